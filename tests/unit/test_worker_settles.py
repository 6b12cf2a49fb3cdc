"""How outcomes reach the store: a settle retried while the lease holds, then left to the lease; succeeded jobs
written together where the queue `SettlesSucceeded` (the memory queue does, as MySQL does), falling back to one
settle each when a batch fails; and a stopping worker writing what waits at once."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import plitzi_jobs_mysql.runtime.settles as settles_module
from plitzi_jobs_mysql.contract.events import EventKind
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..support import Clock, Events, PlainQueue, Proxy, T, job, wait_for, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


async def ok(job: Job) -> str:
    return "ok"


# -- one settle per outcome (a queue without `settle_succeeded`) ------------------------------------------------


async def test_a_settle_that_raises_is_reported_and_tried_again_while_the_lease_holds() -> None:
    _, base = fixed_queue()
    await base.enqueue(job("a", due_at=T))
    await base.enqueue(job("b", due_at=T))
    failures = 2

    async def store_down(**kwargs: Any) -> None:
        nonlocal failures
        if failures and kwargs["job_id"] == "a":  # "b" may run (and settle) while "a" is retried
            failures -= 1
            raise ConnectionError("store down")

    errors: list[BaseException] = []
    queue = Proxy(PlainQueue(base), settle=store_down)
    worker = create_job_worker(queue=queue, handler=ok, workers=1, poll_ms=10, on_error=errors.append)
    worker.start()
    try:
        await wait_for_job(base, "b", "succeeded")  # the loop went on
    finally:
        await worker.stop()
    assert [type(e) for e in errors] == [ConnectionError]  # reported once, not once per try
    a = await base.get_job([1], "a")
    assert a is not None and a.status == "succeeded"  # the store came back within the lease: no second run
    assert len(queue.called("settle")) >= 3 and not queue.called("settle_succeeded")


async def test_a_settle_that_keeps_failing_is_left_to_the_lease(caplog: pytest.LogCaptureFixture) -> None:
    _, base = fixed_queue()
    await base.enqueue(job("a", due_at=T))

    async def store_down(**kwargs: Any) -> None:
        raise ConnectionError("store down")

    errors: list[BaseException] = []
    worker = create_job_worker(
        queue=Proxy(PlainQueue(base), settle=store_down),
        handler=ok,
        workers=1,
        poll_ms=10,
        lease_ms=300,
        on_error=errors.append,
    )
    started = asyncio.get_running_loop().time()
    assert await worker.poll() == 1
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.worker"):
        await worker.stop()  # waits for the run, whose settle gives up once the lease could have lapsed
    assert 0.1 <= asyncio.get_running_loop().time() - started < 5  # tried for most of the 300 ms lease
    assert [type(e) for e in errors] == [ConnectionError]
    assert any("could not settle job a after" in r.getMessage() for r in caplog.records)
    a = await base.get_job([1], "a")
    assert a is not None and a.status == "running"  # nobody renews it now: its lease lapses to another worker


async def test_errors_are_logged_by_default(caplog: pytest.LogCaptureFixture) -> None:
    _, base = fixed_queue()
    await base.enqueue(job("a", due_at=T))

    async def store_down(**kwargs: Any) -> None:
        raise ConnectionError("store down")

    worker = create_job_worker(
        queue=Proxy(base, settle=store_down, settle_succeeded=store_down), handler=ok, lease_ms=300
    )
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql.worker"):
        await worker.poll()
        await wait_for(lambda: any(r.exc_info for r in caplog.records))
    await worker.stop()
    assert any("store down" in str(r.exc_info[1]) for r in caplog.records if r.exc_info)


# -- succeeded settles together ----------------------------------------------------------------------------------


async def test_a_worker_settles_its_succeeded_jobs_in_few_calls() -> None:
    _, base = fixed_queue()
    for n in range(8):
        await base.enqueue(job(f"j{n}", due_at=T))
    queue = Proxy(base)

    async def handler(job: Job) -> str:
        return f"run-{job.id}"

    worker = create_job_worker(queue=queue, handler=handler, workers=8, worker_id="w1")
    assert await worker.poll() == 8
    await worker.idle()
    await worker.stop()
    for n in range(8):
        found = await base.get_job([1], f"j{n}")
        assert found is not None and found.status == "succeeded"
        assert found.run_id == f"run-j{n}" and [a.run_id for a in found.history] == [f"run-j{n}"]
    assert not queue.called("settle")
    batches = [call["jobs"] for call in queue.called("settle_succeeded")]
    assert sorted(item.job_id for b in batches for item in b) == [f"j{n}" for n in range(8)]
    assert len(batches) < 8
    claimed = {j.id: j.claimed_at for j in (await base.list_jobs(space_ids=[1], limit=10)).jobs}
    assert all(item.claimed_at == claimed[item.job_id] is not None for b in batches for item in b)


async def test_a_failing_batch_falls_back_to_single_settles_and_the_jobs_end_succeeded_once() -> None:
    _, base = fixed_queue()
    for n in range(4):
        await base.enqueue(job(f"j{n}", due_at=T))
    failures = 1

    class LostReply:
        """The batch lands, then its answer is lost: each job's own settle must find its row settled already."""

        def __init__(self) -> None:
            self.batches: list[list[str]] = []

        def __getattr__(self, name: str) -> Any:
            return getattr(queue, name)

        async def settle_succeeded(self, **kwargs: Any) -> None:
            nonlocal failures
            self.batches.append([item.job_id for item in kwargs["jobs"]])
            await base.settle_succeeded(**kwargs)
            if failures:
                failures -= 1
                raise ConnectionError("the answer was lost")

    queue = Proxy(base)  # records the single settles
    batching = LostReply()
    errors: list[BaseException] = []
    worker = create_job_worker(queue=batching, handler=ok, workers=4, on_error=errors.append)
    assert await worker.poll() == 4
    await worker.idle()
    await worker.stop()
    assert [type(e) for e in errors] == [ConnectionError]  # reported once for the batch, not once per job
    settled_alone = sorted(kwargs["job_id"] for kwargs in queue.called("settle"))
    assert settled_alone == sorted(batching.batches[0])  # each job of the failed batch fell back
    for n in range(4):
        found = await base.get_job([1], f"j{n}")
        assert found is not None and found.status == "succeeded" and len(found.history) == 1  # settled once


async def test_a_stopping_worker_writes_its_lingering_succeeded_settles_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(settles_module, "SETTLE_LINGER_S", 3600.0)  # only a stop can cut this linger short
    _, base = fixed_queue()
    await base.enqueue(job("a", due_at=T))
    queue = Proxy(base)
    events = Events()
    worker = create_job_worker(queue=queue, handler=ok, workers=2, worker_id="w1", on_event=events)
    assert await worker.poll() == 1
    await events.seen(EventKind.SUCCEEDED, "a")  # emitted before its settle, which now waits for company
    for _ in range(20):
        await asyncio.sleep(0)  # turns of the loop, no time: the linger is an hour
    found = await base.get_job([1], "a")
    assert found is not None and found.status == "running"  # its settle waits, its lease held
    assert not queue.called("settle_succeeded")
    await asyncio.wait_for(worker.stop(), 30)  # a hang guard only: the stop does not wait out the linger
    found = await base.get_job([1], "a")
    assert found is not None and found.status == "succeeded" and len(found.history) == 1
    assert [[item.job_id for item in call["jobs"]] for call in queue.called("settle_succeeded")] == [["a"]]
