"""What only the in-process stores have: a bound on finished jobs, and an injected clock."""

from __future__ import annotations

import logging

import pytest

from plitzi_jobs_mysql import JobInput, create_memory_job_queue, create_memory_kv


def job(id: str) -> JobInput:
    return JobInput(
        id=id, space_id=1, action_id="a", environment="main", trigger="t", input={}, due_at=0, max_attempts=1
    )


async def test_the_oldest_finished_jobs_go_first_and_nothing_waiting_goes() -> None:
    now = [1_000]
    queue = create_memory_job_queue(retain_finished=2, clock=lambda: now[0])
    await queue.enqueue_many([job(f"done-{n}") for n in range(4)] + [job("waiting")])
    for _ in range(4):
        (taken,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
        now[0] += 10
        await queue.settle(job_id=taken.id, worker_id="w", status="succeeded")
    kept = {j.id for j in (await queue.list_jobs(space_ids=[1])).jobs}
    assert kept == {"done-2", "done-3", "waiting"}
    assert await queue.requeue([1], "done-2")  # back to pending: no longer counted as finished
    assert await queue.cancel([1], "waiting")
    kept = {j.id for j in (await queue.list_jobs(space_ids=[1])).jobs}
    assert kept == {"done-2", "done-3", "waiting"}


async def test_the_injected_clock_is_the_only_clock() -> None:
    now = [5_000]
    queue = create_memory_job_queue(clock=lambda: now[0])
    kv = create_memory_kv(clock=lambda: now[0])
    assert int((await queue.now()).timestamp() * 1000) == 5_000
    await queue.enqueue(
        JobInput(
            id="later",
            space_id=1,
            action_id="a",
            environment="main",
            trigger="t",
            input={},
            due_at=6_000,
            max_attempts=1,
        )
    )
    assert await queue.claim(worker_id="w", lease_ms=1_000, limit=1) == []
    await kv.set("k", "v", ttl_seconds=1)
    now[0] = 6_000
    assert await kv.get("k") is None
    (taken,) = await queue.claim(worker_id="w", lease_ms=1_000, limit=1)
    assert (taken.id, taken.lease_until) == ("later", 7_000)


async def test_a_job_that_dies_with_its_last_worker_is_logged_at_error(caplog: pytest.LogCaptureFixture) -> None:
    now = [1_000]
    queue = create_memory_job_queue(clock=lambda: now[0])
    await queue.enqueue(job("doomed"))  # one attempt
    assert len(await queue.claim(worker_id="crashed", lease_ms=100, limit=1)) == 1
    now[0] += 200
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql"):
        assert await queue.claim(worker_id="w2", lease_ms=100, limit=1) == []
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "'doomed'" in record.getMessage() and "dead" in record.getMessage() and "1/1" in record.getMessage()
