"""The queue's contract, part one: its clock, enqueueing, and refusing bad input."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from ..contract.protocols import JobQueue
from .support import job, now_ms


class EnqueueContract:
    """`now`, `enqueue`, `enqueue_many` and validation (a part of `JobQueueContract`)."""

    # -- the clock ------------------------------------------------------------------------------------------

    async def test_now_is_the_store_clock_in_utc(self, queue: JobQueue) -> None:
        now = await queue.now()
        assert now.tzinfo is not None and now.utcoffset() == timedelta(0)
        later = await queue.now()
        assert later >= now

    async def test_instants_written_come_from_the_store_clock(self, queue: JobQueue) -> None:
        before = await now_ms(queue)
        await queue.enqueue(job())
        after = await now_ms(queue)
        found = await queue.get_job([1], "job-1")
        assert found is not None and before <= found.created_at <= after and found.updated_at == found.created_at

    # -- enqueue --------------------------------------------------------------------------------------------

    async def test_enqueue_creates_a_pending_job(self, queue: JobQueue) -> None:
        assert await queue.enqueue(job(due_at=5, missed=4, key="digest", input={"a": [1, "b", None, 2.5]}))
        found = await queue.get_job([1], "job-1")
        assert found is not None
        assert (found.status, found.run_at, found.attempts, tuple(found.history)) == ("pending", 5, 0, ())
        assert (found.missed, found.key, found.input) == (4, "digest", {"a": [1, "b", None, 2.5]})
        assert (found.lease_until, found.worker_id, found.run_id, found.error) == (None, None, None, None)
        assert found.cancel_requested is False

    async def test_enqueue_is_idempotent_by_id(self, queue: JobQueue) -> None:
        assert await queue.enqueue(job(input={"first": True})) is True
        assert await queue.enqueue(job(input={"second": True}, due_at=99)) is False
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.input == {"first": True} and found.run_at == 0

    async def test_racing_enqueues_create_one_job(self, queue: JobQueue) -> None:
        answers = await asyncio.gather(*(queue.enqueue(job(input={"n": n})) for n in range(20)))
        assert answers.count(True) == 1
        page = await queue.list_jobs(space_ids=[1])
        assert page.total == 1

    async def test_ids_are_compared_exactly(self, queue: JobQueue) -> None:
        ids = ["a", "A", "a ", " a", "ä", "a\u0308"]
        assert [await queue.enqueue(job(i)) for i in ids] == [True] * len(ids)
        for i in ids:
            found = await queue.get_job([1], i)
            assert found is not None and found.id == i

    async def test_text_round_trips_as_data(self, queue: JobQueue) -> None:
        hostile = 'it\'s "quoted" \\ ; DROP TABLE x; -- 😀 \x00 ünï'
        data = {"text": hostile, hostile: [hostile], "nested": {"deep": [{"x": hostile}]}}
        assert await queue.enqueue(job(hostile, action_id=hostile, key=hostile, input=data))
        found = await queue.get_job([1], hostile)
        assert found is not None and (found.id, found.action_id, found.key, found.input) == (
            hostile,
            hostile,
            hostile,
            data,
        )

    async def test_enqueue_many_answers_per_job_in_order(self, queue: JobQueue) -> None:
        await queue.enqueue(job("old"))
        batch = [job("new-1"), job("old"), job("new-2"), job("new-1")]
        assert await queue.enqueue_many(batch) == [True, False, True, False]
        assert await queue.enqueue_many([]) == []
        assert (await queue.list_jobs(space_ids=[1])).total == 3

    async def test_enqueue_many_takes_thousands(self, queue: JobQueue) -> None:
        answers = await queue.enqueue_many([job(f"bulk-{n}") for n in range(2_500)])
        assert answers == [True] * 2_500
        again = await queue.enqueue_many([job(f"bulk-{n}") for n in range(2_495, 2_505)])
        assert again == [False] * 5 + [True] * 5
        assert (await queue.list_jobs(space_ids=[1], limit=1)).total == 2_505

    async def test_racing_batches_create_each_job_once(self, queue: JobQueue) -> None:
        batches = [[job(f"j-{n}") for n in range(start, start + 60)] for start in range(0, 200, 20)]
        answers = await asyncio.gather(*(queue.enqueue_many(b) for b in batches))
        created: dict[str, int] = {}
        for batch, answer in zip(batches, answers, strict=True):
            for item, ok in zip(batch, answer, strict=True):
                created[item.id] = created.get(item.id, 0) + int(ok)
        assert set(created.values()) == {1}

    async def test_a_batch_with_one_bad_job_writes_nothing(self, queue: JobQueue) -> None:
        with pytest.raises(ValueError):
            await queue.enqueue_many([job("fine"), job("x" * 192)])
        assert await queue.get_job([1], "fine") is None

    # -- validation -----------------------------------------------------------------------------------------

    @pytest.mark.parametrize(
        ("fields", "error"),
        [
            pytest.param({"id": "x" * 192}, ValueError, id="id-192-chars"),
            pytest.param({"id": ""}, ValueError, id="id-empty"),
            pytest.param({"id": "\ud800"}, ValueError, id="id-lone-surrogate"),
            pytest.param({"action_id": "a" * 192}, ValueError, id="action-id-192-chars"),
            pytest.param({"key": "k" * 192}, ValueError, id="key-192-chars"),
            pytest.param({"environment": "e" * 65}, ValueError, id="environment-65-chars"),
            pytest.param({"trigger": "t" * 65}, ValueError, id="trigger-65-chars"),
            pytest.param({"input": {"when": datetime(2024, 1, 1)}}, TypeError, id="input-datetime"),
            pytest.param({"input": {1: "int key"}}, TypeError, id="input-int-key"),
            pytest.param({"input": {"nan": float("nan")}}, ValueError, id="input-nan"),
            pytest.param({"input": ["not", "a", "dict"]}, TypeError, id="input-list"),
            pytest.param({"input": {"big": "x" * (16 * 1024 * 1024)}}, ValueError, id="input-over-16-mib"),
            pytest.param({"max_attempts": 0}, ValueError, id="max-attempts-0"),
            pytest.param({"max_attempts": True}, TypeError, id="max-attempts-bool"),
            pytest.param({"due_at": -1}, ValueError, id="due-at-negative"),
            pytest.param({"due_at": 1.5}, TypeError, id="due-at-float"),
            pytest.param({"space_id": "1"}, TypeError, id="space-id-text"),
            pytest.param({"space_id": 2**63}, ValueError, id="space-id-past-int64"),
            pytest.param({"missed": -1}, ValueError, id="missed-negative"),
        ],
    )
    async def test_bad_input_is_refused_before_anything_is_written(
        self, queue: JobQueue, fields: dict[str, Any], error: type[Exception]
    ) -> None:
        bad = replace(job("bad"), **fields)
        with pytest.raises(error):
            await queue.enqueue(bad)
        with pytest.raises(error):
            await queue.enqueue_many([bad])
        assert (await queue.list_jobs(space_ids=[1, 2**62])).total == 0

    async def test_the_largest_allowed_identifiers_fit_whole(self, queue: JobQueue) -> None:
        longest = "😀" * 191  # 191 characters, 764 bytes
        assert await queue.enqueue(job(longest, action_id=longest, key=longest, environment="é" * 64))
        found = await queue.get_job([1], longest)
        assert found is not None and (found.action_id, found.key, found.environment) == (longest, longest, "é" * 64)

    async def test_bad_arguments_are_refused(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        with pytest.raises(ValueError):
            await queue.claim(worker_id="w" * 192, lease_ms=1_000, limit=1)
        with pytest.raises(ValueError):
            await queue.claim(worker_id="w1", lease_ms=0, limit=1)
        with pytest.raises(ValueError):
            await queue.claim(worker_id="w1", lease_ms=1_000, limit=-1)
        with pytest.raises(ValueError):
            await queue.settle(job_id="job-1", worker_id="w1", status="running")
        with pytest.raises(ValueError):
            await queue.settle(job_id="job-1", worker_id="w1", status="pending", run_id="r" * 192)
        with pytest.raises(ValueError):
            await queue.list_jobs(space_ids=[1], status="sleeping")
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "pending" and found.attempts == 0
