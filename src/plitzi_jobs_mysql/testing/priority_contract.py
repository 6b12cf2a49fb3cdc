"""The queue's contract on priorities: due jobs by priority (lower first), then oldest run_at."""

from __future__ import annotations

import pytest

from ..contract.protocols import JobQueue
from .support import Advance, claim_one, job, now_ms


class PriorityContract:
    """`JobInput.priority` (a part of `JobQueueContract`)."""

    async def test_priority_is_stored_and_defaults_to_zero(self, queue: JobQueue) -> None:
        await queue.enqueue(job("plain"))
        await queue.enqueue(job("urgent", priority=-100))
        await queue.enqueue_many([job("late", priority=100)])
        found = {i: await queue.get_job([1], i) for i in ("plain", "urgent", "late")}
        assert {i: j.priority if j else None for i, j in found.items()} == {"plain": 0, "urgent": -100, "late": 100}
        page = await queue.list_jobs(space_ids=[1])
        assert sorted(j.priority for j in page.jobs) == [-100, 0, 100]

    @pytest.mark.parametrize(
        ("priority", "error"),
        [
            pytest.param(101, ValueError, id="101"),
            pytest.param(-101, ValueError, id="minus-101"),
            pytest.param(True, TypeError, id="bool"),
            pytest.param(1.0, TypeError, id="float"),
            pytest.param("1", TypeError, id="str"),
        ],
    )
    async def test_a_bad_priority_is_refused_before_anything_is_written(
        self, queue: JobQueue, priority: object, error: type[Exception]
    ) -> None:
        with pytest.raises(error, match="priority"):
            await queue.enqueue(job("bad", priority=priority))
        with pytest.raises(error, match="priority"):
            await queue.enqueue_many([job("fine"), job("bad", priority=priority)])
        assert (await queue.list_jobs(space_ids=[1])).total == 0

    async def test_claims_take_due_jobs_by_priority_then_oldest_run_at(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        await queue.enqueue_many(
            [
                job("p5-old", priority=5, due_at=now - 9_000),
                job("p0-new", priority=0, due_at=now - 1_000),
                job("p0-old", priority=0, due_at=now - 2_000),
                job("p-3", priority=-3, due_at=now - 500),
                job("p-50-future", priority=-50, due_at=now + 3_600_000),  # not due: never before a due job
                job("p5-new", priority=5, due_at=now - 8_000),
            ]
        )
        first = await queue.claim(worker_id="w1", lease_ms=60_000, limit=2)
        assert [j.id for j in first] == ["p-3", "p0-old"]
        rest = await queue.claim(worker_id="w1", lease_ms=60_000, limit=10)
        assert [j.id for j in rest] == ["p0-new", "p5-old", "p5-new"]
        assert await queue.claim(worker_id="w1", lease_ms=60_000, limit=10) == []

    async def test_one_claim_at_a_time_follows_the_order_exactly(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        jobs = [job(f"j{n}", priority=(n * 7) % 5 - 2, due_at=now - 10_000 + (n * 13) % 17) for n in range(40)]
        await queue.enqueue_many(jobs)
        expected = [j.id for j in sorted(jobs, key=lambda j: (j.priority, j.due_at, int(j.id[1:])))]
        taken = [(await claim_one(queue)).id for _ in range(len(jobs))]
        assert taken == expected

    async def test_a_lapsed_job_keeps_its_priority(self, queue: JobQueue, advance: Advance) -> None:
        now = await now_ms(queue)
        await queue.enqueue(job("urgent", priority=-10, due_at=now - 1))
        held = await claim_one(queue, "dying-worker", lease_ms=50)
        assert held.id == "urgent"
        await queue.enqueue(job("plain", due_at=now - 5_000))  # older, but of a lower rank
        await advance(51)
        taken = await claim_one(queue, "rescuer")
        assert (taken.id, taken.priority, taken.attempts) == ("urgent", -10, 2)
        assert (await claim_one(queue, "rescuer")).id == "plain"


class ClaimOrderContract:
    """A lone claimer's claims, exactly (a part of `JobQueueContract`; issue 18, items 4 and 5)."""

    async def test_a_job_that_dies_on_takeover_leaves_its_claim_slot_to_a_due_job(
        self, queue: JobQueue, advance: Advance
    ) -> None:
        now = await now_ms(queue)
        await queue.enqueue(job("doomed", max_attempts=1, due_at=now - 10_000))
        assert (await claim_one(queue, "dying-worker", lease_ms=50)).id == "doomed"
        await queue.enqueue(job("waiting", due_at=now - 1_000))
        await advance(51)
        taken = await queue.claim(worker_id="rescuer", lease_ms=60_000, limit=1)
        assert [j.id for j in taken] == ["waiting"], "a job that died on takeover is no claim won"
        doomed = await queue.get_job([1], "doomed")
        assert doomed is not None and doomed.status == "dead"

    async def test_jobs_that_die_on_takeover_leave_the_claim_in_order(self, queue: JobQueue, advance: Advance) -> None:
        now = await now_ms(queue)
        await queue.enqueue_many(
            [
                job("dies-1", max_attempts=1, due_at=now - 9_000),
                job("dies-2", max_attempts=1, due_at=now - 8_000),
                job("lapses-1", due_at=now - 7_000),
                job("lapses-2", due_at=now - 6_000),
            ]
        )
        assert len(await queue.claim(worker_id="dying-worker", lease_ms=50, limit=4)) == 4
        await queue.enqueue(job("pending", due_at=now - 1_000))
        await advance(51)
        taken = await queue.claim(worker_id="rescuer", lease_ms=60_000, limit=2)
        assert [j.id for j in taken] == ["lapses-1", "lapses-2"]
        assert [j.id for j in await queue.claim(worker_id="rescuer", lease_ms=60_000, limit=2)] == ["pending"]

    async def test_a_lone_claim_takes_a_lapsed_job_and_the_pending_ones_beside_it(
        self, queue: JobQueue, advance: Advance
    ) -> None:
        # A few rows: where an UPDATE's conditions read as a range of the status index, a claim's own
        # compare-and-sets locked each other's rows, and the claim came back short.
        for round in range(6):
            now = await now_ms(queue)
            await queue.enqueue(job(f"held-{round}", due_at=now - 5_000))
            assert (await claim_one(queue, "dying-worker", lease_ms=50)).id == f"held-{round}"
            await queue.enqueue_many([job(f"p{round}-{n}", due_at=now - 1_000) for n in range(3)])
            await advance(51)
            taken = await queue.claim(worker_id="w1", lease_ms=60_000, limit=5)
            assert [j.id for j in taken] == [f"held-{round}"] + [f"p{round}-{n}" for n in range(3)], f"round {round}"

    async def test_a_lone_claimer_takes_jobs_of_one_instant_strictly_in_order(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        ids = [f"j{n:03}" for n in range(240)]
        # One batch: every job has the same run_at, created_at and updated_at; enqueue order breaks the tie.
        await queue.enqueue_many([job(i, due_at=now - 1_000) for i in ids])
        for start in range(0, len(ids), 8):
            taken = await queue.claim(worker_id="w1", lease_ms=60_000, limit=8)
            assert [j.id for j in taken] == ids[start : start + 8], f"claim {start // 8}"
        assert await queue.claim(worker_id="w1", lease_ms=60_000, limit=8) == []
