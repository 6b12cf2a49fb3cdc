"""The leases a worker holds: renewed by one heartbeat call, kept for as long as a handler runs, and kept through
`stop()`, which waits for its running handlers, hands back what it claimed in that instant, and always returns."""

from __future__ import annotations

import asyncio
from typing import Any

from plitzi_jobs_mysql.memory import create_memory_job_queue, wall_clock_ms
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..support import Clock, Gate, Proxy, T, job, wait_for, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


async def test_beat_renews_every_held_lease_in_one_call() -> None:
    clock, base = fixed_queue()
    await base.enqueue(job("a", due_at=T))
    await base.enqueue(job("b", due_at=T))
    queue = Proxy(base)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, lease_ms=30_000, worker_id="w1")
    await worker.poll()
    clock.now += 20_000
    await worker.beat()
    beats = queue.called("heartbeat")
    assert len(beats) == 1 and sorted(beats[0]["job_ids"]) == ["a", "b"]
    clock.now += 20_000  # past the first lease, inside the renewed one
    rival = create_job_worker(queue=base, handler=Gate(), worker_id="rival")
    assert await rival.poll() == 0
    gate.release.set()
    await worker.stop()


async def test_the_heartbeat_keeps_a_long_jobs_lease() -> None:
    queue = create_memory_job_queue()  # the wall clock: this rule is about time
    await queue.enqueue(job("long"))
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, lease_ms=300, poll_ms=20, worker_id="w1")
    rival = create_job_worker(queue=queue, handler=Gate(), lease_ms=300, worker_id="rival")
    worker.start()
    try:
        await wait_for(lambda: gate.running == 1)
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.2  # four leases
        while loop.time() < until:
            assert await rival.poll() == 0
            await asyncio.sleep(0.03)
        gate.release.set()
        found = await wait_for_job(queue, "long", "succeeded")
    finally:
        await worker.stop()
    assert [(a.status, a.worker_id) for a in found.history] == [("succeeded", "w1")]


async def test_stop_waits_for_a_job_longer_than_its_lease_keeping_it_renewed_and_claims_nothing_else() -> None:
    queue = create_memory_job_queue()  # the wall clock: this rule is about time
    await queue.enqueue(job("long", due_at=0))
    await queue.enqueue(job("waiting", due_at=1))
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, workers=1, lease_ms=300, poll_ms=20, worker_id="w1")
    worker.start()
    await wait_for(lambda: gate.running == 1)
    stopping = asyncio.create_task(worker.stop())
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.2  # four leases past the stop
    while loop.time() < until:
        assert not stopping.done()
        long = await queue.get_job([1], "long")
        assert long is not None and long.status == "running" and long.worker_id == "w1"
        assert long.lease_until is not None and long.lease_until > wall_clock_ms()  # still renewed
        await asyncio.sleep(0.03)
    gate.release.set()
    await asyncio.wait_for(stopping, 10)
    long = await queue.get_job([1], "long")
    waiting = await queue.get_job([1], "waiting")
    assert long is not None and long.status == "succeeded"
    assert [a.status for a in long.history] == ["succeeded"]
    assert waiting is not None and (waiting.status, waiting.attempts) == ("pending", 0)
    assert gate.started == ["long"]
    assert worker.in_flight() == 0
    rival_gate = Gate()
    rival_gate.release.set()
    rival = create_job_worker(queue=queue, handler=rival_gate, lease_ms=300, worker_id="rival")
    assert await rival.poll() == 1  # what was waiting is there for the next replica
    await rival.stop()
    assert rival_gate.started == ["waiting"]


async def test_stop_hands_back_a_job_claimed_in_that_instant_with_its_attempt_refunded() -> None:
    _, base = fixed_queue()
    await base.enqueue(job("a", due_at=T))
    entered = asyncio.Event()
    go = asyncio.Event()

    async def slow_claim(**kwargs: Any) -> None:
        entered.set()
        await go.wait()

    gate = Gate()
    worker = create_job_worker(queue=Proxy(base, claim=slow_claim), handler=gate, worker_id="w1")
    polling = asyncio.create_task(worker.poll())
    await entered.wait()
    stopping = asyncio.create_task(worker.stop())
    await asyncio.sleep(0)
    go.set()
    assert await polling == 0
    await stopping
    found = await base.get_job([1], "a")
    assert found is not None
    assert (found.status, found.attempts, tuple(found.history), found.worker_id) == ("pending", 0, (), None)
    assert gate.started == []


async def test_a_stopped_worker_claims_nothing() -> None:
    _, queue = fixed_queue()
    worker = create_job_worker(queue=queue, handler=Gate())
    await worker.stop()
    await queue.enqueue(job("a", due_at=T))
    assert await worker.poll() == 0


async def test_a_run_cut_short_by_the_loops_end_lets_the_job_go_and_stop_still_returns() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, worker_id="w1")
    assert await worker.poll() == 1
    await wait_for(lambda: gate.running == 1)
    supervisors = [t for t in asyncio.all_tasks() if t.get_name() == "job a supervisor"]
    assert len(supervisors) == 1
    supervisors[0].cancel()  # what a loop shutting down does to it
    await asyncio.wait_for(worker.stop(), 10)
    assert gate.cancelled == ["a"]
    found = await queue.get_job([1], "a")
    assert found is not None and found.status == "running"  # left to its lease, which hands it on
