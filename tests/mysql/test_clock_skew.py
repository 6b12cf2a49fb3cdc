"""The application's clock skewed by hours, either way: due times, leases, kv lifetimes and schedule fires are the
server's, through the queue, the kv, the worker and the scheduler.

`tests/test_mysql_adapters.py::test_a_skewed_application_clock_changes_nothing` checks `now()` and one lease under
a +6 h `time.time`. Here the skew goes both ways and reaches the kv, the worker and the scheduler, every instant is
checked against the server's own reading taken in SQL, and a guard proves no module of the store, worker or
scheduler reads the wall clock through `datetime.now`/`utcnow`/`date.today` (the paths `time.time` cannot patch).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pymysql
import pytest

import plitzi_jobs_mysql
from plitzi_jobs_mysql import (
    ActionEntry,
    ScheduleTrigger,
    create_job_worker,
    create_mysql_job_queue,
    create_mysql_kv,
    create_scheduler,
    schedule_for,
    schedule_job_id,
)
from plitzi_jobs_mysql.mysql.statements import NOW_MS
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import open_pool
from ..support import job

SKEWS_H = [6, -9]
TOLERANCE_MS = 3_000


def server_ms(url: str) -> int:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT {NOW_MS}")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def skew_everything(monkeypatch: pytest.MonkeyPatch, hours: int) -> None:
    shift = hours * 3600
    real_time, real_time_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real_time() + shift)
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + shift * 1_000_000_000)

    assert abs(time.time() - real_time() - shift) < 1


@pytest.fixture(params=SKEWS_H, ids=[f"{h:+d}h" for h in SKEWS_H])
async def skewed(
    request: pytest.FixtureRequest, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Any, str, int]]:
    pool = await open_pool(database_url)
    skew_everything(monkeypatch, request.param)
    try:
        yield pool, database_url, request.param
    finally:
        pool.close()
        await pool.wait_closed()


async def until(probe: Callable[[], Awaitable[Any]], what: str, within_s: float = 15.0) -> Any:
    deadline = time.monotonic() + within_s
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        await asyncio.sleep(0.02)


async def test_due_times_and_leases_are_the_servers(skewed: tuple[Any, str, int]) -> None:
    pool, url, hours = skewed
    queue = create_mysql_job_queue(pool)
    server = server_ms(url)
    assert abs(int((await queue.now()).timestamp() * 1000) - server) < TOLERANCE_MS
    assert abs(time.time() * 1000 - server) > abs(hours) * 3_600_000 - TOLERANCE_MS  # the skew is in force

    await queue.enqueue(job("soon", due_at=server + 1_500))
    await queue.enqueue(job("an-hour-on", due_at=server + 3_600_000))
    found = await queue.get_job([1], "soon")
    assert found is not None and abs(found.created_at - server) < TOLERANCE_MS
    # Not due by the server, whatever this machine says.
    assert await queue.claim(worker_id="w1", lease_ms=1_500, limit=5) == []
    started = time.monotonic()
    [claimed] = await until(lambda: queue.claim(worker_id="w1", lease_ms=1_500, limit=5), "the job falling due")
    waited = time.monotonic() - started
    assert claimed.id == "soon" and 0.5 < waited < 5, waited
    assert claimed.lease_until is not None and abs(claimed.lease_until - server_ms(url) - 1_500) < TOLERANCE_MS
    # The lease holds for its length on the server's clock, then lapses into a lost attempt.
    assert await queue.claim(worker_id="w2", lease_ms=60_000, limit=5) == []
    [taken] = await until(lambda: queue.claim(worker_id="w2", lease_ms=60_000, limit=5), "the lease lapsing")
    assert taken.id == "soon" and [a.status for a in taken.history] == ["lost"]
    assert abs(taken.history[0].ended_at - server_ms(url)) < TOLERANCE_MS
    await queue.settle(job_id="soon", worker_id="w2", status="pending", delay_ms=60_000)
    retry = await queue.get_job([1], "soon")
    assert retry is not None and abs(retry.run_at - server_ms(url) - 60_000) < TOLERANCE_MS
    assert await queue.claim(worker_id="w3", lease_ms=1_000, limit=5) == []


async def test_kv_lifetimes_are_the_servers(skewed: tuple[Any, str, int]) -> None:
    pool, _, _ = skewed
    kv = create_mysql_kv(pool)
    await kv.set("long", "v", ttl_seconds=120)
    # Skewed by hours, a lifetime judged by this machine's clock would end at once or last for hours; 2 s leaves
    # a loaded machine room between these calls.
    started = time.monotonic()
    await kv.set("short", "v", ttl_seconds=2)
    assert await kv.swap("lock", None, "me", ttl_seconds=2)
    assert await kv.get("long") == "v" and await kv.get("short") == "v"
    assert await kv.swap("lock", None, "you") is False
    await until(lambda: _is_none(kv.get("short")), "the short key lapsing")
    assert 1.0 < time.monotonic() - started < 10
    assert await kv.swap("lock", None, "you", ttl_seconds=60)
    await kv.expire("long", 2)
    assert await kv.get("long") == "v"
    assert await kv.increment("n") == 1


async def _is_none(value: Awaitable[Any]) -> bool:
    return await value is None


async def test_scheduler_and_worker_fire_and_run_by_the_servers_clock(skewed: tuple[Any, str, int]) -> None:
    pool, url, _ = skewed
    queue = create_mysql_job_queue(pool)
    server = server_ms(url)
    minute = 60_000
    at = await queue.now()

    class Lookups:
        async def list_actions(self, space_id: int) -> list[ActionEntry]:
            return [
                ActionEntry(id="every-minute", schedule=ScheduleTrigger(cron="* * * * *")),
                ActionEntry(id="hourly", schedule=ScheduleTrigger(cron="0 * * * *", timezone="Asia/Kolkata")),
            ]

    scheduler = create_scheduler(queue=queue, lookups=Lookups(), spaces=[1])
    await scheduler.reconcile(1)
    schedules = {s.action_id: s for s in await queue.list_schedules([1])}
    # Promised fires are computed from the server's now, not this machine's.
    assert 0 < schedules["every-minute"].next_run_at - server <= minute + TOLERANCE_MS
    assert 0 < schedules["hourly"].next_run_at - server <= 3_600_000 + TOLERANCE_MS
    expected = schedule_for(ActionEntry(id="x", schedule=ScheduleTrigger(cron="* * * * *")), 1, "main", at)
    assert expected is not None
    assert expected.next_run_at == schedules["every-minute"].next_run_at
    # Nothing is due yet by the server (a +6 h or -9 h machine clock would say otherwise for one or the other).
    assert (await scheduler.sweep()).enqueued == []
    # An overdue fire, by the server: 3 minutes late. It becomes one job with 3 missed, and the next fire is the
    # server's next minute.
    overdue = (server // minute) * minute - 3 * minute
    await queue.put_schedules(
        space_id=1,
        schedules=[
            s if s.action_id != "every-minute" else _with(s, next_run_at=overdue, enabled=False)
            for s in await _inputs(queue)
        ],
    )
    await queue.put_schedules(
        space_id=1,
        schedules=[
            s if s.action_id != "every-minute" else _with(s, next_run_at=overdue, enabled=True)
            for s in await _inputs(queue)
        ],
    )
    result = await scheduler.sweep()
    assert result.enqueued == [schedule_job_id(1, "every-minute", overdue)]
    [missed] = result.missed
    assert missed.count == 3
    moved = {s.action_id: s for s in await queue.list_schedules([1])}["every-minute"]
    assert moved.last_fire_at == overdue and 0 < moved.next_run_at - server_ms(url) <= minute + TOLERANCE_MS

    # The worker runs it; the attempt's instants are the server's.
    ran: list[str] = []

    async def handler(job: Any) -> str:
        ran.append(job.id)
        return "ok"

    worker = create_job_worker(queue=queue, handler=handler, poll_ms=50, lease_ms=3_000)
    worker.start()
    try:
        done = await until(lambda: _finished(queue, result.enqueued[0]), "the fired job running")
    finally:
        await worker.stop()
    assert ran == result.enqueued
    [attempt] = done.history
    now = server_ms(url)
    assert attempt.status == "succeeded" and abs(attempt.ended_at - now) < TOLERANCE_MS
    assert abs(attempt.started_at - now) < TOLERANCE_MS and done.missed == 3


async def _finished(queue: Any, job_id: str) -> Any:
    found = await queue.get_job([1], job_id)
    return found if found is not None and found.status == "succeeded" else None


async def _inputs(queue: Any) -> list[Any]:
    from plitzi_jobs_mysql import ScheduleInput

    return [
        ScheduleInput(
            space_id=s.space_id,
            action_id=s.action_id,
            cron=s.cron,
            environment=s.environment,
            enabled=s.enabled,
            next_run_at=s.next_run_at,
            max_attempts=s.max_attempts,
            timezone=s.timezone,
        )
        for s in await queue.list_schedules([1])
    ]


def _with(schedule: Any, **changes: Any) -> Any:
    from dataclasses import replace

    return replace(schedule, **changes)


#: The one place the process's wall clock is allowed: the memory store's default clock IS the process's.
WALL_CLOCK_ALLOWED = {"wall_clock.py"}


def test_no_module_reads_the_wall_clock_behind_the_servers_back() -> None:
    root = Path(plitzi_jobs_mysql.__file__).parent
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path.name in WALL_CLOCK_ALLOWED or "testing" in path.parts:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if (
                any(
                    call in code
                    for call in (".now(", "utcnow(", "today(", "time.time(", "time.time_ns(", "localtime(", "gmtime(")
                )
                and "queue.now(" not in code
                and "self.now(" not in code
                and "clock.now(" not in code
            ):
                offenders.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert offenders == [], "\n".join(offenders)
