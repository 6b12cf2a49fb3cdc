"""The tuning of the scheduler and the worker, declared once with its defaults and bounds.

`create_scheduler`, `create_job_worker` and `create_action_jobs` take these as keyword arguments (the call forms
API.md fixes); the assembly passes what it was given through unchanged, so no default is written twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, cast

from ..contract import validation as check
from ..contract.events import EventHook
from ..contract.limits import limits_arg
from ..records import ActionLimit
from .schedules import DEFAULT_MAX_ATTEMPTS

__all__ = [
    "ActionJobsOptions",
    "ErrorHandler",
    "SchedulerOptions",
    "SchedulerSettings",
    "WorkerOptions",
    "WorkerSettings",
    "split_action_jobs_options",
]

#: Called with an error the scheduler or worker caught and carried on from (the default logs it).
ErrorHandler = Callable[[BaseException], None]


class SchedulerOptions(TypedDict, total=False):
    environment: str
    poll_ms: int
    batch: int
    max_attempts: int
    reconcile_ms: int
    spaces: Sequence[int] | None
    on_error: ErrorHandler | None
    on_event: EventHook | None


class WorkerOptions(TypedDict, total=False):
    workers: int
    poll_ms: int
    lease_ms: int
    backoff_base_ms: int
    backoff_max_ms: int
    worker_id: str | None
    on_error: ErrorHandler | None
    on_event: EventHook | None
    limits: Mapping[str, ActionLimit] | None


class ActionJobsOptions(WorkerOptions, total=False):
    """The worker's options, and the scheduler's, whose `poll_ms` is called `schedule_poll_ms` here."""

    environment: str
    schedule_poll_ms: int
    batch: int
    max_attempts: int
    reconcile_ms: int
    spaces: Sequence[int] | None


@dataclass(frozen=True, kw_only=True)
class SchedulerSettings:
    """`SchedulerOptions` with their defaults, checked."""

    environment: str = "main"
    poll_ms: int = 15_000
    batch: int = 200
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    reconcile_ms: int = 900_000
    spaces: Sequence[int] | None = None
    on_error: ErrorHandler | None = None
    #: Called with a `JobEvent` for each fire and each run of missed fires (see `plitzi_jobs_mysql.contract.events`).
    on_event: EventHook | None = None

    def __post_init__(self) -> None:
        check.text("environment", self.environment, check.NAME_MAX_CHARS)
        check.duration_ms("poll_ms", self.poll_ms)
        check.integer("batch", self.batch, 1, check.MAX_LIMIT)
        check.integer("max_attempts", self.max_attempts, 1, check.MAX_INT32)
        check.duration_ms("reconcile_ms", self.reconcile_ms)
        if self.spaces is not None:
            object.__setattr__(self, "spaces", check.space_ids(self.spaces))


@dataclass(frozen=True, kw_only=True)
class WorkerSettings:
    """`WorkerOptions` with their defaults, checked."""

    workers: int = 4
    poll_ms: int = 1_000
    lease_ms: int = 30_000
    backoff_base_ms: int = 30_000
    backoff_max_ms: int = 900_000
    worker_id: str | None = None
    on_error: ErrorHandler | None = None
    #: Called with a `JobEvent` for each happening of a job (see `plitzi_jobs_mysql.contract.events`).
    on_event: EventHook | None = None
    #: Fleet-wide limits by action_id, which the store enforces at every claim (contract/limits.py).
    limits: Mapping[str, ActionLimit] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "limits", limits_arg(self.limits) or None)
        check.integer("workers", self.workers, 0, check.MAX_LIMIT)
        check.duration_ms("poll_ms", self.poll_ms)
        check.integer("lease_ms", self.lease_ms, 3, check.MAX_DURATION_MS)
        check.duration_ms("backoff_base_ms", self.backoff_base_ms, allow_zero=True)
        check.duration_ms("backoff_max_ms", self.backoff_max_ms, allow_zero=True)
        if self.worker_id is not None:
            check.worker_id(self.worker_id)


_SCHEDULER_KEYS = SchedulerOptions.__optional_keys__ - {"poll_ms"}


def split_action_jobs_options(options: ActionJobsOptions) -> tuple[SchedulerOptions, WorkerOptions]:
    """The scheduler's and the worker's share of `create_action_jobs`' options (`on_error` and `on_event` go to
    both)."""
    given: dict[str, Any] = dict(options)
    unknown = given.keys() - ActionJobsOptions.__optional_keys__
    if unknown:
        raise TypeError(f"create_action_jobs() got unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    scheduler = {key: value for key, value in given.items() if key in _SCHEDULER_KEYS}
    if "schedule_poll_ms" in given:
        scheduler["poll_ms"] = given["schedule_poll_ms"]
    worker = {key: value for key, value in given.items() if key in WorkerOptions.__optional_keys__}
    return cast(SchedulerOptions, scheduler), cast(WorkerOptions, worker)
