"""What the contract suites share: building records, reading the store's clock, waiting for a condition, skipping
what a store does not offer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

import pytest

from ..contract.clock import to_epoch_ms
from ..contract.protocols import JobQueue
from ..records import Job, JobInput, ScheduleInput

T = TypeVar("T")
#: Moves a queue's clock on by at least the given milliseconds (the contract's `advance` fixture).
Advance = Callable[[int], Awaitable[None]]
WAIT_S = 10.0  # room for a busy machine; a passing test never waits this long


async def eventually(probe: Callable[[], Awaitable[T]], accept: Callable[[T], bool], what: str) -> T:
    """Polls until `accept(probe())`, or fails saying what never happened."""
    deadline = time.monotonic() + WAIT_S
    while True:
        value = await probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {WAIT_S}s (last: {value!r})")
        await asyncio.sleep(0.01)


def job(id: str = "job-1", *, space_id: int = 1, due_at: int = 0, max_attempts: int = 3, **fields: Any) -> JobInput:
    values: dict[str, Any] = {
        "action_id": "action-1",
        "environment": "main",
        "trigger": "manual",
        "input": {"n": 1},
    }
    values.update(fields)
    return JobInput(id=id, space_id=space_id, due_at=due_at, max_attempts=max_attempts, **values)


def schedule(action_id: str, *, space_id: int = 1, cron: str = "*/5 * * * *", **fields: Any) -> ScheduleInput:
    values: dict[str, Any] = {"environment": "main", "enabled": True, "next_run_at": 1_000, "max_attempts": 3}
    values.update(fields)
    return ScheduleInput(space_id=space_id, action_id=action_id, cron=cron, **values)


async def now_ms(queue: JobQueue) -> int:
    return to_epoch_ms(await queue.now())


async def claim_one(queue: JobQueue, worker: str = "w1", lease_ms: int = 60_000) -> Job:
    jobs = await queue.claim(worker_id=worker, lease_ms=lease_ms, limit=1)
    assert len(jobs) == 1, f"expected one job claimed, got {jobs}"
    return jobs[0]


def offers(store: object, capability: type) -> Any:
    """`store` as `capability`, or the test skipped: a capability is optional, its rules bind only the stores that
    offer it."""
    if not isinstance(store, capability):
        pytest.skip(f"the store does not offer {capability.__name__}")
    return store


def settled_fields(found: Job | None) -> tuple[Any, ...]:
    """What a settle writes, with the job's own id and instants set aside."""
    assert found is not None
    history = tuple(replace(a, started_at=0, ended_at=0) for a in found.history)
    return (found.status, found.attempts, found.run_id, found.error, found.lease_until, found.worker_id, history)


def real_time_advance(queue: JobQueue) -> Advance:
    """`advance` for a store whose clock only real time moves: waits until the store's clock has moved on."""

    async def advance(ms: int) -> None:
        target = await now_ms(queue) + ms
        await eventually(lambda: now_ms(queue), lambda now: now >= target, f"the store clock moving {ms} ms on")

    return advance
