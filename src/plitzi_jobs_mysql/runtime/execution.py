"""One claimed job on a worker, from its claim to its release: whether it starts (its single-flight key, an
operator's cancel, a stopping worker), its handler supervised to the end, the outcome decided, emitted and written,
its key given back. One `Execution` per claim, always in ONE `Stage`; `JobWorker` (worker.py) claims, keeps the
leases and counts the slots, and hears from each execution through the callbacks in its `Collaborators`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from ..contract import validation as check
from ..contract.events import Emitter, EventKind, JobEvent
from ..records import Job
from .completer import Completer, Outcome
from .handler import AttemptFailed, JobHandler, PermanentFailure, RetryLater
from .options import ErrorHandler
from .retry import RetryPolicy
from .single_flight import Key, SingleFlight
from .store_calls import clip, describe, logger

#: A job whose single-flight key is held elsewhere comes back after this long.
HANDBACK_DELAY_MS: Final = 1_000
CANCELLED_MESSAGE: Final = "cancelled by an operator"


class Stage(Enum):
    CLAIMED = "claimed"  # held; whether it starts is being decided (its single-flight key, a cancel, a stop)
    RUNNING = "running"  # its handler runs, in one of the worker's slots
    SETTLING = "settling"  # its handler is over: its slot runs the next job while the outcome is written
    RETURNING = "returning"  # never started: handed back (or settled cancelled), its slot held until written
    RELEASED = "released"  # let go of: settled, left to its lease, or forgotten


@dataclass(frozen=True, kw_only=True, slots=True)
class Collaborators:
    """What every execution of one worker is built with."""

    handler: JobHandler
    worker_id: str
    completer: Completer
    keys: SingleFlight | None
    retry: RetryPolicy
    emit: Emitter
    on_error: ErrorHandler
    stopping: Callable[[], bool]
    #: The handler is over: its slot counts as free while the outcome is written.
    slot_free: Callable[[Execution], None]
    #: The execution let go of its job (settled, handed back, or left to its lease).
    released: Callable[[Execution], None]
    #: A slot is free for the next claim.
    look_for_work: Callable[[], None]
    #: Keeps a task of the execution's until it ends (`stop()` and `idle()` wait for them).
    track: Callable[[asyncio.Task[Any]], None]


async def _call(handler: JobHandler, job: Job) -> Any:
    return await handler(job)


def _lost_attempt(job: Job) -> int | None:
    """The number of the `lost` attempt the claim that handed out `job` recorded, if it took the job over.

    A takeover appends the lost attempt in the claim itself, so its end is the claim's instant, which is also the
    job's `updated_at` until anything else touches it."""
    last = job.history[-1] if job.history else None
    if last is not None and last.status == "lost" and last.ended_at == job.updated_at:
        return last.attempt
    return None


class Execution:
    """One claim of one job on this worker. `after`: an earlier execution of the same job on this worker, past its
    handler and still writing its outcome: this one starts only once that one has ended."""

    __slots__ = (
        "_after",
        "_announced",
        "_crew",
        "_ended",
        "_over",
        "_started_at",
        "cancel_requested",
        "handler_task",
        "job",
        "key",
        "key_error",
        "key_refused",
        "stage",
    )

    def __init__(self, job: Job, crew: Collaborators, *, after: Execution | None = None) -> None:
        self.job = job
        self.stage = Stage.CLAIMED
        # A cancel asked for while an earlier holder ran it (and then died) stands: it is never run.
        self.cancel_requested = job.cancel_requested
        self.key: Key | None = None
        self.key_refused = False  # its single-flight key is held elsewhere
        self.key_error: Exception | None = None  # the kv could not be asked for its key
        self.handler_task: asyncio.Task[Any] | None = None
        self._started_at: float | None = None  # the loop's clock when the handler started
        self._crew = crew
        self._after = after
        self._announced = False  # its claim's events are out
        self._ended: asyncio.Event | None = None
        self._over = False

    # -- what the worker asks and tells ----------------------------------------------------------------------

    @property
    def waits_for_earlier(self) -> bool:
        return self._after is not None

    def starts_at_once(self) -> bool:
        """Whether `begin` will start the handler without a store call (so without suspending)."""
        crew = self._crew
        if self._after is not None or crew.stopping() or self.cancel_requested:
            return False
        return crew.keys is None or (self.key_error is None and self.key is not None)

    def offer_key(self, key: Key | None) -> None:
        """The answer of the claim's batched key take: this run's key, or None where another run holds it."""
        self.key, self.key_refused = key, key is None

    def adopt(self, job: Job) -> bool:
        """This worker's own claim handed `job` out again while this execution holds it (its heartbeats did not
        land for a whole lease). Before its handler is over, the run goes on under the new claim (the store
        recorded the lapsed one as `lost`): True. Past it, False: the earlier claim's settle is refused by the
        store, and the new claim runs once this execution has ended."""
        if self.stage not in (Stage.CLAIMED, Stage.RUNNING):
            return False
        self.job = job
        if self._announced:
            self._announce_loss(job)
        logger.warning(
            "job %r (space %d, action %r): this worker's heartbeats did not land for a whole lease and its own "
            "claim took the job back; the run goes on under the new claim (attempt %d), never twice at once",
            job.id,
            job.space_id,
            job.action_id,
            job.attempts,
        )
        if job.cancel_requested:
            self.request_cancel()
        return True

    def request_cancel(self) -> None:
        """An operator asked the job to stop (the heartbeat heard it): its handler task is cancelled."""
        if self.cancel_requested:
            return
        self.cancel_requested = True
        if self.handler_task is not None:
            self.handler_task.cancel()

    async def wait_ended(self) -> None:
        """Returns once the execution has done everything it will: its outcome written or given up on, its key
        given back."""
        if self._over:
            return
        if self._ended is None:
            self._ended = asyncio.Event()
        await self._ended.wait()

    # -- starting --------------------------------------------------------------------------------------------

    async def begin(self) -> bool:
        """Starts the handler, or hands the job back, or settles it cancelled. Answers whether it started."""
        try:
            return await self._begin()
        except Exception as error:  # a bug: the job must not stay held, its lease renewed for ever
            self._crew.on_error(error)
            await self._release(final=False, nudge=False)
            return False

    async def _begin(self) -> bool:
        crew = self._crew
        if self._after is not None:
            await self._after.wait_ended()  # the earlier claim's run writes its outcome (refused now) first
            self._after = None
        job = self.job
        self._announce_loss(job)
        if crew.emit.wants(EventKind.CLAIMED):
            wait_ms = max(0, job.updated_at - job.run_at) if _lost_attempt(job) is None else None
            crew.emit(self._event(EventKind.CLAIMED, job=job, wait_ms=wait_ms))
        self._announced = True
        if crew.stopping():
            # Claimed in the instant the stop arrived: never started, so back to the queue with the attempt.
            return await self._return(Outcome(status="pending", delay_ms=0))
        if self.cancel_requested:  # nothing runs, so no single-flight key is needed to settle it
            return await self._return(self._cancelled(None))
        keys = crew.keys
        if keys is not None:
            if self.key_error is not None:
                return await self._return(Outcome(status="pending", delay_ms=keys.unreachable(self.key_error, job.id)))
            if self.key is None and not self.key_refused:  # not asked for with its claim's batch
                try:
                    self.offer_key(await keys.take(job.id))
                except Exception as error:
                    return await self._return(Outcome(status="pending", delay_ms=keys.unreachable(error, job.id)))
            if self.key is None:
                # Someone still runs it (a stalled worker whose lease lapsed): running it too would run it twice.
                return await self._return(Outcome(status="pending", delay_ms=HANDBACK_DELAY_MS))
            if crew.stopping():
                return await self._return(Outcome(status="pending", delay_ms=0))
        if self.cancel_requested:
            return await self._return(self._cancelled(None))
        job = self.job  # a claim this execution adopted while it took its key is the one that runs
        self._started_at = asyncio.get_running_loop().time()
        self.stage = Stage.RUNNING
        self.handler_task = asyncio.create_task(_call(crew.handler, job), name=f"job {job.id}")
        if crew.emit.wants(EventKind.STARTED):
            crew.emit(self._event(EventKind.STARTED, job=job))
        crew.track(asyncio.create_task(self._supervise(), name=f"job {job.id} supervisor"))
        return True

    def _announce_loss(self, job: Job) -> None:
        lost = _lost_attempt(job)
        if lost is not None:
            previous = job.history[-1]  # the attempt lost, by the worker that lost it
            self._crew.emit(
                self._event(EventKind.LOST, attempt=lost, worker_id=previous.worker_id, message=previous.error)
            )

    async def _return(self, outcome: Outcome) -> bool:
        """A job that never started goes back (or is settled cancelled), holding its slot until that is written."""
        self.stage = Stage.RETURNING
        try:
            await self._crew.completer.complete(self.job, outcome, urgent=self._crew.stopping())
        finally:
            await self._release(final=outcome.final, nudge=False)
        return False

    # -- running ---------------------------------------------------------------------------------------------

    async def _supervise(self) -> None:
        task = self.handler_task
        assert task is not None
        crew = self._crew
        try:
            # `wait`, not `await task`: a cancelled handler must not look like this coroutine being cancelled.
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()  # the loop is shutting down: the lease lapsing hands the job on
            self._forget()
            self._mark_over()
            raise
        # The handler is over: its slot runs the next job while this one's outcome is written (the lease, still
        # held and renewed, covers the settle).
        self.stage = Stage.SETTLING
        crew.slot_free(self)
        outcome = self._decide(task)
        try:
            await crew.completer.complete(self.job, outcome, urgent=crew.stopping())
        finally:
            await self._release(final=outcome.final, nudge=True)

    def _decide(self, task: asyncio.Task[Any]) -> Outcome:
        """What the handler's end makes of the job, emitted (logged, and passed to the hook) before it is written,
        so the log says what happened even when the store is down and the settle has to wait. Whatever goes
        wrong in deciding, the job is still settled, with an error that says what."""
        ran = self._ran_for()
        try:
            return self._outcome_of(task, ran)
        except Exception as error:
            message = f"the worker could not record the handler's outcome: {describe(error)}"
            try:
                return self._failed(message, error, ran)
            except Exception:
                return Outcome(status="pending", attempt="failed", error=clip(message), delay_ms=0)

    def _outcome_of(self, task: asyncio.Task[Any], ran: float | None) -> Outcome:
        crew = self._crew
        if task.cancelled():
            if self.cancel_requested:
                return self._cancelled(ran)
            return self._failed("the handler was cancelled", None, ran)
        error = task.exception()
        if error is None:
            run_id = self._run_id(task.result())
            if crew.emit.wants(EventKind.SUCCEEDED):
                crew.emit(self._event(EventKind.SUCCEEDED, duration_s=ran, run_id=run_id))
            return Outcome(status="succeeded", attempt="succeeded", run_id=run_id)
        if self.cancel_requested:
            # The operator asked it to stop and it did, by raising: that is the cancel, not a failure to retry.
            return self._cancelled(ran)
        if isinstance(error, PermanentFailure):
            # Its message as given; the store refuses an empty error, so a bare raise records its name.
            message = clip(str(error) or type(error).__name__)
            crew.emit(self._event(EventKind.FAILED, error=error, message=message, duration_s=ran))
            crew.emit(self._event(EventKind.DEAD, message=message, duration_s=ran))
            return Outcome(status="dead", attempt="failed", error=message)
        if isinstance(error, RetryLater):
            try:
                delay = crew.retry.retry_later_ms(error)
            except ValueError as bad:  # the handler's bug: a failed attempt saying so, never a wedged job
                return self._failed(describe(bad), bad, ran)
            crew.emit(self._event(EventKind.RETRIED, delay_ms=delay, duration_s=ran, message=error.reason or None))
            return Outcome(status="pending", delay_ms=delay)
        if isinstance(error, AttemptFailed):  # the handler's own backoff (a declared action's)
            return self._failed(describe(error.error), error.error, ran, delay_ms=error.delay_ms)
        return self._failed(describe(error), error, ran)

    def _run_id(self, result: object) -> str | None:
        """What a handler returned, as the job's run_id: a str (empty: none), or None; anything else is not
        recorded, and said so once."""
        if result is None:
            return None
        if isinstance(result, str):
            return clip(result, check.ID_MAX_CHARS) or None
        job = self.job
        logger.warning(
            "job %r (space %d, action %r) succeeded, but its handler returned a %s, not a str or None: no run_id "
            "is recorded for it",
            job.id,
            job.space_id,
            job.action_id,
            type(result).__name__,
        )
        return None

    def _failed(
        self, message: str, error: BaseException | None, ran: float | None, *, delay_ms: int | None = None
    ) -> Outcome:
        job, crew = self.job, self._crew
        crew.emit(self._event(EventKind.FAILED, error=error, message=message, duration_s=ran))
        if job.attempts >= job.max_attempts:
            crew.emit(self._event(EventKind.DEAD, message=message, duration_s=ran))
            return Outcome(status="dead", attempt="failed", error=message)
        delay = crew.retry.backoff_ms(job.attempts) if delay_ms is None else delay_ms
        crew.emit(self._event(EventKind.RETRIED, delay_ms=delay, duration_s=ran, message=message))
        return Outcome(status="pending", attempt="failed", error=message, delay_ms=delay)

    def _cancelled(self, ran: float | None) -> Outcome:
        self._crew.emit(self._event(EventKind.CANCELLED, message=CANCELLED_MESSAGE, duration_s=ran))
        return Outcome(status="cancelled", attempt="cancelled", error=CANCELLED_MESSAGE)

    # -- letting go ------------------------------------------------------------------------------------------

    def _forget(self) -> None:
        if self.stage is not Stage.RELEASED:
            self.stage = Stage.RELEASED
            self._crew.released(self)

    async def _release(self, *, final: bool, nudge: bool) -> None:
        """Lets go of the job, then gives its single-flight key back (only if it is still this run's). A finished
        job's key lingers for others' company while the slot looks for work; a retry's goes first, since the
        retry may be claimed at once and would find it held."""
        crew = self._crew
        self._forget()
        try:
            key, self.key = self.key, None
            if final and nudge:
                crew.look_for_work()
            if key is not None and crew.keys is not None:
                await crew.keys.give_back(key, urgent=not final or crew.stopping())
            if nudge and not final:
                crew.look_for_work()
        finally:
            self._mark_over()

    def _mark_over(self) -> None:
        self._over = True
        if self._ended is not None:
            self._ended.set()

    # -- reporting -------------------------------------------------------------------------------------------

    def _ran_for(self) -> float | None:
        if self._started_at is None:
            return None
        return asyncio.get_running_loop().time() - self._started_at

    def _event(self, kind: EventKind, **fields: Any) -> JobEvent:
        """An event about the job: its attempt by this worker unless `fields` say otherwise."""
        job = self.job
        fields.setdefault("attempt", job.attempts)
        fields.setdefault("worker_id", self._crew.worker_id)
        return JobEvent(
            kind=kind,
            job_id=job.id,
            space_id=job.space_id,
            action_id=job.action_id,
            max_attempts=job.max_attempts,
            **fields,
        )
