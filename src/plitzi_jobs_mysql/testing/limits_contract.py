"""Fleet-wide limits per action (contract/limits.py has the rules): a suite for any store whose `claim` takes
`limits`. Mix `LimitsContract` in beside `JobQueueContract`; it uses the same `queue` and `advance` fixtures."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from ..contract.events import EventKind, JobEvent
from ..contract.limits import LimitUsage
from ..contract.protocols import JobQueue
from ..records import ActionLimit, AttemptOutcome
from .support import Advance, job, now_ms

LEASE = 60_000
SLOW = {"slow": ActionLimit(concurrency=2)}


async def _claim(queue: JobQueue, worker: str, limit: int, limits: object, lease_ms: int = LEASE) -> list[str]:
    # `limits` is beyond the `JobQueue` protocol: a store offers it by taking the argument (contract/limits.py).
    claim: Any = queue.claim
    taken = await claim(worker_id=worker, lease_ms=lease_ms, limit=limit, limits=limits)
    return sorted(j.id for j in taken)


async def _succeed(queue: JobQueue, job_id: str, worker: str) -> None:
    await queue.settle(job_id=job_id, worker_id=worker, status="succeeded", attempt=AttemptOutcome(
        status="succeeded", worker_id=worker))  # fmt: skip


class LimitsContract:
    """`claim(..., limits=...)`: concurrency and rate per action, across every claimer of the store."""

    async def _backlog(self, queue: JobQueue, slow: int = 5, other: int = 2) -> None:
        now = await now_ms(queue)
        await queue.enqueue_many([job(f"s{n}", action_id="slow", due_at=now - 10_000 + n) for n in range(slow)])
        await queue.enqueue_many([job(f"o{n}", action_id="other", due_at=now - 5_000 + n) for n in range(other)])

    async def test_concurrency_holds_across_claimers_and_others_pass_it(self, queue: JobQueue) -> None:
        await self._backlog(queue)
        assert await _claim(queue, "w1", 10, SLOW) == ["o0", "o1", "s0", "s1"]
        assert await _claim(queue, "w2", 10, SLOW) == [], "the slots are the fleet's, not one claimer's"
        waiting = await queue.get_job([1], "s2")
        assert waiting is not None and (waiting.status, waiting.attempts, waiting.error) == ("pending", 0, None)

    async def test_a_settle_gives_the_slot_back(self, queue: JobQueue) -> None:
        await self._backlog(queue, other=0)
        assert await _claim(queue, "w1", 10, SLOW) == ["s0", "s1"]
        await _succeed(queue, "s0", "w1")
        assert await _claim(queue, "w2", 10, SLOW) == ["s2"]
        await queue.settle(job_id="s1", worker_id="w1", status="pending", delay_ms=3_600_000)  # a hand-back
        assert await _claim(queue, "w2", 10, SLOW) == ["s3"]
        assert await _claim(queue, "w2", 10, SLOW) == []

    async def test_a_lapsed_lease_frees_its_slot(self, queue: JobQueue, advance: Advance) -> None:
        await self._backlog(queue, other=0)
        assert await _claim(queue, "dead", 10, SLOW, lease_ms=100) == ["s0", "s1"]
        assert await _claim(queue, "w2", 10, SLOW) == []
        await advance(101)
        # The lapsed jobs are taken over first (oldest run_at): still two at once.
        assert await _claim(queue, "w2", 10, SLOW) == ["s0", "s1"]
        assert await _claim(queue, "w3", 10, SLOW) == []

    async def test_a_heartbeat_keeps_the_slot(self, queue: JobQueue, advance: Advance) -> None:
        await self._backlog(queue, slow=3, other=0)
        assert await _claim(queue, "w1", 10, SLOW, lease_ms=300) == ["s0", "s1"]
        for _ in range(3):
            await advance(150)
            await queue.heartbeat(job_ids=["s0", "s1"], worker_id="w1", lease_ms=300)
        assert await _claim(queue, "w2", 10, SLOW) == [], "renewed leases hold their slots past the first lease"

    async def test_by_key_limits_each_key(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        keys = ["a", "a", "b", None, None]
        await queue.enqueue_many(
            [job(f"k{n}", action_id="slow", key=key, due_at=now - 1_000 + n) for n, key in enumerate(keys)]
        )
        per_key = {"slow": ActionLimit(concurrency=1, by_key=True)}
        assert await _claim(queue, "w1", 10, per_key) == ["k0", "k2", "k3"]
        assert await _claim(queue, "w1", 10, per_key) == []

    async def test_rate_counts_starts_in_a_sliding_window(self, queue: JobQueue, advance: Advance) -> None:
        await self._backlog(queue, slow=6, other=0)
        rate = {"slow": ActionLimit(rate=2, per_ms=400)}
        assert await _claim(queue, "w1", 1, rate) == ["s0"]
        await advance(200)
        assert await _claim(queue, "w2", 10, rate) == ["s1"]
        assert await _claim(queue, "w2", 10, rate) == [], "two starts in the window"
        await _succeed(queue, "s0", "w1")
        assert await _claim(queue, "w2", 10, rate) == [], "a finished job's start still counts"
        await advance(201)
        # s0's start has left the window, s1's has not: one more, not two (calendar slots would allow two).
        assert await _claim(queue, "w3", 10, rate) == ["s2"]

    async def test_racing_claimers_never_pass_the_limit(self, queue: JobQueue) -> None:
        await self._backlog(queue, slow=20, other=10)
        limits = {"slow": ActionLimit(concurrency=3)}
        results = await asyncio.gather(*(_claim(queue, f"w{n}", 4, limits) for n in range(8)))
        taken = [i for r in results for i in r]
        while more := await _claim(queue, "late", 4, limits):  # what lost races left behind
            taken += more
        assert len(taken) == len(set(taken))
        assert sum(1 for i in taken if i.startswith("s")) == 3
        assert sum(1 for i in taken if i.startswith("o")) == 10

    async def test_a_saturated_action_does_not_hide_the_others(self, queue: JobQueue) -> None:
        await self._backlog(queue, slow=40, other=3)  # every slow job is older than every other one
        limits = {"slow": ActionLimit(concurrency=1)}
        assert await _claim(queue, "w1", 3, limits) == ["o0", "o1", "s0"]
        assert await _claim(queue, "w1", 3, limits) == ["o2"]

    async def test_bad_limits_are_refused(self, queue: JobQueue) -> None:
        await self._backlog(queue, slow=1, other=0)
        with pytest.raises(TypeError, match="ActionLimit"):
            await _claim(queue, "w1", 1, {"slow": 3})
        with pytest.raises(TypeError, match="mapping"):
            await _claim(queue, "w1", 1, [("slow", ActionLimit(concurrency=1))])
        waiting = await queue.get_job([1], "s0")
        assert waiting is not None and waiting.status == "pending"

    async def test_a_job_left_waiting_is_reported_with_its_limit(self, queue: JobQueue) -> None:
        await self._backlog(queue, slow=3, other=0)
        seen: list[JobEvent] = []
        claim: Any = queue.claim
        taken = await claim(worker_id="w1", lease_ms=LEASE, limit=10, limits=SLOW, on_limited=seen.append)
        assert sorted(j.id for j in taken) == ["s0", "s1"]
        assert seen and {(e.kind, e.job_id, e.action_id) for e in seen} == {(EventKind.LIMITED, "s2", "slow")}
        assert seen[0].message == "concurrency limit (2 running at once)"

    async def test_limit_usage_shows_running_and_starts_per_group(self, queue: JobQueue) -> None:
        await self._backlog(queue, slow=4, other=2)
        limits = {"slow": ActionLimit(concurrency=2, rate=5, per_ms=60_000)}
        assert await _claim(queue, "w1", 1, limits) == ["s0"]
        assert await _claim(queue, "w1", 10, limits) == ["o0", "o1", "s1"]
        usage = cast(Any, queue).limit_usage  # beside the JobQueue protocol, as `limits` is
        assert await usage() == [
            LimitUsage(
                space_id=1, action_id="slow", key=None, concurrency=2, running=2, rate=5, per_ms=60_000, started=2
            )
        ]
        await _succeed(queue, "s0", "w1")
        (after,) = await usage(space_ids=[1])
        assert (after.running, after.started) == (1, 2), "a settle frees the slot; its start still counts"
        assert await usage(space_ids=[2]) == []

    async def test_a_saturated_key_does_not_hide_the_other_keys(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        await queue.enqueue_many([job(f"n{n}", action_id="slow", due_at=now - 10_000 + n) for n in range(30)])
        await queue.enqueue(job("b0", action_id="slow", key="b", due_at=now - 1_000))
        per_key = {"slow": ActionLimit(concurrency=1, by_key=True)}
        assert await _claim(queue, "w1", 2, per_key) == ["b0", "n0"], "jobs without a key are one group, 'b' another"

    async def test_past_a_saturated_action_claims_go_by_priority(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        await queue.enqueue_many(
            [job(f"s{n}", action_id="slow", priority=-10, due_at=now - 10_000 + n) for n in range(5)]
        )
        await queue.enqueue(job("late", action_id="other", priority=10, due_at=now - 9_000))
        await queue.enqueue(job("first", action_id="other", priority=0, due_at=now - 1_000))
        assert await _claim(queue, "w1", 2, SLOW) == ["s0", "s1"]
        # Every slow job is due before the others and refused: the claim reads past them, still by priority.
        assert await _claim(queue, "w1", 1, SLOW) == ["first"]
        assert await _claim(queue, "w1", 1, SLOW) == ["late"]

    async def test_a_job_dying_on_takeover_spends_no_slot(self, queue: JobQueue, advance: Advance) -> None:
        now = await now_ms(queue)
        await queue.enqueue(job("d", action_id="slow", max_attempts=1, due_at=now - 10_000))
        await queue.enqueue_many([job(f"s{n}", action_id="slow", due_at=now - 5_000 + n) for n in range(3)])
        assert await _claim(queue, "dead", 1, SLOW, lease_ms=100) == ["d"]
        await advance(101)
        assert await _claim(queue, "w2", 10, SLOW) == ["s0", "s1"], "d died on takeover: both slots still run jobs"
        died = await queue.get_job([1], "d")
        assert died is not None and died.status == "dead"
        assert await _claim(queue, "w3", 10, SLOW) == []
