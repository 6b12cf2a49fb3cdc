"""The in-process job queue: one process's dicts, keeping the `JobQueue` contract exactly."""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..contract import validation as check
from ..contract.capabilities import AnnouncesDueJobs, Pausing, SettlesSucceeded
from ..contract.clock import from_epoch_ms
from ..contract.cursor import decode_after
from ..contract.events import Emitter, EventHook, dead_by_loss
from ..contract.events import limited as limited_event
from ..contract.limits import LimitUsage, limits_arg
from ..contract.protocols import JobQueue
from ..contract.wakeups import LOCAL_WAKEUPS, WakeupChannel
from ..records import (
    LOST_ERROR,
    TERMINAL_STATUSES,
    ActionLimit,
    Attempt,
    AttemptOutcome,
    Job,
    JobInput,
    JobPage,
    Schedule,
    ScheduleInput,
    SucceededJob,
)
from .claim_order import ClaimOrder
from .claim_order import Row as _Row
from .limits import MemoryLimits
from .listing import list_page
from .operator_calls import MemoryOperatorCalls, no_connection
from .operator_reads import MemoryOperatorReads
from .pauses import MemoryPauseCalls
from .schedules import MemorySchedules
from .wall_clock import wall_clock_ms

log = logging.getLogger(__name__)
#: The store's own events: a job that dies inside a claim is seen by no worker, so the store logs it.
_emit = Emitter(None, log)


@dataclass
class MemoryJobQueue(MemoryOperatorReads, MemoryOperatorCalls, MemoryPauseCalls):
    """A `JobQueue` in this process's memory. Build it with `create_memory_job_queue`."""

    retain_finished: int
    clock: Callable[[], int]
    _jobs: dict[str, _Row] = field(default_factory=dict)
    _schedules: MemorySchedules = field(default_factory=MemorySchedules)
    _seq: itertools.count[int] = field(default_factory=itertools.count)
    _finished: dict[str, None] = field(default_factory=dict)  # terminal job ids, oldest finish first
    # Claims read heaps rather than sorting every job (claim_order.py).
    _order: ClaimOrder = field(default_factory=ClaimOrder)
    _limits: MemoryLimits = field(default_factory=MemoryLimits)
    _pauses: dict[tuple[int, str | None], int] = field(default_factory=dict)  # (space, action or None) -> since
    _held: dict[str, _Row] = field(default_factory=dict)  # due jobs of a paused scope a claim set aside (pauses.py)
    #: Workers of this queue listen here; an enqueue of a due job wakes them at once.
    wakeups: WakeupChannel = field(default_factory=lambda: LOCAL_WAKEUPS)
    wakeup_topic: str = ""

    def __post_init__(self) -> None:
        self.wakeup_topic = self.wakeup_topic or f"memory-{id(self)}"

    def _now(self) -> int:
        return int(self.clock())

    def _snapshot(self, row: _Row) -> Job:
        return replace(row.job, input=json.loads(row.input_json))

    def _update(self, row: _Row, base: Job, **changes: Any) -> None:
        """Every change of a job goes through here, so the finished ones are known in the order they finished."""
        row.job = replace(base, **changes)
        if row.job.status in TERMINAL_STATUSES and base.status not in TERMINAL_STATUSES:
            row.job = replace(row.job, run_at=row.job.updated_at)  # a finished job's run_at is when it finished
        self._finished.pop(row.job.id, None)
        if row.job.status in TERMINAL_STATUSES:
            self._finished[row.job.id] = None
        self._index(row)

    def _index(self, row: _Row) -> None:
        row.version += 1
        self._order.push(row)
        if self._order.size() > 2 * len(self._jobs) + 1024:
            self._order.rebuild(self._jobs.values())

    def _current(self, row: _Row, version: int) -> bool:
        return row.version == version and self._jobs.get(row.job.id) is row

    def _evict(self) -> None:
        """Oldest finished jobs first, so the bound drops history rather than anything anybody waits on."""
        while len(self._finished) > self.retain_finished:
            oldest = next(iter(self._finished))
            del self._finished[oldest]
            del self._jobs[oldest]

    def _owned(self, space_ids: Sequence[int], job_id: str) -> _Row | None:
        row = self._jobs.get(job_id)
        return row if row is not None and row.job.space_id in space_ids else None

    async def now(self) -> datetime:
        return from_epoch_ms(self._now())

    def _insert(self, job: JobInput, encoded: str, at: int) -> bool:
        if job.id in self._jobs:
            return False
        record = Job(
            id=job.id,
            space_id=job.space_id,
            action_id=job.action_id,
            environment=job.environment,
            trigger=job.trigger,
            input={},
            due_at=job.due_at,
            max_attempts=job.max_attempts,
            missed=job.missed,
            key=job.key,
            priority=job.priority,
            status="pending",
            run_at=job.due_at,
            attempts=0,
            created_at=at,
            updated_at=at,
            history=(),
        )
        row = _Row(job=record, seq=next(self._seq), input_json=encoded)
        self._jobs[job.id] = row
        self._index(row)
        return True

    async def enqueue(self, job: JobInput, *, connection: None = None) -> bool:
        encoded = check.job_input(job)
        no_connection(connection)
        at = self._now()
        created = self._insert(job, encoded, at)
        self._evict()
        if created and job.due_at <= at:
            self.wakeups.notify(self.wakeup_topic)
        return created

    async def enqueue_many(self, jobs: Sequence[JobInput], *, connection: None = None) -> list[bool]:
        encoded = check.job_inputs(jobs)  # all checked before any is written
        no_connection(connection)
        at = self._now()
        answers = [self._insert(job, text, at) for job, text in zip(jobs, encoded, strict=True)]
        self._evict()
        if any(answer and job.due_at <= at for answer, job in zip(answers, jobs, strict=True)):
            self.wakeups.notify(self.wakeup_topic)
        return answers

    async def claim(
        self, *, worker_id: str, lease_ms: int, limit: int, limits: Mapping[str, ActionLimit] | None = None,
        on_limited: EventHook | None = None,
    ) -> list[Job]:  # fmt: skip
        check.claim_args(worker_id=worker_id, lease_ms=lease_ms, limit=limit)
        limited, refused = limits_arg(limits), list[tuple[_Row, int]]()
        at = self._now()
        # Lapsed leases join the due pending jobs, taken by priority, then oldest run_at.
        self._order.ripen(at, self._current)
        taken: list[Job] = []
        while len(taken) < limit:
            found = self._order.pop_due(at, self._current)
            if found is None:
                break
            row, version = found
            if self._paused(row.job):
                self._held[row.job.id] = row  # out of the order until its resume: paused jobs cost claims nothing
                continue
            job = row.job
            if limited and (waits := self._limits.refuses(job, limited, at, self._holds)):
                refused.append((row, version))  # over its limit: waits as it was, for a later claim
                if on_limited is not None:
                    on_limited(limited_event(job.id, job.space_id, job.action_id, waits))
                continue
            if job.status == "running":
                lost = Attempt(
                    attempt=len(job.history) + 1,
                    status="lost",
                    started_at=job.claimed_at or 0,
                    ended_at=at,
                    worker_id=job.worker_id or "unknown",
                    error=LOST_ERROR,
                )
                job = replace(job, history=(*job.history, lost))
                if job.attempts >= job.max_attempts:
                    # A job that kills its worker every time must not loop forever.
                    _emit(dead_by_loss(job.id, job.space_id, job.action_id, job.attempts, job.max_attempts))
                    self._update(
                        row,
                        job,
                        status="dead",
                        lease_until=None,
                        error=LOST_ERROR,
                        updated_at=at,
                    )
                    continue
            self._update(
                row,
                job,
                status="running",
                attempts=job.attempts + 1,
                worker_id=worker_id,
                lease_until=at + lease_ms,
                updated_at=at,
                # Always after the job's previous claim, so two claims never share an instant (see `settle`).
                claimed_at=at if job.claimed_at is None else max(at, job.claimed_at + 1),
            )
            self._limits.started(row.job, limited, at)
            taken.append(self._snapshot(row))
        for row, version in refused:
            self._order.put_back_due(row, version)
        self._evict()
        return taken

    async def limit_usage(self, *, space_ids: Sequence[int] | None = None) -> list[LimitUsage]:
        return self._limits.usage(check.space_ids_or_all(space_ids), self._now(), self._holds)

    def _holds(self, job_id: str, worker_id: str, claimed_at: int, at: int) -> bool:
        job = row.job if (row := self._jobs.get(job_id)) else None
        live = job is not None and job.status == "running" and (job.lease_until or 0) >= at
        return live and job.worker_id == worker_id and job.claimed_at == claimed_at  # type: ignore[union-attr]

    async def heartbeat(self, *, job_ids: Sequence[str], worker_id: str, lease_ms: int) -> list[str]:
        ids = check.heartbeat_args(job_ids=job_ids, worker_id=worker_id, lease_ms=lease_ms)
        at = self._now()
        cancelled: list[str] = []
        for job_id in dict.fromkeys(ids):
            row = self._jobs.get(job_id)
            if row is None or row.job.worker_id != worker_id or row.job.status != "running":
                continue
            self._update(row, row.job, lease_until=at + lease_ms)
            if row.job.cancel_requested:
                cancelled.append(job_id)
        return cancelled

    async def settle(
        self,
        *,
        job_id: str,
        worker_id: str,
        status: str,
        delay_ms: int | None = None,
        run_id: str | None = None,
        error: str | None = None,
        attempt: AttemptOutcome | None = None,
        claimed_at: int | None = None,
    ) -> None:
        self._settle(check.Settle(job_id=job_id, worker_id=worker_id, status=status, delay_ms=delay_ms,
                                  run_id=run_id, error=error, attempt=attempt, claimed_at=claimed_at))  # fmt: skip
        self._evict()

    async def settle_succeeded(self, *, worker_id: str, jobs: Sequence[SucceededJob]) -> None:
        """The `SettlesSucceeded` capability: each job settled as its own `settle` would settle it."""
        for call in check.settle_succeeded_args(worker_id=worker_id, jobs=jobs):
            self._settle(call)
        self._evict()

    def _settle(self, call: check.Settle) -> None:
        row = self._jobs.get(call.job_id)
        if row is None or row.job.worker_id != call.worker_id or row.job.status != "running":
            return
        if call.claimed_at is not None and row.job.claimed_at != call.claimed_at:
            return  # an earlier claim's settle: the job is held by a later one now
        at = self._now()
        job = row.job
        history = tuple(job.history)
        attempt = call.attempt
        if attempt is not None:
            history = (
                *history,
                Attempt(
                    attempt=len(history) + 1,
                    status=attempt.status,
                    started_at=job.claimed_at or 0,
                    ended_at=at,
                    worker_id=attempt.worker_id,
                    run_id=attempt.run_id,
                    error=attempt.error,
                ),
            )
        changes: dict[str, Any] = {
            "history": history,
            "status": call.status,
            "updated_at": at,
            "lease_until": None,
            "error": call.error,
            "run_id": job.run_id if call.run_id is None else call.run_id,
        }
        if call.status == "pending":
            changes["run_at"] = at + (call.delay_ms or 0)
            changes["worker_id"] = None
            if attempt is None:  # a hand-back of a job never started gives its attempt back
                changes["attempts"] = max(0, job.attempts - 1)
        self._update(row, job, **changes)

    async def due_schedules(self, limit: int) -> list[Schedule]:
        check.limit("limit", limit)
        return self._schedules.due(self._now(), limit)

    async def advance_schedule(self, *, space_id: int, action_id: str, from_at: int, to_at: int, missed: int) -> bool:
        check.advance_args(space_id=space_id, action_id=action_id, from_at=from_at, to_at=to_at, missed=missed)
        return self._schedules.advance(
            space_id=space_id, action_id=action_id, from_at=from_at, to_at=to_at, missed=missed, now=self._now
        )

    async def put_schedules(self, *, space_id: int, schedules: Sequence[ScheduleInput]) -> None:
        incoming = check.put_schedules_args(space_id, schedules)
        self._schedules.put(space_id, incoming, self._now())

    async def list_jobs(
        self,
        *,
        space_ids: Sequence[int] | None,
        action_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> JobPage:
        """The `JobQueue` rule; `space_ids=None` (an operator's view) lists every space's jobs."""
        spaces = check.list_jobs_args(space_ids, action_id, status, limit, offset)
        found = list_page(self._jobs.values(), spaces, action_id, status, decode_after(after, offset), offset, limit)
        shown, total, token = found
        return JobPage(jobs=[self._snapshot(r) for r in shown], total=total, next_after=token)

    async def get_job(self, space_ids: Sequence[int], job_id: str) -> Job | None:
        spaces = check.scoped_job(space_ids, job_id)
        row = self._owned(spaces, job_id)
        return self._snapshot(row) if row else None

    async def list_schedules(
        self, space_ids: Sequence[int] | None, *, limit: int | None = None, offset: int = 0
    ) -> list[Schedule]:
        """The schedules of those spaces (None: of every space) by space and action; `limit`/`offset` page them."""
        spaces = check.list_schedules_args(space_ids, limit, offset)
        return self._schedules.listed(spaces, limit, offset)


def create_memory_job_queue(*, retain_finished: int = 500, clock: Callable[[], int] | None = None) -> MemoryJobQueue:
    """The embedded default queue: right for exactly one replica."""
    check.integer("retain_finished", retain_finished, 0, check.INT64_MAX)
    return MemoryJobQueue(retain_finished=retain_finished, clock=clock or wall_clock_ms)


if TYPE_CHECKING:  # mypy checks the memory queue keeps the contract's Protocol and offers the capabilities
    _queue: JobQueue = MemoryJobQueue(retain_finished=0, clock=wall_clock_ms)
    _batches: SettlesSucceeded = MemoryJobQueue(retain_finished=0, clock=wall_clock_ms)
    _announces: AnnouncesDueJobs = MemoryJobQueue(retain_finished=0, clock=wall_clock_ms)
    _pausing: Pausing = MemoryJobQueue(retain_finished=0, clock=wall_clock_ms)
