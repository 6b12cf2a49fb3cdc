"""One claimed job's run on a worker: started (or handed back) once its single-flight key is taken, its handler
task supervised to the end, the outcome emitted and settled (retried while the lease holds), and its
single-flight key given back. `JobWorker` (worker.py) claims the jobs and keeps the leases."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..contract import validation as check
from ..contract.events import Emitter, EventKind, JobEvent
from ..contract.protocols import JobQueue, KvStore
from ..errors import StoreUnavailableError
from ..records import AttemptOutcome, Job
from .options import ErrorHandler
from .settles import SucceededSettles
from .single_flight import KeyReleases, kv_key, kv_token

# The worker's logger: operators filter on one name for everything a worker does.
logger = logging.getLogger("plitzi_jobs_mysql.worker")

JobHandler = Callable[[Job], Awaitable[str | None]]

#: Exception text recorded on a job is clipped to this: the store refuses errors over 65,535 characters, and a
#: settle that fails on an enormous message would leave the job to its lease instead of recording the failure.
ERROR_CLIP_CHARS: Final = 4_000
#: Settlements after which nobody claims the job again (unless an operator requeues it).
FINISHED: Final = frozenset({"succeeded", "dead", "cancelled"})
#: A job whose single-flight key is held elsewhere comes back after this long.
HANDBACK_DELAY_MS: Final = 1_000
#: A settle the store refused is tried again after this, doubling up to the ceiling, while the lease holds.
SETTLE_RETRY_FIRST_S: Final = 0.05
SETTLE_RETRY_MAX_S: Final = 2.0
#: A store call that has not answered within a third of the lease (a claim: the lease; never less than this) is
#: abandoned: its connection went silent (a failover that moved the server's address, a NAT or firewall dropping
#: the flow, no FIN and no RST), and TCP would take about 15 minutes to say so, long after the lease lapsed under a
#: running handler. The floor keeps a merely slow call on a busy machine from being cut (which costs a reconnect)
#: under short leases.
MIN_CALL_BOUND_S: Final = 2.0
T = TypeVar("T")


class _Abandoned(StoreUnavailableError):
    """A store call given up on after its time bound (which it took, so retrying at once is no hot loop)."""


class PermanentFailure(Exception):
    """Raised by a handler: retrying will not help. A 'failed' attempt (error = the message), and the job is
    dead."""


class RetryLater(Exception):
    """Raised by a handler: not now. The job goes back to the queue with its attempt refunded, after
    `delay_ms` (default: the first backoff step, with jitter)."""

    def __init__(self, reason: str = "", delay_ms: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay_ms = delay_ms


def _log_error(error: BaseException) -> None:
    logger.error("job worker error", exc_info=error)


def _clip(text: str, limit: int = ERROR_CLIP_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(error: BaseException) -> str:
    message = str(error)
    return _clip(f"{type(error).__name__}: {message}" if message else type(error).__name__)


async def _call(handler: JobHandler, job: Job) -> str | None:
    return await handler(job)


@dataclass(eq=False)
class _Held:
    """A job this worker holds a lease on, from its claim until its settlement is written."""

    job: Job
    kv_key: str | None = None
    kv_token: str | None = None
    kv_refused: bool = False  # its single-flight key is held elsewhere
    kv_error: Exception | None = None  # the kv could not be asked for its key
    handler_task: asyncio.Task[str | None] | None = None
    started_at: float | None = None  # the loop's clock when the handler started
    cancel_requested: bool = False
    settled: bool = False
    finished: bool = False  # settled for good (succeeded, dead, cancelled): nobody claims it again soon
    settling: bool = False  # its handler is over and its slot given to the next job; the settle is on its way


def _lost_attempt(job: Job) -> int | None:
    """The number of the `lost` attempt the claim that handed out `job` recorded, if it took the job over.

    A takeover appends the lost attempt in the claim itself, so its end is the claim's instant, which is also the
    job's `updated_at` until anything else touches it."""
    last = job.history[-1] if job.history else None
    if last is not None and last.status == "lost" and last.ended_at == job.updated_at:
        return last.attempt
    return None


class JobRun:
    """The per-job half of `JobWorker`: what happens to a held job once it was claimed, until it is let go of."""

    queue: JobQueue
    handler: JobHandler
    kv: KvStore | None
    worker_id: str
    lease_ms: int
    on_error: ErrorHandler
    _emit: Emitter
    _held: dict[str, _Held]
    _released: asyncio.Event  # set whenever a held job is let go of
    _key_releases: KeyReleases | None
    _succeeded_settles: SucceededSettles | None  # when the queue settles many succeeded jobs in one call
    _settling: int  # held jobs whose handler is over (their slot is free again), being settled
    _stopping: bool

    def backoff_ms(self, attempt: int) -> int:
        raise NotImplementedError  # the worker's retry policy

    def _nudge(self) -> None:
        raise NotImplementedError  # the worker looks for work: a slot is free

    def _track(self, task: asyncio.Task[Any]) -> None:
        raise NotImplementedError  # the worker keeps the run's tasks until they end

    async def _kv_unreachable(self, held: _Held, error: Exception) -> None:
        raise NotImplementedError  # the worker hands the job back and pauses claiming

    def _kv_reachable(self) -> None:
        raise NotImplementedError  # the worker resumes claiming

    def _call_bound_s(self) -> float:
        return max(self.lease_ms / 3000, MIN_CALL_BOUND_S)

    async def _bounded(self, what: str, call: Coroutine[Any, Any, T], seconds: float | None = None) -> T:
        """`call`, abandoned when the store does not answer in time (cancelling it closes its connection, so the
        pool opens a fresh one), as a StoreUnavailableError an operator can act on."""
        limit = self._call_bound_s() if seconds is None else seconds
        timer = asyncio.timeout(limit)
        try:
            async with timer:
                return await call
        except TimeoutError:
            if not timer.expired():
                raise
            raise _Abandoned(
                f"the store did not answer {what} within {limit:g} s; abandoned that connection (a connection gone "
                "silent: a failover that moved the server's address, or a NAT or firewall dropping the flow?)"
            ) from None

    def _event(self, held: _Held, kind: EventKind, **fields: Any) -> JobEvent:
        """An event about `held`'s job: its attempt by this worker unless `fields` say otherwise."""
        job = held.job
        fields.setdefault("attempt", job.attempts)
        fields.setdefault("worker_id", self.worker_id)
        return JobEvent(
            kind=kind,
            job_id=job.id,
            space_id=job.space_id,
            action_id=job.action_id,
            max_attempts=job.max_attempts,
            **fields,
        )

    def _ran_for(self, held: _Held) -> float | None:
        if held.started_at is None:
            return None
        return asyncio.get_running_loop().time() - held.started_at

    async def _hand_back(self, held: _Held, delay_ms: int) -> None:
        """Back to the queue with no attempt reported, which the queue refunds. Retried like a settle while the
        lease holds: a hand-back lost to a brief outage (a read-only failover, a cut connection) would cost the
        job an attempt and a whole lease of waiting."""
        await self._settle(held, "pending", delay_ms=delay_ms)

    # -- running ---------------------------------------------------------------------------------------------

    async def _begin(self, held: _Held) -> bool:
        job = held.job
        lost = _lost_attempt(job)
        if lost is not None:
            previous = job.history[-1]  # the attempt lost, by the worker that lost it
            self._emit(
                self._event(held, EventKind.LOST, attempt=lost, worker_id=previous.worker_id, message=previous.error)
            )
        if self._emit.wants(EventKind.CLAIMED):
            wait_ms = max(0, job.updated_at - job.run_at) if lost is None else None
            self._emit(self._event(held, EventKind.CLAIMED, job=job, wait_ms=wait_ms))
        if self._stopping:
            # Claimed in the instant the stop arrived: never started, so back to the queue with the attempt.
            await self._hand_back(held, 0)
            await self._release(held)
            return False
        if held.cancel_requested:  # nothing runs, so no single-flight key is needed to settle it
            await self._cancelled(held)
            await self._release(held)
            return False
        if self.kv is not None:
            if held.kv_error is not None:
                await self._kv_unreachable(held, held.kv_error)
                return False
            taken = held.kv_key is not None
            if not taken and not held.kv_refused:  # not asked for with its claim's batch
                key, token = kv_key(job.id), kv_token(self.worker_id)
                try:
                    taken = await self._bounded(
                        "a single-flight swap", self.kv.swap(key, None, token, self.lease_ms / 1000)
                    )
                except Exception as error:
                    await self._kv_unreachable(held, error)
                    return False
                self._kv_reachable()
                if taken:
                    held.kv_key, held.kv_token = key, token
            if not taken:
                # Someone still runs it (a stalled worker whose lease lapsed): running it too would run it
                # twice.
                await self._hand_back(held, HANDBACK_DELAY_MS)
                return False
            if self._stopping:
                await self._hand_back(held, 0)
                await self._release(held)
                return False
        if held.cancel_requested:
            await self._cancelled(held)
            await self._release(held)
            return False
        held.started_at = asyncio.get_running_loop().time()
        held.handler_task = asyncio.create_task(_call(self.handler, job), name=f"job {job.id}")
        if self._emit.wants(EventKind.STARTED):
            self._emit(self._event(held, EventKind.STARTED, job=job))
        self._track(asyncio.create_task(self._supervise(held), name=f"job {job.id} supervisor"))
        return True

    async def _supervise(self, held: _Held) -> None:
        task = held.handler_task
        assert task is not None
        try:
            # `wait`, not `await task`: a cancelled handler must not look like this coroutine being cancelled.
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.cancel()  # the loop is shutting down: the lease lapsing hands the job on
            self._forget(held)
            raise
        # The handler is over: its slot runs the next job while this one's outcome is written (the lease, still
        # held and renewed, covers the settle as before).
        self._handler_done(held)
        try:
            await self._conclude(held, task)
        finally:
            if held.finished:
                # A slot is free: look for work now rather than at the next tick. A finished job's key goes back
                # beside that claim (and lingers for others' company): nobody waits on it.
                self._nudge()
                await self._release(held)
            else:
                await self._release(held)  # first: the retry may be claimed at once, and would find it held
                self._nudge()

    async def _conclude(self, held: _Held, task: asyncio.Task[str | None]) -> None:
        # Each outcome is emitted (logged, and passed to the hook) before it is written, so the log says what
        # happened even when the store is down and the settle has to wait.
        ran = self._ran_for(held)
        if task.cancelled():
            if held.cancel_requested:
                await self._cancelled(held, ran)
            else:
                await self._failed(held, "the handler was cancelled", None, ran)
            return
        error = task.exception()
        if error is None:
            result = task.result()
            run_id = _clip(str(result), check.ID_MAX_CHARS) if result is not None and str(result) else None
            if self._emit.wants(EventKind.SUCCEEDED):
                self._emit(self._event(held, EventKind.SUCCEEDED, duration_s=ran, run_id=run_id))
            await self._succeeded(held, run_id)
        elif held.cancel_requested:
            # The operator asked it to stop and it did, by raising: that is the cancel, not a failure to
            # retry.
            await self._cancelled(held, ran)
        elif isinstance(error, PermanentFailure):
            # Its message as given; the store refuses an empty error, so a bare raise records its name.
            message = _clip(str(error) or type(error).__name__)
            self._emit(self._event(held, EventKind.FAILED, error=error, message=message, duration_s=ran))
            self._emit(self._event(held, EventKind.DEAD, message=message, duration_s=ran))
            await self._settle(held, "dead", attempt="failed", error=message)
        elif isinstance(error, RetryLater):
            delay = int(error.delay_ms) if error.delay_ms is not None else self.backoff_ms(1)
            delay = max(0, min(delay, check.MAX_DURATION_MS))
            self._emit(
                self._event(held, EventKind.RETRIED, delay_ms=delay, duration_s=ran, message=error.reason or None)
            )
            await self._settle(held, "pending", delay_ms=delay)
        else:
            await self._failed(held, _describe(error), error, ran)

    async def _succeeded(self, held: _Held, run_id: str | None) -> None:
        settles = self._succeeded_settles
        if settles is not None:
            held.finished = True
            try:
                failure = await settles.settle(held.job.id, run_id, urgent=self._stopping)
            except BaseException:
                self._forget(held)
                raise
            if failure is None:
                self._forget(held)
                return
            # The batch failed (and was reported): this job alone, retried while its lease holds, as any settle.
            # A row the batch did write is not written twice: the holder guard no longer matches it.
        await self._settle(held, "succeeded", attempt="succeeded", run_id=run_id)

    async def _failed(self, held: _Held, message: str, error: BaseException | None, ran: float | None) -> None:
        job = held.job
        self._emit(self._event(held, EventKind.FAILED, error=error, message=message, duration_s=ran))
        if job.attempts >= job.max_attempts:
            self._emit(self._event(held, EventKind.DEAD, message=message, duration_s=ran))
            await self._settle(held, "dead", attempt="failed", error=message)
        else:
            delay = self.backoff_ms(job.attempts)
            self._emit(self._event(held, EventKind.RETRIED, delay_ms=delay, duration_s=ran, message=message))
            await self._settle(held, "pending", attempt="failed", error=message, delay_ms=delay)

    async def _cancelled(self, held: _Held, ran: float | None = None) -> None:
        message = "cancelled by an operator"
        self._emit(self._event(held, EventKind.CANCELLED, message=message, duration_s=ran))
        await self._settle(held, "cancelled", attempt="cancelled", error=message)

    async def _settle(
        self,
        held: _Held,
        status: str,
        *,
        attempt: str | None = None,
        error: str | None = None,
        run_id: str | None = None,
        delay_ms: int | None = None,
    ) -> None:
        held.finished = status in FINISHED
        outcome = None
        if attempt is not None:
            outcome = AttemptOutcome(status=attempt, worker_id=self.worker_id, run_id=run_id, error=error)
        # A store that is briefly down (a restart, a failover) must not cost a second run of a job that is done:
        # the settle is tried again while the lease could still hold, and the heartbeat keeps renewing it
        # meanwhile. Past that another worker may have taken the job, and a late settle is ignored anyway.
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self.lease_ms / 1000
        pause = SETTLE_RETRY_FIRST_S
        failures = 0
        try:
            while True:
                try:
                    # Bounded by what is left of the lease, not a third of it: a slow settle that would still
                    # land in time is never given up on; one on a silent connection no longer holds the slot for ever.
                    await self._bounded(
                        "a settle",
                        self.queue.settle(
                            job_id=held.job.id,
                            worker_id=self.worker_id,
                            status=status,
                            delay_ms=delay_ms,
                            run_id=run_id,
                            error=error,
                            attempt=outcome,
                        ),
                        max(give_up_at - loop.time(), MIN_CALL_BOUND_S),
                    )
                    return
                except Exception as failure:
                    failures += 1
                    if failures == 1:
                        self.on_error(failure)
                    if loop.time() + pause >= give_up_at:
                        logger.warning(
                            "could not settle job %s after %d tries; its lease will hand it to another worker",
                            held.job.id,
                            failures,
                        )
                        return
                await asyncio.sleep(pause)
                pause = min(pause * 2, SETTLE_RETRY_MAX_S)
        finally:
            self._forget(held)

    def _handler_done(self, held: _Held) -> None:
        raise NotImplementedError  # the worker frees the job's slot and looks for work

    def _forget(self, held: _Held) -> None:
        if held.settling:
            held.settling = False
            self._settling -= 1
        if self._held.get(held.job.id) is held:
            del self._held[held.job.id]
        held.settled = True
        self._released.set()

    async def _release(self, held: _Held) -> None:
        """Gives up the single-flight key, only if it is still ours."""
        if self.kv is None or held.kv_key is None or held.kv_token is None:
            return
        key, token = held.kv_key, held.kv_token
        held.kv_key = held.kv_token = None
        if self._key_releases is not None:
            await self._key_releases.give_back(key, token, urgent=not held.finished or self._stopping)
            return
        marker = f"released:{token}"
        try:
            # Compare-and-set to a marker that lapses at once: atomic, so a key someone else took is never
            # touched.
            if (
                await self._bounded("a single-flight release", self.kv.swap(key, token, marker, 0.001))
                and await self._bounded("a single-flight release", self.kv.get(key)) == marker
            ):
                await self._bounded("a single-flight release", self.kv.delete(key))
        except Exception as error:
            self.on_error(error)  # it lapses with its lifetime anyway
