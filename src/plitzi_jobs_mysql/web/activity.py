"""The chart's figures: jobs finished per hour over the last hours, from `finished_counts`.

An hour that is over does not change (a requeue afterwards aside), so each closed hour is counted once per
dashboard process and kept; a page view recounts only the current hour. A page's cost then follows the jobs that
finished in the current hour, not the day's nor the table's. An hour counts as closed a minute after its end, so a
settle written by a replica whose clock reading lags a little still lands in it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from ..contract.protocols import OperatorReads
from ..records import FinishedCount

HOUR_MS: Final = 3_600_000
HOURS: Final = 24
CLOSED_AFTER_MS: Final = 60_000
SCOPES_KEPT: Final = 64  # distinct space selections whose closed hours are kept


class Activity:
    def __init__(self, reads: OperatorReads, *, hours: int = HOURS, bucket_ms: int = HOUR_MS) -> None:
        self._reads = reads
        self.hours = hours
        self.bucket_ms = bucket_ms
        # per space selection: bucket start -> its counts
        self._closed: OrderedDict[tuple[int, ...] | None, dict[int, list[FinishedCount]]] = OrderedDict()

    def buckets(self, now: int) -> list[int]:
        """The chart's buckets' first instants, oldest first; the last one holds `now`."""
        current = now // self.bucket_ms * self.bucket_ms
        return [current - n * self.bucket_ms for n in range(self.hours - 1, -1, -1)]

    async def window(self, spaces: Sequence[int] | None, now: int) -> dict[int, list[FinishedCount]]:
        """The counts of each of `buckets(now)`."""
        key = None if spaces is None else tuple(sorted(spaces))
        starts = self.buckets(now)
        closed = self._closed.pop(key, {})
        self._closed[key] = closed
        while len(self._closed) > SCOPES_KEPT:
            self._closed.popitem(last=False)
        for old in [at for at in closed if at < starts[0]]:
            del closed[old]
        is_closed = [at + self.bucket_ms + CLOSED_AFTER_MS <= now for at in starts]
        missing = [at for at, done in zip(starts, is_closed, strict=True) if done and at not in closed]
        open_from = next((at for at, done in zip(starts, is_closed, strict=True) if not done), None)
        if missing:
            counted = await self._count(spaces, missing[0], missing[-1] + self.bucket_ms)
            for at in missing:
                closed[at] = counted.get(at, [])
        result = {at: closed[at] for at in starts if at in closed}
        if open_from is not None:
            result.update(await self._count(spaces, open_from, now + 1))
        return {at: result.get(at, []) for at in starts}

    async def _count(self, spaces: Sequence[int] | None, since: int, until: int) -> dict[int, list[FinishedCount]]:
        found: dict[int, list[FinishedCount]] = {}
        counts = await self._reads.finished_counts(space_ids=spaces, since=since, until=until, bucket_ms=self.bucket_ms)
        for count in counts:
            found.setdefault(count.bucket_at, []).append(count)
        return found
