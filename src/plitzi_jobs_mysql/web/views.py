"""Records turned into what the templates show: readable instants and durations, clipped text, next fires in a
schedule's own zone. Templates only place these; every value is escaped by Jinja's autoescape."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from ..contract.clock import from_epoch_ms, to_epoch_ms
from ..contract.cron import cron_next_fire
from ..records import TERMINAL_STATUSES, ActionStats, Attempt, FinishedCount, Job, JobStatus, Schedule
from .chart import Chart, sparkline
from .times import Instant, duration, in_zone, instant

CELL_CHARS: Final = 120  # an error or id in a table row
ERROR_CHARS: Final = 16_384  # an error on the job's page
INPUT_CHARS: Final = 65_536  # a job's input on its page; the whole is one link away
NEXT_FIRES: Final = 3


@dataclass(frozen=True)
class Clipped:
    text: str
    more: int  # characters left out

    @property
    def clipped(self) -> bool:
        return self.more > 0


def clip(text: str | None, limit: int) -> Clipped | None:
    if text is None:
        return None
    return Clipped(text[:limit], max(len(text) - limit, 0))


@dataclass(frozen=True)
class JobRow:
    job: Job
    id: Clipped
    action: Clipped
    run_at: Instant | None
    updated_at: Instant | None
    error: Clipped | None


def job_row(job: Job, now: int) -> JobRow:
    return JobRow(job=job, id=_clip(job.id, CELL_CHARS), action=_clip(job.action_id, CELL_CHARS),
                  run_at=instant(job.run_at, now), updated_at=instant(job.updated_at, now),
                  error=clip(_one_line(job.error), CELL_CHARS))  # fmt: skip


def _clip(text: str, limit: int) -> Clipped:
    return Clipped(text[:limit], max(len(text) - limit, 0))


def _one_line(text: str | None) -> str | None:
    return None if text is None else " ".join(text.split())


@dataclass(frozen=True)
class AttemptRow:
    attempt: Attempt
    started: Instant | None
    ended: Instant | None
    took: str
    error: Clipped | None


@dataclass(frozen=True)
class Lease:
    worker: str | None
    until: Instant | None
    lapsed: bool


@dataclass(frozen=True)
class JobDetail:
    job: Job
    fields: list[tuple[str, Any]]
    attempts: list[AttemptRow]
    lease: Lease | None
    input: Clipped
    error: Clipped | None
    finished: bool
    can_cancel: bool
    can_retry: bool  # finished, not succeeded: a retry
    can_requeue: bool  # succeeded: running it again


def job_detail(job: Job, now: int) -> JobDetail:
    fields: list[tuple[str, Any]] = [
        ("space", job.space_id),
        ("action", job.action_id),
        ("environment", job.environment),
        ("trigger", job.trigger),
        ("key", job.key),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("priority", job.priority),
        ("missed fires", job.missed),
        ("due at", instant(job.due_at, now)),
        ("run at", instant(job.run_at, now)),
        ("created", instant(job.created_at, now)),
        ("updated", instant(job.updated_at, now)),
        ("run id", job.run_id),
    ]
    attempts = [
        AttemptRow(attempt=a, started=instant(a.started_at, now), ended=instant(a.ended_at, now),
                   took=duration(max(a.ended_at - a.started_at, 0)), error=clip(a.error, ERROR_CHARS))
        for a in job.history
    ]  # fmt: skip
    lease = None
    if job.status == JobStatus.RUNNING or job.lease_until is not None:
        lapsed = job.lease_until is not None and job.lease_until < now
        lease = Lease(worker=job.worker_id, until=instant(job.lease_until, now), lapsed=lapsed)
    finished = job.status in TERMINAL_STATUSES
    return JobDetail(
        job=job, fields=fields, attempts=attempts, lease=lease,
        input=_clip(json.dumps(job.input, indent=2, ensure_ascii=False), INPUT_CHARS),
        error=clip(job.error, ERROR_CHARS), finished=finished,
        can_cancel=job.status == JobStatus.PENDING or (job.status == JobStatus.RUNNING and not job.cancel_requested),
        can_retry=finished and job.status != JobStatus.SUCCEEDED, can_requeue=job.status == JobStatus.SUCCEEDED,
    )  # fmt: skip


@dataclass(frozen=True)
class ActionRow:
    stats: ActionStats
    action: Clipped
    oldest_due_age: str | None
    activity: Chart
    paused: bool
    limits: str | None


def limits_of(stats: ActionStats) -> str | None:
    """`running / limit, rate used` once the stores report limits (issue 21); None until then."""
    return None


@dataclass(frozen=True)
class Paused:
    space_id: int
    action_id: str | None
    since: Instant | None


def paused_rows(paused: Sequence[Any], now: int) -> list[Paused]:
    return [Paused(space_id=int(p.space_id), action_id=p.action_id, since=instant(getattr(p, "since", None), now))
            for p in paused]  # fmt: skip


def is_paused(paused: Sequence[Paused], space_id: int, action_id: str) -> bool:
    return any(p.space_id == space_id and p.action_id in (None, action_id) for p in paused)


def action_rows(actions: Sequence[ActionStats], window: Mapping[int, Sequence[FinishedCount]],
                paused: Sequence[Paused], now: int) -> list[ActionRow]:  # fmt: skip
    return [
        ActionRow(
            stats=a,
            action=_clip(a.action_id, CELL_CHARS),
            oldest_due_age=None if a.oldest_due_run_at is None else duration(max(now - a.oldest_due_run_at, 0)),
            activity=sparkline(window, a.space_id, a.action_id),
            paused=is_paused(paused, a.space_id, a.action_id),
            limits=limits_of(a),
        )
        for a in actions
    ]


@dataclass(frozen=True)
class ScheduleRow:
    schedule: Schedule
    zone: str
    next_run: Instant | None
    next_fires: list[str] = field(default_factory=list)  # on the schedule's own wall clock
    last_fire: Instant | None = None


def schedule_row(schedule: Schedule, now: int) -> ScheduleRow:
    """The stored next fire first (the promise the scheduler keeps), then the cron's next ones after it."""
    fires: list[str] = []
    if schedule.enabled:
        fires.append(in_zone(schedule.next_run_at, schedule.timezone))
        at: datetime | None = from_epoch_ms(schedule.next_run_at)
        while at is not None and len(fires) < NEXT_FIRES:
            at = cron_next_fire(schedule.cron, at + timedelta(minutes=1), schedule.timezone)
            if at is not None:
                fires.append(in_zone(to_epoch_ms(at), schedule.timezone))
    return ScheduleRow(schedule=schedule, zone=schedule.timezone or "UTC", next_run=instant(schedule.next_run_at, now),
                       next_fires=fires, last_fire=instant(schedule.last_fire_at, now))  # fmt: skip


def status_order() -> list[str]:
    return [status.value for status in JobStatus]
