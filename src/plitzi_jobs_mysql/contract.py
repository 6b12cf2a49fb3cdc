"""What every store keeps: the `JobQueue` and `KvStore` protocols.

The memory stores and the MySQL adapters are two implementations of one contract; the rules each method keeps
are written in API.md and proven by `plitzi_jobs_mysql.testing`, which runs the same suite against both.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from .records import AttemptOutcome, Job, JobInput, JobPage, Schedule, ScheduleInput


@runtime_checkable
class JobQueue(Protocol):
    async def now(self) -> datetime: ...

    async def enqueue(self, job: JobInput) -> bool: ...

    async def enqueue_many(self, jobs: Sequence[JobInput]) -> list[bool]: ...

    async def claim(self, *, worker_id: str, lease_ms: int, limit: int) -> list[Job]: ...

    async def heartbeat(self, *, job_ids: Sequence[str], worker_id: str, lease_ms: int) -> list[str]: ...

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
    ) -> None: ...

    async def due_schedules(self, limit: int) -> list[Schedule]: ...

    async def advance_schedule(
        self, *, space_id: int, action_id: str, from_at: int, to_at: int, missed: int
    ) -> bool: ...

    async def put_schedules(self, *, space_id: int, schedules: Sequence[ScheduleInput]) -> None: ...

    async def list_jobs(
        self,
        *,
        space_ids: Sequence[int],
        action_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage: ...

    async def get_job(self, space_ids: Sequence[int], job_id: str) -> Job | None: ...

    async def list_schedules(self, space_ids: Sequence[int]) -> list[Schedule]: ...

    async def requeue(self, space_ids: Sequence[int], job_id: str) -> bool: ...

    async def cancel(self, space_ids: Sequence[int], job_id: str) -> bool: ...

    async def cancel_pending(self, *, space_id: int, key: str, older_than: str | None = None) -> int: ...


@runtime_checkable
class KvStore(Protocol):
    async def get(self, key: str) -> str | None: ...

    async def set(self, key: str, value: str, ttl_seconds: float | None = None) -> None: ...

    async def delete(self, key: str) -> None: ...

    async def increment(self, key: str, amount: int = 1) -> int: ...

    async def expire(self, key: str, ttl_seconds: float) -> None: ...

    async def swap(self, key: str, expected: str | None, value: str, ttl_seconds: float | None = None) -> bool: ...
