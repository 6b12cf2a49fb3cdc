"""Wake-ups: a queue tells the workers listening on its topic that a job just became due, so they claim now
instead of at their next poll.

A wake-up is a hint, never the record: the job is durable in the store before anyone is told, and a worker
that misses a wake-up still finds the job at its next poll. So a channel may drop a notification (a Redis
reconnect, a full buffer) and the cost is the poll interval, not a job.

The default channel is in-process: an `enqueue` wakes the workers of the same process at once. A fleet that
runs Redis can plug `plitzi_jobs_mysql.redis_wakeups.RedisWakeups` in for cross-process wake-ups.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

logger = logging.getLogger("plitzi_jobs_mysql.wakeups")

Unsubscribe = Callable[[], None]


class WakeupChannel(Protocol):
    """Where queues announce due jobs and workers listen. Both methods are called on the event loop thread."""

    def notify(self, topic: str) -> None:
        """A job in `topic` is due now. Must not block; may drop the notification."""
        ...

    def subscribe(self, topic: str, callback: Callable[[], None]) -> Unsubscribe:
        """Calls `callback` (on the subscriber's event loop) for each notification of `topic`; answers the
        function that stops it."""
        ...


class LocalWakeups:
    """Wake-ups within one process: `notify` calls every subscriber of the topic (on its own loop)."""

    def __init__(self) -> None:
        self._subscribers: dict[str, dict[int, tuple[asyncio.AbstractEventLoop, Callable[[], None]]]] = {}
        self._next = 0

    def notify(self, topic: str) -> None:
        listeners = self._subscribers.get(topic)
        if not listeners:  # every enqueue of a due job calls this, mostly in processes with no worker
            return
        try:
            here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            here = None
        for loop, callback in list(listeners.values()):
            if loop is here:
                callback()
            elif not loop.is_closed():
                loop.call_soon_threadsafe(callback)

    def subscribe(self, topic: str, callback: Callable[[], None]) -> Unsubscribe:
        loop = asyncio.get_running_loop()
        self._next += 1
        token = self._next
        self._subscribers.setdefault(topic, {})[token] = (loop, callback)

        def unsubscribe() -> None:
            listeners = self._subscribers.get(topic)
            if listeners is not None:
                listeners.pop(token, None)
                if not listeners:
                    del self._subscribers[topic]

        return unsubscribe


#: The process-wide default: every queue and worker that is given no other channel meets here.
LOCAL_WAKEUPS = LocalWakeups()
