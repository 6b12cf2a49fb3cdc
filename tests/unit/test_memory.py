"""What only the in-process stores have: a bound on finished jobs, an injected clock, and claims from heaps."""

from __future__ import annotations

import logging

import pytest

from plitzi_jobs_mysql import JobInput, create_memory_job_queue, create_memory_kv

from ..support import Clock, job


async def test_the_oldest_finished_jobs_go_first_and_nothing_waiting_goes() -> None:
    now = [1_000]
    queue = create_memory_job_queue(retain_finished=2, clock=lambda: now[0])
    await queue.enqueue_many([job(f"done-{n}", max_attempts=1) for n in range(4)] + [job("waiting", max_attempts=1)])
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
    await queue.enqueue(job("doomed", max_attempts=1))  # one attempt
    assert len(await queue.claim(worker_id="crashed", lease_ms=100, limit=1)) == 1
    now[0] += 200
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql"):
        assert await queue.claim(worker_id="w2", lease_ms=100, limit=1) == []
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "'doomed'" in record.getMessage() and "dead" in record.getMessage() and "1/1" in record.getMessage()


async def test_the_memory_queue_claims_from_its_heaps_exactly_as_a_full_sort_would() -> None:
    """A random walk of enqueues, claims, heartbeats, settles, cancels and lapsed leases: every claim takes the
    jobs a sort of every job by (run_at, enqueue order) would (the rule the heaps replace)."""
    import random

    clock = Clock(1_700_000_000_000)
    queue = create_memory_job_queue(clock=clock, retain_finished=50)
    rng = random.Random(12)
    order: dict[str, int] = {}
    held: dict[str, str] = {}  # job id -> worker
    for step in range(3_000):
        op = rng.random()
        if op < 0.35:
            job_id = f"j{step}"
            if await queue.enqueue(job(job_id, due_at=clock.now + rng.randrange(-500, 500))):
                order[job_id] = step
        elif op < 0.6:
            page = await queue.list_jobs(space_ids=[1], limit=10_000)
            due = sorted(
                (
                    j
                    for j in page.jobs
                    if (j.status == "pending" and j.run_at <= clock.now)
                    or (j.status == "running" and (j.lease_until or 0) < clock.now)
                ),
                key=lambda j: (j.run_at, order[j.id]),
            )
            limit = rng.randrange(0, 6)
            worker = f"w{rng.randrange(3)}"
            claimed = await queue.claim(worker_id=worker, lease_ms=rng.randrange(50, 400), limit=limit)
            expected_run = [j.id for j in due if j.status == "pending" or j.attempts < j.max_attempts]
            # A lapsed job past max_attempts turns dead instead and does not use up the limit.
            assert [j.id for j in claimed] == expected_run[:limit]
            for j in claimed:
                held[j.id] = worker
        elif op < 0.7 and held:
            worker = rng.choice(sorted(set(held.values())))
            await queue.heartbeat(
                job_ids=[k for k, w in held.items() if w == worker], worker_id=worker, lease_ms=rng.randrange(50, 400)
            )
        elif op < 0.85 and held:
            job_id = rng.choice(sorted(held))
            status = rng.choice(["succeeded", "pending"])
            await queue.settle(
                job_id=job_id,
                worker_id=held.pop(job_id),
                status=status,
                delay_ms=rng.randrange(0, 300) if status == "pending" else None,
            )
        elif op < 0.9 and order:
            await queue.cancel([1], rng.choice(sorted(order)))
        else:
            clock.now += rng.randrange(1, 120)


async def test_the_memory_queue_takes_no_connection_but_offers_complete_in_and_announce_due() -> None:
    from plitzi_jobs_mysql import LeaseLostError
    from plitzi_jobs_mysql.contract.wakeups import LocalWakeups

    queue = create_memory_job_queue()
    queue.wakeups = LocalWakeups()
    woken: list[int] = []
    queue.wakeups.subscribe(queue.wakeup_topic, lambda: woken.append(1))
    for call in (queue.enqueue(job("a"), connection=object()), queue.enqueue_many([job("a")], connection="conn")):  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="connection=None"):
            await call
    assert await queue.enqueue(job("a"), connection=None)
    (held,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    with pytest.raises(TypeError, match="connection=None"):
        await queue.complete_in(object(), job_id="a", worker_id="w")  # type: ignore[arg-type]
    with pytest.raises(LeaseLostError):
        await queue.complete_in(None, job_id="a", worker_id="someone-else")
    await queue.complete_in(None, job_id=held.id, worker_id="w", run_id="r")
    found = await queue.get_job([1], "a")
    assert found is not None and found.status == "succeeded" and found.run_id == "r"
    woken.clear()
    queue.announce_due()
    assert woken == [1]
