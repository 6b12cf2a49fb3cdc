"""The queue's contract, part four: what an operator's overview reads (`OperatorReads.finished_counts`)."""

from __future__ import annotations

from collections import Counter

import pytest

from ..contract.protocols import JobQueue, OperatorReads
from ..records import AttemptOutcome
from .support import Advance, claim_one, job, now_ms

HOUR_MS = 3_600_000


def _reads(queue: JobQueue) -> OperatorReads:
    if not isinstance(queue, OperatorReads):
        pytest.skip("this store has no OperatorReads (stats, finished_counts): the dashboard shows no chart for it")
    return queue


class ActivityContract:
    """`finished_counts` (a part of `JobQueueContract`; skipped for a store without `OperatorReads`)."""

    async def _finish(self, queue: JobQueue, job_id: str, status: str, attempt: str) -> None:
        claimed = await claim_one(queue, "w1")
        assert claimed.id == job_id, f"expected {job_id} claimed next, got {claimed.id}"
        outcome = AttemptOutcome(status=attempt, worker_id="w1")
        await queue.settle(job_id=job_id, worker_id="w1", status=status, attempt=outcome)

    async def test_finished_counts_count_finished_jobs_by_space_action_status(
        self, queue: JobQueue, advance: Advance
    ) -> None:
        reads = _reads(queue)
        since = await now_ms(queue)
        await queue.enqueue_many(
            [job("ok-1", due_at=1), job("ok-2", due_at=2), job("dead", due_at=3, action_id="b"),
             job("elsewhere", space_id=2, due_at=4), job("waits", due_at=since), job("dropped", due_at=6)]
        )  # fmt: skip
        await self._finish(queue, "ok-1", "succeeded", "succeeded")
        await self._finish(queue, "ok-2", "succeeded", "succeeded")
        await self._finish(queue, "dead", "dead", "failed")
        await self._finish(queue, "elsewhere", "succeeded", "succeeded")
        assert await queue.cancel([1], "dropped") is True  # cancelled while it waited: finished too
        await advance(1)
        until = await now_ms(queue) + 1

        counts = await reads.finished_counts(space_ids=None, since=since, until=until, bucket_ms=60_000)
        assert all(c.bucket_at % 60_000 == 0 and since - 60_000 < c.bucket_at < until for c in counts), counts
        assert counts == sorted(counts, key=lambda c: (c.bucket_at, c.space_id, c.action_id, c.status))
        summed: Counter[tuple[int, str, str]] = Counter()
        for c in counts:
            summed[(c.space_id, c.action_id, c.status)] += c.count
        assert summed == {
            (1, "action-1", "succeeded"): 2,
            (1, "action-1", "cancelled"): 1,
            (1, "b", "dead"): 1,
            (2, "action-1", "succeeded"): 1,
        }  # "waits" is pending: not finished, not counted
        only_two = await reads.finished_counts(space_ids=[2], since=since, until=until, bucket_ms=HOUR_MS)
        assert sum(c.count for c in only_two) == 1 and {c.space_id for c in only_two} == {2}
        assert await reads.finished_counts(space_ids=[], since=since, until=until) == []
        # The window is [since, until): nothing finished before the first job did.
        assert await reads.finished_counts(space_ids=None, since=max(0, since - 24 * HOUR_MS), until=since) == []

        # A requeued job is not finished any more.
        assert await queue.requeue([1], "dead") is True
        after = await reads.finished_counts(space_ids=[1], since=since, until=until, bucket_ms=HOUR_MS)
        assert "dead" not in {c.status for c in after} and sum(c.count for c in after) == 3

    async def test_finished_counts_refuse_bad_windows(self, queue: JobQueue) -> None:
        reads = _reads(queue)
        with pytest.raises(ValueError, match="bucket_ms"):
            await reads.finished_counts(space_ids=None, since=0, until=1, bucket_ms=0)
        with pytest.raises(ValueError, match="before since"):
            await reads.finished_counts(space_ids=None, since=10, until=5)
        with pytest.raises(ValueError, match="buckets"):
            await reads.finished_counts(space_ids=None, since=0, until=2_000 * HOUR_MS)
        with pytest.raises(TypeError):
            await reads.finished_counts(space_ids=None, since="0", until=1)  # type: ignore[arg-type]
