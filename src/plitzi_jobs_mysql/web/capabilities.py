"""What the queue the dashboard was given can do beyond `JobQueue`, declared as Protocols and checked once: a
page or a button exists only for what the queue has, so the dashboard serves any store (a user's own included)
and grows as the stores do.

- `OperatorReads` (stats, finished_counts): the overview's counts and its chart;
- `Pausing` (pause, resume, list_paused; API.md Extensions, issue 20): the pause buttons and the paused list;
- `BulkOperations` (cancel_all, retry_all; issue 20): the bulk forms, counted before they are confirmed;
- limits (issue 21) have their place in the overview's table (`views.limits_of`) once the stores report them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..contract.capabilities import BulkOperations, Pausing
from ..contract.protocols import JobQueue, OperatorReads


@dataclass(frozen=True)
class Capabilities:
    reads: OperatorReads | None
    pausing: Pausing | None
    bulk: BulkOperations | None


def capabilities_of(queue: JobQueue) -> Capabilities:
    return Capabilities(
        reads=queue if isinstance(queue, OperatorReads) else None,
        pausing=queue if isinstance(queue, Pausing) else None,
        bulk=queue if isinstance(queue, BulkOperations) else None,
    )
