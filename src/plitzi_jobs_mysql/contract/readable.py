"""Instants and durations as people read them: ISO 8601 in UTC, and `3d 4h` (the log lines' and the CLI's words;
machines get the epoch milliseconds)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["age", "duration", "instant"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS: Final = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000))


def instant(ms: int) -> str:
    """Epoch ms as ISO 8601 in UTC: `2026-12-02T03:00:00Z`, with `.250` when the milliseconds are not 0."""
    try:
        moment = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms since the epoch"
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{moment.microsecond // 1000:03d}Z" if moment.microsecond else "Z")


def duration(ms: int | float) -> str:
    """A length of time in its two largest units: `3d 4h`, `5m 2s`; under a minute `12.5s`, under a second
    `250ms`."""
    ms = int(ms)
    if ms < 0:
        return "-" + duration(-ms)
    if ms < 1_000:
        return f"{ms}ms"
    if ms < 60_000:
        tenths = ms % 1_000 // 100
        return f"{ms // 1_000}.{tenths}s" if tenths else f"{ms // 1_000}s"
    parts: list[str] = []
    for unit, size in _UNITS:
        if ms >= size or parts:
            parts.append(f"{ms // size}{unit}")
            ms %= size
        if len(parts) == 2:
            break
    return " ".join(part for part in parts if not part.startswith("0") or part == parts[0])


def age(ms: int, now: int) -> str:
    """How long before (or after) `now` an instant is: `3d 4h ago`, `in 5m 2s`, `now`."""
    delta = now - ms
    if delta == 0:
        return "now"
    return f"{duration(delta)} ago" if delta > 0 else f"in {duration(-delta)}"
