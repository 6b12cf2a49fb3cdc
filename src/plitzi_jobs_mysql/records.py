"""The records a queue takes and answers: frozen, keyword-only, instants as integer epoch milliseconds."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final


class JobStatus(StrEnum):
    """A job's status, in the order a job goes through them (the CLI lists them in this order)."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """A job in a terminal status never runs again unless an operator requeues it."""
        return self not in (JobStatus.PENDING, JobStatus.RUNNING)


class AttemptStatus(StrEnum):
    """How one attempt in a job's history ended (``lost``: its lease lapsed and another claim took the job)."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LOST = "lost"


# The sets hold the plain strings, so messages and comparisons read as the values the records carry.
JOB_STATUSES: Final = frozenset(status.value for status in JobStatus)
TERMINAL_STATUSES: Final = frozenset(status.value for status in JobStatus if status.terminal)
ATTEMPT_STATUSES: Final = frozenset(status.value for status in AttemptStatus)
#: What a worker may settle a job as: back to the queue, or one of the ends.
SETTLE_STATUSES: Final = frozenset({JobStatus.PENDING.value}) | TERMINAL_STATUSES
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
    #: -100..100; a claim takes due jobs by priority (LOWER first), then oldest run_at.
    priority: int = 0


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
    #: The instant of the claim that holds (or last held) the job: every claim of a job gets a later one, so it
    #: tells one claim from the next, even by the same worker within one millisecond (`settle(claimed_at=...)`).
    claimed_at: int | None = None


@dataclass(frozen=True, kw_only=True)
class AttemptOutcome:
    """What a worker reports to `settle()`; the queue numbers it and stamps its instants."""

    status: str
    worker_id: str
    run_id: str | None = None
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class SucceededJob:
    """One job of a `settle_succeeded` call: settled as `settle(status="succeeded", run_id=run_id,
    claimed_at=claimed_at, attempt=AttemptOutcome(status="succeeded", ...))` would settle it."""

    job_id: str
    run_id: str | None = None
    claimed_at: int | None = None


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
    next_after: str | None = None  # `list_jobs(after=...)` for the next page; None when this page is not full


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


@dataclass(frozen=True, kw_only=True)
class ActionStats:
    """`QueueStats` of one action in one space."""

    space_id: int
    action_id: str
    counts: dict[str, int]  # every status, in `JobStatus` order, 0 where none
    pending_due: int
    oldest_due_run_at: int | None
    running_lease_lapsed: int

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True, kw_only=True)
class QueueStats:
    """An operator's view of a queue at one instant of the store's clock."""

    now: int
    counts: dict[str, int]  # every status, in `JobStatus` order, 0 where none
    pending_due: int  # pending jobs whose run_at has come
    oldest_due_run_at: int | None
    running_lease_lapsed: int  # running jobs whose worker stopped renewing the lease
    actions: tuple[ActionStats, ...] = ()  # the same per space and action, ordered by space, then action

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @classmethod
    def from_groups(cls, now: int, groups: Iterable[tuple[int, str, str, int, int, int | None, int]]) -> QueueStats:
        """Sums `(space_id, action_id, status, count, pending_due, oldest_due_run_at, running_lease_lapsed)` per
        space and action, and over all: how both stores build their answer."""
        per_action: dict[tuple[int, str], list[tuple[str, int, int, int | None, int]]] = {}
        for space_id, action_id, status, count, due, oldest, lapsed in groups:
            per_action.setdefault((space_id, action_id), []).append((status, count, due, oldest, lapsed))

        def summed(rows: list[tuple[str, int, int, int | None, int]]) -> dict[str, Any]:
            counts = {status.value: 0 for status in JobStatus}
            for status, count, _due, _oldest, _lapsed in rows:
                counts[status] += count
            oldest = [row[3] for row in rows if row[3] is not None]
            return {
                "counts": counts,
                "pending_due": sum(row[2] for row in rows),
                "oldest_due_run_at": min(oldest, default=None),
                "running_lease_lapsed": sum(row[4] for row in rows),
            }

        actions = tuple(
            ActionStats(space_id=space_id, action_id=action_id, **summed(rows))
            for (space_id, action_id), rows in sorted(per_action.items())
        )
        return cls(now=now, actions=actions, **summed([row for rows in per_action.values() for row in rows]))


@dataclass(frozen=True, kw_only=True)
class ActionLimit:
    """A fleet-wide limit on one action's jobs, enforced by the store: at most `concurrency` running at once (per
    space; with `by_key`, per job `key`) and at most `rate` starts in any sliding `per_ms` window of its clock."""

    concurrency: int | None = None
    rate: int | None = None
    per_ms: int = 1_000
    by_key: bool = False

    def __post_init__(self) -> None:
        for name in ("concurrency", "rate"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or not 1 <= value <= 1_000_000):
                raise ValueError(f"ActionLimit.{name} must be None or an int from 1 to 1,000,000, got {value!r}")
        if type(self.per_ms) is not int or not 1 <= self.per_ms <= 86_400_000:
            raise ValueError(f"ActionLimit.per_ms must be an int from 1 to 86,400,000 (a day), got {self.per_ms!r}")
        if type(self.by_key) is not bool:
            raise ValueError(f"ActionLimit.by_key must be a bool, got {self.by_key!r}")
        if self.concurrency is None and self.rate is None:
            raise ValueError("an ActionLimit limits something: give concurrency, rate or both")


@dataclass(frozen=True, kw_only=True)
class PausedAction:
    """A pause (`pause`): claims skip the pending jobs of the space, or of one action of it, until `resume`."""

    space_id: int
    action_id: str | None  # None: the whole space
    since: int  # when it was paused, epoch ms of the queue's clock


@dataclass(frozen=True, kw_only=True)
class FinishedCount:
    """How many jobs of one space and action finished in one terminal status within one bucket of time
    (`finished_counts`: what the dashboard's chart draws)."""

    space_id: int
    action_id: str
    status: str  # a terminal status
    bucket_at: int  # the bucket's first instant: a multiple of the bucket's length, epoch ms
    count: int


def schedule_job_id(space_id: int, action_id: str, fire_at: int) -> str:
    """The id a fire gets, and the whole of the exactly-once guarantee.

    Derived from the STORED fire instant rather than from any node's reading of the clock, so two replicas
    that disagree about what time it is still write the same id, and the second one's enqueue is a no-op.
    """
    return f"schedule:{space_id}:{action_id}:{fire_at}"
