"""What an operator sees of a worker: its log lines and the `on_event` hook; and how a worker is built."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import string
from typing import Any

import pytest

from plitzi_jobs_mysql.contract.events import EventKind, JobEvent
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import PermanentFailure, RetryLater, create_job_worker

from ..support import Clock, Events, Gate, T, job, records, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


async def test_a_failing_handler_is_logged_with_its_traceback_and_a_dead_job_at_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T, max_attempts=2))

    async def handler(job: Job) -> None:
        raise ValueError(f"broken on attempt {job.attempts}")

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1")
    with caplog.at_level(logging.INFO, logger="plitzi_jobs_mysql.worker"):
        await worker.poll()
        found = await wait_for_job(queue, "a", "pending")
        [failed] = records(caplog, logging.WARNING)
        assert failed.exc_info is not None and str(failed.exc_info[1]) == "broken on attempt 1"
        assert "'a'" in failed.getMessage() and "'act'" in failed.getMessage() and "attempt 1/2" in failed.getMessage()
        assert records(caplog, logging.ERROR) == []
        clock.now = found.run_at
        await worker.poll()
        await wait_for_job(queue, "a", "dead")
        await worker.stop()
    assert len(records(caplog, logging.WARNING)) == 2
    [dead] = records(caplog, logging.ERROR)
    assert "'a'" in dead.getMessage() and "attempt 2/2" in dead.getMessage() and "dead" in dead.getMessage()
    assert "broken on attempt 2" in dead.getMessage()


async def test_a_lost_attempt_is_logged_at_warning_naming_who_lost_it(caplog: pytest.LogCaptureFixture) -> None:
    clock, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))
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
    await queue.enqueue(job("ok", due_at=T))
    await queue.enqueue(job("flaky", due_at=T, max_attempts=2))
    await queue.enqueue(job("later", due_at=T))
    await queue.enqueue(job("stop", due_at=T))
    events = Events()

    async def handler(job: Job) -> str | None:
        if job.id == "flaky":
            raise ValueError("flaky")
        if job.id == "later":
            raise RetryLater("not yet", delay_ms=5)
        if job.id == "stop":
            raise PermanentFailure("never")
        return "run-ok"

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1", on_event=events)
    assert await worker.poll() == 4
    await worker.idle()
    assert {name: events.of(name) for name in ("ok", "flaky", "later", "stop")} == {
        "ok": ["claimed", "started", "succeeded"],
        "flaky": ["claimed", "started", "failed", "retried"],
        "later": ["claimed", "started", "retried"],
        "stop": ["claimed", "started", "failed", "dead"],
    }
    seen = events.seen_events
    ok = next(e for e in seen if e.kind == EventKind.CLAIMED and e.job_id == "ok")
    assert (ok.attempt, ok.max_attempts, ok.worker_id, ok.wait_ms) == (1, 3, "w1", 0)
    failed = next(e for e in seen if e.kind == EventKind.FAILED and e.job_id == "flaky")
    assert isinstance(failed.error, ValueError) and failed.message == "ValueError: flaky"
    retried = next(e for e in seen if e.kind == EventKind.RETRIED and e.job_id == "later")
    assert retried.delay_ms == 5 and retried.duration_s is not None and retried.duration_s >= 0
    done = next(e for e in seen if e.kind == EventKind.SUCCEEDED)
    assert done.run_id == "run-ok" and done.space_id == 1 and done.action_id == "act"

    seen.clear()
    clock.now += 5  # "later" is due again; "flaky" is not
    assert [j.id for j in await queue.claim(worker_id="died", lease_ms=1_000, limit=1)] == ["later"]
    await queue.cancel([1], "later")
    clock.now += 120_000  # "flaky" due again, "later" lapsed under "died"
    await worker.poll()
    await worker.idle()
    await worker.stop()
    kinds = sorted((e.job_id, e.kind.value) for e in seen)
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
    lost = next(e for e in seen if e.kind == EventKind.LOST)
    assert (lost.worker_id, lost.attempt) == ("died", 1)


async def test_events_nobody_listens_to_are_not_built_and_logged_ones_still_are(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("quiet-1", due_at=T))
    await queue.enqueue(job("quiet-2", due_at=T))
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
        await worker.idle()
    assert built == []  # claimed, started, succeeded: nobody to tell
    await queue.enqueue(job("logged-2", due_at=T))
    with caplog.at_level(logging.DEBUG, logger="plitzi_jobs_mysql.worker"):
        assert await worker.poll() == 1
        await worker.idle()
    assert built == ["logged-2:claimed", "logged-2:started", "logged-2:succeeded"]
    assert [
        r.getMessage().split(")")[1].strip().split(" ")[0] for r in caplog.records if "logged-2" in r.getMessage()
    ] == ["claimed", "started", "succeeded"]
    await worker.stop()


async def test_an_event_hook_that_raises_is_logged_and_never_breaks_the_worker(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _, queue = fixed_queue()
    await queue.enqueue(job("a", due_at=T))

    def hook(event: JobEvent) -> None:
        raise RuntimeError("the hook is broken")

    async def handler(job: Job) -> str:
        return "done"

    worker = create_job_worker(queue=queue, handler=handler, worker_id="w1", on_event=hook)
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql.worker"):
        assert await worker.poll() == 1
        found = await wait_for_job(queue, "a", "succeeded")
        await worker.stop()
    assert found.run_id == "done"
    assert any(r.exc_info and "the hook is broken" in str(r.exc_info[1]) for r in caplog.records)


# -- construction --------------------------------------------------------------------------------------------------


def test_an_async_or_uncallable_event_hook_is_refused() -> None:
    async def hook(event: JobEvent) -> None:
        return None

    with pytest.raises(TypeError, match="not async"):
        create_job_worker(queue=create_memory_job_queue(), handler=Gate(), on_event=hook)
    with pytest.raises(TypeError, match="callable"):
        create_job_worker(queue=create_memory_job_queue(), handler=Gate(), on_event="print")  # type: ignore[typeddict-item]


def test_the_default_worker_id_names_host_process_and_a_random_part() -> None:
    one = create_job_worker(queue=create_memory_job_queue(), handler=Gate())
    two = create_job_worker(queue=create_memory_job_queue(), handler=Gate())
    host, pid, rand = one.worker_id.rsplit(":", 2)
    assert host == socket.gethostname()[:120] and pid == str(os.getpid())
    assert len(rand) == 8 and set(rand) <= set(string.hexdigits)
    assert one.worker_id != two.worker_id


def test_arguments_are_checked() -> None:
    queue = create_memory_job_queue()
    with pytest.raises(ValueError):
        create_job_worker(queue=queue, handler=Gate(), workers=-1)
    with pytest.raises(ValueError):
        create_job_worker(queue=queue, handler=Gate(), lease_ms=0)
    with pytest.raises(ValueError):
        create_job_worker(queue=queue, handler=Gate(), worker_id="x" * 192)
    with pytest.raises(TypeError):
        create_job_worker(queue=queue, handler="not a handler")  # type: ignore[arg-type]
