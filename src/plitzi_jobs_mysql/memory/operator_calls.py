"""The memory queue's operator changes, one job and many (`requeue`, `cancel`, `cancel_pending`, `cancel_all`,
`retry_all`), and `complete_in`: what the MySQL queue runs on a caller's connection, here with none."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..contract import validation as check
from ..contract.wakeups import WakeupChannel
from ..errors import LeaseLostError
from ..records import TERMINAL_STATUSES, AttemptOutcome, Job

if TYPE_CHECKING:
    from .claim_order import Row as _Row


def no_connection(connection: object) -> None:
    """The memory queue has no connections: `connection=None` only, so code written for MySQL runs under test."""
    if connection is not None:
        raise TypeError(f"the memory queue takes connection=None only, not {type(connection).__name__}")


class MemoryOperatorCalls:
    """A part of `MemoryJobQueue` (queue.py), which holds the rows."""

    if TYPE_CHECKING:
        _jobs: dict[str, _Row]
        wakeups: WakeupChannel
        wakeup_topic: str

        def _now(self) -> int: ...

        def _update(self, row: _Row, base: Job, **changes: Any) -> None: ...

        def _evict(self) -> None: ...

        def _owned(self, space_ids: Sequence[int], job_id: str) -> _Row | None: ...

        def _settle(self, call: check.Settle) -> None: ...

    # -- one job ---------------------------------------------------------------------------------------------

    def _requeue_row(self, row: _Row, at: int) -> None:
        self._update(row, row.job, status="pending", run_at=at, attempts=0, worker_id=None, lease_until=None,
                     cancel_requested=False, error=None, updated_at=at)  # fmt: skip

    def _cancel_row(self, row: _Row, at: int) -> bool:
        """A pending job is cancelled, a running one asked to stop; answers whether anything changed."""
        if row.job.status == "pending":
            self._update(row, row.job, status="cancelled", worker_id=None, updated_at=at)
            return True
        if row.job.status == "running" and not row.job.cancel_requested:
            self._update(row, row.job, cancel_requested=True, updated_at=at)
            return True
        return False  # asked again: the cancel stands, and nothing changes

    async def requeue(self, space_ids: Sequence[int], job_id: str) -> bool:
        spaces = check.scoped_job(space_ids, job_id)
        row = self._owned(spaces, job_id)
        if row is None or row.job.status not in TERMINAL_STATUSES:
            return False
        self._requeue_row(row, self._now())
        return True

    async def cancel(self, space_ids: Sequence[int], job_id: str) -> bool:
        spaces = check.scoped_job(space_ids, job_id)
        row = self._owned(spaces, job_id)
        if row is None or row.job.status not in ("pending", "running"):
            return False
        self._cancel_row(row, self._now())
        self._evict()
        return True

    async def cancel_pending(self, *, space_id: int, key: str, older_than: str | None = None) -> int:
        check.cancel_pending_args(space_id, key, older_than)
        before: int | None = None
        if older_than is not None:
            anchor = self._jobs.get(older_than)
            if anchor is None:
                return 0
            before = anchor.seq
        at = self._now()
        count = 0
        for row in self._jobs.values():
            job = row.job
            if job.space_id != space_id or job.key != key or job.status != "pending":
                continue
            if before is not None and row.seq >= before:
                continue
            self._update(row, job, status="cancelled", worker_id=None, updated_at=at)
            count += 1
        self._evict()
        return count

    # -- many ------------------------------------------------------------------------------------------------

    def _of(self, space_id: int, action_id: str | None, statuses: tuple[str, ...]) -> list[_Row]:
        return [
            row
            for row in self._jobs.values()
            if row.job.space_id == space_id
            and (action_id is None or row.job.action_id == action_id)
            and row.job.status in statuses
        ]

    async def cancel_all(self, *, space_id: int, action_id: str | None = None) -> int:
        """Every pending job of the space (of that action) cancelled, every running one asked to stop, as `cancel`
        does one; answers how many changed."""
        check.bulk_args(space_id, action_id)
        at = self._now()
        changed = sum(self._cancel_row(row, at) for row in self._of(space_id, action_id, ("pending", "running")))
        self._evict()
        return changed

    async def retry_all(self, *, space_id: int, action_id: str | None = None, status: str = "dead") -> int:
        """Every job of the space (of that action) in that finished status back to pending, as `requeue` does
        one; answers how many changed."""
        check.bulk_args(space_id, action_id)
        rows = self._of(space_id, action_id, (check.finished_status(status),))
        at = self._now()
        for row in rows:
            self._requeue_row(row, at)
        if rows:
            self.wakeups.notify(self.wakeup_topic)
        return len(rows)

    # -- in the caller's transaction (none here) -------------------------------------------------------------

    async def complete_in(self, connection: None, *, job_id: str, worker_id: str, run_id: str | None = None) -> None:
        """What the MySQL queue's `complete_in` does in the caller's transaction: the job `succeeded`, with the
        attempt `settle` would append, while `worker_id` holds it; else `LeaseLostError`, nothing written."""
        check.complete_in_args(job_id, worker_id, run_id)
        no_connection(connection)
        row = self._jobs.get(job_id)
        if row is None or row.job.worker_id != worker_id or row.job.status != "running":
            raise LeaseLostError(
                f"job {job_id!r} is not held by worker {worker_id!r} (its lease lapsed and another claim took it, "
                "or it is finished already): nothing was written"
            )
        outcome = AttemptOutcome(status="succeeded", worker_id=worker_id, run_id=run_id)
        self._settle(check.Settle(job_id=job_id, worker_id=worker_id, status="succeeded", run_id=run_id,
                                  attempt=outcome))  # fmt: skip
        self._evict()

    def announce_due(self) -> None:
        """As the MySQL queue's: wakes the workers listening on this queue's channel."""
        self.wakeups.notify(self.wakeup_topic)
