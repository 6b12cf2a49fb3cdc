"""What a store may offer beyond its protocol, declared once: the worker asks `isinstance(store, Capability)` and
uses the faster path when the store has it, the plain `JobQueue`/`KvStore` calls when it does not.

The memory stores and the MySQL adapters both offer every capability here, so the worker runs the same paths in a
test on memory as in production on MySQL; `plitzi_jobs_mysql.testing`'s contract suites check each one's rule
against every store that offers it (a user's own store included).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..records import PausedAction, SucceededJob
from .wakeups import WakeupChannel


@runtime_checkable
class SettlesSucceeded(Protocol):
    """A queue that settles many succeeded jobs of one worker in one call."""

    async def settle_succeeded(self, *, worker_id: str, jobs: Sequence[SucceededJob]) -> None:
        """Per job exactly what `settle(job_id=..., worker_id=worker_id, status="succeeded", run_id=...,
        claimed_at=..., attempt=AttemptOutcome(status="succeeded", worker_id=worker_id, run_id=...))` writes,
        under the same holder guard: a job another claim holds, or one already settled, is left alone, and a
        repeat changes nothing. A job named twice is settled once."""
        ...


@runtime_checkable
class AnnouncesDueJobs(Protocol):
    """A queue that announces an enqueued job that is due now (`enqueue`, `enqueue_many`, `requeue`) on
    `wakeup_topic` of `wakeups`, so the workers listening there claim at once rather than at their next poll."""

    wakeups: WakeupChannel
    wakeup_topic: str


@runtime_checkable
class BulkOperations(Protocol):
    """A queue that changes every job of a space (or one action of it) in bounded batches (API.md Extensions)."""

    async def cancel_all(self, *, space_id: int, action_id: str | None = None) -> int:
        """Every pending job -> cancelled; every running one asked to stop (as `cancel`); answers how many changed."""
        ...

    async def retry_all(self, *, space_id: int, action_id: str | None = None, status: str = "dead") -> int:
        """Every job finished in `status` -> pending (as `requeue`); answers how many changed."""
        ...


@runtime_checkable
class Pausing(Protocol):
    """A queue whose claims skip the pending jobs of a paused space or action (API.md Extensions)."""

    async def pause(self, *, space_id: int, action_id: str | None = None) -> None:
        """Claims stop taking the scope's jobs (action_id None: the whole space's); running ones finish and
        settle, enqueues and schedules go on (their jobs wait). Pausing what is paused changes nothing."""
        ...

    async def resume(self, *, space_id: int, action_id: str | None = None) -> None:
        """That pause lifted (the whole space's does not lift an action's own); resuming what is not paused
        changes nothing."""
        ...

    async def list_paused(self, space_ids: Sequence[int]) -> list[PausedAction]:
        """The pauses of those spaces, by space, the whole space's first, then by action."""
        ...


@runtime_checkable
class CompletesIn(Protocol):
    """A queue that settles a job `succeeded` inside its caller's transaction (`connection=None`: in one of its own)."""

    async def complete_in(self, connection: Any, *, job_id: str, worker_id: str, run_id: str | None = None) -> None:
        """As `settle(status="succeeded", attempt=AttemptOutcome("succeeded", worker_id, run_id))` while
        `worker_id` holds the job; else `LeaseLostError` and nothing written."""
        ...

    def announce_due(self) -> None:
        """Wakes the queue's workers (after the caller's transaction that enqueued due jobs committed)."""
        ...


@runtime_checkable
class TakesAbsent(Protocol):
    """A kv that takes many absent keys in one call (a worker's single-flight keys for one claim)."""

    async def take_absent(self, pairs: Sequence[tuple[str, str]], ttl_seconds: float | None = None) -> list[bool]:
        """`swap(key, None, value, ttl_seconds)` for each `(key, value)` pair, answered per pair in order; a key
        given twice is a `ValueError` before anything is written."""
        ...


@runtime_checkable
class DeletesUnchanged(Protocol):
    """A kv that gives many keys back in one call, each only while it still holds the value paired with it."""

    async def delete_unchanged(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Deletes each key whose live value is exactly the one paired with it; leaves every other key alone."""
        ...
