"""Faults at the wire, short versions (the long ones: `python -m tests.harness.soak --fault proxy|kill|read-only`).

Two worker processes, a sweeping scheduler and a producer run through a fault aimed at the package's connections only
(tests/harness/injectors.py), against a throwaway server of this module's own; then the soak's checker reads the
tables and the ledger: no job lost, none run twice at once, every job in the state the rules give it, orphans taken
over within one lease after the fault ends, the same processes working again by themselves, nothing escaping the
runtime, and logged errors in proportion to the faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import itertools
import time
from pathlib import Path
from typing import Any

import pytest

from plitzi_jobs_mysql import (
    JobInput,
    MysqlJobQueue,
    ScheduleInput,
    StoreUnavailableError,
    create_job_worker,
    create_mysql_job_queue,
    create_mysql_kv,
    create_scheduler,
)
from plitzi_jobs_mysql.mysql import session as session_module
from plitzi_jobs_mysql.runtime import scheduler as scheduler_module
from plitzi_jobs_mysql.testing import LocalMysqlServer
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import open_pool, own_server_fixtures, sql
from ..harness.faultproxy import FaultProxy
from ..harness.injectors import Kills, ProxyCuts, ReadOnly, admin_sql, package_user
from ..harness.soak import FAULT_DEPLOYMENT, Soak, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


server, database = own_server_fixtures("pjm_faults")


def run_fault(database: str, logs: Path, fault: Any, jobs: int, **options: Any) -> Soak:
    out = io.StringIO()
    soak = run_soak(database, 180.0, logs, out=out, fault=fault, target_jobs=jobs, **{**FAULT_DEPLOYMENT, **options})
    print("\n" + out.getvalue())
    assert not soak.errors, "\n".join(soak.errors)
    assert soak.report["runs"] >= soak.report["jobs"] >= jobs
    return soak


def test_connections_cut_at_random_points_lose_nothing(database: str, tmp_path: Path) -> None:
    fault = ProxyCuts(every_s=0.2)
    soak = run_fault(database, tmp_path, fault, 1_000)
    injected = soak.report["fault"]["injected"]
    # Cuts every ~200 ms, of every kind, including a write the server applied and whose reply never came back.
    assert sum(injected.values()) >= 30 and injected["before_reply"] >= 5 and injected["mid_reply"] >= 3, injected


def test_killed_queries_and_connections_lose_nothing(database: str, tmp_path: Path) -> None:
    fault = Kills(database, every_s=0.2)
    soak = run_fault(database, tmp_path, fault, 800)
    injected = soak.report["fault"]["injected"]
    # Most of them on a statement in flight (how many depends on the moment each lands).
    busy = injected["kill_query_busy"] + injected["kill_connection_busy"]
    assert sum(injected.values()) >= 20 and busy >= 5, injected


def test_read_only_windows_cost_no_second_run_with_the_default_lease(database: str, tmp_path: Path) -> None:
    fault = ReadOnly(database, window_s=3.0, gap_s=2.0, windows=2)
    soak = run_fault(database, tmp_path, fault, 400, lease_ms=30_000)
    assert soak.report["fault"]["injected"] == {"read_only_window": 2}
    # The writes failed, and said why (1290: the server is read-only) ...
    # (the package reports a refused write as StoreUnavailableError, the driver's 1290 as its __cause__)
    refused = soak.report["fault"]["client_errors"]
    assert refused.get("OperationalError:1290", 0) + refused.get("StoreUnavailableError", 0) > 0, soak.report["fault"]
    # ... and what could not be recorded in a window was recorded after it, while the lease held: no attempt
    # was lost and no job ran a second time.
    assert soak.report["lost_attempts"] == 0 and soak.report["reruns"] == 0, soak.report


async def test_a_claim_cut_short_by_a_read_only_server_hands_out_what_it_had_won(
    server: LocalMysqlServer, database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server turns read-only between two of a claim's compare-and-sets (a failover starting): the job already
    won must reach the worker, not stay running under its name with nobody running it until the lease lapses."""
    # A pool of two: the claim's compare-and-sets then go one after the other, and the window opens between them.
    pool = await open_pool(package_user(database), maxsize=2)
    queue = create_mysql_job_queue(pool)
    try:
        await queue.enqueue_many(
            [
                JobInput(
                    id=f"job-{n}",
                    space_id=1,
                    action_id="a",
                    environment="main",
                    trigger="t",
                    input={},
                    due_at=0,
                    max_attempts=3,
                )
                for n in range(4)
            ]
        )
        original = session_module.Connection._write

        # Every write goes through `_write` (a claim's compare-and-set answers its insert id too: issue 18.5).
        async def write(self: Any, sql: str, args: Any, prefix: str | None) -> tuple[int, int]:
            changed = await original(self, sql, args, prefix)
            if queue._sql.claim_pending in sql and changed[0]:
                await asyncio.to_thread(admin_sql, server.url, "SET GLOBAL read_only = 1")
            return changed

        monkeypatch.setattr(session_module.Connection, "_write", write)
        try:
            claimed = await queue.claim(worker_id="w", lease_ms=30_000, limit=4)
        finally:
            await asyncio.to_thread(admin_sql, server.url, "SET GLOBAL read_only = 0")
        running = sql(database, "SELECT id FROM action_jobs WHERE status = 'running' AND worker_id = 'w'")
        assert [job.id for job in claimed] == [row[0].decode() for row in running] == ["job-0"]
        assert sql(database, "SELECT COUNT(*) FROM action_jobs WHERE status = 'pending'") == [(3,)]
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_hand_back_refused_by_a_read_only_server_is_retried_while_the_lease_holds(
    server: LocalMysqlServer, database: str
) -> None:
    """The worker claimed a job, then the server turned read-only before it could take the single-flight key, so
    the job goes back to the queue: that hand-back must be retried once the window ends, not dropped (which left
    the job running under nobody for a whole lease, 30 s by default, and cost it an attempt)."""
    pool = await open_pool(package_user(database))
    queue = create_mysql_job_queue(pool)
    kv = create_mysql_kv(pool)
    windows: list[float] = []

    class ReadOnlyOnFirstSwap:
        async def window(self) -> None:
            if not windows:  # a failover starting right after the claim, for 1.5 s
                windows.append(time.monotonic())
                await asyncio.to_thread(admin_sql, server.url, "SET GLOBAL read_only = 1")
                asyncio.get_running_loop().call_later(
                    1.5,
                    lambda: asyncio.ensure_future(asyncio.to_thread(admin_sql, server.url, "SET GLOBAL read_only = 0")),
                )

        async def swap(self, key: str, expected: str | None, value: str, ttl: float) -> bool:
            await self.window()
            return await kv.swap(key, expected, value, ttl)

        async def take_absent(self, pairs: Any, ttl: float) -> Any:  # the worker's batched single-flight take
            await self.window()
            return await kv.take_absent(pairs, ttl)

        def __getattr__(self, name: str) -> Any:
            return getattr(kv, name)

    ran: list[str] = []
    errors: list[BaseException] = []

    async def handler(job: Any) -> str:
        ran.append(job.id)
        return "done"

    await queue.enqueue(
        JobInput(
            id="job", space_id=1, action_id="a", environment="main", trigger="t", input={}, due_at=0, max_attempts=3
        )
    )
    worker = create_job_worker(
        queue=queue,
        handler=handler,
        kv=ReadOnlyOnFirstSwap(),  # type: ignore[arg-type]
        lease_ms=30_000,
        poll_ms=100,
        on_error=errors.append,
    )
    worker.start()
    try:
        deadline = time.monotonic() + 15
        while (job := await queue.get_job([1], "job")) is None or job.status != "succeeded":
            assert time.monotonic() < deadline, f"not run within 15 s of a 1.5 s read-only window: {job}"
            await asyncio.sleep(0.1)
    finally:
        await worker.stop()
        await asyncio.to_thread(admin_sql, server.url, "SET GLOBAL read_only = 0")
        pool.close()
        await pool.wait_closed()
    assert ran == ["job"] and [a.status for a in job.history] == ["succeeded"] and job.attempts == 1, job
    causes = [e.__cause__ if e.__cause__ is not None else e for e in errors]  # StoreUnavailableError keeps 1290
    assert errors and all(getattr(c, "args", [None])[0] == 1290 for c in causes), errors


async def test_connections_gone_silent_are_abandoned_and_no_job_runs_twice_at_once(
    server: LocalMysqlServer, database: str
) -> None:
    """Chosen fault (issue 14, item 6): connections that go SILENT, neither answering nor closing (no FIN, no RST).
    Users meet it when a failover moves the server's address, or a NAT gateway or firewall drops an idle flow:
    the client's next statement waits for TCP to give up, about 15 minutes on Linux. A worker waiting that long on
    its heartbeat lets its leases lapse while its handlers still run; on a settle, it holds a slot (and `stop()`)
    for as long.

    Worker A reaches the server through the fault proxy; once its four handlers run, every connection it has goes
    silent. Worker B, on a clean line, runs beside it. No job may run twice at once, A must notice and carry on
    over new connections by itself, and say so in an error an operator can act on."""
    proxy = FaultProxy("127.0.0.1", parse_mysql_url(database).port)
    proxy.start()
    pool_a = await open_pool(proxy.route(package_user(database)), maxsize=8, connect_timeout=3)
    pool_b = await open_pool(database, maxsize=8)
    runs: dict[str, list[list[Any]]] = {}
    errors: list[BaseException] = []

    def handler_for(name: str) -> Any:
        async def handler(job: Any) -> str:
            run: list[Any] = [name, time.monotonic(), None]
            runs.setdefault(job.id, []).append(run)
            await asyncio.sleep(7.0)  # longer than the lease: only heartbeats keep it
            run[2] = time.monotonic()
            return "done"

        return handler

    def worker(name: str, pool: Any, on_error: Any = None) -> Any:
        return create_job_worker(
            queue=create_mysql_job_queue(pool),
            handler=handler_for(name),
            workers=4,
            poll_ms=100,
            lease_ms=6_000,
            backoff_base_ms=100,
            backoff_max_ms=500,
            kv=create_mysql_kv(pool),
            worker_id=f"worker-{name}",
            on_error=on_error,
        )

    queue = create_mysql_job_queue(pool_b)
    ids = [f"job-{n:02d}" for n in range(16)]
    await queue.enqueue_many(
        [
            JobInput(
                id=i, space_id=1, action_id="a", environment="main", trigger="t", input={}, due_at=0, max_attempts=5
            )
            for i in ids
        ]
    )
    worker_a, worker_b = worker("a", pool_a, errors.append), worker("b", pool_b)
    worker_a.start()
    try:
        deadline = time.monotonic() + 20
        while worker_a.in_flight() < 4:
            assert time.monotonic() < deadline, "worker A never had four handlers running"
            await asyncio.sleep(0.05)
        silenced = proxy.silence()
        silenced_at = time.monotonic()
        worker_b.start()
        deadline = time.monotonic() + 60
        while (await queue.list_jobs(space_ids=[1], status="succeeded", limit=1)).total < len(ids):
            assert time.monotonic() < deadline, "the jobs did not all succeed within 60 s"
            await asyncio.sleep(0.2)
    finally:
        try:
            async with asyncio.timeout(30):  # a worker stuck on a silent connection would never stop
                await asyncio.gather(worker_a.stop(), worker_b.stop())
        finally:
            await close_behind_proxy(proxy, pool_a, pool_b)
    overlaps = []
    for job_id, job_runs in runs.items():
        ordered = sorted(job_runs, key=lambda r: r[1])
        overlaps += [(job_id, a[0], b[0]) for a, b in itertools.pairwise(ordered) if a[2] is None or a[2] > b[1]]
    after = sum(1 for v in runs.values() for r in v if r[0] == "a" and r[1] > silenced_at)
    print(
        f"\nsilent connections: {silenced} went silent; A started {after} runs afterwards; A's errors: "
        f"{[str(e)[:100] for e in errors[:4]]}"
    )
    assert not overlaps, f"runs overlapped another run of their job: {overlaps}"
    # A noticed, said so, and went on over new connections by itself.
    assert any(isinstance(e, StoreUnavailableError) and "did not answer" in str(e) for e in errors), errors
    assert any(r[0] == "a" and r[1] > silenced_at for v in runs.values() for r in v), "A ran nothing afterwards"


@pytest.mark.timeout(60)
async def test_a_clock_reading_on_a_silent_connection_does_not_wedge_the_queue(database: str) -> None:
    """The queue re-reads the server's clock every `resync_ms`, and concurrent calls share one reading. When that
    reading went out on a connection gone silent, every later call of the process waited on it, for ever: claims,
    heartbeats and settles alike, whatever bound the caller put on each. The last reading still holds (the local
    monotonic clock carries it), so a refresh must never stand in a call's way, and a stuck one must be dropped."""
    proxy = FaultProxy("127.0.0.1", parse_mysql_url(database).port)
    proxy.start()
    pool = await open_pool(proxy.route(package_user(database)), maxsize=4, connect_timeout=3)
    try:
        queue = MysqlJobQueue(pool, resync_ms=300)
        await queue.heartbeat(job_ids=["nothing"], worker_id="w", lease_ms=1_000)  # tables, first reading
        assert proxy.silence() >= 1  # the pool's idle connection: the next borrower gets it
        await asyncio.sleep(0.4)  # a reading is due
        answered, tries = False, 0
        deadline = time.monotonic() + 10
        while not answered and time.monotonic() < deadline:
            tries += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.5):  # the caller's own bound, as the worker puts on each call
                    await queue.heartbeat(job_ids=["nothing"], worker_id="w", lease_ms=1_000)
                    answered = True
        assert answered, f"no call answered in 10 s ({tries} tries): the queue is wedged on one silent reading"
    finally:
        await close_behind_proxy(proxy, pool)


async def close_behind_proxy(proxy: FaultProxy, *pools: Any) -> None:
    """The proxy first, so a call still waiting on a silent connection fails now; then the pools, once that call
    has given its connection back (aiomysql's wait_closed is not woken by a closed connection coming back)."""
    await asyncio.to_thread(proxy.stop)
    await asyncio.sleep(0.2)
    for pool in pools:
        pool.close()
        async with asyncio.timeout(15):
            await pool.wait_closed()


async def test_a_sweep_stuck_on_a_silent_connection_is_abandoned(
    database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scheduler's sweep that went out on a connection gone silent held every later sweep of the replica (one
    pass at a time), with no log line: its schedules fired only through other replicas, or not at all."""
    monkeypatch.setattr(scheduler_module, "SWEEP_BOUND_S", 2.0, raising=False)
    proxy = FaultProxy("127.0.0.1", parse_mysql_url(database).port)
    proxy.start()
    pool = await open_pool(proxy.route(package_user(database)), maxsize=4, connect_timeout=3)
    clean_pool = await open_pool(database)
    errors: list[BaseException] = []

    class NoLookups:
        async def list_actions(self, space_id: int) -> list[Any]:
            return []

    queue = create_mysql_job_queue(pool)
    scheduler = create_scheduler(queue=queue, lookups=NoLookups(), poll_ms=200, on_error=errors.append)
    try:
        clean = create_mysql_job_queue(clean_pool)
        now = int((await queue.now()).timestamp() * 1000)  # its clock read: the sweep's statements meet the silence
        assert proxy.silence() >= 1  # the pool's idle connection: the first sweep gets it
        await clean.put_schedules(
            space_id=1,
            schedules=[
                ScheduleInput(
                    space_id=1,
                    action_id="digest",
                    cron="* * * * *",
                    environment="main",
                    enabled=True,
                    next_run_at=now - 60_000,
                    max_attempts=3,
                )
            ],
        )
        scheduler.start()
        deadline = time.monotonic() + 20
        while not (await clean.list_jobs(space_ids=[1], limit=1)).total:
            assert time.monotonic() < deadline, f"the due schedule never fired: {errors}"
            await asyncio.sleep(0.1)
        assert any(isinstance(e, StoreUnavailableError) and "sweep" in str(e) for e in errors), errors
    finally:
        scheduler.stop()
        await close_behind_proxy(proxy, pool, clean_pool)
