"""The bulk operations beside a real worker draining the queue (issue 20.4): no deadlock or other error reaches
anyone, nothing is half-done (every job ends in a sane state) and the counts they answer add up exactly."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from plitzi_jobs_mysql import PermanentFailure, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.batch_statements import BULK_BATCH
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..conftest import sql
from ..support import job, wait_for

JOBS = 3 * BULK_BATCH - 300  # three batches, the last one short


async def total(queue: Any, status: str) -> int:
    return int((await queue.list_jobs(space_ids=[1], status=status, limit=0)).total)


def warnings(caplog: pytest.LogCaptureFixture, logger: str = "plitzi_jobs_mysql") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith(logger)]


async def test_cancel_all_during_a_drain(
    database_url: str, database_pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"j{n}") for n in range(JOBS)])
    await queue.enqueue_many([job(f"other-{n}", space_id=2, due_at=2**42) for n in range(10)])
    errors: list[BaseException] = []

    async def handler(job: Job) -> None:
        await asyncio.sleep(0.002)

    worker = create_job_worker(queue=queue, handler=handler, workers=8, poll_ms=10, on_error=errors.append)
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql"):
        worker.start()
        try:
            await wait_for_count(queue, "succeeded", 50)
            changed = await queue.cancel_all(space_id=1)
            await wait_for_count(queue, "pending", 0, at_most=True)
            await wait_for_count(queue, "running", 0, at_most=True)
        finally:
            await worker.stop()
    assert errors == [] and warnings(caplog) == []
    rows = sql(database_url, "SELECT status, cancel_requested, COUNT(*) FROM action_jobs WHERE space_id = 1 "
                             "GROUP BY status, cancel_requested")  # fmt: skip
    by = {(str(status), int(asked)): int(count) for status, asked, count in rows}
    assert set(status for status, _ in by) <= {"succeeded", "cancelled"} and sum(by.values()) == JOBS
    # Each job it counted was changed once: a waiting one cancelled, or a running one asked to stop (which then
    # finished, or stopped when its worker heard it).
    assert changed == by.get(("cancelled", 0), 0) + by.get(("cancelled", 1), 0) + by.get(("succeeded", 1), 0)
    assert by.get(("cancelled", 0), 0) > BULK_BATCH  # most were still waiting: more than one batch
    assert await queue.cancel_all(space_id=1) == 0
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE space_id = 2 AND status = 'pending'")[0][0] == 10


async def test_retry_all_during_a_drain(
    database_url: str, database_pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"j{n}") for n in range(JOBS)])
    errors: list[BaseException] = []

    async def handler(job: Job) -> None:
        if not job.history:  # the first run of every job fails for good; its retry succeeds
            raise PermanentFailure("first run")

    worker = create_job_worker(queue=queue, handler=handler, workers=8, poll_ms=10, on_error=errors.append)
    retried = 0
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.mysql"):
        worker.start()
        try:
            await wait_for_count(queue, "dead", 50)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 60
            while await total(queue, "succeeded") < JOBS:  # retried again and again while the worker drains
                assert loop.time() < deadline, f"{await total(queue, 'succeeded')} of {JOBS} succeeded in time"
                retried += await queue.retry_all(space_id=1)
                await asyncio.sleep(0.01)
        finally:
            await worker.stop()
    assert errors == [] and warnings(caplog, "plitzi_jobs_mysql.mysql") == []  # the worker logs each death
    assert retried == JOBS  # every job died once and was retried exactly once
    histories = sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE status = 'succeeded' AND attempts = 1 "
                                  "AND JSON_LENGTH(history) = 2")  # fmt: skip
    assert histories[0][0] == JOBS


async def wait_for_count(queue: Any, status: str, count: int, *, at_most: bool = False) -> None:
    async def reached() -> bool:
        found = await total(queue, status)
        return found <= count if at_most else found >= count

    await wait_for(reached, within=60, every=0.02, what=f"{status} jobs {'down to' if at_most else 'up to'} {count}")
