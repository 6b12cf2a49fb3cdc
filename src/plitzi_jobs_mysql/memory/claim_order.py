"""The order the memory queue hands jobs out in, kept in heaps rather than by sorting every job per claim.

Three heaps: pending jobs not yet due by (run_at, seq); due ones by (priority, run_at, seq), which is the claim
order; running jobs by lease_until. A pending job moves from the first to the second once it is due (each job
once), so a claim costs O(limit · log n) whatever the mix of priorities. An entry is stale once its row changed
again or left the queue; stale entries are skipped when they come up, and the heaps are rebuilt if they outgrow
the jobs.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..records import Job


@dataclass
class Row:
    """A job as the memory queue holds it: the record, plus what only the store needs to know."""

    job: Job
    seq: int  # enqueue order, finer than a millisecond
    input_json: str  # kept encoded, so a caller mutating its dict afterwards changes nothing here
    version: int = 0  # moves on every change: a heap entry carrying an older one is stale


# (run_at or lease_until, seq, version, row) and (priority, run_at, seq, version, row): seq is unique per row and
# versions differ per entry, so the row itself is never compared.
_Timed = tuple[int, int, int, Row]
_Ranked = tuple[int, int, int, int, Row]


@dataclass
class ClaimOrder:
    waiting: list[_Timed] = field(default_factory=list)
    due: list[_Ranked] = field(default_factory=list)
    leases: list[_Timed] = field(default_factory=list)

    def size(self) -> int:
        return len(self.waiting) + len(self.due) + len(self.leases)

    def push(self, row: Row) -> None:
        """Indexes the row as it is now (its version already moved on)."""
        job = row.job
        if job.status == "pending":
            heapq.heappush(self.waiting, (job.run_at, row.seq, row.version, row))
        elif job.status == "running":
            heapq.heappush(self.leases, (job.lease_until or 0, row.seq, row.version, row))

    def rebuild(self, rows: Iterable[Row]) -> None:
        self.waiting, self.due, self.leases = [], [], []
        for row in rows:
            self.push(row)

    def ripen(self, at: int, current: Callable[[Row, int], bool]) -> None:
        """Lapsed leases and pending jobs due by `at` join the claim order; a lapsed job keeps its priority."""
        while self.leases and self.leases[0][0] < at:
            _lease, seq, version, row = heapq.heappop(self.leases)
            if current(row, version):
                heapq.heappush(self.due, (row.job.priority, row.job.run_at, seq, version, row))
        while self.waiting and self.waiting[0][0] <= at:
            run_at, seq, version, row = heapq.heappop(self.waiting)
            if current(row, version):
                heapq.heappush(self.due, (row.job.priority, run_at, seq, version, row))

    def pop_due(self, at: int, current: Callable[[Row, int], bool]) -> tuple[Row, int] | None:
        """The next job to claim, with the version it was indexed at; None when nothing is due."""
        while self.due:
            _priority, run_at, _seq, version, row = heapq.heappop(self.due)
            if not current(row, version):
                continue
            if run_at > at or (row.job.status == "running" and (row.job.lease_until or 0) >= at):
                # Ripened by an earlier claim, but the clock has stepped back since: not due (or under its
                # lease) again.
                self.push_back(row, version)
                continue
            return row, version
        return None

    def put_back_due(self, row: Row, version: int) -> None:
        """A job popped by `pop_due` but not taken (over its limit): due as it was, for a later claim."""
        heapq.heappush(self.due, (row.job.priority, row.job.run_at, row.seq, version, row))

    def push_back(self, row: Row, version: int) -> None:
        job = row.job
        if job.status == "pending":
            heapq.heappush(self.waiting, (job.run_at, row.seq, version, row))
        else:
            heapq.heappush(self.leases, (job.lease_until or 0, row.seq, version, row))
