"""The Python peers side by side (issue 12, item 6): APScheduler 4 with its SQLAlchemy data store on the same
MySQL server, and arq on Redis as an in-memory yardstick. Needs the `bench` extra (`pip install -e '.[bench]'`);
a peer that is not installed is left out of the report, never faked.

APScheduler 4.0.0a6 runs here as `role="worker"` (its schedule processing fails on MariaDB 10.11 with a
`WITH ... UPDATE` syntax error) with the task's `max_running_jobs=None` (its default, 1, runs one job at a time).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

_ran: list[int] = []
_done = asyncio.Event()
_target = 0


async def noop(index: int) -> None:
    """The job every peer runs: record it, nothing else."""
    _ran.append(index)
    if len(_ran) >= _target:
        _done.set()


def _reset(n: int) -> None:
    global _done, _target
    _ran.clear()
    _done = asyncio.Event()
    _target = n


@dataclass
class PeerResult:
    jobs_per_s: float
    statements_per_job: float | None
    exactly_once: bool
    detail: str


def apscheduler_available() -> bool:
    try:
        import apscheduler  # noqa: F401
        import sqlalchemy.ext.asyncio  # noqa: F401
    except ImportError:
        return False
    return True


def _aps_url(mysql_url: Any) -> str:
    return str(mysql_url.sqlalchemy_url()).replace("mysql+pymysql://", "mysql+asyncmy://", 1)


async def apscheduler_drain(mysql_url: Any, admin: Any, n: int, slots: int, timeout_s: float = 600.0) -> PeerResult:
    """n no-op jobs added (untimed), then drained by one AsyncScheduler(role=worker, max_concurrent_jobs=slots)."""
    from apscheduler import AsyncScheduler, SchedulerRole
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_aps_url(mysql_url), pool_size=slots, max_overflow=0)
    _reset(n)
    try:
        async with AsyncScheduler(
            SQLAlchemyDataStore(engine), role=SchedulerRole.worker, max_concurrent_jobs=slots
        ) as scheduler:
            await scheduler.configure_task("bench-noop", func=noop, max_running_jobs=None)
            for i in range(n):
                await scheduler.add_job("bench-noop", args=(i,))
            before = admin.counters()
            started = time.perf_counter()
            await scheduler.start_in_background()
            await asyncio.wait_for(_done.wait(), timeout_s)
            elapsed = time.perf_counter() - started
            delta = admin.delta(before)
            await scheduler.stop()
            await scheduler.wait_until_stopped()
    finally:
        await engine.dispose()
    ok = len(_ran) == n == len(set(_ran))
    return PeerResult(n / elapsed, delta["Questions"] / n, ok, f"ran={len(_ran)} distinct={len(set(_ran))}")


async def apscheduler_pickup(mysql_url: Any, samples: int) -> list[float]:
    """ms from `add_job` returning to the job starting, one job at a time, the worker idle in between (the
    scheduler adding the job is the one running it: its local event broker wakes it, as in-process as ours)."""
    from apscheduler import AsyncScheduler, SchedulerRole
    from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(_aps_url(mysql_url), pool_size=4, max_overflow=0)
    out: list[float] = []
    try:
        async with AsyncScheduler(
            SQLAlchemyDataStore(engine), role=SchedulerRole.worker, max_concurrent_jobs=4
        ) as scheduler:
            await scheduler.configure_task("bench-noop", func=noop, max_running_jobs=None)
            await scheduler.start_in_background()
            await asyncio.sleep(0.5)
            for i in range(samples):
                _reset(1)
                await scheduler.add_job("bench-noop", args=(i,))
                added = time.perf_counter()
                await asyncio.wait_for(_done.wait(), 30)
                out.append((time.perf_counter() - added) * 1000)
                await asyncio.sleep(0.05)
            await scheduler.stop()
            await scheduler.wait_until_stopped()
    finally:
        await engine.dispose()
    return out


def arq_available(redis_url: str | None) -> bool:
    if not redis_url:
        return False
    try:
        import arq  # noqa: F401
    except ImportError:
        return False
    return True


async def arq_drain(
    redis_url: str, n: int, slots: int, poll_delay: float = 0.5, timeout_s: float = 600.0
) -> PeerResult:
    """n no-op jobs enqueued (untimed) on Redis, then drained by one arq worker with max_jobs=slots
    (`poll_delay` 0.5 s is arq's default)."""
    import secrets

    from arq import Worker, create_pool
    from arq.connections import RedisSettings

    settings = RedisSettings.from_dsn(redis_url)
    queue_name = f"bench-arq-{secrets.token_hex(4)}"
    redis = await create_pool(settings, default_queue_name=queue_name)
    _reset(n)

    async def job(ctx: dict[str, Any], index: int) -> None:
        await noop(index)

    job.__qualname__ = job.__name__ = "bench_noop"
    try:
        for i in range(n):
            await redis.enqueue_job("bench_noop", i, _queue_name=queue_name)
        worker = Worker(
            functions=[job],
            redis_pool=redis,
            queue_name=queue_name,
            max_jobs=slots,
            keep_result=0,
            poll_delay=poll_delay,
            handle_signals=False,
        )
        started = time.perf_counter()
        run = asyncio.ensure_future(worker.async_run())
        await asyncio.wait_for(_done.wait(), timeout_s)
        elapsed = time.perf_counter() - started
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)
        with contextlib.suppress(asyncio.CancelledError):
            await worker.close()
    finally:
        await redis.delete(queue_name)
        await redis.aclose()
    ok = len(_ran) == n == len(set(_ran))
    return PeerResult(n / elapsed, None, ok, f"ran={len(_ran)} distinct={len(set(_ran))}")
