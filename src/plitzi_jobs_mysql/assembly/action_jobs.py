"""The assembly: a producer, a consumer and the store they meet in.

Both halves run in EVERY replica by default, and neither needs to know about the others. The producer is safe
to duplicate because a fire's job id is the fire's own instant; the consumer is safe to duplicate because a
claim is atomic. What a deployment tunes is how many jobs each replica carries (`workers`) and whether it
produces at all: a pod dedicated to running jobs sets `produce=False`, a pod serving pages sets `workers=0`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Unpack

from ..contract.protocols import JobQueue, KvStore
from ..errors import SchemaMismatchError
from ..memory import create_memory_job_queue
from ..runtime.halt import Halt
from ..runtime.options import ActionJobsOptions, split_action_jobs_options
from ..runtime.scheduler import Scheduler
from ..runtime.schedules import ActionLookups
from ..runtime.worker import JobHandler, JobWorker

logger = logging.getLogger("plitzi_jobs_mysql.jobs")


@dataclass(eq=False)
class ActionJobs:
    """`.queue`, `.scheduler` and `.worker`, started and stopped together."""

    queue: JobQueue
    scheduler: Scheduler
    worker: JobWorker
    produce: bool = True

    def start(self) -> None:
        """Starts the sweep (when producing) and the worker. Call it inside a running event loop."""
        if self.produce:
            self.scheduler.start()
        self.worker.start()

    async def stop(self) -> None:
        """Stops producing, then lets the worker finish what it is running (see `JobWorker.stop`)."""
        self.scheduler.stop()
        await self.worker.stop()

    @property
    def failure(self) -> SchemaMismatchError | None:
        """Why the worker and the scheduler stopped for good: the store refused its tables (logged once at
        ERROR, naming the fix; `stop()` still returns). None while they run."""
        return self.worker.failure or self.scheduler.failure


def create_action_jobs(
    *,
    lookups: ActionLookups,
    handler: JobHandler,
    queue: JobQueue | None = None,
    kv: KvStore | None = None,
    produce: bool = True,
    **options: Unpack[ActionJobsOptions],
) -> ActionJobs:
    """Scheduler and worker over one queue. Built, not started: whoever owns the process calls `start()`.

    `options` are the worker's (`WorkerOptions`) and the scheduler's (`SchedulerOptions`, its `poll_ms` named
    `schedule_poll_ms` here), passed through unchanged; `on_error` and `on_event` go to both.
    """
    scheduler_options, worker_options = split_action_jobs_options(options)
    if queue is None:
        # Said out loud because the failure is invisible: everything works, and the nightly email goes out
        # once per replica.
        logger.warning(
            "action jobs are using the in-memory queue, which is right for ONE replica only: with more, each "
            "keeps its own schedules and jobs. Pass a shared queue (create_mysql_job_queue) to run several."
        )
        queue = create_memory_job_queue()
    halt = Halt()  # tables the store refuses stop both halves, said once
    scheduler = Scheduler(queue=queue, lookups=lookups, halt=halt, **scheduler_options)
    worker = JobWorker(queue=queue, handler=handler, kv=kv, halt=halt, **worker_options)
    return ActionJobs(queue=queue, scheduler=scheduler, worker=worker, produce=produce)
