"""The records a queue takes and answers: frozen, keyword-only, instants as integer epoch milliseconds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

#: A job in one of these never runs again unless an operator requeues it.
TERMINAL_STATUSES: Final = frozenset({"succeeded", "failed", "dead", "cancelled"})
JOB_STATUSES: Final = frozenset({"pending", "running"}) | TERMINAL_STATUSES
ATTEMPT_STATUSES: Final = frozenset({"succeeded", "failed", "cancelled", "lost"})
#: What a worker may settle a job as: back to the queue, or one of the ends.
SETTLE_STATUSES: Final = frozenset({"pending"}) | TERMINAL_STATUSES
#: The error of a `lost` attempt: its lease lapsed and another claim took the job.
LOST_ERROR: Final = "the worker holding this job stopped reporting"


@dataclass(frozen=True, kw_only=True)
class JobInput:
    id: str
    space_id: int
    action_id: str
    environment: str
    trigger: str
    input: dict[str, Any]
    due_at: int
    max_attempts: int
    missed: int | None = None
    key: str | None = None


@dataclass(frozen=True, kw_only=True)
class Attempt:
    attempt: int
    status: str
    started_at: int
    ended_at: int
    worker_id: str
    run_id: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Job(JobInput):
    status: str
    run_at: int
    attempts: int
    created_at: int
    updated_at: int
    history: Sequence[Attempt] = field(default_factory=tuple)
    lease_until: int | None = None
    worker_id: str | None = None
    run_id: str | None = None
    cancel_requested: bool = False
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class AttemptOutcome:
    """What a worker reports to `settle()`; the queue numbers it and stamps its instants."""

    status: str
    worker_id: str
    run_id: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class ScheduleInput:
    space_id: int
    action_id: str
    cron: str
    environment: str
    enabled: bool
    next_run_at: int
    max_attempts: int
    timezone: str | None = None


@dataclass(frozen=True, kw_only=True)
class Schedule(ScheduleInput):
    missed: int
    updated_at: int
    last_fire_at: int | None = None


@dataclass(frozen=True, kw_only=True)
class JobPage:
    jobs: list[Job]
    total: int


@dataclass(frozen=True, kw_only=True)
class MissedFires:
    space_id: int
    action_id: str
    count: int


@dataclass(frozen=True, kw_only=True)
class SweepResult:
    enqueued: list[str]
    duplicates: list[str]
    missed: list[MissedFires]
