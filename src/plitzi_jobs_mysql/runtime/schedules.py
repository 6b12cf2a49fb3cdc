"""What a space's actions declare about their schedules, read once into rows the scheduler sweeps.

The cron and the zone are read when the actions are saved (or reconciled) and written to a schedule row. What
a sweep then reads is a due time, not every action of the deployment parsed again: one indexed query a minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Final, Protocol, runtime_checkable

from ..contract import validation as check
from ..contract.clock import to_epoch_ms
from ..contract.cron import cron_next_fire
from ..records import ScheduleInput
from ..records import schedule_job_id as schedule_job_id  # named beside schedule_for in API.md

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

    None for no schedule, an empty expression, or an action the store would refuse (`schedule_problem` says
    why: an expression, zone or action id it cannot take). A zone nobody knows is never read as UTC: a schedule
    that fires at the wrong hour is worse than one that visibly never fires. A bad `space_id`, `environment` or
    `max_attempts`, the caller's own, raises.
    """
    return read_schedule(entry, space_id, environment, at, max_attempts)[0]


def schedule_problem(entry: ActionEntry, space_id: int, at: datetime) -> str | None:
    """Why the schedule `entry` declares cannot be used, or None when it can (or it declares none)."""
    return read_schedule(entry, space_id, "main", at, DEFAULT_MAX_ATTEMPTS)[1]


def read_schedule(
    entry: ActionEntry, space_id: int, environment: str, at: datetime, max_attempts: int
) -> tuple[ScheduleInput | None, str | None]:
    """The schedule `entry` declares, or None and why not (None too when it declares none).

    The action's fields are checked by the store's own rules (`validation.schedule_input`, which `put_schedules`
    runs), not by a copy of them: whatever this answers, the store takes, so one unusable action is skipped here
    rather than refusing its space's whole set there. The caller's own arguments are checked first, raising."""
    check.space_id(space_id)
    check.text("environment", environment, check.NAME_MAX_CHARS)
    check.integer("max_attempts", max_attempts, 1, check.MAX_INT32)
    trigger = entry.schedule
    if trigger is None:
        return None, None
    cron = _stripped(trigger.cron)
    if cron is None:
        return None, None  # an empty expression declares no schedule
    zone = _stripped(trigger.timezone)
    draft = ScheduleInput(
        space_id=space_id,
        action_id=entry.id,
        cron=cron,  # type: ignore[arg-type]  # whatever the lookups gave: the check says what is wrong with it
        environment=environment,
        enabled=bool(trigger.enabled),
        next_run_at=0,
        max_attempts=max_attempts,
        timezone=zone,  # type: ignore[arg-type]
    )
    try:
        check.schedule_input(draft, space_id)
    except (TypeError, ValueError) as error:
        return None, str(error)
    next_fire = cron_next_fire(draft.cron, at, draft.timezone)
    if next_fire is None:
        return None, f"{draft.cron!r} never fires within four years"
    return replace(draft, next_run_at=to_epoch_ms(next_fire)), None


def _stripped(value: object) -> object:
    """A trigger's text without the blanks around it, None when nothing is left; anything else as it came."""
    if isinstance(value, str):
        return value.strip() or None
    return value


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
