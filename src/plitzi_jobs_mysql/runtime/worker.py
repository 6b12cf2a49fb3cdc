"""Drains the queue: claims what fits in the free slots, runs each job's handler, settles what came of it.

Every replica may run one; a claim is atomic, so two workers never receive the same job. A claim is a lease
that the heartbeat renews every third of its length while the handler runs, so a long job keeps its claim and
a dead process does not: its jobs are taken over once the lease lapses.

This module is the worker: its slots, its claims, the heartbeat and the timers. Each claimed job is an
`Execution` (execution.py), built with what it needs: the completer that writes its outcome (completer.py), the
single-flight keys (single_flight.py), the retry policy (retry.py) and the worker's callbacks.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any, Final, Unpack, cast

from ..contract import validation as check
from ..contract.capabilities import AnnouncesDueJobs
from ..contract.events import Emitter
from ..contract.protocols import JobQueue, KvStore
from ..errors import SchemaMismatchError
from ..records import Job
from .completer import completer_for
from .execution import HANDBACK_DELAY_MS as HANDBACK_DELAY_MS  # re-exported: it is imported from here
from .execution import Collaborators, Execution, Stage
from .halt import Halt
from .handler import JobHandler, PermanentFailure, RetryLater
from .limits import LimitedEvents, limits_for
from .options import WorkerOptions, WorkerSettings
from .retry import RetryPolicy
from .single_flight import SingleFlight
from .store_calls import MIN_CALL_BOUND_S, StoreCallAbandoned, bounded, call_bound_s, log_error, logger

__all__ = ["JobHandler", "JobWorker", "PermanentFailure", "RetryLater", "create_job_worker"]

#: Claims a busy worker keeps in flight at once, each on its own pooled connection. A claim is a read, then one
#: compare-and-set per job in sequence, then a read-back: one at a time, claiming alone filled a drain's wall
#: time while the slots waited. While claims come back full, the free slots are split over up to this many.
MAX_CLAIMS_IN_FLIGHT: Final = 2


def _default_worker_id() -> str:
    # A host name that is not UTF-8 comes back with lone surrogates, which no store takes as a worker id.
    return f"{check.storable_text(socket.gethostname(), 120)}:{os.getpid()}:{secrets.token_hex(4)}"


class JobWorker:
    """Runs up to `workers` handlers at once. `poll()` and `beat()` are the two halves `start()` puts on
    timers.

    `random` (a callable answering a float in [0, 1)) is the retry jitter's source of chance, for tests; `halt` is
    shared with a scheduler by `create_action_jobs`, so tables the store refuses stop both (see `failure`)."""

    def __init__(
        self,
        *,
        queue: JobQueue,
        handler: JobHandler,
        kv: KvStore | None = None,
        random: Callable[[], float] | None = None,
        halt: Halt | None = None,
        **options: Unpack[WorkerOptions],
    ) -> None:
        if not callable(handler):
            raise TypeError("handler must be an async callable taking a Job")
        settings = WorkerSettings(**options)
        if settings.worker_id is None:
            settings = replace(settings, worker_id=_default_worker_id())
        self.settings = settings = limits_for(settings, handler, queue)
        self._limited = LimitedEvents(Emitter(settings.on_event, logger))
        self.queue = queue
        self.kv = kv
        self.on_error = settings.on_error or log_error
        self._halt = halt or Halt()
        self._halt.when_tripped(self._halted)
        base, ceiling = settings.backoff_base_ms, settings.backoff_max_ms
        self.retry = RetryPolicy(base, ceiling) if random is None else RetryPolicy(base, ceiling, random)
        self._keys = None
        if kv is not None:
            self._keys = SingleFlight(
                kv,
                worker_id=self.worker_id,
                lease_ms=settings.lease_ms,
                on_error=self.on_error,
                on_refused=self._refused,
            )
        self._completer = completer_for(
            queue, worker_id=self.worker_id, lease_ms=settings.lease_ms, on_error=self.on_error
        )
        self._crew = Collaborators(
            handler=handler,
            worker_id=self.worker_id,
            completer=self._completer,
            keys=self._keys,
            retry=self.retry,
            emit=Emitter(settings.on_event, logger),
            on_error=self.on_error,
            stopping=self._is_stopping,
            slot_free=self._slot_free,
            released=self._released_one,
            look_for_work=self._nudge,
            track=self._track,
        )
        self._held: dict[str, Execution] = {}  # by job id: the execution holding each job's current claim
        self._settling: set[Execution] = set()  # held, handler over, slot free while the outcome is written
        self._runs: set[asyncio.Task[Any]] = set()
        self._reserved = 0  # slots promised to claims in flight
        self._claims_in_flight = 0
        self._more_waiting = False  # the last claim came back full: more jobs are likely due
        self._stopping = False
        self._wake = asyncio.Event()
        self._nudges = 0  # counts reasons to claim (a slot freed, a job announced) that came while claiming
        self._unsubscribe: Callable[[], None] | None = None
        self._changed = asyncio.Event()  # set whenever a job is let go of, a claim ends or a task of a run ends
        self._poll_task: asyncio.Task[None] | None = None
        self._beat_task: asyncio.Task[None] | None = None

    @property
    def worker_id(self) -> str:
        worker_id = self.settings.worker_id
        assert worker_id is not None
        return worker_id

    # -- what it is doing ------------------------------------------------------------------------------------

    def in_flight(self) -> int:
        """Handlers running now."""
        return sum(1 for execution in self._held.values() if execution.stage is Stage.RUNNING)

    @property
    def running(self) -> bool:
        """Whether `start()`'s claiming timer runs (it ends with `stop()`, or when the store refuses its tables)."""
        return self._poll_task is not None and not self._poll_task.done()

    @property
    def failure(self) -> SchemaMismatchError | None:
        """Why the worker stopped claiming for good: the store refused its tables (logged once at ERROR, with the
        fix). None while it may claim."""
        return self._halt.error

    async def idle(self) -> None:
        """Returns once this worker holds no job, has no claim in flight, and every run's last step (its settle,
        its single-flight key given back) is done: what a test waits on after `poll()`, rather than a sleep."""
        while self._held or self._claims_in_flight or self._runs:
            self._changed.clear()
            await self._changed.wait()

    def backoff_ms(self, attempt: int) -> int:
        """The retry delay after attempt `attempt` (`RetryPolicy.backoff_ms`)."""
        return self.retry.backoff_ms(attempt)

    # -- slots -----------------------------------------------------------------------------------------------

    def _free(self) -> int:
        # A held job whose handler is over no longer takes a slot, but no more than `workers` of those count as
        # free, so a store slow to take settles cannot pile up leases without end.
        workers = self.settings.workers
        return workers - (len(self._held) - min(len(self._settling), workers)) - self._reserved

    def _slot_free(self, execution: Execution) -> None:
        self._settling.add(execution)
        self._nudge()  # a slot is free: look for work now, beside this job's settle

    def _released_one(self, execution: Execution) -> None:
        self._settling.discard(execution)
        if self._held.get(execution.job.id) is execution:
            del self._held[execution.job.id]
        self._changed.set()

    def _is_stopping(self) -> bool:
        return self._stopping

    # -- claiming --------------------------------------------------------------------------------------------

    def _reserve(self, limit: int) -> None:
        """Promises `limit` free slots to a claim about to start, so claims in flight at once never count the
        same free slot twice. `_claim` gives them back."""
        self._reserved += limit
        self._claims_in_flight += 1

    def _claimable(self) -> bool:
        if self._stopping or self._halt.error is not None:
            return False
        return self._keys is None or not self._keys.paused()  # the kv unreachable: nothing claimed could run

    async def _claim(self, limit: int) -> list[Job]:
        """Claims up to `limit` jobs into the slots `_reserve(limit)` promised; the caller holds them (`_hold`)
        before its next await."""
        settings = self.settings
        try:
            # A whole lease: a claim that took longer handed out leases already over, and one abandoned after it
            # won rows leaves those to their lease.
            claimed = await bounded(
                "a claim",
                self._claim_call(limit),
                max(settings.lease_ms / 1000, MIN_CALL_BOUND_S),
            )
        finally:
            self._reserved -= limit
            self._claims_in_flight -= 1
            self._changed.set()
        return claimed

    def _claim_call(self, limit: int) -> Coroutine[Any, Any, list[Job]]:
        settings = self.settings
        if not settings.limits:
            return self.queue.claim(worker_id=self.worker_id, lease_ms=settings.lease_ms, limit=limit)
        # The store enforces the limits (contract/limits.py): `limits` is beyond the `JobQueue` protocol.
        claim: Any = self.queue.claim
        call = claim(worker_id=self.worker_id, lease_ms=settings.lease_ms, limit=limit, limits=settings.limits,
                     on_limited=self._limited)  # fmt: skip
        return cast(Coroutine[Any, Any, list[Job]], call)

    def _hold(self, claimed: list[Job]) -> list[Execution]:
        """Each claimed job held from here on, so the heartbeat renews it whatever happens next: a new execution
        each, except for a job this worker still holds, whose execution adopts the new claim while its handler
        runs (`Execution.adopt`) or else is followed by the new one once it has ended."""
        executions = []
        for job in claimed:
            earlier = self._held.get(job.id)
            if earlier is not None:
                if earlier.adopt(job):
                    continue
                self._settling.discard(earlier)  # its slot is the new claim's now
            execution = self._held[job.id] = Execution(job, self._crew, after=earlier)
            executions.append(execution)
        return executions

    async def poll(self) -> int:
        """One pass: claim what fits in the free slots and start it. Answers how many handlers it started."""
        if not self._claimable():
            return 0
        free = self._free()
        if free <= 0:
            return 0
        self._reserve(free)
        try:
            claimed = self._hold(await self._claim(free))
        except SchemaMismatchError as error:
            self._refused(error)
            raise
        await self._take_keys(claimed)
        later = [execution for execution in claimed if execution.waits_for_earlier]
        for execution in later:
            self._track(asyncio.create_task(execution.begin(), name=f"job {execution.job.id} start"))
        started = await asyncio.gather(*(e.begin() for e in claimed if not e.waits_for_earlier))
        return sum(started)

    def _fill(self) -> None:
        """Starts claims for the free slots: one at a time while the queue looks empty (an idle worker costs one
        read per poll), several at once, each its own share of the slots, while claims come back full."""
        workers = self.settings.workers
        share = -(-workers // MAX_CLAIMS_IN_FLIGHT)
        if not self._claimable():
            return
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
        task.add_done_callback(self._run_done)

    def _run_done(self, task: asyncio.Task[Any]) -> None:
        self._runs.discard(task)
        self._changed.set()

    def _nudge(self) -> None:
        """Look for work now rather than at the next tick: a slot freed, or a job was announced."""
        self._nudges += 1
        self._wake.set()

    async def _claim_and_start(self, limit: int) -> None:
        nudges = self._nudges
        try:
            jobs = await self._claim(limit)
        except SchemaMismatchError as error:
            self._refused(error)
            return
        except Exception as error:
            self.on_error(error)
            self._more_waiting = False  # back off to the poll interval rather than hammer a failing store
            return
        claimed = self._hold(jobs)
        self._more_waiting = len(jobs) >= limit
        if self._more_waiting or self._nudges != nudges:
            # More are likely due, or a slot freed / a job was announced while this claim ran (and may have
            # missed it): claim again now, beside this one's jobs starting.
            self._wake.set()
        await self._take_keys(claimed)
        for execution in claimed:
            if execution.starts_at_once():
                await execution.begin()  # no store call on its way: no task of its own (a share of the CPU per job)
            else:  # a hand-back, a swap, or an earlier claim to wait for: it must not hold up the others' start
                self._track(asyncio.create_task(execution.begin(), name=f"job {execution.job.id} start"))

    async def _take_keys(self, claimed: list[Execution]) -> None:
        """With a kv that takes many keys at once, the single-flight keys of one claim's jobs in one call (one
        statement when all were free) rather than one swap per job. A job waiting for an earlier execution of its
        own takes its key once that one gave it back."""
        keys = self._keys
        asking = [execution for execution in claimed if not execution.waits_for_earlier]
        if keys is None or not keys.takes_many or not asking:
            return
        try:
            answers = await keys.take_many([execution.job.id for execution in asking])
        except Exception as error:
            for execution in asking:
                execution.key_error = error  # each goes back, and claiming pauses (`SingleFlight.unreachable`)
            return
        for execution, key in zip(asking, answers, strict=True):
            execution.offer_key(key)

    # -- the heartbeat ---------------------------------------------------------------------------------------

    async def beat(self) -> None:
        """Renews every lease this worker holds (one call) and cancels the handlers an operator asked to
        stop."""
        held = list(self._held.values())
        if not held:
            return
        cancelled = await self.queue.heartbeat(
            job_ids=[execution.job.id for execution in held],
            worker_id=self.worker_id,
            lease_ms=self.settings.lease_ms,
        )
        for job_id in cancelled:
            execution = self._held.get(job_id)
            if execution is not None:
                execution.request_cancel()
        if self._keys is not None:
            for execution in held:
                if execution.key is not None and execution.stage is not Stage.RELEASED:
                    await self._keys.renew(execution.key)

    # -- the timers ------------------------------------------------------------------------------------------

    async def _poll_loop(self) -> None:
        # Claims start on each tick, whenever a slot frees, and at once again while claims come back full;
        # a claim that comes back short waits for the next of those.
        wake = self._wake
        while not self._stopping and self._halt.error is None:
            wake.clear()
            self._fill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.settings.poll_ms / 1000)

    async def _beat_loop(self) -> None:
        interval = max(self.settings.lease_ms / 3, 1) / 1000
        pause = interval
        while True:
            await asyncio.sleep(pause)
            pause = interval
            try:
                await bounded("a heartbeat", self.beat(), call_bound_s(self.settings.lease_ms))
            except StoreCallAbandoned as error:
                self.on_error(error)
                pause = 0  # abandoned on a silent connection: again at once, on another, while the lease holds
            except Exception as error:
                self.on_error(error)

    def _refused(self, error: SchemaMismatchError) -> None:
        reported = None if self.on_error is log_error else self.on_error
        self._halt.trip(error, logger, "the job worker stops claiming", reported)

    def _halted(self) -> None:
        self._wake.set()  # the poll loop ends; what runs here finishes and settles

    def start(self) -> None:
        """Starts claiming (every `poll_ms`, and whenever a slot frees) and beating. Call it inside a running
        loop."""
        self._stopping = False
        workers = self.settings.workers
        queue = self.queue
        if self._unsubscribe is None and workers > 0 and isinstance(queue, AnnouncesDueJobs):
            if isinstance(queue.wakeup_topic, str):
                # An enqueue of a due job (in this process, or wherever the channel reaches) starts a claim at once.
                self._unsubscribe = queue.wakeups.subscribe(queue.wakeup_topic, self._nudge)
        if self._beat_task is None or self._beat_task.done():
            self._beat_task = asyncio.create_task(self._beat_loop(), name="job worker heartbeat")
        if workers > 0 and self._halt.error is None and (self._poll_task is None or self._poll_task.done()):
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
        if self._keys is not None:
            self._keys.hurry()  # keys lingering for company go now
        self._completer.hurry()  # so do settles
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
            # A claim in flight comes back and hands its jobs back first; each run settles and gives its
            # single-flight key back.
            await self.idle()
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
