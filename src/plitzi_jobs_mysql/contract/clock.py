"""The clock of the store a queue lives in, read cheaply.

Every comparison a queue makes (is this due, has this lease lapsed) is made against ONE clock, and replicas in
different countries only agree on the store's. Reading it on every call would put a round trip on the path of
every claim, so it is read once and then trusted for the ELAPSED time only, measured on the local monotonic
clock: the one thing a wrong local clock still gets right is how long thirty seconds is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final, Protocol

from ..errors import StoreUnavailableError
from . import validation as check

RESYNC_MS = 30_000
#: A reading that has not come back in this long is dropped, so the next call takes a fresh one.
READ_BOUND_S = 10.0
log = logging.getLogger("plitzi_jobs_mysql.clock")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def to_epoch_ms(moment: datetime) -> int:
    """An instant as epoch milliseconds, in integer arithmetic (a float timestamp can be a millisecond off).
    A naive datetime is read as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(milliseconds=1)


def from_epoch_ms(ms: int) -> datetime:
    """Epoch milliseconds as a timezone-aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


class QueueClock(Protocol):
    """Where a queue's instants come from: the store's clock (`StoreClock`), or a test's (`InjectedClock`)."""

    async def now(self) -> int:
        """Epoch ms."""
        ...

    def fresh(self) -> int | None:
        """`now()` without an await when it needs none; None when only `now()` can answer."""
        ...

    def resync(self) -> None:
        """Read the clock again on the next call (after a failover)."""
        ...


@dataclass(frozen=True)
class InjectedClock:
    """A clock a test moves (`read` answers epoch ms), standing in for the store's: the queue reads nothing else."""

    read: Callable[[], int]

    async def now(self) -> int:
        return int(self.read())

    def fresh(self) -> int:
        return int(self.read())

    def resync(self) -> None:
        return None  # nothing was remembered


@dataclass
class StoreClock:
    """`now()` answers the store's time in epoch ms; `resync()` forgets the reading (after a failover, in a test)."""

    read: Callable[[], Awaitable[int]]
    resync_ms: int = RESYNC_MS
    _offset_ns: int = 0  # store time minus local monotonic time, at the last reading
    _read_at_ns: int | None = None
    _pending: asyncio.Future[None] | None = field(default=None, repr=False)

    async def now(self) -> int:
        if self._read_at_ns is None:
            await self._sync()
        elif time.monotonic_ns() - self._read_at_ns >= self.resync_ms * 1_000_000:
            # The last reading still holds, carried by the monotonic clock: refresh it beside the caller, never in
            # its way. A refresh stuck on a connection gone silent must not hold up every call of the process.
            self._refresh()
        return (time.monotonic_ns() + self._offset_ns) // 1_000_000

    def fresh(self) -> int | None:
        """`now()` without an await when the last reading still holds and needs no refresh (the common case: a
        hot path saves the coroutine); None when `now()` has a reading to take or start."""
        read_at = self._read_at_ns
        if read_at is None:
            return None
        local = time.monotonic_ns()
        if local - read_at >= self.resync_ms * 1_000_000:
            return None
        return (local + self._offset_ns) // 1_000_000

    def resync(self) -> None:
        self._read_at_ns = None

    def _refresh(self) -> asyncio.Future[None]:
        # Concurrent callers share one reading rather than each sending their own.
        if self._pending is None:
            pending = self._pending = asyncio.ensure_future(self._take_reading())
            pending.add_done_callback(self._reading_done)
        return self._pending

    def _reading_done(self, pending: asyncio.Future[None]) -> None:
        if self._pending is pending:
            self._pending = None
        if not pending.cancelled() and pending.exception() is not None:
            log.debug("reading the store's clock failed", exc_info=pending.exception())

    async def _sync(self) -> None:
        await asyncio.shield(self._refresh())

    async def _take_reading(self) -> None:
        before = time.monotonic_ns()
        try:
            async with asyncio.timeout(READ_BOUND_S):
                store_ms = await self.read()
        except TimeoutError:
            raise StoreUnavailableError(
                f"the store did not answer a clock reading within {READ_BOUND_S:g} s (a connection gone silent?)"
            ) from None
        after = time.monotonic_ns()
        # The reading was taken somewhere between the two: assume the middle.
        self._offset_ns = store_ms * 1_000_000 - (before + after) // 2
        self._read_at_ns = after


def create_store_clock(read: Callable[[], Awaitable[int]], resync_ms: int = RESYNC_MS) -> StoreClock:
    """`read` answers the store's own time in epoch ms (on MySQL `UTC_TIMESTAMP(6)`, so no session time zone can
    shift it)."""
    if not callable(read):
        raise TypeError("read must be an async callable answering epoch milliseconds")
    check.integer("resync_ms", resync_ms, 0, check.MAX_DURATION_MS)
    return StoreClock(read=read, resync_ms=resync_ms)
