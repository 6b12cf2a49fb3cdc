"""Turns due schedules into jobs. Nothing else.

**There is no leader.** Every replica sweeps, and that is safe because a fire's job id is derived from the
fire's own stored instant: two replicas reaching the same fire write the same id, and the queue keeps the
first. A leader lock would only add a way for the cluster to have no producer at all for a minute, which is
exactly the failure a nightly digest cannot afford.

**No clock is trusted but the queue's.** Which schedules are due is the queue's answer, the fire instant is
the one the schedule row already held, and the next one is computed from that row. Replicas whose clocks have
drifted apart still produce the same fires, once each.

**A fire is enqueued BEFORE the schedule moves on.** If this process dies between the two, the schedule is
still due, the next sweep enqueues the same id (a no-op) and advances. Nothing is produced twice and nothing
is lost; the ordering is the whole of that guarantee.

**An outage does not replay as a storm.** The overdue fire becomes one job, and the schedule then jumps to the
first occurrence after now, recording how many went by. A digest missed for a day sends once and says it
missed 23, rather than sending 23 times, which is how a scheduler that "catches up" turns an outage into an
incident.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Coroutine
from typing import Any, Final, Unpack

from ..contract import readable
from ..contract.clock import from_epoch_ms, to_epoch_ms
from ..contract.cron import cron_fires_between, cron_next_fire
from ..contract.events import Emitter, EventKind, JobEvent
from ..contract.protocols import JobQueue
from ..errors import SchemaMismatchError, StoreUnavailableError
from ..records import JobInput, MissedFires, Schedule, ScheduleInput, SweepResult, schedule_job_id
from .halt import Halt
from .options import SchedulerOptions, SchedulerSettings
from .schedules import ActionLookups, read_schedule

logger = logging.getLogger("plitzi_jobs_mysql.scheduler")

MINUTE_MS: Final = 60_000
#: Where a schedule is parked when its expression has no next fire at all: four years out, the horizon
#: `cron_next_fire` searches. Nothing inside it matched, so nothing inside it will.
PARK_MS: Final = 2_108_160 * MINUTE_MS
#: How much of an action id a log line shows.
ID_SHOWN: Final = 200

#: A timed sweep that has not finished in this long is abandoned: a connection gone silent (no FIN, no RST) would
#: otherwise hold it for as long as TCP takes to give up, about 15 minutes, and no sweep of this replica runs
#: meanwhile.
SWEEP_BOUND_S: Final = 20.0


def _log_error(error: BaseException) -> None:
    logger.error("schedule pass failed", exc_info=error)


class Scheduler:
    """A leaderless producer: `sweep()` turns due schedules into jobs; `start()` runs it on a timer."""

    def __init__(
        self,
        *,
        queue: JobQueue,
        lookups: ActionLookups,
        halt: Halt | None = None,
        **options: Unpack[SchedulerOptions],
    ) -> None:
        self.settings = SchedulerSettings(**options)
        self.queue = queue
        self.lookups = lookups
        self.on_error = self.settings.on_error or _log_error
        self._emit = Emitter(self.settings.on_event, logger)
        # Shared with the worker by `create_action_jobs`: tables the store refuses stop both (see `failure`).
        self._halt = halt or Halt()
        self._halt.when_tripped(self.stop)
        # The passes under way, each kind on its own: a slow reconcile must not hold up due fires, nor a long
        # sweep skip a whole reconcile period.
        self._running: set[Callable[[], Coroutine[Any, Any, Any]]] = set()
        self._tasks: list[asyncio.Task[None]] = []

    # -- one pass --------------------------------------------------------------------------------------------

    async def sweep(self) -> SweepResult:
        """One pass: every due schedule (up to `batch`) becomes one job, and moves on."""
        result = SweepResult(enqueued=[], duplicates=[], missed=[])
        at = to_epoch_ms(await self.queue.now())
        failures: list[Exception] = []
        due = await self.queue.due_schedules(self.settings.batch)
        for schedule in due:
            try:
                await self._produce(schedule, at, result)
            except Exception as error:
                # One schedule that cannot fire must not starve the rest: it stays due (it is the oldest, so it
                # would head every later sweep too) and each sweep says so, naming it.
                logger.error(
                    "schedule of space %d, action %r could not fire at %s; the other due schedules go on and it is "
                    "tried again on the next sweep",
                    schedule.space_id,
                    schedule.action_id,
                    readable.instant(schedule.next_run_at),
                    exc_info=error,
                )
                failures.append(error)
        if failures and len(failures) == len(due):
            raise failures[0]  # nothing fired at all, the store itself may be down: the pass failed
        if self.on_error is not _log_error:
            for failure in failures:
                self.on_error(failure)
        return result

    async def _produce(self, schedule: Schedule, at: int, result: SweepResult) -> None:
        fire_at = schedule.next_run_at
        cron, timezone = schedule.cron, schedule.timezone
        lateness = max(fire_at, at)
        # Fires in (fire_at, lateness]: the ones that went by while nothing swept. The fire itself is the job.
        missed = cron_fires_between(cron, from_epoch_ms(fire_at), from_epoch_ms(lateness), timezone)
        # The first occurrence strictly after `lateness`, which (fires being whole minutes) is the first at or
        # after the minute following the one `lateness` falls in. Not `lateness + 1 minute`: `cron_next_fire`
        # rounds up to a whole minute, so a sweep seven seconds late would ask from 00:02:07, get 00:03, and
        # an every-minute schedule would fire every other minute.
        ask_from = (lateness // MINUTE_MS) * MINUTE_MS + MINUTE_MS
        next_fire = cron_next_fire(cron, from_epoch_ms(ask_from), timezone)
        to_at = to_epoch_ms(next_fire) if next_fire is not None else lateness + PARK_MS

        job_id = schedule_job_id(schedule.space_id, schedule.action_id, fire_at)
        created = await self.queue.enqueue(
            JobInput(
                id=job_id,
                space_id=schedule.space_id,
                action_id=schedule.action_id,
                environment=schedule.environment,
                trigger="schedule",
                input={},
                due_at=fire_at,
                max_attempts=schedule.max_attempts,
                missed=missed or None,
            )
        )
        (result.enqueued if created else result.duplicates).append(job_id)
        if created:
            self._emit(
                JobEvent(
                    kind=EventKind.FIRED,
                    job_id=job_id,
                    space_id=schedule.space_id,
                    action_id=schedule.action_id,
                    fire_at=fire_at,
                )
            )
        # Only after the job exists: a crash between the two leaves the schedule due, and the retry is a
        # no-op.
        moved = await self.queue.advance_schedule(
            space_id=schedule.space_id,
            action_id=schedule.action_id,
            from_at=fire_at,
            to_at=to_at,
            missed=missed,
        )
        # Another replica that advanced it first reports the misses it moved past; counting them here too
        # would report one outage once per replica.
        if moved and missed > 0:
            result.missed.append(MissedFires(space_id=schedule.space_id, action_id=schedule.action_id, count=missed))
            self._emit(
                JobEvent(
                    kind=EventKind.MISSED,
                    job_id=job_id,
                    space_id=schedule.space_id,
                    action_id=schedule.action_id,
                    fire_at=fire_at,
                    count=missed,
                )
            )

    # -- reconciling rows with the actions -------------------------------------------------------------------

    async def reconcile(self, space_id: int) -> None:
        """Re-derives one space's schedules from its actions. Call it whenever they change."""
        entries = await self.lookups.list_actions(space_id)
        at = await self.queue.now()
        schedules: dict[str, ScheduleInput] = {}
        for entry in entries:
            schedule, problem = read_schedule(
                entry, space_id, self.settings.environment, at, self.settings.max_attempts
            )
            if schedule is not None and schedule.action_id in schedules:
                schedule, problem = None, "the action is listed twice; the first one listed is kept"
            if schedule is not None:
                schedules[schedule.action_id] = schedule
            elif problem is not None:
                # The others are reconciled all the same; this one has no schedule row (an existing one is
                # removed) until its action is fixed, and says so every reconcile.
                logger.warning(
                    "space %d, action %r: its schedule is skipped and will not fire: %s",
                    space_id,
                    str(entry.id)[:ID_SHOWN],
                    problem,
                )
        await self.queue.put_schedules(space_id=space_id, schedules=list(schedules.values()))

    async def _scheduled_spaces(self) -> list[int]:
        listed = getattr(self.lookups, "list_scheduled_spaces", None)
        if listed is not None:
            return list(await listed())
        return list(self.settings.spaces or [])

    async def _reconcile_all(self) -> None:
        for space_id in await self._scheduled_spaces():
            # One space whose actions cannot be read must not keep every other space's schedules stale.
            try:
                await self.reconcile(space_id)
            except SchemaMismatchError:
                raise  # not this space's: no space can be reconciled (`_guarded` stops the scheduler)
            except Exception as error:
                self.on_error(error)

    # -- the timers ------------------------------------------------------------------------------------------

    async def _guarded(self, run: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """One pass of each kind at a time per replica: a sweep that outlives its interval must not have another
        land on top (a reconcile may run beside it)."""
        if run in self._running:
            return
        self._running.add(run)
        try:
            await run()
        except SchemaMismatchError as error:  # no later pass can succeed: stop, saying so once
            reported = None if self.on_error is _log_error else self.on_error
            self._halt.trip(error, logger, "the scheduler stops sweeping", reported)
        except Exception as error:
            self.on_error(error)
        finally:
            self._running.discard(run)

    async def _bounded_sweep(self) -> None:
        """A timed sweep, abandoned (safe: a fire is enqueued before its schedule moves) when it outlives
        `SWEEP_BOUND_S`: one stuck on a connection gone silent would hold this replica's every later sweep."""
        timer = asyncio.timeout(SWEEP_BOUND_S)
        try:
            async with timer:
                await self.sweep()
        except TimeoutError:
            if not timer.expired():
                raise
            raise StoreUnavailableError(
                f"a schedule sweep did not finish within {SWEEP_BOUND_S:g} s; abandoned it (a connection gone silent?)"
            ) from None

    async def _every(self, interval_ms: int, run: Callable[[], Coroutine[Any, Any, Any]], now: bool) -> None:
        if now:
            await self._guarded(run)
        while True:
            await asyncio.sleep(interval_ms / 1000)
            await self._guarded(run)

    def start(self) -> None:
        """Sweeps every `poll_ms` (plus up to a second of jitter, so replicas started together spread out) and
        reconciles the known spaces every `reconcile_ms`. Call it inside a running event loop."""
        if self._tasks or self._halt.error is not None:
            return
        interval = self.settings.poll_ms + int(random.random() * 1000)
        self._tasks.append(asyncio.create_task(self._every(interval, self._bounded_sweep, False)))
        if getattr(self.lookups, "list_scheduled_spaces", None) is None and not self.settings.spaces:
            logger.warning(
                "schedules are running but nothing says which spaces to watch: pass `spaces`, or give the "
                "lookups a `list_scheduled_spaces()`; until then only reconcile(space_id) calls update them"
            )
            return
        self._tasks.append(asyncio.create_task(self._every(self.settings.reconcile_ms, self._reconcile_all, True)))

    @property
    def running(self) -> bool:
        """Whether `start()`'s timers run (they end with `stop()`, or when the store refuses its tables)."""
        return bool(self._tasks)

    @property
    def failure(self) -> SchemaMismatchError | None:
        """Why the scheduler stopped sweeping for good: the store refused its tables (logged once at ERROR, with
        the fix). None while it may sweep."""
        return self._halt.error

    def stop(self) -> None:
        """Cancels the timers. A pass cut short is safe: a fire is enqueued before its schedule moves."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()


def create_scheduler(*, queue: JobQueue, lookups: ActionLookups, **options: Unpack[SchedulerOptions]) -> Scheduler:
    """A leaderless producer of scheduled jobs; every replica may run one. Options and defaults: `SchedulerSettings`.

    `on_event` receives a `JobEvent` for each fire it enqueues and each run of missed fires it moves past (see
    `plitzi_jobs_mysql.contract.events`)."""
    return Scheduler(queue=queue, lookups=lookups, **options)
