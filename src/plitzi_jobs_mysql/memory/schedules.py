"""The memory queue's schedules: one dict by (space, action), kept by the `JobQueue` contract's schedule rules.
The queue validates the arguments and gives the instant; this holds and changes the schedules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from ..records import Schedule, ScheduleInput


class MemorySchedules:
    """The schedule table of a `MemoryJobQueue`."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[int, str], Schedule] = {}

    def due(self, at: int, limit: int) -> list[Schedule]:
        due = [s for s in self._by_key.values() if s.enabled and s.next_run_at <= at]
        due.sort(key=lambda s: (s.next_run_at, s.space_id, s.action_id))
        return due[:limit]

    def advance(
        self, *, space_id: int, action_id: str, from_at: int, to_at: int, missed: int, now: Callable[[], int]
    ) -> bool:
        """`now` is read only when the schedule moves."""
        schedule = self._by_key.get((space_id, action_id))
        if schedule is None or schedule.next_run_at != from_at:
            return False
        self._by_key[(space_id, action_id)] = replace(
            schedule,
            next_run_at=to_at,
            last_fire_at=from_at,
            missed=schedule.missed + missed,
            updated_at=now(),
        )
        return True

    def put(self, space_id: int, incoming: Sequence[ScheduleInput], at: int) -> None:
        keep = {s.action_id for s in incoming}
        for existing_key in [k for k in self._by_key if k[0] == space_id and k[1] not in keep]:
            del self._by_key[existing_key]
        for schedule in incoming:
            existing = self._by_key.get((space_id, schedule.action_id))
            next_run_at = schedule.next_run_at
            if existing is not None and _keeps_next_run(existing, schedule):
                next_run_at = existing.next_run_at
            self._by_key[(space_id, schedule.action_id)] = Schedule(
                space_id=space_id,
                action_id=schedule.action_id,
                cron=schedule.cron,
                environment=schedule.environment,
                enabled=schedule.enabled,
                next_run_at=next_run_at,
                max_attempts=schedule.max_attempts,
                timezone=schedule.timezone,
                missed=existing.missed if existing else 0,
                updated_at=at,
                last_fire_at=existing.last_fire_at if existing else None,
            )

    def listed(self, spaces: Sequence[int] | None, limit: int | None, offset: int) -> list[Schedule]:
        found = sorted(
            (s for s in self._by_key.values() if spaces is None or s.space_id in spaces),
            key=lambda s: (s.space_id, s.action_id),
        )
        return found[offset:] if limit is None else found[offset : offset + limit]


def _keeps_next_run(existing: Schedule, incoming: ScheduleInput) -> bool:
    """A save must not push a promised fire forward, and a week switched off is not a week of missed fires."""
    unchanged = (
        existing.cron == incoming.cron
        and existing.timezone == incoming.timezone
        and existing.environment == incoming.environment
    )
    switched_on = not existing.enabled and incoming.enabled
    return unchanged and not switched_on
