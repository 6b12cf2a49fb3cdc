"""Five-field cron expressions, read on the wall clock of an IANA time zone.

The grammar is checked here, strictly, before croniter sees an expression: croniter also accepts a seconds
field, macros, `L`, `W`, `#`, `?` and reversed ranges, and a schedule the store accepted must mean the same
thing to every replica forever. croniter then only does the calendar arithmetic, on naive wall-clock times;
daylight saving is applied here, the way vixie cron does it:

* both day fields restricted (neither starts with `*`): a day matches if EITHER matches;
* a wall-clock time skipped by a spring-forward: a fixed-hour expression fires once, at the first instant
  after the gap; an expression whose hour field starts with `*` simply has no fires there;
* a wall-clock time repeated by a fall-back: a fixed-hour expression fires once, on the first pass; an
  expression whose hour field starts with `*` fires on both passes.

This module imports nothing from the rest of the package.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo

from croniter import croniter

__all__ = ["cron_fires_between", "cron_next_fire", "is_known_time_zone", "is_valid_cron"]

HORIZON: Final = timedelta(minutes=2_108_160)  # four years (1,464 days): the furthest any search looks
_MINUTE: Final = timedelta(minutes=1)
# A couple of days beyond the horizon in wall-clock terms covers any UTC offset; the UTC check is exact.
_WALL_MARGIN: Final = timedelta(days=2)
_LAST: Final = datetime.max.replace(second=0, microsecond=0, tzinfo=UTC)

_MONTHS: Final = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1
    )
}
_DAYS: Final = {name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}


@dataclass(frozen=True, slots=True)
class _Field:
    low: int
    high: int  # the largest value written; day-of-week allows 7 for Sunday
    names: dict[str, int]


_FIELDS: Final = (
    _Field(0, 59, {}),
    _Field(0, 23, {}),
    _Field(1, 31, {}),
    _Field(1, 12, _MONTHS),
    _Field(0, 7, _DAYS),
)
_VALUE: Final = r"(?:[0-9]{1,2}|[A-Za-z]{3})"  # `\d` would admit non-ASCII digits
# A step only after `*` or a range: croniter reads `5/10` as `5-59/10`, cronie and vixie differ; refuse it.
_ELEMENT: Final = re.compile(
    rf"\*(?:/(?P<star_step>[0-9]{{1,2}}))?|(?P<low>{_VALUE})(?:-(?P<high>{_VALUE})(?:/(?P<step>[0-9]{{1,2}}))?)?"
)
_ZONE_NAME: Final = re.compile(r"[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*")


@dataclass(frozen=True, slots=True)
class _Cron:
    expression: str  # canonical numeric form handed to croniter
    day_or: bool
    hour_star: bool


def _value(text: str, field: _Field) -> int | None:
    number = field.names.get(text.upper()) if text[0].isalpha() else int(text)
    if number is None or not field.low <= number <= field.high:
        return None
    return number


def _parse_field(text: str, field: _Field) -> frozenset[int] | None:
    values: set[int] = set()
    for element in text.split(","):
        match = _ELEMENT.fullmatch(element)
        if match is None:
            return None
        step_text = match["star_step"] or match["step"]
        step = int(step_text) if step_text is not None else 1
        if not 1 <= step <= field.high:  # cronie's bounds: `*/0` and `*/60` are mistakes
            return None
        if match["low"] is None:
            low, high = field.low, field.high
        else:
            low_value = _value(match["low"], field)
            high_value = low_value if match["high"] is None else _value(match["high"], field)
            if low_value is None or high_value is None or low_value > high_value:
                return None  # out of range, unknown name, or a reversed range croniter would wrap
            low, high = low_value, high_value
        values.update(range(low, high + 1, step))
    if field is _FIELDS[4] and 7 in values:
        values.discard(7)
        values.add(0)
    return frozenset(values)


def _canonical(values: frozenset[int], full: range) -> str:
    return "*" if values >= set(full) else ",".join(str(value) for value in sorted(values))


@lru_cache(maxsize=4096)
def _parse(expression: str) -> _Cron | None:
    texts = expression.split()
    if len(texts) != 5:
        return None
    sets: list[frozenset[int]] = []
    for text, field in zip(texts, _FIELDS, strict=True):
        values = _parse_field(text, field)
        if values is None:
            return None
        sets.append(values)
    minutes, hours, days, months, weekdays = sets
    dom = _canonical(days, range(1, 32))
    dow = _canonical(weekdays, range(7))
    # vixie cron: a day field that starts with `*` (even `*/2`) is "unrestricted" and the day fields are
    # AND'd; otherwise they are OR'd. croniter treats `*/2` as restricted, so the choice is made here.
    day_or = not texts[2].startswith("*") and not texts[4].startswith("*")
    if day_or and "*" in (dom, dow):
        dom = dow = "*"  # one side matches every day, so the OR does too
    minute = _canonical(minutes, range(60))
    hour = _canonical(hours, range(24))
    month = _canonical(months, range(1, 13))
    return _Cron(f"{minute} {hour} {dom} {month} {dow}", day_or, texts[1].startswith("*"))


def is_valid_cron(expression: str) -> bool:
    """True for a five-field expression in the supported grammar (whether or not it ever fires)."""
    return isinstance(expression, str) and _parse(expression) is not None


@lru_cache(maxsize=1024)
def _load_zone(name: str) -> ZoneInfo | None:
    try:
        return ZoneInfo(name)
    except Exception:  # not found, not a TZif file, an odd key: all mean "unknown"
        return None


def _zone(name: object) -> ZoneInfo | None:
    # The regex keeps paths (`../etc/passwd`, `/etc/localtime`) and oddities away from the filesystem.
    if not isinstance(name, str) or len(name) > 255 or _ZONE_NAME.fullmatch(name) is None:
        return None
    return _load_zone(name)


def is_known_time_zone(name: str) -> bool:
    """True when `name` is an IANA zone zoneinfo can load. Never raises."""
    return _zone(name) is not None


def _as_utc(moment: datetime, name: str) -> datetime:
    if not isinstance(moment, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(moment).__name__}")
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def _wall_bound(last: datetime) -> datetime:
    """The last wall-clock time worth reading for fires up to the UTC instant `last`."""
    return (last + min(_WALL_MARGIN, _LAST - last)).replace(tzinfo=None)


def _walls(cron: _Cron, first: datetime, last: datetime) -> Iterator[datetime]:
    """The matching naive wall-clock minutes in [first, last], ascending; croniter jumps between them."""
    iterator = croniter(
        cron.expression, first - _MINUTE, ret_type=datetime, day_or=cron.day_or, max_years_between_matches=5
    )
    while True:
        try:
            wall: datetime = iterator.get_next(datetime)
        except (ValueError, OverflowError):  # CroniterBadDateError: nothing within croniter's own bound
            return
        if wall > last:
            return
        yield wall


def _local(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first whole minute after the spring-forward gap that swallows `wall`."""
    # fold=1 reads `wall` with the offset after the gap (an instant before it); fold=0 with the offset before
    # the gap (an instant after it). The transition lies between; bisect on minutes.
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    after = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    low, high = 0, -(-(after - before) // _MINUTE)
    while high - low > 1:
        middle = (low + high) // 2
        if _local(before + middle * _MINUTE, zone) > wall:
            high = middle
        else:
            low = middle
    return before + high * _MINUTE


def _fires(cron: _Cron, zone: ZoneInfo | None, start: datetime, wall_last: datetime) -> Iterator[datetime]:
    """Every fire at or after `start` (aware UTC, a whole minute), ascending, without duplicates."""
    if zone is None:
        for wall in _walls(cron, start.replace(tzinfo=None), wall_last):
            yield wall.replace(tzinfo=UTC)
        return

    local = start.astimezone(zone)
    wall_first = local.replace(tzinfo=None)
    if cron.hour_star and local.fold == 0:
        second_pass = wall_first.replace(tzinfo=zone, fold=1).astimezone(UTC)
        if second_pass != start:
            # `start` is in the first pass of a repeated hour: the second pass of earlier wall times is
            # still ahead of it, so read the wall clock from as far back as that pass reaches.
            wall_first -= second_pass - start
    elif not cron.hour_star:
        just_before = _local(start - _MINUTE, zone) + _MINUTE
        if just_before < wall_first:
            # `start` is the first instant after a spring-forward gap, where the gap's times still fire.
            wall_first = just_before

    last: datetime | None = None
    second_passes: list[datetime] = []  # held back until the first pass of the repeated hour is done
    for wall in _walls(cron, wall_first, wall_last):
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        candidates: list[datetime]
        if first < second:  # repeated by a fall-back
            candidates = [first]
            if cron.hour_star:
                second_passes.append(second)
        else:
            candidates = [*second_passes, first] if first == second else list(second_passes)
            second_passes.clear()
            if first > second and not cron.hour_star:  # skipped by a spring-forward
                candidates.append(_gap_end(wall, zone))
        for instant in candidates:
            # Several skipped times, and a real fire at the gap's end, all land on one instant: fire once.
            if instant >= start and (last is None or instant > last):
                last = instant
                yield instant
    for instant in second_passes:
        if instant >= start and (last is None or instant > last):
            yield instant


def _prepare(expression: str, timezone_name: str | None) -> tuple[_Cron, ZoneInfo | None] | None:
    cron = _parse(expression) if isinstance(expression, str) else None
    if cron is None:
        return None
    if timezone_name is None:
        return cron, None
    zone = _zone(timezone_name)
    return None if zone is None else (cron, zone)


def cron_next_fire(expression: str, after: datetime, timezone: str | None = None) -> datetime | None:
    """The first whole minute at or after `after` on which `expression` fires on `timezone`'s wall clock.

    `after` is rounded up to a whole minute; a naive `after` is UTC. The answer is an aware UTC datetime, or
    None when the expression or zone is invalid or nothing fires within four years.
    """
    start = _as_utc(after, "after")
    prepared = _prepare(expression, timezone)
    if prepared is None:
        return None
    cron, zone = prepared
    floor = _floor_minute(start)
    try:
        start = floor if floor == start else floor + _MINUTE
        limit = start + min(HORIZON, _LAST - start)
        for instant in _fires(cron, zone, start, _wall_bound(limit)):
            return instant if instant <= limit else None
    except OverflowError:  # within four years of datetime.max
        pass
    return None


def cron_fires_between(
    expression: str, after: datetime, until: datetime, timezone: str | None = None, limit: int = 1000
) -> int:
    """How many times `expression` fires in (`after`, `until`], counting no further than `limit`.

    0 for an invalid expression or zone. Like `cron_next_fire`, it never looks more than four years past the
    previous fire (or `after`) for the next one.
    """
    start = _as_utc(after, "after")
    end = _as_utc(until, "until")
    prepared = _prepare(expression, timezone)
    if prepared is None or limit <= 0 or end <= start:
        return 0
    cron, zone = prepared
    count = 0
    try:
        previous = _floor_minute(start) + _MINUTE  # `after` itself is excluded
        for instant in _fires(cron, zone, previous, _wall_bound(end)):
            if instant > end or instant - previous > HORIZON:
                break
            count += 1
            if count >= limit:
                break
            previous = instant + _MINUTE
    except OverflowError:
        pass
    return count
