"""Drains the queue: claims what fits in the free slots, runs each job's handler, settles what came of it.

Every replica may run one; a claim is atomic, so two workers never receive the same job. A claim is a lease
that the heartbeat renews every third of its length while the handler runs, so a long job keeps its claim and
a dead process does not: its jobs are taken over once the lease lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import random
import secrets
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar, Unpack

from . import validation as check
from .contract import JobQueue, KvStore
from .errors import StoreUnavailableError
from .events import Emitter, EventKind, JobEvent
from .options import WorkerOptions, WorkerSettings
from .records import AttemptOutcome, Job

logger = logging.getLogger(__name__)

JobHandler = Callable[[Job], Awaitable[str | None]]

#: Exception text recorded on a job is clipped to this: the store refuses errors over 65,535 characters, and a
#: settle that fails on an enormous message would leave the job to its lease instead of recording the failure.
ERROR_CLIP_CHARS: Final = 4_000
#: A job whose single-flight key is held elsewhere comes back after this long.
HANDBACK_DELAY_MS: Final = 1_000
#: The jitter added to a retry is at most this, however long the backoff has grown.
MAX_JITTER_MS: Final = 30_000
KV_KEY_PREFIX: Final = "plitzi-jobs:run:"
#: A settle the store refused is tried again after this, doubling up to the ceiling, while the lease holds.
SETTLE_RETRY_FIRST_S: Final = 0.05
SETTLE_RETRY_MAX_S: Final = 2.0
#: With the kv unreachable, a claimed job goes back after this long and the worker claims nothing meanwhile,
#: doubling with every failure in a row up to the ceiling, so an outage costs a claim every few minutes, not
#: a claim and a hand-back per job per second.
KV_BACKOFF_FIRST_MS: Final = 1_000
KV_BACKOFF_MAX_MS: Final = 300_000
#: Claims a busy worker keeps in flight at once, each on its own pooled connection. A claim is a read, then one
#: compare-and-set per job in sequence, then a read-back: one at a time, claiming alone filled a drain's wall
#: time while the slots waited. While claims come back full, the free slots are split over up to this many.
MAX_CLAIMS_IN_FLIGHT: Final = 2
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


def _default_worker_id() -> str:
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{secrets.token_hex(4)}"


async def _call(handler: JobHandler, job: Job) -> str | None:
    return await handler(job)


def _kv_token(worker_id: str) -> str:
    return f"{worker_id}:{secrets.token_hex(8)}"


class _KeyReleases:
    """Single-flight keys given back together: those released while one statement is in flight go in the next
    one, so a busy worker pays a fraction of a statement per job rather than one."""

    def __init__(self, delete_unchanged: Callable[[list[tuple[str, str]]], Awaitable[None]],
                 on_error: Callable[[BaseException], None]) -> None:
        self._delete = delete_unchanged
        self._on_error = on_error
        self._waiting: list[tuple[str, str]] = []
        self._flusher: asyncio.Future[None] | None = None

    async def give_back(self, key: str, token: str) -> None:
        """Returns once the key is deleted (if it still held `token`) or the attempt failed."""
        self._waiting.append((key, token))
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush())
        await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                try:
                    await self._delete(batch)
                except Exception as error:
                    self._on_error(error)  # they lapse with their lifetime anyway
        finally:
            self._flusher = None  # no await since the loop found nothing waiting


def _kv_key(job_id: str) -> str:
    key = KV_KEY_PREFIX + job_id
    # A 191-character id of 4-byte characters plus the prefix would pass the kv's 764-byte bound.
    if len(key.encode("utf-8")) > check.KV_KEY_MAX_BYTES:
        key = KV_KEY_PREFIX + "sha256:" + hashlib.sha256(job_id.encode("utf-8")).hexdigest()
    return key


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


def _lost_attempt(job: Job) -> int | None:
    """The number of the `lost` attempt the claim that handed out `job` recorded, if it took the job over.

    A takeover appends the lost attempt in the claim itself, so its end is the claim's instant, which is also the
    job's `updated_at` until anything else touches it."""
    last = job.history[-1] if job.history else None
    if last is not None and last.status == "lost" and last.ended_at == job.updated_at:
        return last.attempt
    return None


class JobWorker:
    """Runs up to `workers` handlers at once. `poll()` and `beat()` are the two halves `start()` puts on
    timers."""

    def __init__(
        self, *, queue: JobQueue, handler: JobHandler, kv: KvStore | None = None, **options: Unpack[WorkerOptions]
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be an async callable taking a Job")
        settings = WorkerSettings(**options)
        self.queue = queue
        self.handler = handler
        self.workers = settings.workers
        self.poll_ms = settings.poll_ms
        self.lease_ms = settings.lease_ms
        self.backoff_base_ms = settings.backoff_base_ms
        self.backoff_max_ms = settings.backoff_max_ms
        self.worker_id = settings.worker_id or _default_worker_id()
        self.kv = kv
        self.on_error = settings.on_error or _log_error
        self._emit = Emitter(settings.on_event, logger)
        self._kv_failures = 0  # in a row
        self._kv_delay_ms = 0
        self._kv_resume_at = 0.0  # the loop's clock; no claims before it while the kv is unreachable
        self._held: dict[str, _Held] = {}
        self._runs: set[asyncio.Task[Any]] = set()
        self._reserved = 0  # slots promised to claims in flight
        self._claims_in_flight = 0
        self._claims_done = asyncio.Event()  # set whenever no claim is in flight
        self._claims_done.set()
        self._more_waiting = False  # the last claim came back full: more jobs are likely due
        delete_unchanged = getattr(kv, "delete_unchanged", None)
        self._key_releases = _KeyReleases(delete_unchanged, self.on_error) if delete_unchanged is not None else None
        self._stopping = False
        self._wake = asyncio.Event()
        self._nudges = 0  # counts reasons to claim (a slot freed, a job announced) that came while claiming
        self._unsubscribe: Callable[[], None] | None = None
        self._released = asyncio.Event()  # set whenever a held job is let go of
        self._poll_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None

    # -- introspection ---------------------------------------------------------------------------------------

    def in_flight(self) -> int:
        """Handlers running now."""
        return sum(1 for h in self._held.values() if h.handler_task is not None and not h.handler_task.done())

    def backoff_ms(self, attempt: int) -> int:
        """The retry delay after attempt `attempt`: doubling from the base up to the ceiling, plus jitter so
        the jobs one outage failed together do not all come back in the same second."""
        doublings = min(max(0, attempt - 1), 62)  # past that the ceiling has long been reached
        delay = min(self.backoff_max_ms, self.backoff_base_ms * (1 << doublings))
        cap = min(delay, MAX_JITTER_MS)
        jitter = min(cap - 1, int(float(random.random()) * cap)) if cap > 0 else 0
        return min(delay + jitter, check.MAX_DURATION_MS)

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

    # -- claiming --------------------------------------------------------------------------------------------

    def _free(self) -> int:
        return self.workers - len(self._held) - self._reserved

    def _reserve(self, limit: int) -> None:
        """Promises `limit` free slots to a claim about to start, so claims in flight at once never count the
        same free slot twice. `_claim` gives them back."""
        self._reserved += limit
        self._claims_in_flight += 1
        self._claims_done.clear()

    async def _claim(self, limit: int) -> list[_Held]:
        """Claims up to `limit` jobs into the slots `_reserve(limit)` promised."""
        try:
            # A whole lease: a claim that took longer handed out leases already over, and one abandoned after it
            # won rows leaves those to their lease.
            claimed = await self._bounded(
                "a claim",
                self.queue.claim(worker_id=self.worker_id, lease_ms=self.lease_ms, limit=limit),
                max(self.lease_ms / 1000, MIN_CALL_BOUND_S),
            )
        finally:
            self._reserved -= limit
            self._claims_in_flight -= 1
            if not self._claims_in_flight:
                self._claims_done.set()
        # A cancel asked for while an earlier holder ran it (and then died) stands: it is never run.
        held = [_Held(job=job, cancel_requested=job.cancel_requested) for job in claimed]
        for h in held:  # held from here on, so the heartbeat renews them whatever happens next
            self._held[h.job.id] = h
        return held

    async def poll(self) -> int:
        """One pass: claim what fits in the free slots and start it. Answers how many handlers it started."""
        if self._stopping or asyncio.get_running_loop().time() < self._kv_resume_at:
            return 0
        free = self._free()
        if free <= 0:
            return 0
        self._reserve(free)
        held = await self._claim(free)
        await self._take_keys(held)
        started = await asyncio.gather(*(self._begin(h) for h in held))
        return sum(started)

    def _fill(self) -> None:
        """Starts claims for the free slots: one at a time while the queue looks empty (an idle worker costs one
        read per poll), several at once, each its own share of the slots, while claims come back full."""
        share = -(-self.workers // MAX_CLAIMS_IN_FLIGHT)
        if asyncio.get_running_loop().time() < self._kv_resume_at:
            return  # the kv is unreachable: nothing claimed could run
        while not self._stopping:
            free = self._free()
            if free <= 0:
                return
            if not self._more_waiting:
                if self._claims_in_flight:
                    return
                limit = free
            elif self._claims_in_flight >= MAX_CLAIMS_IN_FLIGHT or (self._claims_in_flight and free < share):
                return  # a sliver of a claim beside the others would cost a read and a read-back for one job
            else:
                limit = min(free, share)
            self._reserve(limit)
            self._track(asyncio.create_task(self._claim_and_start(limit), name="job worker claim"))

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._runs.add(task)
        task.add_done_callback(self._runs.discard)

    def _nudge(self) -> None:
        """Look for work now rather than at the next tick: a slot freed, or a job was announced."""
        self._nudges += 1
        self._wake.set()

    async def _claim_and_start(self, limit: int) -> None:
        nudges = self._nudges
        try:
            held = await self._claim(limit)
        except Exception as error:
            self.on_error(error)
            self._more_waiting = False  # back off to the poll interval rather than hammer a failing store
            return
        self._more_waiting = len(held) >= limit
        if self._more_waiting or self._nudges != nudges:
            # More are likely due, or a slot freed / a job was announced while this claim ran (and may have
            # missed it): claim again now, beside this one's jobs starting.
            self._wake.set()
        await self._take_keys(held)
        for h in held:
            self._track(asyncio.create_task(self._begin(h), name=f"job {h.job.id} start"))

    def _event(self, held: _Held, kind: EventKind, **fields: Any) -> JobEvent:
        job = held.job
        return JobEvent(
            kind=kind,
            job_id=job.id,
            space_id=job.space_id,
            action_id=job.action_id,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            worker_id=self.worker_id,
            **fields,
        )

    def _ran_for(self, held: _Held) -> float | None:
        if held.started_at is None:
            return None
        return asyncio.get_running_loop().time() - held.started_at

    async def _begin(self, held: _Held) -> bool:
        job = held.job
        lost = _lost_attempt(job)
        if lost is not None:
            previous = job.history[-1]
            self._emit(
                JobEvent(
                    kind=EventKind.LOST,
                    job_id=job.id,
                    space_id=job.space_id,
                    action_id=job.action_id,
                    attempt=lost,
                    max_attempts=job.max_attempts,
                    worker_id=previous.worker_id,
                    message=previous.error,
                )
            )
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
                key, token = _kv_key(job.id), _kv_token(self.worker_id)
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
        self._emit(self._event(held, EventKind.STARTED, job=job))
        self._track(asyncio.create_task(self._supervise(held), name=f"job {job.id} supervisor"))
        return True

    async def _take_keys(self, held: list[_Held]) -> None:
        """With a kv that takes many keys at once, the single-flight keys of one claim's jobs in one call
        (one statement when all were free) rather than one swap per job."""
        take_absent = getattr(self.kv, "take_absent", None)
        if take_absent is None or not held:
            return
        pairs = [(_kv_key(h.job.id), _kv_token(self.worker_id)) for h in held]
        try:
            answers = await self._bounded("a single-flight take", take_absent(pairs, self.lease_ms / 1000))
        except Exception as error:
            for h in held:
                h.kv_error = error  # each goes back, and claiming pauses (`_kv_unreachable`)
            return
        self._kv_reachable()
        for h, (key, token), taken in zip(held, pairs, answers, strict=True):
            if taken:
                h.kv_key, h.kv_token = key, token
            else:
                h.kv_refused = True

    async def _hand_back(self, held: _Held, delay_ms: int) -> None:
        """Back to the queue with no attempt reported, which the queue refunds. Retried like a settle while the
        lease holds: a hand-back lost to a brief outage (a read-only failover, a cut connection) would cost the
        job an attempt and a whole lease of waiting."""
        await self._settle(held, "pending", delay_ms=delay_ms)

    async def _kv_unreachable(self, held: _Held, error: Exception) -> None:
        """The single-flight key cannot be taken: the job goes back, and claiming pauses, longer each time."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self._kv_resume_at:  # the jobs of one claim share one failure
            self._kv_failures += 1
            doublings = min(self._kv_failures - 1, 20)
            self._kv_delay_ms = min(KV_BACKOFF_MAX_MS, KV_BACKOFF_FIRST_MS * (1 << doublings))
            self._kv_resume_at = loop.time() + self._kv_delay_ms / 1000
            logger.warning(
                "the kv store is unreachable (%s), so no job can take its single-flight key: job %r goes back to "
                "the queue and this worker claims nothing for %d ms (failure %d in a row; the pause doubles up "
                "to %d ms)",
                _describe(error),
                held.job.id,
                self._kv_delay_ms,
                self._kv_failures,
                KV_BACKOFF_MAX_MS,
                exc_info=error if self._kv_failures == 1 else None,
            )
            if self.on_error is not _log_error:
                self.on_error(error)
        await self._hand_back(held, self._kv_delay_ms)

    def _kv_reachable(self) -> None:
        if self._kv_failures:
            logger.warning("the kv store answers again after %d failures in a row; claiming resumes", self._kv_failures)
        self._kv_failures = 0
        self._kv_resume_at = 0.0

    # -- running ---------------------------------------------------------------------------------------------

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
        try:
            await self._conclude(held, task)
        finally:
            await self._release(held)
            self._nudge()  # a slot is free: look for work now rather than at the next tick

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
            self._emit(self._event(held, EventKind.SUCCEEDED, duration_s=ran, run_id=run_id))
            await self._settle(held, "succeeded", attempt="succeeded", run_id=run_id)
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
                    await self._bounded("a settle", self.queue.settle(
                        job_id=held.job.id,
                        worker_id=self.worker_id,
                        status=status,
                        delay_ms=delay_ms,
                        run_id=run_id,
                        error=error,
                        attempt=outcome,
                    ), max(give_up_at - loop.time(), MIN_CALL_BOUND_S))
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

    def _forget(self, held: _Held) -> None:
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
            await self._key_releases.give_back(key, token)
            return
        marker = f"released:{token}"
        try:
            # Compare-and-set to a marker that lapses at once: atomic, so a key someone else took is never
            # touched.
            if await self._bounded("a single-flight release", self.kv.swap(key, token, marker, 0.001)) and \
                    await self._bounded("a single-flight release", self.kv.get(key)) == marker:
                await self._bounded("a single-flight release", self.kv.delete(key))
        except Exception as error:
            self.on_error(error)  # it lapses with its lifetime anyway

    # -- the heartbeat ---------------------------------------------------------------------------------------

    async def beat(self) -> None:
        """Renews every lease this worker holds (one call) and cancels the handlers an operator asked to
        stop."""
        held = list(self._held.values())
        if not held:
            return
        cancelled = await self.queue.heartbeat(
            job_ids=[h.job.id for h in held], worker_id=self.worker_id, lease_ms=self.lease_ms
        )
        for job_id in cancelled:
            h = self._held.get(job_id)
            if h is None or h.cancel_requested:
                continue
            h.cancel_requested = True
            if h.handler_task is not None:
                h.handler_task.cancel()
        if self.kv is not None:
            for h in held:
                if h.kv_key is None or h.kv_token is None or h.settled:
                    continue
                try:
                    await self.kv.swap(h.kv_key, h.kv_token, h.kv_token, self.lease_ms / 1000)
                except Exception as error:
                    self.on_error(error)

    # -- the timers ------------------------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        # Claims start on each tick, whenever a slot frees, and at once again while claims come back full;
        # a claim that comes back short waits for the next of those.
        wake = self._wake
        while not self._stopping:
            wake.clear()
            self._fill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.poll_ms / 1000)

    async def _beat_loop(self) -> None:
        interval = max(self.lease_ms / 3, 1) / 1000
        pause = interval
        while True:
            await asyncio.sleep(pause)
            pause = interval
            try:
                await self._bounded("a heartbeat", self.beat())
            except _Abandoned as error:
                self.on_error(error)
                pause = 0  # abandoned on a silent connection: again at once, on another, while the lease holds
            except Exception as error:
                self.on_error(error)

    def start(self) -> None:
        """Starts claiming (every `poll_ms`, and whenever a slot frees) and beating. Call it inside a running
        loop."""
        self._stopping = False
        wakeups = getattr(self.queue, "wakeups", None)
        topic = getattr(self.queue, "wakeup_topic", None)
        if self._unsubscribe is None and self.workers > 0 and wakeups is not None and isinstance(topic, str):
            # An enqueue of a due job (in this process, or wherever the channel reaches) starts a claim at once.
            self._unsubscribe = wakeups.subscribe(topic, self._nudge)
        if self._beat_task is None or self._beat_task.done():
            self._beat_task = asyncio.create_task(self._beat_loop(), name="job worker heartbeat")
        if self.workers > 0 and (self._poll_task is None or self._poll_task.done()):
            self._poll_task = asyncio.create_task(self._poll_loop(), name="job worker poll")

    async def stop(self) -> None:
        """Stops claiming, then waits for every running handler to FINISH, however long past its lease that
        is.

        The heartbeat keeps renewing their leases meanwhile, so no other replica takes a job over while this
        one is still running it, and an operator's cancel still reaches it. What is still waiting in the queue
        is not touched; a job claimed in the instant the stop arrived is handed back with its attempt
        refunded.
        """
        self._stopping = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._wake.set()
        poll_task, self._poll_task = self._poll_task, None
        if poll_task is not None:
            # Not cancelled: a claim in flight must come back and hand its jobs back, not vanish with them.
            await asyncio.wait({poll_task})
        drain_beat = None
        if self._held and (self._beat_task is None or self._beat_task.done()):
            drain_beat = asyncio.create_task(self._beat_loop(), name="job worker drain heartbeat")
        try:
            await self._claims_done.wait()  # a claim in flight comes back and hands its jobs back first
            while self._held:
                self._released.clear()
                await self._released.wait()
            # Each run still gives its single-flight key back after settling.
            await asyncio.gather(*self._runs, return_exceptions=True)
        finally:
            for task in (drain_beat, self._beat_task):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            self._beat_task = None


def create_job_worker(
    *, queue: JobQueue, handler: JobHandler, kv: KvStore | None = None, **options: Unpack[WorkerOptions]
) -> JobWorker:
    """A consumer of the queue; every replica may run one. `workers=0` makes it claim nothing. Options and
    defaults: `WorkerSettings`.

    `on_event` is called with a `JobEvent` for each happening (see `plitzi_jobs_mysql.events`); it runs on the
    event loop, so it must be quick, and an exception it raises is logged and ignored."""
    return JobWorker(queue=queue, handler=handler, kv=kv, **options)
