"""What the worker and the scheduler report as they go: one emission point per happening, feeding both the log
and the user's `on_event` hook.

Each happening is emitted once, where it happens, as a `JobEvent`; the `Emitter` writes the log line an
operator acts on (a failed attempt at WARNING with its traceback, a job gone `dead` at ERROR, a lost attempt
and missed fires at WARNING) and then hands the same event to the hook. A hook that raises is logged and
otherwise ignored: watching the worker must never break it.

The kinds, in the order a job meets them (besides `job_id`, `space_id` and `action_id`, which every event has):

- `claimed`: this worker's claim took the job. `attempt`, `max_attempts`, `worker_id`, `job`, and `wait_ms`
  (how long it had been due, by the store's clock; None for a takeover).
- `lost`: that claim took it over from a worker that stopped reporting. `attempt` (the lost one), `worker_id`
  (who lost it), `message`.
- `started`: its handler started. `attempt`, `worker_id`, `job`.
- `succeeded`: the handler returned. `duration_s`, `run_id`.
- `failed`: the handler raised; a `retried` or a `dead` follows. `error` (the exception), `message` (as
  recorded on the job), `duration_s`.
- `retried`: back to the queue for another attempt (after `failed`, or a `RetryLater`). `delay_ms`,
  `duration_s`.
- `dead`: out of attempts, or a `PermanentFailure`. `message`, `duration_s`.
- `cancelled`: settled `cancelled` at an operator's request. `message`, `duration_s` (None if it never
  started).
- `fired`: the scheduler enqueued a schedule's fire as a job. `fire_at`.
- `missed`: a sweep moved a schedule past fires that went by unrun. `fire_at`, `count`.
- `limited`: a claim of a worker given `limits` left this due job waiting: its action is at its fleet-wide
  concurrency or rate limit (`message` says which). At most one a second per action and worker.

Every run that started ends in exactly one of `succeeded`, `retried`, `dead` or `cancelled`.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from ..records import LOST_ERROR, ActionLimit, Job
from . import readable


class EventKind(StrEnum):
    CLAIMED = "claimed"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RETRIED = "retried"
    DEAD = "dead"
    LOST = "lost"
    CANCELLED = "cancelled"
    FIRED = "fired"
    MISSED = "missed"
    LIMITED = "limited"


#: The kinds that end a run this worker started.
RUN_ENDINGS: Final = frozenset({EventKind.SUCCEEDED, EventKind.RETRIED, EventKind.DEAD, EventKind.CANCELLED})


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    """One happening in the life of a job or a schedule's fire. Fields that do not apply to a kind are None."""

    kind: EventKind
    job_id: str
    space_id: int
    action_id: str
    attempt: int | None = None
    max_attempts: int | None = None
    worker_id: str | None = None
    job: Job | None = None
    error: BaseException | None = None
    message: str | None = None
    run_id: str | None = None
    duration_s: float | None = None
    wait_ms: int | None = None
    delay_ms: int | None = None
    fire_at: int | None = None
    count: int | None = None


#: A user's hook: called synchronously on the event loop, so it must be quick and must not block.
EventHook = Callable[[JobEvent], None]

LEVELS: Final = {
    EventKind.CLAIMED: logging.DEBUG,
    EventKind.STARTED: logging.DEBUG,
    EventKind.SUCCEEDED: logging.INFO,
    EventKind.FAILED: logging.WARNING,
    EventKind.RETRIED: logging.INFO,
    EventKind.DEAD: logging.ERROR,
    EventKind.LOST: logging.WARNING,
    EventKind.CANCELLED: logging.INFO,
    EventKind.FIRED: logging.INFO,
    EventKind.MISSED: logging.WARNING,
    EventKind.LIMITED: logging.INFO,
}


def _at(ms: int | None) -> str:
    return "an unknown instant" if ms is None else readable.instant(ms)


def _delay(ms: int | None) -> str:
    return "a moment" if ms is None else readable.duration(ms)


def describe(event: JobEvent) -> str:
    """The log line of an event: what happened, to which job, and what to look at."""
    job = f"job {event.job_id!r} (space {event.space_id}, action {event.action_id!r}"
    if event.attempt is not None:
        job += f", attempt {event.attempt}" + (f"/{event.max_attempts}" if event.max_attempts else "")
    job += ")"
    took = f" after {event.duration_s:.3f}s" if event.duration_s is not None else ""
    kind = event.kind
    if kind is EventKind.CLAIMED:
        waited = f" {readable.duration(event.wait_ms)} after it was due" if event.wait_ms is not None else ""
        return f"{job} claimed by {event.worker_id}{waited}"
    if kind is EventKind.STARTED:
        return f"{job} started on {event.worker_id}"
    if kind is EventKind.SUCCEEDED:
        return f"{job} succeeded{took}" + (f", run {event.run_id!r}" if event.run_id else "")
    if kind is EventKind.FAILED:
        return f"{job} failed{took}: {event.message}"
    if kind is EventKind.RETRIED:
        return f"{job} goes back to the queue, due again in {_delay(event.delay_ms)}"
    if kind is EventKind.DEAD:
        return f"{job} is dead{took}, it will not run again unless an operator requeues it: {event.message}"
    if kind is EventKind.LOST:
        return f"{job} was lost by worker {event.worker_id}, which stopped reporting; taken over"
    if kind is EventKind.CANCELLED:
        return f"{job} cancelled{took}: {event.message}"
    if kind is EventKind.LIMITED:
        return f"{job} is due but waits: its action is at its {event.message}"
    if kind is EventKind.FIRED:
        return (
            f"schedule of space {event.space_id}, action {event.action_id!r} fired at {_at(event.fire_at)}: "
            f"{event.job_id!r}"
        )
    return (
        f"schedule of space {event.space_id}, action {event.action_id!r} missed {event.count} fire(s) before "
        f"{_at(event.fire_at)}: nothing swept it while they were due; one job ({event.job_id!r}) runs for them"
    )


def limited(job_id: str, space_id: int, action_id: str, message: str) -> JobEvent:
    """A claim left a due job waiting because its action's fleet-wide limit (`message`) was reached."""
    return JobEvent(kind=EventKind.LIMITED, job_id=job_id, space_id=space_id, action_id=action_id, message=message)


def limit_reached(limit: ActionLimit, concurrency_full: bool, key: str | None) -> str:
    """The `message` of a `limited` event."""
    per = f" for key {key!r}" if limit.by_key else ""
    if concurrency_full:
        return f"concurrency limit{per} ({limit.concurrency} running at once)"
    return f"rate limit{per} ({limit.rate} starts per {limit.per_ms} ms)"


def dead_by_loss(job_id: str, space_id: int, action_id: str, attempts: int, max_attempts: int) -> JobEvent:
    """A job that lost its worker on its last attempt: the claim that finds it makes it `dead`, and no worker
    ever holds it again, so the store reports it (to its log; no hook sees it)."""
    return JobEvent(
        kind=EventKind.DEAD,
        job_id=job_id,
        space_id=space_id,
        action_id=action_id,
        attempt=attempts,
        max_attempts=max_attempts,
        message=LOST_ERROR + ", on its last attempt",
    )


class Emitter:
    """Logs an event at its level on `log`, then passes it to the hook, whose failures are logged, never
    raised."""

    def __init__(self, hook: EventHook | None, log: logging.Logger) -> None:
        if hook is not None and not callable(hook):
            raise TypeError("on_event must be a callable taking a JobEvent")
        if inspect.iscoroutinefunction(hook):  # it would be called and never awaited
            raise TypeError("on_event must be a plain (not async) function: it is called on the event loop")
        self.hook = hook
        self.log = log

    def wants(self, kind: EventKind) -> bool:
        """Whether an event of this kind reaches anyone (the hook, or the log at its level): the worker builds the
        events of every job's claim, start and success only then, which costs a share of its CPU per job."""
        return self.hook is not None or self.log.isEnabledFor(LEVELS[kind])

    def __call__(self, event: JobEvent) -> None:
        level = LEVELS[event.kind]
        if self.log.isEnabledFor(level):
            trace = event.error if event.kind is EventKind.FAILED else None
            self.log.log(level, "%s", describe(event), exc_info=trace, extra={"plitzi_event": event})
        if self.hook is None:
            return
        try:
            self.hook(event)
        except Exception:
            self.log.exception(
                "the on_event hook raised on a %r event of job %r; ignored", event.kind.value, event.job_id
            )
