"""How a run's outcome reaches the store: each outcome its own settle (`InlineCompleter`), or, with a queue that
settles many succeeded jobs at once, successes written together (`BatchCompleter`). Every settle carries the
claim's instant, so a settle retried after the job was claimed again lands on nothing."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final, Protocol

from ..contract.capabilities import SettlesSucceeded
from ..contract.protocols import JobQueue
from ..records import AttemptOutcome, Job, SucceededJob
from .options import ErrorHandler
from .settles import SucceededSettles
from .store_calls import MIN_CALL_BOUND_S, bounded, call_bound_s, logger

#: Settlements after which nobody claims the job again (unless an operator requeues it).
FINISHED: Final = frozenset({"succeeded", "dead", "cancelled"})
#: A settle the store refused is tried again after this, doubling up to the ceiling, while the lease holds.
SETTLE_RETRY_FIRST_S: Final = 0.05
SETTLE_RETRY_MAX_S: Final = 2.0


@dataclass(frozen=True, slots=True)
class Outcome:
    """What becomes of a job: its new `status`, the attempt recorded (None: a hand-back, which is refunded)."""

    status: str
    attempt: str | None = None
    error: str | None = None
    run_id: str | None = None
    delay_ms: int | None = None

    @property
    def final(self) -> bool:
        """Settled for good (succeeded, dead, cancelled): nobody claims the job again soon."""
        return self.status in FINISHED


class Completer(Protocol):
    async def complete(self, job: Job, outcome: Outcome, *, urgent: bool) -> None:
        """Writes `outcome` for the claim `job` was handed out by, retried while its lease could hold; returns
        once written or given up on (then the lease hands the job on). `urgent`: the worker is stopping."""
        ...

    def hurry(self) -> None:
        """Write what waits now (the worker is stopping)."""
        ...


class InlineCompleter:
    """Each outcome in its own `settle`."""

    def __init__(self, queue: JobQueue, *, worker_id: str, lease_ms: int, on_error: ErrorHandler) -> None:
        self._queue = queue
        self._worker_id = worker_id
        self._lease_ms = lease_ms
        self._on_error = on_error

    def hurry(self) -> None:
        return None  # nothing waits

    async def complete(self, job: Job, outcome: Outcome, *, urgent: bool) -> None:
        attempt = None
        if outcome.attempt is not None:
            attempt = AttemptOutcome(
                status=outcome.attempt, worker_id=self._worker_id, run_id=outcome.run_id, error=outcome.error
            )
        # A store that is briefly down (a restart, a failover) must not cost a second run of a job that is done:
        # the settle is tried again while the lease could still hold, and the heartbeat keeps renewing it
        # meanwhile. Past that another worker may have taken the job, and a late settle is ignored anyway.
        loop = asyncio.get_running_loop()
        give_up_at = loop.time() + self._lease_ms / 1000
        pause = SETTLE_RETRY_FIRST_S
        failures = 0
        while True:
            try:
                # Bounded by what is left of the lease, not a third of it: a slow settle that would still land in
                # time is never given up on; one on a silent connection no longer holds the slot for ever.
                await bounded(
                    "a settle",
                    self._queue.settle(
                        job_id=job.id,
                        worker_id=self._worker_id,
                        status=outcome.status,
                        delay_ms=outcome.delay_ms,
                        run_id=outcome.run_id,
                        error=outcome.error,
                        attempt=attempt,
                        claimed_at=job.claimed_at,
                    ),
                    max(give_up_at - loop.time(), MIN_CALL_BOUND_S),
                )
                return
            except Exception as failure:
                failures += 1
                if failures == 1:
                    self._on_error(failure)
                if loop.time() + pause >= give_up_at:
                    logger.warning(
                        "could not settle job %s after %d tries; its lease will hand it to another worker",
                        job.id,
                        failures,
                    )
                    return
            await asyncio.sleep(pause)
            pause = min(pause * 2, SETTLE_RETRY_MAX_S)


class BatchCompleter(InlineCompleter):
    """Successes go together (`SucceededSettles`: group commit, one `settle_succeeded` per batch); every other
    outcome, and each job of a batch that failed, in its own `settle`."""

    def __init__(
        self, queue: SettlesSucceeded, fallback: JobQueue, *, worker_id: str, lease_ms: int, on_error: ErrorHandler
    ) -> None:
        super().__init__(fallback, worker_id=worker_id, lease_ms=lease_ms, on_error=on_error)
        bound = call_bound_s(lease_ms)

        async def settle_many(jobs: list[SucceededJob]) -> None:
            await bounded("a settle", queue.settle_succeeded(worker_id=worker_id, jobs=jobs), bound)

        self._batches = SucceededSettles(settle_many, on_error)

    def hurry(self) -> None:
        self._batches.hurry()

    async def complete(self, job: Job, outcome: Outcome, *, urgent: bool) -> None:
        if outcome.status == "succeeded" and outcome.attempt == "succeeded" and outcome.error is None:
            item = SucceededJob(job_id=job.id, run_id=outcome.run_id, claimed_at=job.claimed_at)
            if await self._batches.settle(item, urgent=urgent) is None:
                return
            # The batch failed (and was reported): this job alone, retried while its lease holds, as any settle.
            # A row the batch did write is not written twice: the holder guard no longer matches it.
        await super().complete(job, outcome, urgent=urgent)


def completer_for(queue: JobQueue, *, worker_id: str, lease_ms: int, on_error: ErrorHandler) -> Completer:
    """The batching completer where the queue offers `SettlesSucceeded`, else one settle per outcome."""
    if isinstance(queue, SettlesSucceeded):
        return BatchCompleter(queue, queue, worker_id=worker_id, lease_ms=lease_ms, on_error=on_error)
    return InlineCompleter(queue, worker_id=worker_id, lease_ms=lease_ms, on_error=on_error)
