"""What the tests share: a clock they move, a job with plain defaults, handlers and queues that let a test see
and steer a run, and ways to wait for a condition or a public signal (never a fixed sleep)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest

from plitzi_jobs_mysql.contract.events import EventKind, JobEvent
from plitzi_jobs_mysql.contract.protocols import JobQueue
from plitzi_jobs_mysql.records import Job, JobInput
from plitzi_jobs_mysql.testing.support import eventually

__all__ = [
    "Clock",
    "Events",
    "Gate",
    "PlainQueue",
    "Proxy",
    "T",
    "eventually",
    "job",
    "records",
    "wait_for",
    "wait_for_job",
    "wait_until",
]

#: An instant the tests' clocks start at (2023-11-14T22:13:20Z).
T = 1_700_000_000_000
WAIT_S = 10.0  # room for a busy machine; a passing test never waits this long


class Clock:
    """An injectable epoch-ms clock that moves only when a test moves it."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    async def advance(self, ms: int) -> None:
        """The contract's `advance` for a queue built over this clock."""
        self.now += ms

    async def rewind(self, ms: int) -> None:
        """`ClockStepContract`'s `rewind`: the clock stepping back."""
        self.now -= ms


def job(id: str = "job-1", **fields: Any) -> JobInput:
    """A job due since the epoch with plain defaults; `fields` override any of them."""
    values: dict[str, Any] = {
        "space_id": 1,
        "action_id": "act",
        "environment": "main",
        "trigger": "t",
        "input": {},
        "due_at": 0,
        "max_attempts": 3,
    }
    values.update(fields)
    return JobInput(id=id, **values)


async def wait_for(
    condition: Callable[[], Any],
    within: float = WAIT_S,
    what: str = "the condition",
    *,
    every: float = 0.005,
    detail: Callable[[], str] | None = None,
) -> Any:
    """Until `condition()` (plain or async) answers something truthy, which is returned; checked every `every`
    seconds, or fails after `within` saying what never happened (and `detail()`, e.g. the replicas' logs)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise AssertionError(f"{what} did not happen within {within:g} s" + (f"\n{detail()}" if detail else ""))
        await asyncio.sleep(every)


def wait_until(condition: Callable[[], Any], what: str, within: float = 30.0, every: float = 0.05) -> Any:
    """`wait_for` for code outside an event loop (a fixture starting servers): sleeps between the checks."""
    deadline = time.monotonic() + within
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within:g} s")
        time.sleep(every)
    return value


async def wait_for_job(queue: JobQueue, job_id: str, *statuses: str, within: float = WAIT_S) -> Job:
    """The job, once it is in one of `statuses`."""
    return await eventually(
        lambda: queue.get_job([1], job_id),
        lambda found: found is not None and found.status in statuses,
        f"job {job_id!r} reaching {statuses}",
    )


def records(caplog: pytest.LogCaptureFixture, level: int, logger: str = "plitzi_jobs_mysql.worker") -> list[Any]:
    """The log records of `logger` at exactly `level`."""
    return [r for r in caplog.records if r.name == logger and r.levelno == level]


class Events:
    """An `on_event` hook keeping what it saw, and a public signal to wait on: `await events.seen(kind, job)`."""

    def __init__(self) -> None:
        self.seen_events: list[JobEvent] = []
        self._changed = asyncio.Event()

    def __call__(self, event: JobEvent) -> None:
        self.seen_events.append(event)
        self._changed.set()

    def of(self, job_id: str) -> list[str]:
        return [e.kind.value for e in self.seen_events if e.job_id == job_id]

    def count(self, kind: EventKind, job_id: str | None = None) -> int:
        return sum(1 for e in self.seen_events if e.kind is kind and job_id in (None, e.job_id))

    async def seen(self, kind: EventKind, job_id: str | None = None, times: int = 1) -> JobEvent:
        """Waits until `kind` was emitted `times` times (for `job_id`, if given); answers the last one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + WAIT_S
        while self.count(kind, job_id) < times:
            self._changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"no {times} x {kind.value} of {job_id!r} within {WAIT_S:g} s: {self.seen_events}")
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                continue
        return [e for e in self.seen_events if e.kind is kind and job_id in (None, e.job_id)][times - 1]


class Gate:
    """A handler that blocks until released, recording what it saw and how many ran at once."""

    def __init__(self, result: Callable[[Job], Any] = lambda job: f"run-{job.id}") -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.cancelled: list[str] = []
        self.running = 0
        self.most = 0
        self._result = result

    async def __call__(self, job: Job) -> Any:
        self.started.append(job.id)
        self.tasks.append(asyncio.current_task())
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled.append(job.id)
            raise
        finally:
            self.running -= 1
        return self._result(job)


class Proxy:
    """A queue that forwards everything it is asked (capabilities included, where the inner queue has them),
    recording each call, with a hook awaited before chosen methods."""

    def __init__(self, inner: Any, **before: Callable[..., Awaitable[None]]) -> None:
        self.inner = inner
        self.before = before
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not callable(target):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            if name in self.before:
                await self.before[name](*args, **kwargs)
            return await target(*args, **kwargs)

        return call

    def called(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for called, kwargs in self.calls if called == name]


class PlainQueue:
    """Only the `JobQueue` protocol of a queue, none of its capabilities: what a user's own store may be, so the
    worker takes its plain paths (one settle per job, no wake-ups)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    METHODS = frozenset(name for name in vars(JobQueue) if not name.startswith("_"))

    def __getattr__(self, name: str) -> Any:
        if name not in self.METHODS:
            raise AttributeError(name)
        return getattr(self._inner, name)


def ids(jobs: Sequence[Job]) -> list[str]:
    return [j.id for j in jobs]


class Ledger:
    """A handler keeping (action, start, end) of every run, by the monotonic clock, and the most running at once
    per action: a job of the action `limited` runs 20 ms, any other 1 ms."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, float, float]] = []
        self.running: dict[str, int] = {}
        self.most: dict[str, int] = {}

    async def handler(self, job: Job) -> None:
        action = job.action_id
        self.running[action] = self.running.get(action, 0) + 1
        self.most[action] = max(self.most.get(action, 0), self.running[action])
        start = time.monotonic()
        await asyncio.sleep(0.02 if action == "limited" else 0.001)
        self.running[action] -= 1
        self.runs.append((action, start, time.monotonic()))
