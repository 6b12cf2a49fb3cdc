"""The worker's slots: a handler per claimed job, no more than `workers` at once, claims asking for exactly the
free slots, a slot freed while its settle is written, the timed loop, and `idle()`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from plitzi_jobs_mysql.contract.events import EventKind
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..support import Clock, Events, Gate, PlainQueue, Proxy, T, job, wait_for, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


@pytest.fixture(params=["batched", "plain"])
def path(request: pytest.FixtureRequest) -> str:
    """The worker's two settle paths: succeeded jobs written together (`SettlesSucceeded`, which the memory queue
    and MySQL offer), or one `settle` each (a store without the capability)."""
    return str(request.param)


def on_path(queue: Any, path: str) -> Any:
    return PlainQueue(queue) if path == "plain" else queue


async def test_a_handler_that_returns_settles_succeeded_with_its_run_id(path: str) -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T, input={"n": 1}))
    seen: list[Job] = []

    async def handler(job: Job) -> str:
        seen.append(job)
        return "run-1"

    worker = create_job_worker(queue=on_path(queue, path), handler=handler, worker_id="w1")
    assert await worker.poll() == 1
    job_ = await wait_for_job(queue, "a", "succeeded")
    await worker.stop()
    assert seen[0].input == {"n": 1}
    assert job_.run_id == "run-1"
    assert job_.attempts == 1
    [attempt] = job_.history
    assert (attempt.status, attempt.worker_id, attempt.run_id, attempt.attempt) == ("succeeded", "w1", "run-1", 1)
    assert worker.in_flight() == 0


async def test_no_more_than_workers_handlers_run_and_claims_ask_only_for_free_slots() -> None:
    _, base = fixed_queue()
    for i in range(5):
        await base.enqueue(job(f"j{i}", due_at=T))
    queue = Proxy(base)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, workers=2, worker_id="w1")
    assert await worker.poll() == 2
    await wait_for(lambda: gate.running == 2)
    assert worker.in_flight() == 2
    assert await worker.poll() == 0  # no free slot: the store is not even asked
    assert [kw["limit"] for kw in queue.called("claim")] == [2]
    # Each handler runs in a task of its own.
    assert len({id(t) for t in gate.tasks}) == 2
    assert asyncio.current_task() not in gate.tasks
    gate.release.set()
    await worker.idle()
    assert worker.in_flight() == 0
    assert await worker.poll() == 2
    await worker.stop()
    assert gate.most == 2
    assert [kw["limit"] for kw in queue.called("claim")] == [2, 2]


async def test_a_handler_that_returned_frees_its_slot_while_its_settle_is_written_up_to_workers_of_them(
    path: str,
) -> None:
    _, base = fixed_queue()
    for name in ("a", "b", "c"):
        await base.enqueue(job(name, due_at=T))
    writing = asyncio.Event()
    settles: list[str] = []

    async def slow_settle(**kwargs: Any) -> None:
        settles.extend([kwargs["job_id"]] if "job_id" in kwargs else [j.job_id for j in kwargs["jobs"]])
        await writing.wait()

    ran: list[str] = []

    async def handler(job: Job) -> str | None:
        ran.append(job.id)
        return None

    queue = Proxy(on_path(base, path), settle=slow_settle, settle_succeeded=slow_settle)
    events = Events()
    worker = create_job_worker(queue=queue, handler=handler, workers=1, worker_id="w1", on_event=events)
    assert await worker.poll() == 1
    await wait_for(lambda: settles == ["a"])
    assert worker.in_flight() == 0 and events.of("a")[-1] == "succeeded"  # its handler is over ...
    job_a = await base.get_job([1], "a")
    assert job_a is not None and job_a.status == "running"  # ... and it is still held (its lease renewed)
    assert await worker.poll() == 1  # its slot runs the next job meanwhile
    await events.seen(EventKind.SUCCEEDED, "b")  # (its settle goes beside a's, or in the batch after it)
    assert await worker.poll() == 0  # no more than `workers` settles stand in for running handlers
    assert ran == ["a", "b"]
    writing.set()
    await worker.idle()
    assert [j.status for j in [await base.get_job([1], n) for n in "ab"] if j] == ["succeeded", "succeeded"]
    assert await worker.poll() == 1
    await worker.stop()
    assert ran == ["a", "b", "c"]


async def test_a_claim_asks_for_exactly_the_free_slots() -> None:
    _, base = fixed_queue()
    await base.enqueue(job("first", due_at=T))
    queue = Proxy(base)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, workers=3, worker_id="w1")
    assert await worker.poll() == 1
    for i in range(4):
        await base.enqueue(job(f"j{i}", due_at=T))
    assert await worker.poll() == 2
    assert [kw["limit"] for kw in queue.called("claim")] == [3, 2]
    assert worker.in_flight() <= 3
    gate.release.set()
    await worker.stop()


async def test_the_timed_loop_drains_the_queue_within_the_slot_limit(path: str) -> None:
    _, queue = fixed_queue()
    for i in range(8):
        await queue.enqueue(job(f"j{i}", due_at=T))
    running = 0
    most = 0

    async def handler(job: Job) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        for _ in range(3):
            await asyncio.sleep(0)  # a few turns of the loop: the others get to start beside it
        running -= 1

    worker = create_job_worker(queue=on_path(queue, path), handler=handler, workers=3, poll_ms=20, worker_id="w1")
    worker.start()
    assert worker.running
    try:
        for i in range(8):
            await wait_for_job(queue, f"j{i}", "succeeded")
    finally:
        await worker.stop()
    assert not worker.running
    assert most == 3


async def test_workers_zero_claims_nothing() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
    worker = create_job_worker(queue=queue, handler=Gate(), workers=0)
    assert await worker.poll() == 0
    worker.start()
    assert not worker.running
    await worker.stop()
    found = await queue.get_job([1], "a")
    assert found is not None and found.status == "pending"


async def test_idle_returns_once_every_run_has_settled_and_given_its_key_back() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, worker_id="w1")
    await worker.idle()  # nothing held: at once
    assert await worker.poll() == 1
    idle = asyncio.create_task(worker.idle())
    await wait_for(lambda: gate.running == 1)
    assert not idle.done()
    gate.release.set()
    await asyncio.wait_for(idle, 10)
    found = await queue.get_job([1], "a")
    assert found is not None and found.status == "succeeded"  # settled before idle() returned
    await worker.stop()
