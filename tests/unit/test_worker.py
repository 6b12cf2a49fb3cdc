"""The worker: slots, heartbeats, settlement, retries, cancels, single-flight and the drain on stop."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import plitzi_jobs_mysql.runtime.settles as settles_module
import plitzi_jobs_mysql.runtime.single_flight as single_flight
import plitzi_jobs_mysql.runtime.worker as worker_module
from plitzi_jobs_mysql.contract.events import EventKind, JobEvent
from plitzi_jobs_mysql.contract.protocols import JobQueue
from plitzi_jobs_mysql.memory import create_memory_job_queue, create_memory_kv, wall_clock_ms
from plitzi_jobs_mysql.mysql import create_mysql_job_queue
from plitzi_jobs_mysql.records import AttemptOutcome, Job, JobInput
from plitzi_jobs_mysql.runtime.worker import (
    HANDBACK_DELAY_MS,
    PermanentFailure,
    RetryLater,
    create_job_worker,
)

from ..conftest import Clock, sql

T = 1_700_000_000_000


class FixedRandom:
    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


class Proxy:
    """A queue that forwards everything, with a hook before chosen methods."""

    def __init__(self, inner: JobQueue, **before: Callable[..., Awaitable[None]]) -> None:
        self.inner = inner
        self.before = before
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, kwargs))
            if name in self.before:
                await self.before[name](*args, **kwargs)
            return await target(*args, **kwargs)

        return call


async def wait_for(condition: Callable[[], bool], within: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.005)


async def wait_for_job(queue: JobQueue, job_id: str, *statuses: str, within: float = 10.0) -> Job:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        job = await queue.get_job([1], job_id)
        if job is not None and job.status in statuses:
            return job
        if loop.time() > deadline:
            raise AssertionError(f"job {job_id} never reached {statuses}: {job}")
        await asyncio.sleep(0.005)


async def enqueue(queue: JobQueue, job_id: str, due_at: int = T, max_attempts: int = 3) -> None:
    await queue.enqueue(
        JobInput(
            id=job_id,
            space_id=1,
            action_id="act",
            environment="main",
            trigger="schedule",
            input={"n": 1},
            due_at=due_at,
            max_attempts=max_attempts,
        )
    )


class Gate:
    """A handler that blocks until released, recording what it saw."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.started: list[str] = []
        self.tasks: list[asyncio.Task[Any] | None] = []
        self.cancelled: list[str] = []
        self.running = 0
        self.most = 0

    async def __call__(self, job: Job) -> str | None:
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
        return f"run-{job.id}"


def fixed_queue() -> tuple[Clock, JobQueue]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


# -- success, slots, tasks -------------------------------------------------------------------------------------


async def test_a_handler_that_returns_settles_succeeded_with_its_run_id() -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a")
    seen: list[Job] = []

    async def handler(job: Job) -> str:
        seen.append(job)
        return "run-1"

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    assert await worker.poll() == 1
    job = await wait_for_job(queue, "a", "succeeded")
    await worker.stop()
    assert seen[0].input == {"n": 1}
    assert job.run_id == "run-1"
    assert job.attempts == 1
    [attempt] = job.history
    assert (attempt.status, attempt.worker_id, attempt.run_id, attempt.attempt) == ("succeeded", "w1", "run-1", 1)
    assert worker.in_flight() == 0


async def test_no_more_than_workers_handlers_run_and_claims_ask_only_for_free_slots() -> None:
    _, base = fixed_queue()
    for i in range(5):
        await enqueue(base, f"j{i}")
    queue = Proxy(base)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, workers=2, worker_id="w1")
    assert await worker.poll() == 2
    await wait_for(lambda: gate.running == 2)
    assert worker.in_flight() == 2
    assert await worker.poll() == 0  # no free slot: the store is not even asked
    claims = [kw["limit"] for name, kw in queue.calls if name == "claim"]
    assert claims == [2]
    # Each handler runs in a task of its own.
    assert len({id(t) for t in gate.tasks}) == 2
    assert asyncio.current_task() not in gate.tasks
    gate.release.set()
    await wait_for(lambda: worker.in_flight() == 0)
    await wait_for(lambda: not worker._held)
    assert await worker.poll() == 2
    await worker.stop()
    assert gate.most == 2
    assert [kw["limit"] for name, kw in queue.calls if name == "claim"] == [2, 2]


async def test_a_handler_that_returned_frees_its_slot_while_its_settle_is_written_up_to_workers_of_them() -> None:
    _, base = fixed_queue()
    for name in ("a", "b", "c"):
        await enqueue(base, name)
    writing = asyncio.Event()
    settles: list[str] = []

    async def slow_settle(**kwargs: Any) -> None:
        settles.append(kwargs["job_id"])
        await writing.wait()

    ran: list[str] = []

    async def handler(job: Job) -> str | None:
        ran.append(job.id)
        return None

    worker = create_job_worker(queue=Proxy(base, settle=slow_settle), handler=handler, workers=1, worker_id="w1")
    assert await worker.poll() == 1
    await wait_for(lambda: settles == ["a"])
    assert worker.in_flight() == 0 and len(worker._held) == 1  # still held (its lease renewed) until settled
    assert await worker.poll() == 1  # its slot runs the next job meanwhile
    await wait_for(lambda: settles == ["a", "b"])
    assert await worker.poll() == 0  # no more than `workers` settles stand in for running handlers
    assert ran == ["a", "b"]
    writing.set()
    await wait_for(lambda: not worker._held)
    assert [j.status for j in [await base.get_job([1], n) for n in "ab"] if j] == ["succeeded", "succeeded"]
    assert await worker.poll() == 1
    await worker.stop()
    assert ran == ["a", "b", "c"]


async def test_a_claim_asks_for_exactly_the_free_slots() -> None:
    _, base = fixed_queue()
    await enqueue(base, "first")
    queue = Proxy(base)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, workers=3, worker_id="w1")
    assert await worker.poll() == 1
    for i in range(4):
        await enqueue(base, f"j{i}")
    assert await worker.poll() == 2
    assert [kw["limit"] for name, kw in queue.calls if name == "claim"] == [3, 2]
    assert worker.in_flight() <= 3
    gate.release.set()
    await worker.stop()


async def test_the_timed_loop_drains_the_queue_within_the_slot_limit() -> None:
    _, queue = fixed_queue()
    for i in range(8):
        await enqueue(queue, f"j{i}")
    running = 0
    most = 0

    async def handler(job: Job) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    worker = create_job_worker(queue=queue, handler=handler, workers=3, poll_ms=20, worker_id="w1")
    worker.start()
    try:
        for i in range(8):
            await wait_for_job(queue, f"j{i}", "succeeded")
    finally:
        await worker.stop()
    assert most == 3


async def test_workers_zero_claims_nothing() -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a")
    worker = create_job_worker(queue=queue, handler=Gate(), workers=0)
    assert await worker.poll() == 0
    worker.start()
    await worker.stop()
    job = await queue.get_job([1], "a")
    assert job is not None and job.status == "pending"


# -- failures and retries --------------------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_ceiling_plus_bounded_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    worker = create_job_worker(queue=create_memory_job_queue(), handler=Gate())
    monkeypatch.setattr(worker_module, "random", FixedRandom(0.5))
    assert [worker.backoff_ms(n) for n in (1, 2, 3, 4)] == [45_000, 75_000, 135_000, 255_000]
    assert worker.backoff_ms(6) == 900_000 + 15_000  # 960 000 capped at the ceiling
    assert worker.backoff_ms(60) == 900_000 + 15_000
    monkeypatch.setattr(worker_module, "random", FixedRandom(0.0))
    assert worker.backoff_ms(1) == 30_000
    monkeypatch.setattr(worker_module, "random", FixedRandom(0.9999999999))
    assert worker.backoff_ms(1) == 30_000 + 29_999  # jitter stays below min(d, 30 000)
    small = create_job_worker(queue=create_memory_job_queue(), handler=Gate(), backoff_base_ms=1_000)
    assert small.backoff_ms(1) == 1_000 + 999  # jitter bounded by d itself when d < 30 s
    assert small.backoff_ms(3) == 4_000 + 3_999


async def test_a_failing_handler_is_retried_with_backoff_then_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "random", FixedRandom(0.5))
    clock, queue = fixed_queue()
    await enqueue(queue, "a", max_attempts=3)

    async def handler(job: Job) -> None:
        raise ValueError(f"broken on attempt {job.attempts}")

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    expected_delays = [30_000 + 15_000, 60_000 + 15_000]
    for attempt, delay in enumerate(expected_delays, start=1):
        assert await worker.poll() == 1
        job = await wait_for_job(queue, "a", "pending")
        await wait_for(lambda: not worker._held)
        assert job.attempts == attempt
        assert job.run_at == clock.now + delay
        assert job.error == f"ValueError: broken on attempt {attempt}"
        assert await worker.poll() == 0  # not before its delay
        clock.now = job.run_at
    assert await worker.poll() == 1
    job = await wait_for_job(queue, "a", "dead")
    await worker.stop()
    assert job.attempts == 3
    assert [a.status for a in job.history] == ["failed", "failed", "failed"]
    assert job.history[-1].error == "ValueError: broken on attempt 3"


async def test_permanent_failure_is_dead_at_once_with_its_message() -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a", max_attempts=5)

    async def handler(job: Job) -> None:
        raise PermanentFailure("the template is gone")

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    await worker.poll()
    job = await wait_for_job(queue, "a", "dead")
    await worker.stop()
    assert job.error == "the template is gone"
    assert [(a.status, a.error) for a in job.history] == [("failed", "the template is gone")]


async def test_a_bare_permanent_failure_and_an_empty_run_id_still_settle() -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a")
    await enqueue(queue, "b")

    async def handler(job: Job) -> str:
        if job.id == "a":
            raise PermanentFailure()
        return ""

    worker = create_job_worker(queue=queue, handler=handler)
    await worker.poll()
    a = await wait_for_job(queue, "a", "dead")
    b = await wait_for_job(queue, "b", "succeeded")
    await worker.stop()
    assert a.error == "PermanentFailure"
    assert b.run_id is None


async def test_retry_later_refunds_the_attempt_and_waits_its_delay() -> None:
    clock, queue = fixed_queue()
    await enqueue(queue, "a")

    async def handler(job: Job) -> None:
        raise RetryLater("rate limited", delay_ms=5_000)

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    await worker.poll()
    job = await wait_for_job(queue, "a", "pending")
    await worker.stop()
    assert job.attempts == 0
    assert job.history == ()
    assert job.run_at == clock.now + 5_000


async def test_retry_later_defaults_to_the_first_backoff_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module, "random", FixedRandom(0.25))
    clock, queue = fixed_queue()
    await enqueue(queue, "a")

    async def handler(job: Job) -> None:
        raise RetryLater()

    worker = create_job_worker(queue=queue, handler=handler, backoff_base_ms=8_000)
    await worker.poll()
    job = await wait_for_job(queue, "a", "pending")
    await worker.stop()
    assert job.attempts == 0
    assert job.run_at == clock.now + 8_000 + 2_000


async def test_a_huge_exception_message_is_clipped_so_the_store_takes_it() -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a")

    async def handler(job: Job) -> None:
        raise PermanentFailure("x" * 200_000)

    errors: list[BaseException] = []
    worker = create_job_worker(queue=queue, handler=handler, on_error=errors.append)
    await worker.poll()
    job = await wait_for_job(queue, "a", "dead")
    await worker.stop()
    assert job.error is not None and 100 < len(job.error) <= 4_000
    assert errors == []


async def test_a_settle_that_raises_is_reported_and_tried_again_while_the_lease_holds() -> None:
    _, base = fixed_queue()
    await enqueue(base, "a")
    await enqueue(base, "b")
    failures = 2

    async def store_down(**kwargs: Any) -> None:
        nonlocal failures
        if failures and kwargs["job_id"] == "a":  # "b" may run (and settle) while "a" is retried
            failures -= 1
            raise ConnectionError("store down")
        await base.settle(**kwargs)

    errors: list[BaseException] = []

    async def handler(job: Job) -> str:
        return "ok"

    worker = create_job_worker(
        queue=Proxy(base, settle=store_down), handler=handler, workers=1, poll_ms=10, on_error=errors.append
    )
    worker.start()
    try:
        await wait_for_job(base, "b", "succeeded")  # the loop went on
    finally:
        await worker.stop()
    assert [type(e) for e in errors] == [ConnectionError]  # reported once, not once per try
    a = await base.get_job([1], "a")
    assert a is not None and a.status == "succeeded"  # the store came back within the lease: no second run


async def test_a_settle_that_keeps_failing_is_left_to_the_lease() -> None:
    _, base = fixed_queue()
    await enqueue(base, "a")

    async def store_down(**kwargs: Any) -> None:
        raise ConnectionError("store down")

    errors: list[BaseException] = []

    async def handler(job: Job) -> str:
        return "ok"

    worker = create_job_worker(
        queue=Proxy(base, settle=store_down),
        handler=handler,
        workers=1,
        poll_ms=10,
        lease_ms=300,
        on_error=errors.append,
    )
    started = asyncio.get_running_loop().time()
    assert await worker.poll() == 1
    await worker.stop()  # waits for the run, whose settle gives up once the lease could have lapsed
    assert 0.1 <= asyncio.get_running_loop().time() - started < 5  # tried for most of the 300 ms lease
    assert [type(e) for e in errors] == [ConnectionError]
    a = await base.get_job([1], "a")
    assert a is not None and a.status == "running"  # nobody renews it now: its lease lapses to another worker


async def test_errors_are_logged_by_default(caplog: pytest.LogCaptureFixture) -> None:
    _, base = fixed_queue()
    await enqueue(base, "a")

    async def store_down(**kwargs: Any) -> None:
        raise ConnectionError("store down")

    async def handler(job: Job) -> None:
        return None

    worker = create_job_worker(queue=Proxy(base, settle=store_down), handler=handler)
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql.worker"):
        await worker.poll()
        await wait_for(lambda: any(r.exc_info for r in caplog.records))
    await worker.stop()
    assert any("store down" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


# -- heartbeat and cancel ----------------------------------------------------------------------------------------


async def test_an_operators_cancel_cancels_the_handler_task_and_settles_cancelled() -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a")
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, worker_id="w1")
    await worker.poll()
    await wait_for(lambda: gate.running == 1)
    assert await queue.cancel([1], "a") is True
    await worker.beat()
    job = await wait_for_job(queue, "a", "cancelled")
    await worker.stop()
    assert gate.cancelled == ["a"]
    assert gate.tasks[0] is not None and gate.tasks[0].cancelled()
    assert [a.status for a in job.history] == ["cancelled"]


async def test_beat_renews_every_held_lease_in_one_call() -> None:
    clock, base = fixed_queue()
    await enqueue(base, "a")
    await enqueue(base, "b")
    queue = Proxy(base)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, lease_ms=30_000, worker_id="w1")
    await worker.poll()
    clock.now += 20_000
    await worker.beat()
    beats = [kw for name, kw in queue.calls if name == "heartbeat"]
    assert len(beats) == 1 and sorted(beats[0]["job_ids"]) == ["a", "b"]
    clock.now += 20_000  # past the first lease, inside the renewed one
    rival = create_job_worker(queue=base, handler=Gate(), worker_id="rival")
    assert await rival.poll() == 0
    gate.release.set()
    await worker.stop()


async def test_the_heartbeat_keeps_a_long_jobs_lease() -> None:
    queue = create_memory_job_queue()  # the wall clock: this rule is about time
    await queue.enqueue(
        JobInput(
            id="long", space_id=1, action_id="act", environment="main", trigger="t", input={}, due_at=0, max_attempts=3
        )
    )
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, lease_ms=300, poll_ms=20, worker_id="w1")
    rival = create_job_worker(queue=queue, handler=Gate(), lease_ms=300, worker_id="rival")
    worker.start()
    try:
        await wait_for(lambda: gate.running == 1)
        loop = asyncio.get_running_loop()
        until = loop.time() + 1.2  # four leases
        while loop.time() < until:
            assert await rival.poll() == 0
            await asyncio.sleep(0.03)
        gate.release.set()
        job = await wait_for_job(queue, "long", "succeeded")
    finally:
        await worker.stop()
    assert [(a.status, a.worker_id) for a in job.history] == [("succeeded", "w1")]


# -- single flight -----------------------------------------------------------------------------------------------


async def test_a_job_whose_key_is_held_elsewhere_is_handed_back_refunded() -> None:
    clock, queue = fixed_queue()
    kv = create_memory_kv(clock=clock)
    await enqueue(queue, "a")
    await kv.set(single_flight.kv_key("a"), "another-worker", 30)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, kv=kv, worker_id="w1")
    assert await worker.poll() == 0
    job = await queue.get_job([1], "a")
    assert job is not None
    assert (job.status, job.attempts, tuple(job.history)) == ("pending", 0, ())
    assert job.run_at == clock.now + HANDBACK_DELAY_MS
    assert gate.started == []
    assert await kv.get(single_flight.kv_key("a")) == "another-worker"  # theirs, untouched

    await kv.delete(single_flight.kv_key("a"))
    clock.now = job.run_at
    assert await worker.poll() == 1
    await wait_for(lambda: gate.running == 1)
    assert (await kv.get(single_flight.kv_key("a"))) is not None
    gate.release.set()
    await wait_for_job(queue, "a", "succeeded")
    await worker.stop()
    assert await kv.get(single_flight.kv_key("a")) is None  # released after settling


async def test_the_key_is_taken_for_a_lease_renewed_on_each_beat_and_released_only_if_ours() -> None:
    clock, base = fixed_queue()
    kv = create_memory_kv(clock=clock)
    await enqueue(base, "a")
    await enqueue(base, "b")
    gate = Gate()
    worker = create_job_worker(queue=base, handler=gate, kv=kv, lease_ms=30_000, worker_id="w1")
    assert await worker.poll() == 2
    key_a, key_b = single_flight.kv_key("a"), single_flight.kv_key("b")
    token = await kv.get(key_a)
    assert token is not None and token.startswith("w1:")
    assert await kv.swap(key_a, None, "intruder") is False  # single flight: nobody else gets it
    for _ in range(3):  # 60 s in all, twice the key's lifetime, renewed every 20 s
        clock.now += 20_000
        await worker.beat()
    assert await kv.get(key_a) == token
    await kv.set(key_b, "someone-else")  # b's key was lost and taken over meanwhile
    gate.release.set()
    await wait_for_job(base, "a", "succeeded")
    await wait_for_job(base, "b", "succeeded")
    await worker.stop()
    assert await kv.get(key_a) is None
    assert await kv.get(key_b) == "someone-else"


class RecordingKv:
    """The memory kv, recording each batch of keys given back."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.released: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def delete_unchanged(self, pairs: Any) -> None:
        self.released.append(sorted(key for key, _ in pairs))
        await self.inner.delete_unchanged(pairs)


async def test_finished_jobs_keys_go_back_together_and_at_once_when_urgent_or_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(single_flight, "RELEASE_LINGER_S", 3600.0)  # only urgency, a full batch or hurry() send
    clock = Clock(T)
    kv = RecordingKv(create_memory_kv(clock=clock))
    for name in ("a", "b", "c", "u"):
        await kv.set(name, f"token-{name}", 60)
    releases = single_flight.KeyReleases(kv.delete_unchanged, on_error=lambda error: None)
    finished = [asyncio.create_task(releases.give_back(name, f"token-{name}", urgent=False)) for name in "ab"]
    await releases.give_back("u", "token-u")  # a retry's key: sent at once, with whatever waits already
    assert kv.released == [["a", "b", "u"]]
    await asyncio.gather(*finished)
    lingering = asyncio.create_task(releases.give_back("c", "token-c", urgent=False))
    for _ in range(10):
        await asyncio.sleep(0)  # loop turns, no time: nothing may be sent yet
    assert not lingering.done() and kv.released == [["a", "b", "u"]]
    releases.hurry()  # the worker stops
    await asyncio.wait_for(lingering, 10)
    assert kv.released == [["a", "b", "u"], ["c"]]
    assert [await kv.get(name) for name in "abcu"] == [None] * 4

    many = [f"k{i:02}" for i in range(single_flight.RELEASE_BATCH)]
    for name in many:
        await kv.set(name, "t", 60)
    await asyncio.wait_for(asyncio.gather(*(releases.give_back(name, "t", urgent=False) for name in many)), 10)
    assert kv.released[-1] == many  # a full batch does not wait


async def test_a_retrys_key_goes_back_before_its_next_claim_while_a_finished_jobs_lingers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(single_flight, "RELEASE_LINGER_S", 3600.0)
    clock, queue = fixed_queue()
    kv = RecordingKv(create_memory_kv(clock=clock))
    await enqueue(queue, "done")
    await enqueue(queue, "again")
    runs: list[str] = []

    async def handler(job: Job) -> str | None:
        runs.append(job.id)
        if job.id == "again" and runs.count("again") == 1:
            raise RetryLater("not yet", delay_ms=0)
        return None

    worker = create_job_worker(queue=queue, handler=handler, kv=kv, worker_id="w1")
    assert await worker.poll() == 2
    await wait_for_job(queue, "done", "succeeded")
    await wait_for(lambda: any(single_flight.kv_key("again") in batch for batch in kv.released))
    # Due again at once, and its key already free: the next claim runs it (a held key would hand it back for
    # HANDBACK_DELAY_MS, on a clock that does not move).
    assert await worker.poll() == 1
    await wait_for_job(queue, "again", "succeeded")
    assert runs.count("again") == 2
    await worker.stop()
    assert await kv.get(single_flight.kv_key("done")) is None
    assert await kv.get(single_flight.kv_key("again")) is None


def test_long_ids_still_make_a_key_the_kv_takes() -> None:
    key = single_flight.kv_key("😀" * 191)
    assert len(key.encode()) <= 764
    assert single_flight.kv_key("a") != single_flight.kv_key("b")


# -- stop ----------------------------------------------------------------------------------------------------------


async def test_stop_waits_for_a_job_longer_than_its_lease_keeping_it_renewed_and_claims_nothing_else() -> None:
    queue = create_memory_job_queue()  # the wall clock: this rule is about time
    for job_id in ("long", "waiting"):
        await queue.enqueue(
            JobInput(
                id=job_id,
                space_id=1,
                action_id="act",
                environment="main",
                trigger="t",
                input={},
                due_at=0 if job_id == "long" else 1,
                max_attempts=3,
            )
        )
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, workers=1, lease_ms=300, poll_ms=20, worker_id="w1")
    worker.start()
    await wait_for(lambda: gate.running == 1)
    stopping = asyncio.create_task(worker.stop())
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.2  # four leases past the stop
    while loop.time() < until:
        assert not stopping.done()
        long = await queue.get_job([1], "long")
        assert long is not None and long.status == "running" and long.worker_id == "w1"
        assert long.lease_until is not None and long.lease_until > wall_clock_ms()  # still renewed
        await asyncio.sleep(0.03)
    gate.release.set()
    await asyncio.wait_for(stopping, 10)
    long = await queue.get_job([1], "long")
    waiting = await queue.get_job([1], "waiting")
    assert long is not None and long.status == "succeeded"
    assert [a.status for a in long.history] == ["succeeded"]
    assert waiting is not None and (waiting.status, waiting.attempts) == ("pending", 0)
    assert gate.started == ["long"]
    assert worker.in_flight() == 0
    rival_gate = Gate()
    rival_gate.release.set()
    rival = create_job_worker(queue=queue, handler=rival_gate, lease_ms=300, worker_id="rival")
    assert await rival.poll() == 1  # what was waiting is there for the next replica
    await rival.stop()
    assert rival_gate.started == ["waiting"]


async def test_stop_hands_back_a_job_claimed_in_that_instant_with_its_attempt_refunded() -> None:
    _, base = fixed_queue()
    await enqueue(base, "a")
    entered = asyncio.Event()
    go = asyncio.Event()

    async def slow_claim(**kwargs: Any) -> None:
        entered.set()
        await go.wait()

    gate = Gate()
    worker = create_job_worker(queue=Proxy(base, claim=slow_claim), handler=gate, worker_id="w1")
    polling = asyncio.create_task(worker.poll())
    await entered.wait()
    stopping = asyncio.create_task(worker.stop())
    await asyncio.sleep(0)
    go.set()
    assert await polling == 0
    await stopping
    job = await base.get_job([1], "a")
    assert job is not None
    assert (job.status, job.attempts, tuple(job.history), job.worker_id) == ("pending", 0, (), None)
    assert gate.started == []


async def test_a_stopped_worker_claims_nothing() -> None:
    _, queue = fixed_queue()
    worker = create_job_worker(queue=queue, handler=Gate())
    await worker.stop()
    await enqueue(queue, "a")
    assert await worker.poll() == 0


# -- construction --------------------------------------------------------------------------------------------------


def test_the_default_worker_id_names_host_process_and_a_random_part() -> None:
    one = create_job_worker(queue=create_memory_job_queue(), handler=Gate())
    two = create_job_worker(queue=create_memory_job_queue(), handler=Gate())
    host, pid, rand = one.worker_id.rsplit(":", 2)
    assert host == socket.gethostname()[:120] and pid == str(os.getpid())
    assert len(rand) == 8 and int(rand, 16) >= 0
    assert one.worker_id != two.worker_id


def test_arguments_are_checked() -> None:
    queue = create_memory_job_queue()
    with pytest.raises(ValueError):
        create_job_worker(queue=queue, handler=Gate(), workers=-1)
    with pytest.raises(ValueError):
        create_job_worker(queue=queue, handler=Gate(), lease_ms=0)
    with pytest.raises(ValueError):
        create_job_worker(queue=queue, handler=Gate(), worker_id="x" * 192)


# -- a cancel that outlives its worker ---------------------------------------------------------------------------


async def test_a_cancel_that_survived_a_lost_lease_settles_cancelled_without_running_the_handler() -> None:
    clock, queue = fixed_queue()
    await enqueue(queue, "a")
    assert len(await queue.claim(worker_id="died", lease_ms=1_000, limit=1)) == 1
    assert await queue.cancel([1], "a") is True  # asked while "died" held it; nobody heard
    clock.now += 2_000  # its lease lapses
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, worker_id="w1")
    assert await worker.poll() == 0
    job = await wait_for_job(queue, "a", "cancelled")
    await worker.stop()
    assert gate.started == []
    assert [(a.status, a.worker_id) for a in job.history] == [("lost", "died"), ("cancelled", "w1")]


# -- what an operator sees: logs and the event hook --------------------------------------------------------------


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "plitzi_jobs_mysql.worker" and r.levelno == level]


async def test_a_failing_handler_is_logged_with_its_traceback_and_a_dead_job_at_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, queue = fixed_queue()
    await enqueue(queue, "a", max_attempts=2)

    async def handler(job: Job) -> None:
        raise ValueError(f"broken on attempt {job.attempts}")

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    with caplog.at_level(logging.INFO, logger="plitzi_jobs_mysql.worker"):
        await worker.poll()
        job = await wait_for_job(queue, "a", "pending")
        [failed] = records(caplog, logging.WARNING)
        assert failed.exc_info is not None and str(failed.exc_info[1]) == "broken on attempt 1"
        assert "'a'" in failed.getMessage() and "'act'" in failed.getMessage() and "attempt 1/2" in failed.getMessage()
        assert records(caplog, logging.ERROR) == []
        clock.now = job.run_at
        await worker.poll()
        await wait_for_job(queue, "a", "dead")
        await worker.stop()
    assert len(records(caplog, logging.WARNING)) == 2
    [dead] = records(caplog, logging.ERROR)
    assert "'a'" in dead.getMessage() and "attempt 2/2" in dead.getMessage() and "dead" in dead.getMessage()
    assert "broken on attempt 2" in dead.getMessage()


async def test_a_lost_attempt_is_logged_at_warning_naming_who_lost_it(caplog: pytest.LogCaptureFixture) -> None:
    clock, queue = fixed_queue()
    await enqueue(queue, "a")
    assert len(await queue.claim(worker_id="died", lease_ms=1_000, limit=1)) == 1
    clock.now += 2_000
    worker = create_job_worker(queue=queue, handler=lambda job: asyncio.sleep(0), worker_id="w1")
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.worker"):
        await worker.poll()
        await wait_for_job(queue, "a", "succeeded")
        await worker.stop()
    [lost] = records(caplog, logging.WARNING)
    assert "'a'" in lost.getMessage() and "died" in lost.getMessage() and "lost" in lost.getMessage()


async def test_the_event_hook_sees_each_happening_of_a_run() -> None:
    clock, queue = fixed_queue()
    await enqueue(queue, "ok")
    await enqueue(queue, "flaky", max_attempts=2)
    await enqueue(queue, "later")
    await enqueue(queue, "stop")
    events: list[JobEvent] = []

    async def handler(job: Job) -> str | None:
        if job.id == "flaky":
            raise ValueError("flaky")
        if job.id == "later":
            raise RetryLater("not yet", delay_ms=5)
        if job.id == "stop":
            raise PermanentFailure("never")
        return "run-ok"

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1", on_event=events.append)
    assert await worker.poll() == 4
    await wait_for(lambda: not worker._held)
    by_job: dict[str, list[str]] = {}
    for event in events:
        by_job.setdefault(event.job_id, []).append(event.kind.value)
    assert by_job == {
        "ok": ["claimed", "started", "succeeded"],
        "flaky": ["claimed", "started", "failed", "retried"],
        "later": ["claimed", "started", "retried"],
        "stop": ["claimed", "started", "failed", "dead"],
    }
    ok = next(e for e in events if e.kind == EventKind.CLAIMED and e.job_id == "ok")
    assert (ok.attempt, ok.max_attempts, ok.worker_id, ok.wait_ms) == (1, 3, "w1", 0)
    failed = next(e for e in events if e.kind == EventKind.FAILED and e.job_id == "flaky")
    assert isinstance(failed.error, ValueError) and failed.message == "ValueError: flaky"
    retried = next(e for e in events if e.kind == EventKind.RETRIED and e.job_id == "later")
    assert retried.delay_ms == 5 and retried.duration_s is not None and retried.duration_s >= 0
    done = next(e for e in events if e.kind == EventKind.SUCCEEDED)
    assert done.run_id == "run-ok" and done.space_id == 1 and done.action_id == "act"

    events.clear()
    clock.now += 5  # "later" is due again; "flaky" is not
    assert [j.id for j in await queue.claim(worker_id="died", lease_ms=1_000, limit=1)] == ["later"]
    await queue.cancel([1], "later")
    clock.now += 120_000  # "flaky" due again, "later" lapsed under "died"
    await worker.poll()
    await wait_for(lambda: not worker._held)
    await worker.stop()
    kinds = sorted((e.job_id, e.kind.value) for e in events)
    assert kinds == sorted(
        [
            ("later", "lost"),
            ("later", "claimed"),
            ("later", "cancelled"),
            ("flaky", "claimed"),
            ("flaky", "started"),
            ("flaky", "failed"),
            ("flaky", "dead"),
        ]
    )
    lost = next(e for e in events if e.kind == EventKind.LOST)
    assert (lost.worker_id, lost.attempt) == ("died", 1)


async def test_events_nobody_listens_to_are_not_built_and_logged_ones_still_are(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "quiet-1")
    await enqueue(queue, "quiet-2")
    built: list[str] = []
    event_init = JobEvent.__init__

    def counting_init(self: JobEvent, **fields: Any) -> None:
        built.append(f"{fields['job_id']}:{fields['kind'].value}")
        event_init(self, **fields)

    monkeypatch.setattr(JobEvent, "__init__", counting_init)

    async def handler(job: Job) -> str | None:
        return None

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.worker"):
        assert await worker.poll() == 2
        await wait_for(lambda: not worker._held)
    assert built == []  # claimed, started, succeeded: nobody to tell
    await enqueue(queue, "logged-2")
    with caplog.at_level(logging.DEBUG, logger="plitzi_jobs_mysql.worker"):
        assert await worker.poll() == 1
        await wait_for(lambda: not worker._held)
    assert built == ["logged-2:claimed", "logged-2:started", "logged-2:succeeded"]
    assert [
        r.getMessage().split(")")[1].strip().split(" ")[0] for r in caplog.records if "logged-2" in r.getMessage()
    ] == ["claimed", "started", "succeeded"]
    await worker.stop()


async def test_an_event_hook_that_raises_is_logged_and_never_breaks_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, queue = fixed_queue()
    await enqueue(queue, "a")

    def hook(event: JobEvent) -> None:
        raise RuntimeError("the hook is broken")

    async def handler(job: Job) -> str:
        return "done"

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1", on_event=hook)
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql.worker"):
        assert await worker.poll() == 1
        job = await wait_for_job(queue, "a", "succeeded")
        await worker.stop()
    assert job.run_id == "done"
    assert any(r.exc_info and "the hook is broken" in str(r.exc_info[1]) for r in caplog.records)


# -- the kv being down ---------------------------------------------------------------------------------------------


class SwitchableKv:
    """A kv that can be switched off: every single-flight swap raises until it is back."""

    def __init__(self, clock: Clock) -> None:
        self.inner = create_memory_kv(clock=clock)
        self.up = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if not self.up:
                raise ConnectionError("kv unreachable")
            return await target(*args, **kwargs)

        return call


async def test_an_unreachable_kv_pauses_claims_with_a_growing_logged_back_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(worker_module, "KV_BACKOFF_FIRST_MS", 40, raising=False)
    clock, base = fixed_queue()
    queue = Proxy(base)
    kv = SwitchableKv(clock)
    await enqueue(base, "a")
    ran: list[str] = []

    async def handler(job: Job) -> str:
        ran.append(job.id)
        return "ok"

    def claims() -> int:
        return sum(1 for name, _ in queue.calls if name == "claim")

    worker = create_job_worker(queue=queue, handler=handler, kv=kv, worker_id="w1")
    with caplog.at_level(logging.INFO, logger="plitzi_jobs_mysql.worker"):
        for expected_ms in (40, 80, 160):
            before = claims()
            while claims() == before:  # paused until the back-off has passed
                assert await worker.poll() == 0
                await asyncio.sleep(0.005)
            job = await base.get_job([1], "a")
            assert job is not None and (job.status, job.attempts, job.history) == ("pending", 0, ())
            assert job.run_at == clock.now + expected_ms  # handed back, attempt refunded, later each time
            assert await worker.poll() == 0 and claims() == before + 1  # and no claim during the pause
            clock.now = job.run_at
        warned = [r.getMessage() for r in records(caplog, logging.WARNING)]
        assert len(warned) == 3 and all("kv store is unreachable" in m for m in warned)
        assert [f"for {ms} ms" in m for ms, m in zip((40, 80, 160), warned, strict=True)] == [True] * 3
        kv.up = True
        await wait_for_poll(worker)
        await wait_for_job(base, "a", "succeeded")
        await worker.stop()
    assert ran == ["a"]
    assert "answers again after 3 failures" in records(caplog, logging.WARNING)[-1].getMessage()


async def wait_for_poll(worker: Any, within: float = 10.0) -> None:
    """Polls until a poll starts a handler."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while await worker.poll() == 0:
        if loop.time() > deadline:
            raise AssertionError("nothing started in time")
        await asyncio.sleep(0.005)


def test_an_async_or_uncallable_event_hook_is_refused() -> None:
    async def hook(event: JobEvent) -> None:
        return None

    with pytest.raises(TypeError, match="not async"):
        create_job_worker(queue=create_memory_job_queue(), handler=Gate(), on_event=hook)
    with pytest.raises(TypeError, match="callable"):
        create_job_worker(queue=create_memory_job_queue(), handler=Gate(), on_event="print")  # type: ignore[typeddict-item]


# -- succeeded settles batched (MySQL) -------------------------------------------------------------------------

SETTLED_COLUMNS = (
    "space_id, action_id, environment, `trigger`, input, due_at, max_attempts, missed, `key`, status, run_at, "
    "attempts, created_at, updated_at, history, lease_until, worker_id, run_id, cancel_requested, error"
)


async def test_a_batch_of_succeeded_settles_writes_what_single_settles_write(
    database_url: str, database_pool: Any
) -> None:
    clock = Clock(T)
    queue = create_mysql_job_queue(database_pool, clock=clock)
    run_ids = ["run-1", None, "run-3 ✓"]
    for n in range(3):
        await enqueue(queue, f"one-{n}")
        await enqueue(queue, f"many-{n}")
    await enqueue(queue, "theirs")
    claimed = await queue.claim(worker_id="w", lease_ms=60_000, limit=6)
    assert len(claimed) == 6
    assert [j.id for j in await queue.claim(worker_id="other", lease_ms=60_000, limit=1)] == ["theirs"]
    await clock.advance(1_234)
    for n, run_id in enumerate(run_ids):
        await queue.settle(
            job_id=f"one-{n}",
            worker_id="w",
            status="succeeded",
            run_id=run_id,
            attempt=AttemptOutcome(status="succeeded", worker_id="w", run_id=run_id),
        )
    # "theirs" is held by another worker: the guard leaves it alone, as a single settle would.
    batch = [(f"many-{n}", run_id) for n, run_id in enumerate(run_ids)] + [("theirs", "run-x")]
    await queue.settle_succeeded(worker_id="w", jobs=batch)

    def row(job_id: str) -> tuple[Any, ...]:
        return sql(database_url, f"SELECT {SETTLED_COLUMNS} FROM action_jobs WHERE id = %s", (job_id,))[0]

    before = {f"many-{n}": row(f"many-{n}") for n in range(3)}
    for n in range(3):
        assert row(f"many-{n}") == row(f"one-{n}")  # byte for byte: history JSON, run_id, instants, all of it
        job = await queue.get_job([1], f"many-{n}")
        assert job is not None and job.status == "succeeded" and job.run_id == run_ids[n]
        attempts = [(a.attempt, a.status, a.worker_id, a.run_id) for a in job.history]
        assert attempts == [(1, "succeeded", "w", run_ids[n])]
    theirs = await queue.get_job([1], "theirs")
    assert theirs is not None and theirs.status == "running" and not theirs.history and theirs.run_id is None
    await clock.advance(1_000)
    await queue.settle_succeeded(worker_id="w", jobs=batch)  # a repeat (a lost OK packet's retry) changes nothing
    assert {f"many-{n}": row(f"many-{n}") for n in range(3)} == before


async def test_a_worker_settles_its_succeeded_jobs_in_few_statements(database_pool: Any) -> None:
    queue = Proxy(create_mysql_job_queue(database_pool))
    for n in range(8):
        await enqueue(queue, f"j{n}")

    async def handler(job: Job) -> str:
        return f"run-{job.id}"

    worker = create_job_worker(queue=queue, handler=handler, workers=8, poll_ms=10)
    await worker.poll()
    for n in range(8):
        job = await wait_for_job(queue, f"j{n}", "succeeded")
        assert job.run_id == f"run-j{n}" and [a.run_id for a in job.history] == [f"run-j{n}"]
    await worker.stop()
    names = [name for name, _ in queue.calls]
    assert "settle" not in names
    batches = [kwargs["jobs"] for name, kwargs in queue.calls if name == "settle_succeeded"]
    assert sorted(job_id for b in batches for job_id, _ in b) == [f"j{n}" for n in range(8)]
    assert len(batches) < 8


async def test_a_failing_batch_falls_back_to_single_settles_and_the_jobs_end_succeeded_once(
    database_pool: Any,
) -> None:
    base = create_mysql_job_queue(database_pool)
    for n in range(4):
        await enqueue(base, f"j{n}")
    failures = 1

    async def written_but_unanswered(**kwargs: Any) -> None:
        # The batch lands, then its answer is lost: each job's own settle must find its row settled already.
        nonlocal failures
        await base.settle_succeeded(**kwargs)
        if failures:
            failures -= 1
            raise ConnectionError("the answer was lost")

    queue = Proxy(base)  # records the single settles
    errors: list[BaseException] = []

    async def handler(job: Job) -> None:
        return None

    proxied = _WithBatch(queue, written_but_unanswered)
    worker = create_job_worker(queue=proxied, handler=handler, workers=4, poll_ms=10, on_error=errors.append)
    await worker.poll()
    for n in range(4):
        await wait_for_job(base, f"j{n}", "succeeded")
    await worker.stop()
    assert [type(e) for e in errors] == [ConnectionError]  # reported once for the batch, not once per job
    first = proxied.batches[0]
    settled_alone = sorted(kwargs["job_id"] for name, kwargs in queue.calls if name == "settle")
    assert settled_alone == sorted(job_id for job_id, _ in first)  # each job of the failed batch fell back
    for n in range(4):
        job = await base.get_job([1], f"j{n}")
        assert job is not None and job.status == "succeeded" and len(job.history) == 1  # settled once


class _WithBatch:
    """A queue whose `settle_succeeded` is `batch`, everything else forwarded (and recorded) by `inner`."""

    def __init__(self, inner: Proxy, batch: Callable[..., Awaitable[None]]) -> None:
        self.inner = inner
        self.batch = batch
        self.batches: list[list[tuple[str, str | None]]] = []

    async def settle_succeeded(self, **kwargs: Any) -> None:
        self.batches.append(list(kwargs["jobs"]))
        await self.batch(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_stopping_worker_writes_its_lingering_succeeded_settles_at_once(
    database_pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settles_module, "SETTLE_LINGER_S", 3600.0)  # only a stop can cut this linger short
    queue = create_mysql_job_queue(database_pool)
    await enqueue(queue, "a")
    returned = asyncio.Event()

    async def handler(job: Job) -> None:
        returned.set()

    worker = create_job_worker(queue=queue, handler=handler, workers=2, poll_ms=10)
    await worker.poll()
    await returned.wait()
    settles = worker._succeeded_settles
    assert settles is not None
    await wait_for(lambda: settles._waiting == [("a", None)])
    job = await queue.get_job([1], "a")
    assert job is not None and job.status == "running"  # its settle waits for company, its lease held
    await asyncio.wait_for(worker.stop(), 30)  # a hang guard only: the stop does not wait out the linger
    job = await queue.get_job([1], "a")
    assert job is not None and job.status == "succeeded" and len(job.history) == 1
