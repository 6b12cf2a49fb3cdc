"""Drains the queue: claims what fits in the free slots, runs each job's handler, settles what came of it.

Every replica may run one; a claim is atomic, so two workers never receive the same job. A claim is a lease
that the heartbeat renews every third of its length while the handler runs, so a long job keeps its claim and
a dead process does not: its jobs are taken over once the lease lapses.

This module claims, beats and runs the timers; one claimed job's run, from its start to its settle, is in
job_run.py, the single-flight kv key a run holds in single_flight.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import secrets
import socket
from collections.abc import Callable
from typing import Any, Final, Unpack

from ..contract import validation as check
from ..contract.events import Emitter
from ..contract.protocols import JobQueue, KvStore
from .job_run import HANDBACK_DELAY_MS as HANDBACK_DELAY_MS  # re-exported: it is imported from here
from .job_run import (
    MIN_CALL_BOUND_S,
    JobHandler,
    JobRun,
    PermanentFailure,
    RetryLater,
    _Abandoned,
    _describe,
    _Held,
    _log_error,
    logger,
)
from .options import WorkerOptions, WorkerSettings
from .settles import SucceededSettles
from .single_flight import KeyReleases, kv_key, kv_token

__all__ = ["JobHandler", "JobWorker", "PermanentFailure", "RetryLater", "create_job_worker"]

#: The jitter added to a retry is at most this, however long the backoff has grown.
MAX_JITTER_MS: Final = 30_000
#: With the kv unreachable, a claimed job goes back after this long and the worker claims nothing meanwhile,
#: doubling with every failure in a row up to the ceiling, so an outage costs a claim every few minutes, not
#: a claim and a hand-back per job per second.
KV_BACKOFF_FIRST_MS: Final = 1_000
KV_BACKOFF_MAX_MS: Final = 300_000
#: Claims a busy worker keeps in flight at once, each on its own pooled connection. A claim is a read, then one
#: compare-and-set per job in sequence, then a read-back: one at a time, claiming alone filled a drain's wall
#: time while the slots waited. While claims come back full, the free slots are split over up to this many.
MAX_CLAIMS_IN_FLIGHT: Final = 2


def _default_worker_id() -> str:
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{secrets.token_hex(4)}"


class JobWorker(JobRun):
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
        self._settling = 0
        self._runs: set[asyncio.Task[Any]] = set()
        self._reserved = 0  # slots promised to claims in flight
        self._claims_in_flight = 0
        self._claims_done = asyncio.Event()  # set whenever no claim is in flight
        self._claims_done.set()
        self._more_waiting = False  # the last claim came back full: more jobs are likely due
        delete_unchanged = getattr(kv, "delete_unchanged", None)
        self._key_releases = KeyReleases(delete_unchanged, self.on_error) if delete_unchanged is not None else None
        settle_succeeded = getattr(queue, "settle_succeeded", None)
        self._succeeded_settles = None
        if settle_succeeded is not None:  # the MySQL queue: one statement for many succeeded jobs

            async def settle_many(jobs: list[tuple[str, str | None]]) -> None:
                await self._bounded("a settle", settle_succeeded(worker_id=self.worker_id, jobs=jobs))

            self._succeeded_settles = SucceededSettles(settle_many, self.on_error)
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

    # -- claiming --------------------------------------------------------------------------------------------

    def _free(self) -> int:
        # A held job whose handler is over no longer takes a slot, but no more than `workers` of those count as
        # free, so a store slow to take settles cannot pile up leases without end.
        return self.workers - (len(self._held) - min(self._settling, self.workers)) - self._reserved

    def _handler_done(self, held: _Held) -> None:
        if not held.settling and not held.settled:
            held.settling = True
            self._settling += 1
        self._nudge()  # a slot is free: look for work now, beside this job's settle

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
            if self._starts_at_once(h):
                await self._begin(h)  # no store call on its way: no task of its own (a share of the CPU per job)
            else:  # a hand-back or a swap: its round trip must not hold up the others' start
                self._track(asyncio.create_task(self._begin(h), name=f"job {h.job.id} start"))

    def _starts_at_once(self, held: _Held) -> bool:
        """Whether `_begin` will start the job's handler without a store call (so without suspending)."""
        if self._stopping or held.cancel_requested:
            return False
        return self.kv is None or (held.kv_error is None and held.kv_key is not None)

    async def _take_keys(self, held: list[_Held]) -> None:
        """With a kv that takes many keys at once, the single-flight keys of one claim's jobs in one call
        (one statement when all were free) rather than one swap per job."""
        take_absent = getattr(self.kv, "take_absent", None)
        if take_absent is None or not held:
            return
        pairs = [(kv_key(h.job.id), kv_token(self.worker_id)) for h in held]
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
        if self._key_releases is not None:
            self._key_releases.hurry()  # keys lingering for company go now
        if self._succeeded_settles is not None:
            self._succeeded_settles.hurry()  # so do settles
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

    `on_event` is called with a `JobEvent` for each happening (see `plitzi_jobs_mysql.contract.events`); it runs on the
    event loop, so it must be quick, and an exception it raises is logged and ignored."""
    return JobWorker(queue=queue, handler=handler, kv=kv, **options)
