"""This machine's clock: the in-process stores' default, and the only place the package reads it."""

from __future__ import annotations

import time


def wall_clock_ms() -> int:
    """Epoch milliseconds by this machine's clock."""
    return time.time_ns() // 1_000_000
