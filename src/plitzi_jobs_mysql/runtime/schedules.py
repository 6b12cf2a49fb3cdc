"""What a space's actions declare about their schedules, read once into rows the scheduler sweeps.

The cron and the zone are read when the actions are saved (or reconciled) and written to a schedule row. What
a sweep then reads is a due time, not every action of the deployment parsed again: one indexed query a minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol, runtime_checkable

from ..contract.clock import to_epoch_ms
from ..contract.cron import cron_next_fire, is_known_time_zone, is_valid_cron
from ..contract.validation import ID_MAX_CHARS, MAX_INSTANT_MS, NAME_MAX_CHARS
from ..records import ScheduleInput, schedule_job_id

#: Attempts a scheduled job is given before it is left for an operator.
DEFAULT_MAX_ATTEMPTS: Final = 3


@dataclass(frozen=True)
class ScheduleTrigger:
    """An action's schedule trigger: a five-field cron, read on the wall clock of `timezone` (UTC when
    None)."""

    cron: str
    timezone: str | None = None
    enabled: bool = True


@dataclass(frozen=True)
class ActionEntry:
    """One action of a space, as the deployment's lookups describe it."""

    id: str
    schedule: ScheduleTrigger | None = None


@runtime_checkable
class ActionLookups(Protocol):
    """What only the deployment can answer: which actions a space has.

    It may also define `async list_scheduled_spaces() -> list[int]`, the spaces the scheduler reconciles on
    its own; that one is optional (found with `getattr`), so it is not part of the protocol's required
    surface.
    """

    async def list_actions(self, space_id: int) -> list[ActionEntry]: ...


def schedule_for(
    entry: ActionEntry,
    space_id: int,
    environment: str,
    at: datetime,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> ScheduleInput | None:
    """The schedule an action declares as of `at`, or None.

    None for no schedule, an empty expression, or an expression or zone this cannot use (`schedule_problem`
    says which). A zone nobody knows is never read as UTC: a schedule that fires at the wrong hour is worse than
    one that visibly never fires.
    """
    return read_schedule(entry, space_id, environment, at, max_attempts)[0]


def schedule_problem(entry: ActionEntry, space_id: int, at: datetime) -> str | None:
    """Why the schedule `entry` declares cannot be used, or None when it can (or it declares none)."""
    return read_schedule(entry, space_id, "main", at, DEFAULT_MAX_ATTEMPTS)[1]


def read_schedule(
    entry: ActionEntry, space_id: int, environment: str, at: datetime, max_attempts: int
) -> tuple[ScheduleInput | None, str | None]:
    """The schedule `entry` declares, or None and why not (None too when it declares none)."""
    trigger = entry.schedule
    if trigger is None:
        return None, None
    cron = (trigger.cron or "").strip()
    if not cron:
        return None, None  # an empty expression declares no schedule
    if len(cron) > ID_MAX_CHARS or not is_valid_cron(cron):
        return None, f"{cron[:ID_MAX_CHARS]!r} is not a five-field cron expression this can read"
    zone = (trigger.timezone or "").strip() or None
    if zone is not None and (len(zone) > NAME_MAX_CHARS or not is_known_time_zone(zone)):
        return None, f"time zone {zone[:NAME_MAX_CHARS]!r} is unknown (it is never read as UTC)"
    if len(schedule_job_id(space_id, entry.id, MAX_INSTANT_MS)) > ID_MAX_CHARS:
        return None, f"the action id is too long: its fires' job id would pass {ID_MAX_CHARS} characters"
    next_fire = cron_next_fire(cron, at, zone)
    if next_fire is None:
        return None, f"{cron!r} never fires within four years"
    schedule = ScheduleInput(
        space_id=space_id,
        action_id=entry.id,
        cron=cron,
        environment=environment,
        enabled=bool(trigger.enabled),
        next_run_at=to_epoch_ms(next_fire),
        max_attempts=max_attempts,
        timezone=zone,
    )
    return schedule, None


def schedules_for(
    entries: Sequence[ActionEntry],
    space_id: int,
    environment: str,
    at: datetime,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[ScheduleInput]:
    """Every usable schedule a space's actions declare, as of one instant."""
    found = (schedule_for(entry, space_id, environment, at, max_attempts) for entry in entries)
    return [schedule for schedule in found if schedule is not None]
