"""The memory queue's pauses (`pause`, `resume`, `list_paused`): a claim sets a paused job aside rather than
taking it, and a resume puts what it set aside back into the claim order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..contract import validation as check
from ..contract.wakeups import WakeupChannel
from ..records import Job, PausedAction

if TYPE_CHECKING:
    from .claim_order import Row as _Row


class MemoryPauseCalls:
    """A part of `MemoryJobQueue` (queue.py), which holds the rows, the pauses and the rows set aside."""

    if TYPE_CHECKING:
        _jobs: dict[str, _Row]
        _pauses: dict[tuple[int, str | None], int]  # (space, action or None) -> since
        _held: dict[str, _Row]  # due jobs a claim met while their scope was paused, by id
        wakeups: WakeupChannel
        wakeup_topic: str

        def _now(self) -> int: ...

        def _index(self, row: _Row) -> None: ...

    def _paused(self, job: Job) -> bool:
        return (job.space_id, None) in self._pauses or (job.space_id, job.action_id) in self._pauses

    async def pause(self, *, space_id: int, action_id: str | None = None) -> None:
        """Claims skip the pending jobs of the space (of that action); pausing again keeps the first `since`."""
        check.bulk_args(space_id, action_id)
        self._pauses.setdefault((space_id, action_id), self._now())

    async def resume(self, *, space_id: int, action_id: str | None = None) -> None:
        """That pause lifted; the jobs set aside under it join the claim order again (those still under another
        pause stay aside)."""
        check.bulk_args(space_id, action_id)
        if self._pauses.pop((space_id, action_id), None) is None:
            return
        freed = [row for row in self._held.values() if not self._paused(row.job)]
        for row in freed:
            del self._held[row.job.id]
            if self._jobs.get(row.job.id) is row:
                self._index(row)
        if freed:
            self.wakeups.notify(self.wakeup_topic)

    async def list_paused(self, space_ids: Sequence[int]) -> list[PausedAction]:
        """The pauses of those spaces, by space: the whole space's first, then its actions' by id."""
        spaces = set(check.space_ids(space_ids))
        found = sorted((k for k in self._pauses if k[0] in spaces), key=lambda k: (k[0], k[1] is not None, k[1] or ""))
        return [
            PausedAction(space_id=space, action_id=action, since=self._pauses[space, action]) for space, action in found
        ]
