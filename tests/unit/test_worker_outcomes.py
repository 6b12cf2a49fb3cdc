"""What a handler's end makes of its job: success and its run_id, failures retried with backoff until dead,
`PermanentFailure`, `RetryLater` and its delay, an operator's cancel; and that whatever a handler's outcome is,
the job ends settled or handed back, never wedged (issue 18, items 3 and 11)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from plitzi_jobs_mysql.contract.events import EventKind
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.retry import RetryPolicy
from plitzi_jobs_mysql.runtime.worker import JobWorker, PermanentFailure, RetryLater, create_job_worker

from ..support import Clock, Events, Gate, T, job, records, wait_for, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


# -- the retry policy ------------------------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_ceiling_plus_bounded_jitter() -> None:
    half = RetryPolicy(30_000, 900_000, lambda: 0.5)
    assert [half.backoff_ms(n) for n in (1, 2, 3, 4)] == [45_000, 75_000, 135_000, 255_000]
    assert half.backoff_ms(6) == 900_000 + 15_000  # 960 000 capped at the ceiling
    assert half.backoff_ms(60) == 900_000 + 15_000
    assert RetryPolicy(30_000, 900_000, lambda: 0.0).backoff_ms(1) == 30_000
    assert RetryPolicy(30_000, 900_000, lambda: 0.9999999999).backoff_ms(1) == 30_000 + 29_999  # below min(d, 30 s)
    small = RetryPolicy(1_000, 900_000, lambda: 0.9999999999)
    assert small.backoff_ms(1) == 1_000 + 999  # jitter bounded by d itself when d < 30 s
    assert small.backoff_ms(3) == 4_000 + 3_999
    assert RetryPolicy(0, 0, lambda: 0.5).backoff_ms(5) == 0


def test_the_worker_draws_its_jitter_from_the_random_source_it_was_given() -> None:
    worker = JobWorker(queue=create_memory_job_queue(), handler=Gate(), random=lambda: 0.5)
    assert worker.backoff_ms(1) == 45_000  # the default base, 30 s, plus half of it
    draws = iter([0.0, 0.25])
    other = JobWorker(
        queue=create_memory_job_queue(), handler=Gate(), backoff_base_ms=8_000, random=lambda: next(draws)
    )
    assert [other.backoff_ms(1), other.backoff_ms(1)] == [8_000, 10_000]


def test_retry_later_asks_for_its_own_delay_within_bounds() -> None:
    policy = RetryPolicy(8_000, 900_000, lambda: 0.25)
    assert policy.retry_later_ms(RetryLater()) == 8_000 + 2_000  # the first backoff step
    assert policy.retry_later_ms(RetryLater(delay_ms=5)) == 5
    assert policy.retry_later_ms(RetryLater(delay_ms=30.7)) == 30  # type: ignore[arg-type]
    assert policy.retry_later_ms(RetryLater(delay_ms=-5)) == 0
    assert policy.retry_later_ms(RetryLater(delay_ms=10**30)) == 10 * 366 * 24 * 3_600_000
    for bad in (float("inf"), float("-inf"), float("nan"), "30.5", [1]):
        with pytest.raises(ValueError, match="whole number of milliseconds"):
            policy.retry_later_ms(RetryLater(delay_ms=bad))  # type: ignore[arg-type]


# -- failures and retries --------------------------------------------------------------------------------------


async def test_a_failing_handler_is_retried_with_backoff_then_dead() -> None:
    clock, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T, max_attempts=3))

    async def handler(job: Job) -> None:
        raise ValueError(f"broken on attempt {job.attempts}")

    worker = JobWorker(queue=queue, handler=handler, worker_id="w1", random=lambda: 0.5)
    expected_delays = [30_000 + 15_000, 60_000 + 15_000]
    for attempt, delay in enumerate(expected_delays, start=1):
        assert await worker.poll() == 1
        await worker.idle()
        found = await wait_for_job(queue, "a", "pending")
        assert found.attempts == attempt
        assert found.run_at == clock.now + delay
        assert found.error == f"ValueError: broken on attempt {attempt}"
        assert await worker.poll() == 0  # not before its delay
        clock.now = found.run_at
    assert await worker.poll() == 1
    found = await wait_for_job(queue, "a", "dead")
    await worker.stop()
    assert found.attempts == 3
    assert [a.status for a in found.history] == ["failed", "failed", "failed"]
    assert found.history[-1].error == "ValueError: broken on attempt 3"


async def test_permanent_failure_is_dead_at_once_with_its_message() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T, max_attempts=5))

    async def handler(job: Job) -> None:
        raise PermanentFailure("the template is gone")

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    await worker.poll()
    found = await wait_for_job(queue, "a", "dead")
    await worker.stop()
    assert found.error == "the template is gone"
    assert [(a.status, a.error) for a in found.history] == [("failed", "the template is gone")]


async def test_a_bare_permanent_failure_and_an_empty_run_id_still_settle() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
    await queue.enqueue(job("b", due_at=T))

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
    await queue.enqueue(job("a", due_at=T))

    async def handler(job: Job) -> None:
        raise RetryLater("rate limited", delay_ms=5_000)

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    await worker.poll()
    found = await wait_for_job(queue, "a", "pending")
    await worker.stop()
    assert found.attempts == 0
    assert found.history == ()
    assert found.run_at == clock.now + 5_000


async def test_retry_later_defaults_to_the_first_backoff_step() -> None:
    clock, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))

    async def handler(job: Job) -> None:
        raise RetryLater()

    worker = JobWorker(queue=queue, handler=handler, backoff_base_ms=8_000, random=lambda: 0.25)
    await worker.poll()
    found = await wait_for_job(queue, "a", "pending")
    await worker.stop()
    assert found.attempts == 0
    assert found.run_at == clock.now + 8_000 + 2_000


async def test_a_huge_exception_message_is_clipped_so_the_store_takes_it() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))

    async def handler(job: Job) -> None:
        raise PermanentFailure("x" * 200_000)

    errors: list[BaseException] = []
    worker = create_job_worker(queue=queue, handler=handler, on_error=errors.append)
    await worker.poll()
    found = await wait_for_job(queue, "a", "dead")
    await worker.stop()
    assert found.error is not None and 100 < len(found.error) <= 4_000
    assert errors == []


# -- outcomes that are the handler's bug: still settled, and the drain still ends (issue 18.3) ---------------------


@pytest.mark.parametrize(
    "delay", [float("inf"), float("nan"), "30.5", float("-inf")], ids=["inf", "nan", "text", "minus-inf"]
)
async def test_a_retry_later_with_a_bad_delay_is_a_failed_attempt_saying_so_and_the_drain_ends(delay: Any) -> None:
    clock, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T, max_attempts=3))

    async def handler(job: Job) -> None:
        raise RetryLater("come back", delay_ms=delay)

    events = Events()
    worker = JobWorker(queue=queue, handler=handler, worker_id="w1", random=lambda: 0.0, on_event=events)
    worker.start()
    await events.seen(EventKind.STARTED, "a")
    await asyncio.wait_for(worker.stop(), 10)  # a SIGTERM drain: it returns
    found = await queue.get_job([1], "a")
    assert found is not None and (found.status, found.attempts, found.worker_id) == ("pending", 1, None)
    assert found.run_at == clock.now + 30_000  # retried with backoff like any failure, so it cannot loop for ever
    assert found.error is not None and f"RetryLater(delay_ms={delay!r})" in found.error
    assert "whole number of milliseconds" in found.error
    assert [(a.status, a.error) for a in found.history] == [("failed", found.error)]
    assert events.of("a") == ["claimed", "started", "failed", "retried"]


async def test_an_outcome_that_cannot_even_be_described_is_still_settled_with_a_clear_error() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T, max_attempts=1))

    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text for this one")

    async def handler(job: Job) -> None:
        raise Unprintable()

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    await worker.poll()
    await asyncio.wait_for(worker.stop(), 10)
    found = await queue.get_job([1], "a")
    assert found is not None and found.status == "dead"
    assert found.error == "the worker could not record the handler's outcome: RuntimeError: no text for this one"


async def test_a_handler_returning_anything_but_a_str_records_no_run_id_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, queue = fixed_queue()
    returned: dict[str, Any] = {"rows": {"rows": 3}, "seven": 7, "bytes": b"run-1", "text": "run-1", "none": None}
    await queue.enqueue_many([job(name, due_at=T) for name in returned])

    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    await queue.enqueue(job("odd", due_at=T))
    returned["odd"] = Unprintable()

    async def handler(job: Job) -> Any:
        return returned[job.id]

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1", workers=10)
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.worker"):
        assert await worker.poll() == 6
        await worker.idle()
    await worker.stop()
    settled = {name: await queue.get_job([1], name) for name in returned}
    assert {name: (j.status, j.run_id) for name, j in settled.items() if j} == {
        "rows": ("succeeded", None),
        "seven": ("succeeded", None),
        "bytes": ("succeeded", None),
        "text": ("succeeded", "run-1"),
        "none": ("succeeded", None),
        "odd": ("succeeded", None),
    }
    warned = sorted(r.getMessage() for r in records(caplog, logging.WARNING))
    assert len(warned) == 4  # once per job, naming it and what it returned
    assert all("succeeded" in m and "no run_id" in m for m in warned)
    for name, kind in (("bytes", "bytes"), ("odd", "Unprintable"), ("rows", "dict"), ("seven", "int")):
        assert any(f"job {name!r}" in m and f"returned a {kind}," in m for m in warned), (name, warned)


# -- an operator's cancel ----------------------------------------------------------------------------------------


async def test_an_operators_cancel_cancels_the_handler_task_and_settles_cancelled() -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, worker_id="w1")
    await worker.poll()
    await wait_for(lambda: gate.running == 1)
    assert await queue.cancel([1], "a") is True
    await worker.beat()
    found = await wait_for_job(queue, "a", "cancelled")
    await worker.stop()
    assert gate.cancelled == ["a"]
    assert gate.tasks[0] is not None and gate.tasks[0].cancelled()
    assert [a.status for a in found.history] == ["cancelled"]


async def test_a_cancel_that_survived_a_lost_lease_settles_cancelled_without_running_the_handler() -> None:
    clock, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
    assert len(await queue.claim(worker_id="died", lease_ms=1_000, limit=1)) == 1
    assert await queue.cancel([1], "a") is True  # asked while "died" held it; nobody heard
    clock.now += 2_000  # its lease lapses
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, worker_id="w1")
    assert await worker.poll() == 0
    found = await wait_for_job(queue, "a", "cancelled")
    await worker.stop()
    assert gate.started == []
    assert [(a.status, a.worker_id) for a in found.history] == [("lost", "died"), ("cancelled", "w1")]
