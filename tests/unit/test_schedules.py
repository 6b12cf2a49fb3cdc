"""What an action's schedule trigger becomes: a row the scheduler sweeps, or nothing."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from plitzi_jobs_mysql.records import ScheduleInput
from plitzi_jobs_mysql.runtime.schedules import (
    ActionEntry,
    ActionLookups,
    ScheduleTrigger,
    schedule_for,
    schedule_job_id,
    schedules_for,
)

AT = datetime(2024, 1, 15, 0, 0, 30, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def entry(cron: str, timezone: str | None = None, enabled: bool = True, id: str = "digest") -> ActionEntry:
    return ActionEntry(id=id, schedule=ScheduleTrigger(cron=cron, timezone=timezone, enabled=enabled))


def test_job_id_is_derived_from_the_stored_fire_instant() -> None:
    assert schedule_job_id(7, "digest", 1_700_000_000_000) == "schedule:7:digest:1700000000000"


def test_an_action_with_a_schedule_becomes_a_row() -> None:
    schedule = schedule_for(entry("*/15 * * * *"), 7, "main", AT, max_attempts=5)
    assert schedule == ScheduleInput(
        space_id=7,
        action_id="digest",
        cron="*/15 * * * *",
        environment="main",
        enabled=True,
        next_run_at=ms(datetime(2024, 1, 15, 0, 15, tzinfo=UTC)),
        max_attempts=5,
        timezone=None,
    )


def test_default_max_attempts_is_three_and_environment_is_kept() -> None:
    schedule = schedule_for(entry("0 * * * *"), 1, "staging", AT)
    assert schedule is not None
    assert schedule.max_attempts == 3
    assert schedule.environment == "staging"


def test_the_zone_moves_the_fire_onto_its_wall_clock() -> None:
    schedule = schedule_for(entry("0 9 * * *", "Europe/Berlin"), 1, "main", AT)
    assert schedule is not None
    assert schedule.timezone == "Europe/Berlin"
    assert schedule.next_run_at == ms(datetime(2024, 1, 15, 8, 0, tzinfo=UTC))  # 09:00 CET


def test_cron_and_zone_are_stripped() -> None:
    schedule = schedule_for(entry("  0 9 * * *\n", " Europe/Berlin "), 1, "main", AT)
    assert schedule is not None
    assert schedule.cron == "0 9 * * *"
    assert schedule.timezone == "Europe/Berlin"


def test_a_blank_zone_means_utc() -> None:
    schedule = schedule_for(entry("0 9 * * *", "   "), 1, "main", AT)
    assert schedule is not None
    assert schedule.timezone is None
    assert schedule.next_run_at == ms(datetime(2024, 1, 15, 9, 0, tzinfo=UTC))


def test_an_unknown_zone_is_never_treated_as_utc() -> None:
    assert schedule_for(entry("0 9 * * *", "Mars/Olympus_Mons"), 1, "main", AT) is None
    assert schedule_for(entry("0 9 * * *", "X" * 65), 1, "main", AT) is None


@pytest.mark.parametrize("cron", ["", "   ", "not a cron", "0 0 * * * *", "@daily", "61 * * * *", "x" * 200])
def test_an_expression_it_cannot_use_gives_no_schedule(cron: str) -> None:
    assert schedule_for(entry(cron), 1, "main", AT) is None


def test_an_action_without_a_schedule_gives_none() -> None:
    assert schedule_for(ActionEntry(id="plain"), 1, "main", AT) is None


def test_an_expression_that_never_fires_gives_none() -> None:
    assert schedule_for(entry("0 0 30 2 *"), 1, "main", AT) is None


def test_a_disabled_trigger_is_kept_disabled() -> None:
    schedule = schedule_for(entry("0 * * * *", enabled=False), 1, "main", AT)
    assert schedule is not None
    assert schedule.enabled is False


def test_schedules_for_keeps_only_usable_schedules_in_order() -> None:
    entries = [
        entry("0 * * * *", id="a"),
        ActionEntry(id="b"),
        entry("0 9 * * *", "Nowhere/Never", id="c"),
        entry("30 * * * *", id="d"),
    ]
    assert [s.action_id for s in schedules_for(entries, 1, "main", AT)] == ["a", "d"]


def test_lookups_protocol_needs_only_list_actions() -> None:
    class Lookups:
        async def list_actions(self, space_id: int) -> list[ActionEntry]:
            return []

    assert isinstance(Lookups(), ActionLookups)


def test_the_lookup_records_take_their_fields_by_position_or_by_name() -> None:
    # Not among API.md's keyword-only records: its call forms name them positionally too.
    assert ScheduleTrigger("0 7 * * *", "Europe/Berlin") == ScheduleTrigger(cron="0 7 * * *", timezone="Europe/Berlin")
    assert ActionEntry("digest", ScheduleTrigger("0 7 * * *")).schedule == ScheduleTrigger(cron="0 7 * * *")
