"""When a job comes back: the doubling backoff with its jitter, and a `RetryLater`'s own delay."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from ..contract import validation as check
from .handler import RetryLater

#: The jitter added to a retry is at most this, however long the backoff has grown.
MAX_JITTER_MS: Final = 30_000


@dataclass(frozen=True)
class RetryPolicy:
    """The retry delays of one worker; `random` (answering a float in [0, 1)) is its only source of chance."""

    base_ms: int
    max_ms: int
    random: Callable[[], float] = field(default=random.random)

    def backoff_ms(self, attempt: int) -> int:
        """The retry delay after attempt `attempt`: doubling from the base up to the ceiling, plus jitter so
        the jobs one outage failed together do not all come back in the same second."""
        doublings = min(max(0, attempt - 1), 62)  # past that the ceiling has long been reached
        delay = min(self.max_ms, self.base_ms * (1 << doublings))
        cap = min(delay, MAX_JITTER_MS)
        jitter = min(cap - 1, int(float(self.random()) * cap)) if cap > 0 else 0
        return min(delay + jitter, check.MAX_DURATION_MS)

    def retry_later_ms(self, error: RetryLater) -> int:
        """The delay a `RetryLater` asked for (clipped to 0 .. ten years), or the first backoff step. A delay that
        is not a finite number is a `ValueError` saying so."""
        asked = error.delay_ms
        if asked is None:
            return self.backoff_ms(1)
        if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not math.isfinite(asked):
            raise ValueError(
                f"RetryLater(delay_ms={asked!r}): delay_ms must be a whole number of milliseconds (or None for the "
                "backoff's first step)"
            )
        return max(0, min(int(asked), check.MAX_DURATION_MS))
