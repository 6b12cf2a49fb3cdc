"""The chart's figures: jobs finished per hour over the last hours, from `finished_counts`.

An hour that is over does not change (a requeue afterwards aside), so each closed hour is counted once per
dashboard process and kept; a page view recounts only the current hour. A page's cost then follows the jobs that
finished in the current hour, not the day's nor the table's. An hour counts as closed a minute after its end, so a
settle written by a replica whose clock reading lags a little still lands in it.

Counting the closed hours the first time costs what they hold (1.9 s for a day of 1,000,000 jobs over a week), so
a page does not wait for it: the hours are counted a few at a time, newest first, by a task of their own, and a
page waits for it at most `COUNT_BUDGET_S`, shows the hours counted so far, and says how many are still being
counted (the next view shows them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Sequence
from typing import Final

from ..contract.protocols import OperatorReads
from ..records import FinishedCount

HOUR_MS: Final = 3_600_000
HOURS: Final = 24
CLOSED_AFTER_MS: Final = 60_000
SCOPES_KEPT: Final = 64  # distinct space selections whose closed hours are kept
#: How long a page waits for closed hours being counted before it shows those counted so far.
COUNT_BUDGET_S: Final = 0.03
#: Closed hours one statement counts (newest first), so a long first count shows progress hour by hour.
HOURS_PER_COUNT: Final = 3

log = logging.getLogger("plitzi_jobs_mysql.web")

Scope = tuple[int, ...] | None


class Activity:
    def __init__(
        self, reads: OperatorReads, *, hours: int = HOURS, bucket_ms: int = HOUR_MS, budget_s: float = COUNT_BUDGET_S
    ) -> None:
        self._reads = reads
        self.hours = hours
        self.bucket_ms = bucket_ms
        self.budget_s = budget_s
        # per space selection: bucket start -> its counts
        self._closed: OrderedDict[Scope, dict[int, list[FinishedCount]]] = OrderedDict()
        self._counting: dict[Scope, asyncio.Task[None]] = {}

    def buckets(self, now: int) -> list[int]:
        """The chart's buckets' first instants, oldest first; the last one holds `now`."""
        current = now // self.bucket_ms * self.bucket_ms
        return [current - n * self.bucket_ms for n in range(self.hours - 1, -1, -1)]

    async def window(self, spaces: Sequence[int] | None, now: int) -> dict[int, list[FinishedCount]]:
        """The counts of each of `buckets(now)` (none yet for a closed hour still being counted: `uncounted`)."""
        key = None if spaces is None else tuple(sorted(spaces))
        starts = self.buckets(now)
        closed = self._closed.pop(key, {})
        self._closed[key] = closed
        while len(self._closed) > SCOPES_KEPT:
            self._closed.popitem(last=False)
        for old in [at for at in closed if at < starts[0]]:
            del closed[old]
        missing = self._missing(closed, starts, now)
        open_from = next((at for at in starts if not self._is_closed(at, now)), None)
        if missing:
            task = self._counting.get(key)
            if task is None or task.done():
                task = self._counting[key] = asyncio.create_task(self._count_closed(spaces, closed, missing))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), self.budget_s)
        result = {at: closed[at] for at in starts if at in closed}
        if open_from is not None:
            result.update(await self._count(spaces, open_from, now + 1))
        return {at: result.get(at, []) for at in starts}

    def uncounted(self, spaces: Sequence[int] | None, now: int) -> int:
        """How many closed hours of `buckets(now)` are still being counted (shown as none yet)."""
        key = None if spaces is None else tuple(sorted(spaces))
        return len(self._missing(self._closed.get(key, {}), self.buckets(now), now))

    async def finish_counting(self, spaces: Sequence[int] | None) -> None:
        """Waits until the closed hours being counted for these spaces are (a page never waits: tools and tests)."""
        task = self._counting.get(None if spaces is None else tuple(sorted(spaces)))
        if task is not None:
            await asyncio.shield(task)

    def _is_closed(self, at: int, now: int) -> bool:
        return at + self.bucket_ms + CLOSED_AFTER_MS <= now

    def _missing(self, closed: dict[int, list[FinishedCount]], starts: list[int], now: int) -> list[int]:
        return [at for at in starts if self._is_closed(at, now) and at not in closed]

    async def _count_closed(
        self, spaces: Sequence[int] | None, closed: dict[int, list[FinishedCount]], missing: list[int]
    ) -> None:
        """Counts `missing` (closed hours, oldest first) into `closed`, a few hours a statement, newest first."""
        try:
            for end in range(len(missing), 0, -HOURS_PER_COUNT):
                chunk = missing[max(end - HOURS_PER_COUNT, 0) : end]
                counted = await self._count(spaces, chunk[0], chunk[-1] + self.bucket_ms)
                for at in chunk:
                    closed[at] = counted.get(at, [])
        except Exception as error:  # the next page view tries again
            log.warning("the dashboard's chart could not count its closed hours: %s", error)

    async def _count(self, spaces: Sequence[int] | None, since: int, until: int) -> dict[int, list[FinishedCount]]:
        found: dict[int, list[FinishedCount]] = {}
        counts = await self._reads.finished_counts(space_ids=spaces, since=since, until=until, bucket_ms=self.bucket_ms)
        for count in counts:
            found.setdefault(count.bucket_at, []).append(count)
        return found
