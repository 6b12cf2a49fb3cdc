"""The runtime's pace (issue 12): wake-ups on enqueue, claims in flight side by side, single-flight keys taken and
given back in batches. Correctness only: the speed is measured in bench/, never here."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from plitzi_jobs_mysql import create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.contract.protocols import JobQueue
from plitzi_jobs_mysql.contract.wakeups import LocalWakeups
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..conftest import empty_tables, sql
from ..support import job

LONG_POLL_MS = 600_000  # no poll tick can happen within a test: only a wake-up starts a claim


async def now_ms(queue: JobQueue) -> int:
    return int((await queue.now()).timestamp() * 1000)


class CountingClaims:
    """Counts the claims a queue answered, to know when a worker's first (empty) claim is over."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.claimed_once = asyncio.Event()
        self.wakeups = inner.wakeups
        self.wakeup_topic = inner.wakeup_topic

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def claim(self, **kwargs: Any) -> list[Job]:
        try:
            return list(await self.inner.claim(**kwargs))
        finally:
            self.claimed_once.set()


@pytest.fixture(params=["memory", "mysql"])
async def queue(request: pytest.FixtureRequest, session_db: str) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield create_memory_job_queue()
        return
    from ..conftest import open_pool

    empty_tables(session_db)
    pool = await open_pool(session_db)
    try:
        yield create_mysql_job_queue(pool)
    finally:
        pool.close()
        await pool.wait_closed()


async def test_an_enqueue_wakes_an_idle_worker_of_the_same_process(queue: Any) -> None:
    counted = CountingClaims(queue)
    started = asyncio.Event()

    async def handler(job: Job) -> str | None:
        started.set()
        return None

    worker = create_job_worker(queue=counted, handler=handler, workers=2, poll_ms=LONG_POLL_MS)
    worker.start()
    try:
        await asyncio.wait_for(counted.claimed_once.wait(), 30)  # the first claim found nothing: it is idle
        await queue.enqueue(job("woken", due_at=await now_ms(queue) - 1))
        # Far sooner than the next poll (ten minutes away): only the wake-up can have started it.
        await asyncio.wait_for(started.wait(), 30)
    finally:
        await worker.stop()


async def test_a_job_due_later_wakes_nobody_and_a_stopped_worker_stops_listening(queue: Any) -> None:
    channel = LocalWakeups()
    queue.wakeups = channel
    woken: list[str] = []
    unsubscribe = channel.subscribe(queue.wakeup_topic, lambda: woken.append("x"))
    await queue.enqueue(job("later", due_at=await now_ms(queue) + 3_600_000))
    assert woken == []
    await queue.enqueue_many([job("due-1", due_at=await now_ms(queue) - 1)])
    assert woken == ["x"]
    unsubscribe()

    async def handler(job: Job) -> str | None:
        return None

    worker = create_job_worker(queue=queue, handler=handler, workers=1, poll_ms=LONG_POLL_MS)
    worker.start()
    assert channel._subscribers  # the worker listens while it runs
    await worker.stop()
    assert not channel._subscribers


async def test_busy_workers_keep_claims_in_flight_and_never_run_a_job_twice(session_db: str) -> None:
    from ..conftest import open_pool

    empty_tables(session_db)
    pool = await open_pool(session_db, maxsize=12)
    n = 1_500
    ran: Counter[str] = Counter()
    running: set[str] = set()
    overlaps: list[str] = []
    all_ran = asyncio.Event()
    try:
        queues = [create_mysql_job_queue(pool) for _ in range(3)]
        kv = create_mysql_kv(pool)
        now = await now_ms(queues[0])
        await queues[0].enqueue_many([job(f"busy-{i}", due_at=now - 1) for i in range(n)])

        async def handler(job: Job) -> str | None:
            if job.id in running:
                overlaps.append(job.id)
            running.add(job.id)
            ran[job.id] += 1
            if len(ran) >= n:
                all_ran.set()
            await asyncio.sleep(0)
            running.discard(job.id)
            return None

        # Three workers over one table (each its own queue object, as replicas are), 16 slots each, with the
        # kv's single-flight keys taken and given back in batches.
        workers = [create_job_worker(queue=q, handler=handler, workers=16, kv=kv, poll_ms=LONG_POLL_MS) for q in queues]
        for worker in workers:
            worker.start()
        try:
            await asyncio.wait_for(all_ran.wait(), 120)
        finally:
            for worker in workers:
                await worker.stop()
        assert len(ran) == n
        assert [job_id for job_id, count in ran.items() if count != 1] == []
        assert overlaps == []
        rows = sql(session_db, "SELECT status, attempts, COUNT(*) FROM action_jobs GROUP BY status, attempts")
        assert [(str(status), int(attempts), int(count)) for status, attempts, count in rows] == [("succeeded", 1, n)]
        # Every single-flight key was given back.
        assert sql(session_db, "SELECT COUNT(*) FROM action_kv")[0][0] == 0
    finally:
        pool.close()
        await pool.wait_closed()
