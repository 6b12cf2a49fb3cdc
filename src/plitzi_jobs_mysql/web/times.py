"""Instants and durations for people: an ISO instant in UTC with its age, `3d 4h` for a duration."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from ..contract.readable import duration

__all__ = ["Instant", "age", "duration", "in_zone", "instant"]


@dataclass(frozen=True)
class Instant:
    """What a template shows for one instant: `iso` (for `<time datetime>`), `text` and its `age`."""

    iso: str
    text: str
    age: str

    def __str__(self) -> str:
        return f"{self.text} ({self.age})"


def instant(ms: int | None, now: int) -> Instant | None:
    if ms is None:
        return None
    at = datetime.fromtimestamp(ms / 1000, UTC)
    iso = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    text = at.strftime("%Y-%m-%d %H:%M:%S") + "Z"
    return Instant(iso=iso, text=text, age=age(ms, now))


def age(ms: int, now: int) -> str:
    """`5m 3s ago`, `in 2h 10m`, or `now` (within a second): durations as the CLI writes them."""
    delta = now - ms
    if abs(delta) < 1000:
        return "now"
    spoken = duration(abs(delta))
    return f"{spoken} ago" if delta > 0 else f"in {spoken}"


def in_zone(ms: int, zone: str | None) -> str:
    """An instant on the wall clock of `zone` (UTC when None), with the zone's abbreviation and offset."""
    at = datetime.fromtimestamp(ms / 1000, UTC).astimezone(ZoneInfo(zone or "UTC"))
    return at.strftime("%Y-%m-%d %H:%M %Z (UTC%z)")
