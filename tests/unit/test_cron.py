"""The cron contract: grammar, rounding, the four-year horizon, vixie day-field and daylight-saving rules."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from plitzi_jobs_mysql.contract.cron import (
    HORIZON,
    cron_fires_between,
    cron_next_fire,
    is_known_time_zone,
    is_valid_cron,
)

MINUTE = timedelta(minutes=1)
BERLIN = "Europe/Berlin"
NEW_YORK = "America/New_York"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def fires(expression: str, after: datetime, until: datetime, zone: str | None = None) -> list[datetime]:
    """Every fire in [after, until], found by chaining cron_next_fire."""
    found: list[datetime] = []
    moment = after
    while True:
        fire = cron_next_fire(expression, moment, zone)
        if fire is None or fire > until:
            return found
        found.append(fire)
        moment = fire + MINUTE


# --- grammar --------------------------------------------------------------------------------------

VALID = [
    "* * * * *",
    "0 0 * * *",
    "59 23 31 12 6",
    "*/15 * * * *",
    "*/59 * * * *",
    "10-40/10 * * * *",
    "0-59/1 0-23 1-31 1-12 0-7",
    "0,30 9,17 1,15 * *",
    "0 9 * * MON-FRI",
    "0 9 * * mon",
    "0 9 * * Sun,SAT",
    "0 0 1 JAN *",
    "0 0 1 jan,Jul *",
    "0 0 1 feb-apr/2 *",
    "0 0 * * 0",
    "0 0 * * 7",
    "0 0 * * 5-7",
    "00 07 * * *",
    "0 0 29 2 *",
    "0 0 30 2 *",  # valid grammar that never fires: cron_next_fire answers None
    "  0   0 * * *  ",
    "0\t0 * * *",
]

INVALID = [
    "",
    "   ",
    "garbage",
    "a b c d e",
    "* * * *",
    "* * * * * *",  # a seconds field
    "0 0 0 1 1 * 2024",  # a seconds and a year field
    "@daily",
    "@hourly",
    "@reboot",
    "@every 5m",
    "0 0 ? * *",
    "0 0 L * *",
    "0 0 * * 5L",
    "0 0 15W * *",
    "0 0 LW * *",
    "0 0 * * 5#2",
    "H * * * *",
    "H(0-29) * * * *",
    "*/0 * * * *",
    "0-30/0 * * * *",
    "*/60 * * * *",
    "0 */24 * * *",
    "60 * * * *",
    "0 24 * * *",
    "0 0 0 * *",
    "0 0 32 * *",
    "0 0 * 0 *",
    "0 0 * 13 *",
    "0 0 * * 8",
    "0 0 * * 1-8",
    "-1 * * * *",
    "+1 * * * *",
    "1.5 * * * *",
    "0x1 * * * *",
    "100 * * * *",
    "1,,2 * * * *",
    "1, * * * *",
    ",1 * * * *",
    "5/10 * * * *",  # a step after a single value: readings differ between crons
    "50-10 * * * *",  # a reversed range: croniter wraps it, cronie refuses it
    "*/15/2 * * * *",
    "1-2-3 * * * *",
    "** * * * *",
    "*-5 * * * *",
    "0 0 * * MONDAY",
    "0 0 * FOO *",
    "0 0 * * JAN",  # a month name in the day-of-week field
    "0 0 * MON *",
    "0 0 1 * * *",
    "\u0663 * * * *",  # ARABIC-INDIC DIGIT THREE: `\d` would have let it in
]


@pytest.mark.parametrize("expression", VALID)
def test_valid_expressions_are_accepted(expression: str) -> None:
    assert is_valid_cron(expression)


@pytest.mark.parametrize("expression", INVALID)
def test_invalid_expressions_are_refused_everywhere(expression: str) -> None:
    assert not is_valid_cron(expression)
    assert cron_next_fire(expression, utc(2024, 1, 1)) is None
    assert cron_fires_between(expression, utc(2024, 1, 1), utc(2024, 2, 1)) == 0


@pytest.mark.parametrize(
    "expression",
    ["* * * * * *", "@daily", "0 0 L * *", "0 0 * * 5#2", "0 0 ? * *", "0 0 15W * *", "5/10 * * * *"],
)
def test_croniter_alone_accepts_forms_we_refuse(expression: str) -> None:
    # Why the strict parser exists: croniter's own validation lets these through.
    assert croniter.is_valid(expression)
    assert not is_valid_cron(expression)


@pytest.mark.parametrize("value", [None, 5, b"* * * * *", ["*", "*", "*", "*", "*"]])
def test_non_string_expressions_are_invalid(value: object) -> None:
    assert not is_valid_cron(value)  # type: ignore[arg-type]
    assert cron_next_fire(value, utc(2024, 1, 1)) is None  # type: ignore[arg-type]
    assert cron_fires_between(value, utc(2024, 1, 1), utc(2024, 2, 1)) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expression", "after", "expected"),
    [
        ("*/15 * * * *", utc(2024, 1, 1, 0, 1), utc(2024, 1, 1, 0, 15)),
        ("10-40/10 * * * *", utc(2024, 1, 1, 0, 41), utc(2024, 1, 1, 1, 10)),
        ("0 9 * * MON-FRI", utc(2024, 1, 6), utc(2024, 1, 8, 9)),  # Saturday -> Monday
        ("0 9 * * mon", utc(2024, 1, 6), utc(2024, 1, 8, 9)),
        ("0 0 1 jan,Jul *", utc(2024, 2, 1), utc(2024, 7, 1)),
        ("0 0 1 feb-apr/2 *", utc(2024, 2, 2), utc(2024, 4, 1)),
        ("0 0 * * 7", utc(2024, 1, 1), utc(2024, 1, 7)),  # 7 is Sunday
        ("0 0 * * 0", utc(2024, 1, 1), utc(2024, 1, 7)),
        ("0 0 * * SUN", utc(2024, 1, 1), utc(2024, 1, 7)),
        ("59 23 31 12 *", utc(2024, 1, 1), utc(2024, 12, 31, 23, 59)),
    ],
)
def test_field_forms_fire_where_expected(expression: str, after: datetime, expected: datetime) -> None:
    assert cron_next_fire(expression, after) == expected


def test_steps_and_ranges_fire_on_each_listed_minute() -> None:
    hour = (utc(2024, 1, 1, 0, 0), utc(2024, 1, 1, 0, 59))
    assert [f.minute for f in fires("10-40/10 * * * *", *hour)] == [10, 20, 30, 40]
    assert [f.minute for f in fires("*/15 * * * *", *hour)] == [0, 15, 30, 45]
    assert [f.minute for f in fires("0-5,58 * * * *", *hour)] == [0, 1, 2, 3, 4, 5, 58]


def test_sunday_as_seven_matches_sunday_as_zero_in_ranges() -> None:
    span = (utc(2024, 1, 1), utc(2024, 1, 31))
    assert fires("0 0 * * 5-7", *span) == fires("0 0 * * 0,5,6", *span)
    assert fires("0 0 * * 5-7", *span) == fires("0 0 * * FRI-SAT,SUN", *span)


# --- day-of-month / day-of-week (vixie cron) ------------------------------------------------------


def test_both_day_fields_restricted_are_ored() -> None:
    # The 13th OR any Friday; January 2024: Fridays 5, 12, 19, 26; the 13th is a Saturday.
    days = [f.day for f in fires("0 0 13 * 5", utc(2024, 1, 1), utc(2024, 1, 31))]
    assert days == [5, 12, 13, 19, 26]


def test_one_day_field_star_means_the_other_alone() -> None:
    assert [f.day for f in fires("0 0 13 * *", utc(2024, 1, 1), utc(2024, 3, 31))] == [13, 13, 13]
    assert [f.day for f in fires("0 0 * * 5", utc(2024, 1, 1), utc(2024, 1, 31))] == [5, 12, 19, 26]


def test_a_day_field_starting_with_star_is_anded_with_the_other() -> None:
    # vixie cron: `*/2` counts as "*" for the OR rule: odd days that are Fridays. croniter ORs them.
    expected = [utc(2024, 1, 5), utc(2024, 1, 19), utc(2024, 2, 9), utc(2024, 2, 23)]
    assert fires("0 0 */2 * 5", utc(2024, 1, 1), utc(2024, 2, 29)) == expected
    plain = croniter("0 0 */2 * 5", datetime(2024, 1, 1), ret_type=datetime)
    assert plain.get_next(datetime) == datetime(2024, 1, 3)  # a Wednesday: croniter's OR


def test_an_or_with_a_full_day_field_fires_every_day() -> None:
    assert len(fires("0 0 1-31 * MON", utc(2024, 1, 1), utc(2024, 1, 31))) == 31
    assert len(fires("0 0 13 * 0-7", utc(2024, 1, 1), utc(2024, 1, 31))) == 31


@dataclass(frozen=True)
class DayRule:
    expression: str
    dom: frozenset[int]
    months: frozenset[int]
    dow: frozenset[int]  # 0 = Sunday
    either: bool


ALL_DOM = frozenset(range(1, 32))
ALL_MONTHS = frozenset(range(1, 13))
ALL_DOW = frozenset(range(7))

DAY_RULES = [
    DayRule("0 0 13 * 5", frozenset({13}), ALL_MONTHS, frozenset({5}), True),
    DayRule("0 0 1,15 * MON-WED", frozenset({1, 15}), ALL_MONTHS, frozenset({1, 2, 3}), True),
    DayRule("0 0 1-7 * 1", frozenset(range(1, 8)), ALL_MONTHS, frozenset({1}), True),
    DayRule("0 0 */2 * 5", frozenset(range(1, 32, 2)), ALL_MONTHS, frozenset({5}), False),
    DayRule("0 0 * * 5", ALL_DOM, ALL_MONTHS, frozenset({5}), False),
    DayRule("0 0 10-20 * */3", frozenset(range(10, 21)), ALL_MONTHS, frozenset({0, 3, 6}), False),
    DayRule("0 0 31 * SUN", frozenset({31}), ALL_MONTHS, frozenset({0}), True),
    DayRule("0 0 29 FEB *", frozenset({29}), frozenset({2}), ALL_DOW, False),
    DayRule("0 0 1 JAN-MAR 5", frozenset({1}), frozenset({1, 2, 3}), frozenset({5}), True),
]


@pytest.mark.parametrize("rule", DAY_RULES, ids=[rule.expression for rule in DAY_RULES])
def test_day_fields_match_a_day_by_day_reference(rule: DayRule) -> None:
    expected: list[datetime] = []
    day = date(2024, 1, 1)
    while day <= date(2025, 12, 31):
        dom, dow = day.day in rule.dom, day.isoweekday() % 7 in rule.dow
        if day.month in rule.months and ((dom or dow) if rule.either else (dom and dow)):
            expected.append(utc(day.year, day.month, day.day))
        day += timedelta(days=1)
    assert fires(rule.expression, utc(2024, 1, 1), utc(2025, 12, 31)) == expected


# --- rounding, time zones of the arguments, answers -----------------------------------------------


def test_after_is_rounded_up_to_a_whole_minute() -> None:
    assert cron_next_fire("* * * * *", datetime(2024, 1, 1, 0, 2, 7, tzinfo=UTC)) == utc(2024, 1, 1, 0, 3)
    assert cron_next_fire("* * * * *", datetime(2024, 1, 1, 0, 2, 0, 1, tzinfo=UTC)) == utc(2024, 1, 1, 0, 3)


def test_a_whole_minute_after_is_itself_a_candidate() -> None:
    assert cron_next_fire("* * * * *", datetime(2024, 1, 1, 0, 2, 0, 0, tzinfo=UTC)) == utc(2024, 1, 1, 0, 2)
    assert cron_next_fire("2 0 * * *", utc(2024, 1, 1, 0, 2)) == utc(2024, 1, 1, 0, 2)


def test_answers_are_aware_utc() -> None:
    fire = cron_next_fire("0 9 * * *", utc(2024, 1, 1), BERLIN)
    assert fire == utc(2024, 1, 1, 8)
    assert fire is not None and fire.tzinfo is UTC


def test_naive_after_is_read_as_utc() -> None:
    assert cron_next_fire("30 * * * *", datetime(2024, 1, 1, 5, 10)) == utc(2024, 1, 1, 5, 30)


def test_aware_after_in_another_zone_is_converted() -> None:
    after = datetime(2024, 1, 1, 5, 10, tzinfo=ZoneInfo(NEW_YORK))  # 10:10 UTC
    assert cron_next_fire("30 * * * *", after) == utc(2024, 1, 1, 10, 30)


def test_expression_is_read_on_the_zones_wall_clock() -> None:
    assert cron_next_fire("0 9 * * *", utc(2024, 7, 1), BERLIN) == utc(2024, 7, 1, 7)  # CEST
    assert cron_next_fire("0 9 * * *", utc(2024, 7, 1), NEW_YORK) == utc(2024, 7, 1, 13)  # EDT
    # Monday 00:30 in Berlin is still Sunday in UTC.
    assert cron_next_fire("30 0 * * MON", utc(2024, 1, 6), BERLIN) == utc(2024, 1, 7, 23, 30)


def test_utc_zone_name_matches_no_zone() -> None:
    for expression in ["*/7 3 * * *", "0 0 13 * 5", "15 10 28 * *"]:
        assert cron_next_fire(expression, utc(2024, 5, 5), "UTC") == cron_next_fire(expression, utc(2024, 5, 5))


def test_non_datetime_after_or_until_raises_type_error() -> None:
    with pytest.raises(TypeError):
        cron_next_fire("* * * * *", "2024-01-01")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cron_next_fire("* * * * *", date(2024, 1, 1))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        cron_fires_between("* * * * *", utc(2024, 1, 1), 1_700_000_000)  # type: ignore[arg-type]


# --- the four-year horizon ------------------------------------------------------------------------


def test_horizon_is_four_years_of_minutes() -> None:
    assert HORIZON == timedelta(minutes=2_108_160)


@pytest.mark.parametrize("expression", ["0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"])
def test_an_expression_that_never_fires_answers_none(expression: str) -> None:
    assert cron_next_fire(expression, utc(2024, 1, 1)) is None
    assert cron_next_fire(expression, utc(2024, 1, 1), BERLIN) is None
    assert cron_fires_between(expression, utc(2024, 1, 1), utc(2034, 1, 1)) == 0


def test_leap_day_is_found_within_four_years() -> None:
    assert cron_next_fire("0 0 29 2 *", utc(2024, 3, 1)) == utc(2028, 2, 29)


def test_nothing_beyond_the_horizon_is_found() -> None:
    # 2100 is not a leap year: after 2096-02-29 the next 29 February is 2104, eight years on.
    assert cron_next_fire("0 0 29 2 *", utc(2097, 3, 1)) is None
    plain = croniter("0 0 29 2 *", datetime(2097, 3, 1), ret_type=datetime)
    assert plain.get_next(datetime) == datetime(2104, 2, 29)  # croniter alone would look that far


def test_the_last_minutes_a_datetime_can_hold_are_searched_without_overflow() -> None:
    assert cron_next_fire("* * * * *", datetime(9999, 12, 31, 23, 58)) == utc(9999, 12, 31, 23, 58)
    assert cron_next_fire("0 0 1 1 *", datetime(9999, 1, 2), BERLIN) is None
    assert cron_fires_between("* * * * *", datetime(9999, 12, 31, 23, 50), datetime.max) == 9


def test_horizon_edge_is_inclusive() -> None:
    fire = utc(2104, 2, 29)
    assert cron_next_fire("0 0 29 2 *", fire - HORIZON) == fire
    assert cron_next_fire("0 0 29 2 *", fire - HORIZON - MINUTE) is None


# --- counting -------------------------------------------------------------------------------------


def test_count_excludes_after_and_includes_until() -> None:
    assert cron_fires_between("0 * * * *", utc(2024, 1, 1, 0), utc(2024, 1, 1, 3)) == 3  # 01, 02, 03
    assert cron_fires_between("0 * * * *", utc(2024, 1, 1, 0, 0, 30), utc(2024, 1, 1, 3)) == 3
    assert cron_fires_between("0 * * * *", utc(2024, 1, 1, 0), utc(2024, 1, 1, 2, 59, 59)) == 2
    assert cron_fires_between("0 * * * *", utc(2023, 12, 31, 23, 59, 59), utc(2024, 1, 1, 0)) == 1


def test_empty_or_reversed_span_counts_zero() -> None:
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 1)) == 0
    assert cron_fires_between("* * * * *", utc(2024, 1, 2), utc(2024, 1, 1)) == 0


def test_count_is_capped_at_limit() -> None:
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 4)) == 1000  # 4,320 in truth
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 4), limit=10) == 10
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 4), limit=5000) == 4320
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 4), limit=0) == 0
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 4), limit=-1) == 0


def test_count_stops_at_the_cap_on_a_huge_span() -> None:
    began = time.perf_counter()
    assert cron_fires_between("* * * * *", utc(2000, 1, 1), utc(9000, 1, 1), BERLIN, limit=1000) == 1000
    assert time.perf_counter() - began < 1.0  # ~10 ms: it cannot have walked the span


def test_count_spans_longer_than_the_horizon_when_fires_are_closer() -> None:
    # The horizon bounds each search for the next fire, not the span counted.
    assert cron_fires_between("0 0 1 1 *", utc(2024, 1, 1), utc(2034, 1, 1)) == 10


def test_count_with_invalid_zone_is_zero() -> None:
    assert cron_fires_between("* * * * *", utc(2024, 1, 1), utc(2024, 1, 2), "Nowhere/Special") == 0


# --- time zones -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["UTC", "Europe/Berlin", "America/New_York", "Etc/GMT+5", "Asia/Kolkata"])
def test_known_time_zones(name: str) -> None:
    assert is_known_time_zone(name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        " ",
        "Not/AZone",
        "Mars/Olympus_Mons",
        "../etc/passwd",
        "/etc/localtime",
        "Europe/../Europe/Berlin",
        "Europe//Berlin",
        "Europe/Berlin/",
        "Europe/Berlin ",
        "Europe/Berlin\x00",
        "zone.tab",
        "tzdata.zi",
        "x" * 10_000,
    ],
)
def test_unknown_time_zones(name: str) -> None:
    assert not is_known_time_zone(name)
    assert cron_next_fire("* * * * *", utc(2024, 1, 1), name) is None  # never silently UTC


@pytest.mark.parametrize("value", [None, 0, b"UTC", ["UTC"], object()])
def test_non_string_time_zones_are_unknown(value: object) -> None:
    assert not is_known_time_zone(value)  # type: ignore[arg-type]


# --- daylight saving: exact instants --------------------------------------------------------------


def test_berlin_spring_forward_skipped_time_fires_once_at_end_of_gap() -> None:
    # 2024-03-31 02:00 CET -> 03:00 CEST: 02:30 does not exist; 03:00 CEST is 01:00 UTC.
    assert cron_next_fire("30 2 * * *", utc(2024, 3, 30, 12), BERLIN) == utc(2024, 3, 31, 1)
    assert cron_next_fire("30 2 * * *", utc(2024, 3, 31, 1), BERLIN) == utc(2024, 3, 31, 1)  # from the gap's end
    assert cron_next_fire("30 2 * * *", utc(2024, 3, 31, 1, 1), BERLIN) == utc(2024, 4, 1, 0, 30)
    assert cron_fires_between("30 2 * * *", utc(2024, 3, 30, 12), utc(2024, 3, 31, 12), BERLIN) == 1


def test_several_skipped_times_and_the_gap_end_collapse_into_one_fire() -> None:
    day = (utc(2024, 3, 30, 22), utc(2024, 3, 31, 21, 59))
    assert fires("0,30 2 * * *", *day, BERLIN) == [utc(2024, 3, 31, 1)]
    assert fires("0 2,3 * * *", *day, BERLIN) == [utc(2024, 3, 31, 1)]
    assert fires("0 2,3 * * *", utc(2024, 3, 29, 22), utc(2024, 3, 30, 21, 59), BERLIN) == [
        utc(2024, 3, 30, 1),
        utc(2024, 3, 30, 2),
    ]


def test_berlin_spring_forward_star_hour_has_no_fires_in_the_gap() -> None:
    # 01:30 CET = 00:30 UTC, then 02:30 is skipped, then 03:30 CEST = 01:30 UTC.
    assert fires("30 * * * *", utc(2024, 3, 31, 0), utc(2024, 3, 31, 2), BERLIN) == [
        utc(2024, 3, 31, 0, 30),
        utc(2024, 3, 31, 1, 30),
    ]
    # */15 keeps firing every 15 minutes of real time.
    assert fires("*/15 * * * *", utc(2024, 3, 31, 0, 30), utc(2024, 3, 31, 1, 15), BERLIN) == [
        utc(2024, 3, 31, 0, 30),
        utc(2024, 3, 31, 0, 45),
        utc(2024, 3, 31, 1, 0),
        utc(2024, 3, 31, 1, 15),
    ]


def test_berlin_fall_back_fixed_time_fires_once_on_the_first_pass() -> None:
    # 2024-10-27 03:00 CEST -> 02:00 CET: 02:30 happens at 00:30 UTC and again at 01:30 UTC.
    assert cron_next_fire("30 2 * * *", utc(2024, 10, 26, 12), BERLIN) == utc(2024, 10, 27, 0, 30)
    assert cron_next_fire("30 2 * * *", utc(2024, 10, 27, 0, 31), BERLIN) == utc(2024, 10, 28, 1, 30)
    assert cron_next_fire("30 2 * * *", utc(2024, 10, 27, 1, 0), BERLIN) == utc(2024, 10, 28, 1, 30)
    assert cron_fires_between("30 2 * * *", utc(2024, 10, 26, 12), utc(2024, 10, 27, 12), BERLIN) == 1


def test_plain_croniter_fires_twice_in_a_fall_back_hour_and_we_do_not() -> None:
    berlin = ZoneInfo(BERLIN)
    plain = croniter("30 2 * * *", datetime(2024, 10, 27, 0, 0, tzinfo=berlin), ret_type=datetime)
    seen = [plain.get_next(datetime).astimezone(UTC) for _ in range(2)]
    assert seen == [utc(2024, 10, 27, 0, 30), utc(2024, 10, 27, 1, 30)]  # the same wall time, twice
    assert fires("30 2 * * *", utc(2024, 10, 26, 22), utc(2024, 10, 27, 22), BERLIN) == [utc(2024, 10, 27, 0, 30)]


def test_berlin_fall_back_star_hour_fires_on_both_passes() -> None:
    span = (utc(2024, 10, 26, 23, 30), utc(2024, 10, 27, 2, 30))
    assert fires("0 * * * *", *span, BERLIN) == [
        utc(2024, 10, 27, 0),
        utc(2024, 10, 27, 1),
        utc(2024, 10, 27, 2),
    ]
    assert cron_fires_between("0 * * * *", *span, BERLIN) == 3
    # */15 over two hours of real time: 00:00 .. 02:00 UTC every quarter hour.
    assert cron_fires_between("*/15 * * * *", utc(2024, 10, 26, 23, 59), utc(2024, 10, 27, 2), BERLIN) == 9
    assert cron_fires_between("0 */2 * * *", utc(2024, 10, 26, 22, 30), utc(2024, 10, 27, 1, 30), BERLIN) == 2


def test_start_inside_the_first_pass_still_finds_the_second_pass() -> None:
    # 00:10 UTC is 02:10 CEST; 02:05 comes round again at 01:05 UTC (02:05 CET).
    assert cron_next_fire("5 * * * *", utc(2024, 10, 27, 0, 10), BERLIN) == utc(2024, 10, 27, 1, 5)
    assert cron_next_fire("20 * * * *", utc(2024, 10, 27, 0, 10), BERLIN) == utc(2024, 10, 27, 0, 20)


def test_start_inside_the_second_pass_fires_on_real_time() -> None:
    assert cron_next_fire("5 * * * *", utc(2024, 10, 27, 1, 0), BERLIN) == utc(2024, 10, 27, 1, 5)
    assert cron_next_fire("5 * * * *", utc(2024, 10, 27, 1, 6), BERLIN) == utc(2024, 10, 27, 2, 5)


def test_new_york_spring_forward() -> None:
    # 2024-03-10 02:00 EST -> 03:00 EDT; 03:00 EDT is 07:00 UTC.
    assert cron_next_fire("30 2 * * *", utc(2024, 3, 9, 12), NEW_YORK) == utc(2024, 3, 10, 7)
    assert cron_next_fire("30 2 * * *", utc(2024, 3, 10, 7, 1), NEW_YORK) == utc(2024, 3, 11, 6, 30)
    assert fires("30 * * * *", utc(2024, 3, 10, 6), utc(2024, 3, 10, 8), NEW_YORK) == [
        utc(2024, 3, 10, 6, 30),
        utc(2024, 3, 10, 7, 30),
    ]


def test_new_york_fall_back() -> None:
    # 2024-11-03 02:00 EDT -> 01:00 EST: 01:30 happens at 05:30 UTC and 06:30 UTC.
    assert cron_next_fire("30 1 * * *", utc(2024, 11, 2, 12), NEW_YORK) == utc(2024, 11, 3, 5, 30)
    assert cron_next_fire("30 1 * * *", utc(2024, 11, 3, 5, 31), NEW_YORK) == utc(2024, 11, 4, 6, 30)
    assert fires("0 * * * *", utc(2024, 11, 3, 4, 30), utc(2024, 11, 3, 7), NEW_YORK) == [
        utc(2024, 11, 3, 5),
        utc(2024, 11, 3, 6),
        utc(2024, 11, 3, 7),
    ]


# --- daylight saving: against a minute-by-minute reference ----------------------------------------


@dataclass(frozen=True)
class Rule:
    expression: str
    minutes: frozenset[int]
    hours: frozenset[int]
    hour_star: bool

    def matches(self, wall: datetime) -> bool:
        return wall.minute in self.minutes and wall.hour in self.hours


ALL_HOURS = frozenset(range(24))
RULES = [
    Rule("*/15 * * * *", frozenset({0, 15, 30, 45}), ALL_HOURS, True),
    Rule("0 * * * *", frozenset({0}), ALL_HOURS, True),
    Rule("30 * * * *", frozenset({30}), ALL_HOURS, True),
    Rule("*/20 */2 * * *", frozenset({0, 20, 40}), frozenset(range(0, 24, 2)), True),
    Rule("30 2 * * *", frozenset({30}), frozenset({2}), False),
    Rule("0,30 2 * * *", frozenset({0, 30}), frozenset({2}), False),
    Rule("0 2,3 * * *", frozenset({0}), frozenset({2, 3}), False),
    Rule("45 1 * * *", frozenset({45}), frozenset({1}), False),
    Rule("*/10 1-3 * * *", frozenset(range(0, 60, 10)), frozenset({1, 2, 3}), False),
    Rule("59 1,2 * * *", frozenset({59}), frozenset({1, 2}), False),
]
WINDOWS = [
    (BERLIN, utc(2024, 3, 30, 20)),
    (BERLIN, utc(2024, 10, 26, 20)),
    (NEW_YORK, utc(2024, 3, 10, 2)),
    (NEW_YORK, utc(2024, 11, 3, 2)),
]


def reference(rule: Rule, zone_name: str, start: datetime, end: datetime) -> list[datetime]:
    """The DST rules stated directly, walking real time a minute at a time."""
    zone = ZoneInfo(zone_name)
    found: list[datetime] = []

    def walls() -> Iterator[tuple[datetime, datetime, datetime]]:
        moment = start - MINUTE
        previous = moment.astimezone(zone)
        while moment < end:
            moment += MINUTE
            local = moment.astimezone(zone)
            yield moment, previous.replace(tzinfo=None), local
            previous = local

    for moment, previous_wall, local in walls():
        wall = local.replace(tzinfo=None)
        repeat = wall.replace(tzinfo=zone, fold=1 - local.fold).utcoffset() != local.utcoffset()
        fire = rule.matches(wall) and (rule.hour_star or not (repeat and local.fold == 1))
        skipped = wall - previous_wall > MINUTE
        if skipped and not rule.hour_star:
            gap = previous_wall + MINUTE
            while gap < wall and not fire:
                fire = rule.matches(gap)
                gap += MINUTE
        if fire:
            found.append(moment)
    return found


@pytest.mark.parametrize("rule", RULES, ids=[rule.expression for rule in RULES])
@pytest.mark.parametrize(("zone", "start"), WINDOWS, ids=[f"{z}-{s:%m}" for z, s in WINDOWS])
def test_dst_matches_the_reference(rule: Rule, zone: str, start: datetime) -> None:
    end = start + timedelta(hours=12)
    expected = reference(rule, zone, start, end)
    assert fires(rule.expression, start, end, zone) == expected
    assert cron_fires_between(rule.expression, start - MINUTE, end, zone, limit=10_000) == len(expected)
    # From every minute of the window, the next fire is the reference's next fire.
    moment = start
    while moment <= end - timedelta(hours=3):
        want = next((fire for fire in expected if fire >= moment), None)
        got = cron_next_fire(rule.expression, moment, zone)
        if want is None:  # the next fire is past the window the reference walked
            assert got is not None and got > end, moment
        else:
            assert got == want, moment
        moment += MINUTE


# --- cost -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("zone", [None, BERLIN])
@pytest.mark.parametrize("expression", ["*/15 * * * *", "30 2 * * *", "0 9 * * MON-FRI", "0 0 13 * 5"])
def test_next_fire_is_well_under_a_millisecond(expression: str, zone: str | None) -> None:
    calls = 500
    began = time.perf_counter()
    for step in range(calls):
        cron_next_fire(expression, utc(2024, 1, 1) + step * timedelta(minutes=97), zone)
    assert (time.perf_counter() - began) / calls < 0.001


def test_a_never_firing_expression_answers_quickly() -> None:
    began = time.perf_counter()
    assert cron_next_fire("0 0 30 2 *", utc(2024, 1, 1), BERLIN) is None
    assert cron_next_fire("0 0 29 2 *", utc(2097, 3, 1), BERLIN) is None
    assert time.perf_counter() - began < 0.1
