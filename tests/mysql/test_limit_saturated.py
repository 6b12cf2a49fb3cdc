"""Claims beside a saturated group (mysql/limit_saturated.py): for a moment they read past its backlog with it left
out, in claim order and missing nothing; a slot this queue frees is claimed at once, one another replica frees
once the moment is over; and a binding limit shared by two replicas keeps its slots busy without waiting on a
poll."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from plitzi_jobs_mysql import ActionLimit, create_job_worker, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.limit_saturated import SATURATED_MS

from ..support import Ledger, ids, job, wait_for
from .test_limit_slots import _reads_of_slots

ONE = {"export": ActionLimit(concurrency=1)}


async def _claim(queue: Any, worker: str, limit: int = 3) -> list[str]:
    return [j.id for j in await queue.claim(worker_id=worker, lease_ms=60_000, limit=limit, limits=ONE)]


async def test_claims_read_past_a_saturated_group_in_claim_order_and_miss_nothing(database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"e{n:02}", action_id="export", due_at=n) for n in range(30)])
    await queue.enqueue_many([job(f"o{n:02}", action_id="other", due_at=100 + n) for n in range(12)])
    # The export's one slot taken, its other jobs refused; the claim reads past them for the rest.
    assert await _claim(queue, "holder", limit=5) == ["e00", "o00", "o01", "o02", "o03"]
    assert queue._saturated.past(await queue._now_ms())[0], "the claim remembers the saturated group"
    taken = []
    for _ in range(4):  # the next claims start where the first other job was, with the export left out
        taken += await _claim(queue, "w")
    assert taken == [f"o{n:02}" for n in range(4, 12)]
    # A job of another action due before that point (here: among the export's) is not missed for longer than
    # the moment the memory lasts.
    await queue.enqueue(job("early", action_id="other", due_at=50))
    started = time.monotonic()
    assert await wait_for(lambda: _claim(queue, "w"), within=5, what="the early job") == ["early"]
    assert time.monotonic() - started < SATURATED_MS / 1000 + 2


async def test_a_group_at_its_rate_is_read_past_until_its_window_opens(database_pool: Any) -> None:
    """Held at its rate, a group is left out of the claims' reads (none reads its slots or its waiting jobs) until
    the oldest start in its window leaves it; the claim at that instant takes the group's next job."""
    clock = [int(time.time() * 1000)]
    queue = create_mysql_job_queue(database_pool, clock=lambda: clock[0])
    rated = {"export": ActionLimit(rate=2, per_ms=150)}
    await queue.enqueue_many([job(f"e{n:02}", action_id="export", due_at=n) for n in range(30)])
    await queue.enqueue_many([job(f"o{n:02}", action_id="other", due_at=100 + n) for n in range(30)])

    async def claim() -> list[str]:
        return ids(await queue.claim(worker_id="w", lease_ms=60_000, limit=3, limits=rated))

    assert await claim() == ["e00", "e01", "o00"]  # both starts of the window taken at `opened`
    opened = clock[0]
    clock[0] += 50
    assert await claim() == ["o01", "o02", "o03"]  # it read the rate's entries: full until opened + 150
    reads = await _reads_of_slots(queue)
    taken = []
    for at in (70, 90, 110, 130, 149):
        clock[0] = opened + at
        taken += await claim()
    assert taken == [f"o{n:02}" for n in range(4, 19)]
    assert reads == [0], "a claim read the rated group while its window was full"
    clock[0] = opened + 150  # the two starts leave the window: the claim at that instant takes its jobs
    assert (await claim())[:2] == ["e02", "e03"]


async def test_a_slot_this_queue_frees_is_claimed_by_its_next_claim(database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(3)])
    assert await _claim(queue, "w") == ["e0"]
    assert await _claim(queue, "w") == [], "the slot is taken: the group is remembered as saturated"
    await queue.settle(job_id="e0", worker_id="w", status="succeeded")
    assert await _claim(queue, "w") == ["e1"], "its own settle ends the memory: the freed slot is taken at once"
    await queue.settle(job_id="e1", worker_id="w", status="failed", error="boom")
    assert await _claim(queue, "w") == ["e2"]


async def test_a_claim_that_read_the_slots_before_a_free_remembers_nothing(database_pool: Any) -> None:
    """A claim that read the group full, then saw this queue free a slot before it ended, must not leave the group
    remembered as saturated: the next claim (the one a settle leads to) takes the freed slot."""
    clock = [int(time.time() * 1000)]
    queue = create_mysql_job_queue(database_pool, clock=lambda: clock[0])
    await queue.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(3)])
    assert await _claim(queue, "w") == ["e0"]  # and refuses e1, e2: remembered for SATURATED_MS
    clock[0] += SATURATED_MS  # that memory over, the next claim reads the slot
    read, go_on = asyncio.Event(), asyncio.Event()
    read_free = queue._read_free

    async def paused_after_the_read(*args: Any) -> Any:
        found = await read_free(*args)
        read.set()
        await go_on.wait()  # the slot reads as taken; the settle below frees it meanwhile
        return found

    queue._read_free = paused_after_the_read
    stale = asyncio.create_task(_claim(queue, "w"))
    await asyncio.wait_for(read.wait(), 10)
    queue._read_free = read_free
    await queue.settle(job_id="e0", worker_id="w", status="succeeded")
    go_on.set()
    assert await stale == [], "it read the slot taken"
    assert await _claim(queue, "w") == ["e1"], "the freed slot is taken at once, not after the memory"


async def test_a_slot_another_replica_frees_is_claimed_once_the_moment_is_over(database_pool: Any) -> None:
    first, second = create_mysql_job_queue(database_pool), create_mysql_job_queue(database_pool)
    await first.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(2)])
    assert await _claim(first, "a") == ["e0"]
    assert await _claim(second, "b") == []
    await first.settle(job_id="e0", worker_id="a", status="succeeded")
    started = time.monotonic()
    assert await wait_for(lambda: _claim(second, "b"), within=5, what="the freed slot") == ["e1"]
    assert time.monotonic() - started < SATURATED_MS / 1000 + 2


async def test_two_replicas_keep_a_binding_limit_busy_without_waiting_for_a_poll(database_pool: Any) -> None:
    """A settle frees its slot and leads to the next claim (the worker's nudge) in the replica that settled, which
    the memory of a saturated group must not hold back."""
    queues = [create_mysql_job_queue(database_pool), create_mysql_job_queue(database_pool)]
    await queues[0].enqueue_many([job(f"l{n:02}", action_id="limited", due_at=n) for n in range(40)])
    ledger = Ledger()
    limits = {"limited": ActionLimit(concurrency=2)}
    # A poll of 5 s: any slot left idle until a poll shows as a drain far longer than 40 / 2 x 20 ms (0.4 s).
    workers = [create_job_worker(queue=q, handler=ledger.handler, workers=4, poll_ms=5_000, limits=limits)
               for q in queues]  # fmt: skip
    started = time.monotonic()
    for worker in workers:
        worker.start()
    try:
        await wait_for(lambda: len(ledger.runs) == 40, within=30, what="the drain")
    finally:
        for worker in workers:
            await worker.stop()
    elapsed = time.monotonic() - started
    assert ledger.most["limited"] == 2
    assert elapsed < 4.5, f"40 jobs of 20 ms, 2 at once, took {elapsed:.2f} s: slots waited for a poll"
