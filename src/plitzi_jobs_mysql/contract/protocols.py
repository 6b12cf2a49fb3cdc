"""What every store keeps: the `JobQueue` and `KvStore` protocols, each method with the rule it promises.

The memory stores and the MySQL adapters are two implementations of one contract; `plitzi_jobs_mysql.testing`
runs the same suite (`JobQueueContract`, `KvContract`) against both, and against a user's own store.

Rules for every method: instants are integer epoch milliseconds of the STORE's clock, never the caller's.
Text has bounds (`id`, `action_id`, `key`, `worker_id`, `run_id`, `cron` at most 191 characters; `environment`,
`trigger`, `timezone` 64; a job's `input` JSON-serialisable, else `TypeError`, and at most 16 MiB encoded): out of
bounds raises `ValueError` before anything is written, in every store alike. A method taking `space_ids` answers
nothing (empty, None, False) for an empty list.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from ..records import AttemptOutcome, FinishedCount, Job, JobInput, JobPage, QueueStats, Schedule, ScheduleInput


@runtime_checkable
class JobQueue(Protocol):
    """A durable queue of jobs and the cron schedules that produce them, shared by every replica."""

    async def now(self) -> datetime:
        """The store's clock, timezone-aware UTC: every instant the queue writes or compares comes from it."""
        ...

    async def enqueue(self, job: JobInput) -> bool:
        """Idempotent by `id`: the first call creates a `pending` job (`run_at = due_at`, `attempts = 0`, empty
        history) and answers True; any later call with that id changes nothing and answers False, however many
        race."""
        ...

    async def enqueue_many(self, jobs: Sequence[JobInput]) -> list[bool]:
        """`enqueue`'s rule for a batch, answered per job in order, in a handful of round trips. `jobs` is a
        sequence (a list or tuple); anything else, a generator included, is a `TypeError` and nothing is written."""
        ...

    async def claim(self, *, worker_id: str, lease_ms: int, limit: int) -> list[Job]:
        """Takes up to `limit` jobs that are `pending` with `run_at <= now`, or `running` with a lapsed lease,
        oldest `run_at` first (concurrent claimers may spread over the oldest few). Each becomes `running`,
        `attempts + 1`, held by `worker_id` until `now + lease_ms`. A lapsed job gets a `lost` attempt (worker:
        the old holder) and, when it had used `max_attempts`, becomes `dead` instead. Two claimers never receive
        the same job; the cost does not grow with the number of waiting jobs. Each claim sets the job's
        `claimed_at` to its instant, always later than the job's previous claim (even within a millisecond)."""
        ...

    async def heartbeat(self, *, job_ids: Sequence[str], worker_id: str, lease_ms: int) -> list[str]:
        """Renews the lease of each listed job `worker_id` holds and that is running; answers the ids among them
        an operator asked to cancel. Renews nothing for a worker that does not hold the job."""
        ...

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
        """Ignored unless `worker_id` still holds the job (a lapsed lease nobody took over still counts) and, when
        `claimed_at` is given, holds it by that claim (`Job.claimed_at` of the claim's answer): a settle of an
        earlier claim is ignored, even from the same worker. Appends `attempt` if given (numbered history length
        + 1, started at the claim, ended now); sets status, error and run_id (kept if None); clears the lease.
        `status='pending'` retries at `now + delay_ms`, clears `worker_id` and, with no attempt reported (a
        hand-back of a job never started), refunds the attempt."""
        ...

    async def due_schedules(self, limit: int) -> list[Schedule]:
        """Enabled schedules with `next_run_at <= now`, oldest first."""
        ...

    async def advance_schedule(self, *, space_id: int, action_id: str, from_at: int, to_at: int, missed: int) -> bool:
        """Compare-and-set: moves `next_run_at` from `from_at` to `to_at`, sets `last_fire_at = from_at`, adds
        `missed`; True only for the one caller that moved it."""
        ...

    async def put_schedules(self, *, space_id: int, schedules: Sequence[ScheduleInput]) -> None:
        """Makes the space's schedules exactly `schedules` (never touching another space's). One whose cron,
        zone and environment are unchanged keeps its `next_run_at`, `missed` and `last_fire_at`, unless it goes
        from disabled to enabled. A schedule of another space is a `ValueError`. Concurrent writers of one space
        leave one writer's set, never a mix."""
        ...

    async def list_jobs(
        self,
        *,
        space_ids: Sequence[int],
        action_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage:
        """Jobs of those spaces, newest `updated_at` first; `total` counts every match."""
        ...

    async def get_job(self, space_ids: Sequence[int], job_id: str) -> Job | None:
        """The job, or None when it is in none of the listed spaces."""
        ...

    async def list_schedules(self, space_ids: Sequence[int]) -> list[Schedule]:
        """The schedules of those spaces."""
        ...

    async def requeue(self, space_ids: Sequence[int], job_id: str) -> bool:
        """A finished job (terminal status) goes back to `pending` now with `attempts = 0`, history kept, error,
        lease, worker and cancel flag cleared. False for anything else."""
        ...

    async def cancel(self, space_ids: Sequence[int], job_id: str) -> bool:
        """A `pending` job becomes `cancelled`; a `running` one gets `cancel_requested` (its worker hears it on
        the next heartbeat; asked again, it answers True and changes nothing, `updated_at` included). False for
        anything else."""
        ...

    async def cancel_pending(self, *, space_id: int, key: str, older_than: str | None = None) -> int:
        """Cancels the space's `pending` jobs carrying `key`; with `older_than`, only those enqueued before that
        job (by enqueue order; an unknown id cancels nothing). Running jobs are untouched. Answers how many."""
        ...


@runtime_checkable
class OperatorReads(Protocol):
    """What an operator's view reads beyond `JobQueue`. Both stores here have it; the dashboard draws its overview
    from it when the queue it is given does (a user's own store may leave it out)."""

    async def stats(self, *, space_ids: Sequence[int] | None = None) -> QueueStats:
        """Per space and action: jobs by status, due pending jobs, the oldest due one, lapsed leases (None: every
        space)."""
        ...

    async def finished_counts(
        self, *, space_ids: Sequence[int] | None, since: int, until: int, bucket_ms: int = 3_600_000
    ) -> list[FinishedCount]:
        """Jobs that finished (a terminal status) at an instant in `[since, until)`, counted per space, action,
        status and bucket (`bucket_at` = the instant rounded down to a multiple of `bucket_ms`), ordered by bucket,
        space, action and status; groups with no job are left out. A finished job counts at the instant it
        finished; one requeued since counts no more. `space_ids=None`: every space."""
        ...


@runtime_checkable
class KvStore(Protocol):
    """Strings by key, compared byte for byte; a key past its lifetime (by the store's clock) answers nothing."""

    async def get(self, key: str) -> str | None:
        """The live value, or None."""
        ...

    async def set(self, key: str, value: str, ttl_seconds: float | None = None) -> None:
        """Replaces value and lifetime (`ttl_seconds` > 0, may be a float; None: no lifetime)."""
        ...

    async def delete(self, key: str) -> None:
        """Removes the key, if there."""
        ...

    async def increment(self, key: str, amount: int = 1) -> int:
        """Atomic; a missing or lapsed key counts from 0 (losing its old lifetime), a live one keeps its lifetime.
        Answers the new value; a live value that is not an integer is a `ValueError` and stays as it was.

        An integer here is an optional '-' and 1 to 19 ASCII digits, nothing else (no sign '+', no spaces, no line
        break), from -2**63 to 2**63 - 1; a new value outside that range is a `ValueError` too, the value left as
        it was. `amount` is an int from -(2**63 - 1) to 2**63 - 1."""
        ...

    async def expire(self, key: str, ttl_seconds: float) -> None:
        """Gives a live key a lifetime; does nothing for a missing key."""
        ...

    async def swap(self, key: str, expected: str | None, value: str, ttl_seconds: float | None = None) -> bool:
        """Compare-and-set on the exact value (`expected=None`: only if absent, a lapsed key being absent); writing
        back the same value counts. Exactly one of many racing writers wins. The value gets `ttl_seconds`."""
        ...
