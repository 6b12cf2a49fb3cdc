"""The worker on MySQL: succeeded settles in one statement per batch, byte for byte what single settles write,
falling back to single settles when a batch fails, and written at once when the worker stops."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import plitzi_jobs_mysql.runtime.settles as settles_module
from plitzi_jobs_mysql.contract.events import EventKind
from plitzi_jobs_mysql.mysql import create_mysql_job_queue
from plitzi_jobs_mysql.records import AttemptOutcome, Job, SucceededJob
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..conftest import sql
from ..support import Clock, Events, Proxy, T, job, wait_for_job

SETTLED_COLUMNS = (
    "space_id, action_id, environment, `trigger`, input, due_at, max_attempts, missed, `key`, status, run_at, "
    "attempts, created_at, updated_at, claimed_at, history, lease_until, worker_id, run_id, cancel_requested, error"
)


async def test_a_batch_of_succeeded_settles_writes_what_single_settles_write_byte_for_byte(
    database_url: str, database_pool: Any
) -> None:
    clock = Clock(T)
    queue = create_mysql_job_queue(database_pool, clock=clock)
    run_ids = ["run-1", None, "run-3 ✓"]
    for n in range(3):
        await queue.enqueue(job(f"one-{n}", due_at=T))
        await queue.enqueue(job(f"many-{n}", due_at=T))
    await queue.enqueue(job("theirs", due_at=T))
    claimed = {j.id: j for j in await queue.claim(worker_id="w", lease_ms=60_000, limit=6)}
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
            claimed_at=claimed[f"one-{n}"].claimed_at,
        )
    # "theirs" is held by another worker: the guard leaves it alone, as a single settle would.
    batch = [
        SucceededJob(job_id=f"many-{n}", run_id=run_id, claimed_at=claimed[f"many-{n}"].claimed_at)
        for n, run_id in enumerate(run_ids)
    ]
    await queue.settle_succeeded(worker_id="w", jobs=[*batch, SucceededJob(job_id="theirs", run_id="run-x")])

    def row(job_id: str) -> tuple[Any, ...]:
        return sql(database_url, f"SELECT {SETTLED_COLUMNS} FROM action_jobs WHERE id = %s", (job_id,))[0]

    before = {f"many-{n}": row(f"many-{n}") for n in range(3)}
    for n in range(3):
        assert row(f"many-{n}") == row(f"one-{n}")  # byte for byte: history JSON, run_id, instants, all of it
        found = await queue.get_job([1], f"many-{n}")
        assert found is not None and found.status == "succeeded" and found.run_id == run_ids[n]
        attempts = [(a.attempt, a.status, a.worker_id, a.run_id) for a in found.history]
        assert attempts == [(1, "succeeded", "w", run_ids[n])]
    theirs = await queue.get_job([1], "theirs")
    assert theirs is not None and theirs.status == "running" and not theirs.history and theirs.run_id is None
    await clock.advance(1_000)
    await queue.settle_succeeded(worker_id="w", jobs=batch)  # a repeat (a lost OK packet's retry) changes nothing
    assert {f"many-{n}": row(f"many-{n}") for n in range(3)} == before


async def test_a_worker_settles_its_succeeded_jobs_in_few_statements(database_pool: Any) -> None:
    queue = Proxy(create_mysql_job_queue(database_pool))
    for n in range(8):
        await queue.enqueue(job(f"j{n}"))

    async def handler(job: Job) -> str:
        return f"run-{job.id}"

    worker = create_job_worker(queue=queue, handler=handler, workers=8, poll_ms=10)
    await worker.poll()
    await worker.idle()
    await worker.stop()
    for n in range(8):
        found = await queue.get_job([1], f"j{n}")
        assert found is not None and found.status == "succeeded"
        assert found.run_id == f"run-j{n}" and [a.run_id for a in found.history] == [f"run-j{n}"]
    assert not queue.called("settle")
    batches = [call["jobs"] for call in queue.called("settle_succeeded")]
    assert sorted(item.job_id for b in batches for item in b) == [f"j{n}" for n in range(8)]
    assert len(batches) < 8


async def test_a_failing_batch_falls_back_to_single_settles_and_the_jobs_end_succeeded_once(
    database_pool: Any,
) -> None:
    base = create_mysql_job_queue(database_pool)
    for n in range(4):
        await base.enqueue(job(f"j{n}"))
    failures = 1
    queue = Proxy(base)  # records the single settles
    batches: list[list[str]] = []

    class LostReply:
        """The batch lands, then its answer is lost: each job's own settle must find its row settled already."""

        def __getattr__(self, name: str) -> Any:
            return getattr(queue, name)

        async def settle_succeeded(self, **kwargs: Any) -> None:
            nonlocal failures
            batches.append([item.job_id for item in kwargs["jobs"]])
            await base.settle_succeeded(**kwargs)
            if failures:
                failures -= 1
                raise ConnectionError("the answer was lost")

    errors: list[BaseException] = []

    async def handler(job: Job) -> None:
        return None

    worker = create_job_worker(queue=LostReply(), handler=handler, workers=4, poll_ms=10, on_error=errors.append)
    await worker.poll()
    await worker.idle()
    await worker.stop()
    assert [type(e) for e in errors] == [ConnectionError]  # reported once for the batch, not once per job
    settled_alone = sorted(kwargs["job_id"] for kwargs in queue.called("settle"))
    assert settled_alone == sorted(batches[0])  # each job of the failed batch fell back
    for n in range(4):
        found = await base.get_job([1], f"j{n}")
        assert found is not None and found.status == "succeeded" and len(found.history) == 1  # settled once


async def test_a_stopping_worker_writes_its_lingering_succeeded_settles_at_once(
    database_pool: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(settles_module, "SETTLE_LINGER_S", 3600.0)  # only a stop can cut this linger short
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue(job("a"))
    events = Events()

    async def handler(job: Job) -> None:
        return None

    worker = create_job_worker(queue=queue, handler=handler, workers=2, poll_ms=10, on_event=events)
    await worker.poll()
    await events.seen(EventKind.SUCCEEDED, "a")  # emitted before its settle, which now waits for company
    for _ in range(20):
        await asyncio.sleep(0)
    found = await queue.get_job([1], "a")
    assert found is not None and found.status == "running"  # its settle waits for company, its lease held
    await asyncio.wait_for(worker.stop(), 30)  # a hang guard only: the stop does not wait out the linger
    found = await wait_for_job(queue, "a", "succeeded")
    assert len(found.history) == 1
