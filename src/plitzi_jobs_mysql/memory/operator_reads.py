"""The memory queue's operator reads (`OperatorReads`): its overview per space and action, and finished counts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contract import validation as check
from ..records import TERMINAL_STATUSES, FinishedCount, JobStatus, QueueStats


class MemoryOperatorReads:
    """Mixed into `MemoryJobQueue`, whose rows (`_jobs`) and clock (`_now`) it reads."""

    _jobs: dict[str, Any]

    def _now(self) -> int:
        raise NotImplementedError

    async def stats(self, *, space_ids: Sequence[int] | None = None) -> QueueStats:
        spaces = check.space_ids_or_all(space_ids)
        now = self._now()
        jobs = [r.job for r in self._jobs.values() if spaces is None or r.job.space_id in spaces]
        groups = []
        for job in jobs:
            due = job.status == JobStatus.PENDING and job.run_at <= now
            lapsed = job.status == JobStatus.RUNNING and job.lease_until is not None and job.lease_until < now
            groups.append(
                (job.space_id, job.action_id, job.status, 1, int(due), job.run_at if due else None, int(lapsed))
            )
        return QueueStats.from_groups(now, groups)

    async def finished_counts(
        self, *, space_ids: Sequence[int] | None, since: int, until: int, bucket_ms: int = 3_600_000
    ) -> list[FinishedCount]:
        spaces = check.finished_counts_args(space_ids, since, until, bucket_ms)
        counts: dict[tuple[int, int, str, str], int] = {}
        for row in self._jobs.values():
            job = row.job  # a finished job's run_at is the instant it finished
            if (
                job.status in TERMINAL_STATUSES
                and since <= job.run_at < until
                and (spaces is None or job.space_id in spaces)
            ):
                group = (job.run_at // bucket_ms * bucket_ms, job.space_id, job.action_id, job.status)
                counts[group] = counts.get(group, 0) + 1
        return [
            FinishedCount(space_id=space, action_id=action, status=status, bucket_at=at, count=count)
            for (at, space, action, status), count in sorted(counts.items())
        ]
