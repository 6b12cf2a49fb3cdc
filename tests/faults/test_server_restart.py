"""The server stopped and started in the middle of a run of a worker, a scheduler and a producer over one pool.

While it is down every call fails with a clear connection error within a bound (no hang); after it is back the
same pool recovers by itself; no job is lost or stored twice; and a schedule whose fire fell due while nothing
could sweep produces ONE job carrying its `missed` count.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import (
    ActionEntry,
    JobInput,
    ScheduleInput,
    create_job_worker,
    create_mysql_job_queue,
    create_mysql_kv,
    create_scheduler,
    schedule_job_id,
)
from plitzi_jobs_mysql.testing import LocalMysqlServer

from ..conftest import open_pool, own_server_fixtures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

CALL_BOUND_S = 15.0
#: What a client sees when the server goes away or is not there: can't connect, lost or gone away.
CONNECTION_ERRORS = {2003, 2006, 2013, 2014, 2055}
MINUTE = 60_000


server, database = own_server_fixtures("pjm_restart")


def connection_error(error: BaseException) -> bool:
    if isinstance(error, pymysql.err.OperationalError) and error.args and error.args[0] in CONNECTION_ERRORS:
        return True
    return isinstance(error, (ConnectionError, OSError)) and not isinstance(error, TimeoutError)


class NoLookups:
    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        return []


async def test_a_run_survives_the_server_stopping_and_starting(server: LocalMysqlServer, database: str) -> None:
    pool = await open_pool(database, maxsize=10, connect_timeout=5)
    queue = create_mysql_job_queue(pool)
    kv = create_mysql_kv(pool)
    runs: collections.Counter[str] = collections.Counter()
    worker_errors: list[BaseException] = []
    sweep_errors: list[BaseException] = []
    produced: list[str] = []
    producer_errors: list[tuple[BaseException, float]] = []
    fired: list[Any] = []
    sweeping = asyncio.Event()
    sweeping.set()
    stop = asyncio.Event()

    async def handler(job: Any) -> str:
        runs[job.id] += 1
        await asyncio.sleep(0.02)
        return "done"

    async def producer() -> None:
        n = 0
        while not stop.is_set():
            job_id = f"job-{n:05d}"
            started = time.monotonic()
            try:
                async with asyncio.timeout(CALL_BOUND_S):
                    await queue.enqueue(
                        JobInput(
                            id=job_id,
                            space_id=1,
                            action_id="a",
                            environment="main",
                            trigger="t",
                            input={"n": n},
                            due_at=0,
                            max_attempts=5,
                        )
                    )
                produced.append(job_id)
                n += 1
            except TimeoutError:
                raise AssertionError(f"enqueue hung for {CALL_BOUND_S} s while the server was down") from None
            except Exception as error:
                producer_errors.append((error, time.monotonic() - started))
                await asyncio.sleep(0.05)  # the same id is tried again: an enqueue is idempotent
            await asyncio.sleep(0.005)

    async def sweeper() -> None:
        scheduler = create_scheduler(queue=queue, lookups=NoLookups())
        while not stop.is_set():
            await sweeping.wait()
            try:
                async with asyncio.timeout(CALL_BOUND_S):
                    fired.append(await scheduler.sweep())
            except TimeoutError:
                raise AssertionError("a sweep hung while the server was down") from None
            except Exception as error:
                sweep_errors.append(error)
            await asyncio.sleep(0.1)

    worker = create_job_worker(
        queue=queue,
        handler=handler,
        workers=4,
        poll_ms=50,
        lease_ms=1_500,
        backoff_base_ms=100,
        backoff_max_ms=500,
        on_error=worker_errors.append,
    )
    worker.start()
    tasks = [asyncio.create_task(producer()), asyncio.create_task(sweeper())]
    try:
        await until(lambda: len(runs) >= 50, "the run warming up")

        # A schedule whose fire is two minutes overdue, written with sweeping paused just before the server
        # stops: nothing can sweep it until the server is back.
        sweeping.clear()
        now = int((await queue.now()).timestamp() * 1000)
        fire_at = (now // MINUTE) * MINUTE - 2 * MINUTE
        await queue.put_schedules(
            space_id=1,
            schedules=[
                ScheduleInput(
                    space_id=1,
                    action_id="digest",
                    cron="* * * * *",
                    environment="main",
                    enabled=True,
                    next_run_at=fire_at,
                    max_attempts=3,
                )
            ],
        )
        await kv.set("survives", "yes")

        # -- the outage --------------------------------------------------------------------------------------
        stopped_at = time.monotonic()
        await asyncio.to_thread(server.stop, keep_data=True)
        sweeping.set()
        errors_before = len(producer_errors)
        await until(
            lambda: len(producer_errors) >= errors_before + 5 and len(sweep_errors) >= 2,
            "calls failing while the server is down",
        )
        # Direct calls fail fast and clearly too.
        for call in (
            lambda: queue.get_job([1], "job-00000"),
            lambda: kv.get("survives"),
            lambda: queue.claim(worker_id="probe", lease_ms=1_000, limit=1),
        ):
            started = time.monotonic()
            with pytest.raises(Exception) as raised:
                async with asyncio.timeout(CALL_BOUND_S):
                    await call()
            assert connection_error(raised.value), repr(raised.value)
            assert time.monotonic() - started < CALL_BOUND_S
        await asyncio.to_thread(server.start)
        outage_s = time.monotonic() - stopped_at

        # -- after -------------------------------------------------------------------------------------------
        recovered_at = time.monotonic()
        produced_at_restart = len(produced)
        await until(lambda: len(produced) >= produced_at_restart + 50, "the producer recovering")
        recovery_s = time.monotonic() - recovered_at
        digest = schedule_job_id(1, "digest", fire_at)
        await until(lambda: any(digest in r.enqueued for r in fired), "the overdue fire")
        stop.set()
        await asyncio.gather(*tasks)
        # The schedule fires every minute: a run slow enough to cross a minute after the overdue fire also has
        # that minute's job (CI once had 104 produced + 2 fires).
        fires = [x for r in fired for x in r.enqueued if x.startswith("schedule:1:digest:")]
        await until_async(lambda: all_finished(queue, [*produced, *fires]), "every job finishing")
    finally:
        stop.set()
        sweeping.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await worker.stop()

    try:
        # Errors were connection errors, named as such, and quick.
        assert producer_errors and all(connection_error(e) for e, _ in producer_errors), producer_errors[:3]
        assert max(took for _, took in producer_errors) < CALL_BOUND_S
        assert all(connection_error(e) for e in sweep_errors), sweep_errors[:3]
        assert all(connection_error(e) for e in worker_errors), worker_errors[:3]
        # Nothing lost, nothing stored twice; every produced job succeeded, and ran at least once.
        page = await queue.list_jobs(space_ids=[1], limit=10_000)
        ids = [j.id for j in page.jobs]
        assert len(ids) == len(set(ids)) == page.total == len(produced) + len(fires)
        assert set(ids) == {*produced, *fires}
        assert {j.status for j in page.jobs} == {"succeeded"}
        assert set(runs) == set(ids)
        reruns = {k: v for k, v in runs.items() if v > 1}
        lost = [j.id for j in page.jobs if any(a.status == "lost" for a in j.history)]
        # A run repeats only when its settle could not be written while the server was down: it is then the
        # lease lapsing that hands it on, with a `lost` attempt saying so.
        assert set(reruns) <= set(lost), (reruns, lost)
        # The overdue schedule: one job, carrying its missed fires, and the schedule moved past now once.
        # The overdue fire first, then at most the minutes a slow run crossed, each once.
        instants = [int(x.rsplit(":", 1)[1]) for x in fires]
        assert fires[0] == digest and instants == sorted(set(instants)), fires
        assert all(b - a == MINUTE for a, b in itertools.pairwise(instants[1:])), fires
        digest_job = await queue.get_job([1], digest)
        assert digest_job is not None and digest_job.missed is not None and digest_job.missed >= 2
        [schedule] = await queue.list_schedules([1])
        assert schedule.last_fire_at == instants[-1]
        if len(fires) == 1:
            assert schedule.missed == digest_job.missed
        reported = [m for r in fired for m in r.missed]
        assert [(m.action_id, m.count) for m in reported] == [("digest", digest_job.missed)]
        assert await kv.get("survives") == "yes"
        print(
            f"\nserver restart: outage {outage_s:.1f} s, producer recovered in {recovery_s:.2f} s, "
            f"{len(producer_errors)} producer / {len(sweep_errors)} sweep / {len(worker_errors)} worker errors "
            f"(slowest failing call {max(t for _, t in producer_errors):.3f} s), {len(produced)} jobs, "
            f"{len(reruns)} reruns after lost settles, digest missed {digest_job.missed}"
        )
    finally:
        pool.close()
        await pool.wait_closed()


async def until(condition: Any, what: str, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        await asyncio.sleep(0.02)


async def until_async(probe: Any, what: str, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not await probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        await asyncio.sleep(0.05)


async def all_finished(queue: Any, ids: list[str]) -> bool:
    page = await queue.list_jobs(space_ids=[1], status="succeeded", limit=1)
    return page.total == len(ids)
