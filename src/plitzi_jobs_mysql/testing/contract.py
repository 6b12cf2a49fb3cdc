"""What every `JobQueue` and `KvStore` must do, written once and run against each store.

A contract is where a scheduling bug lives: a claim that is not atomic runs a job twice, a heartbeat that does not
renew hands a running job to another replica, a settle from a worker that lost its lease overwrites a live
attempt. Subclass a suite and supply a fixture that yields a fresh, empty subject:

    class TestMyQueue(JobQueueContract):
        @pytest.fixture
        async def queue(self):
            yield make_my_queue()

Real time, real stores: leases are tens of milliseconds and the tests wait for them to lapse (polling for the
condition, never a fixed sleep), because the store's own clock is part of what is being tested.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

import pytest

from ..clock import to_epoch_ms
from ..contract import JobQueue, KvStore
from ..records import AttemptOutcome, Job, JobInput, ScheduleInput

T = TypeVar("T")
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


class JobQueueContract:
    """The job queue contract. Supply a `queue` fixture yielding a fresh, empty `JobQueue`."""

    pytestmark = pytest.mark.asyncio

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
        hostile = "it's \"quoted\" \\ ; DROP TABLE x; -- 😀 \x00 ünï"
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
            ({"id": "x" * 192}, ValueError),
            ({"id": ""}, ValueError),
            ({"id": "\ud800"}, ValueError),
            ({"action_id": "a" * 192}, ValueError),
            ({"key": "k" * 192}, ValueError),
            ({"environment": "e" * 65}, ValueError),
            ({"trigger": "t" * 65}, ValueError),
            ({"input": {"when": datetime(2024, 1, 1)}}, TypeError),
            ({"input": {1: "int key"}}, TypeError),
            ({"input": {"nan": float("nan")}}, ValueError),
            ({"input": ["not", "a", "dict"]}, TypeError),
            ({"input": {"big": "x" * (16 * 1024 * 1024)}}, ValueError),
            ({"max_attempts": 0}, ValueError),
            ({"max_attempts": True}, TypeError),
            ({"due_at": -1}, ValueError),
            ({"due_at": 1.5}, TypeError),
            ({"space_id": "1"}, TypeError),
            ({"space_id": 2**63}, ValueError),
            ({"missed": -1}, ValueError),
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

    # -- claim ----------------------------------------------------------------------------------------------

    async def test_claim_takes_due_jobs_oldest_first(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        await queue.enqueue(job("later", due_at=now + 3_600_000))
        await queue.enqueue(job("second", due_at=now - 1_000))
        await queue.enqueue(job("first", due_at=now - 2_000))
        await queue.enqueue(job("third", due_at=now - 500))
        taken = await queue.claim(worker_id="w1", lease_ms=30_000, limit=2)
        assert [j.id for j in taken] == ["first", "second"]
        taken += await queue.claim(worker_id="w1", lease_ms=30_000, limit=5)
        assert [j.id for j in taken] == ["first", "second", "third"]
        assert await queue.claim(worker_id="w1", lease_ms=30_000, limit=5) == []

    async def test_claim_marks_the_job_running_under_a_lease(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        before = await now_ms(queue)
        taken = await claim_one(queue, "worker-a", lease_ms=45_000)
        after = await now_ms(queue)
        assert (taken.status, taken.attempts, taken.worker_id) == ("running", 1, "worker-a")
        assert taken.lease_until is not None and before + 45_000 <= taken.lease_until <= after + 45_000
        stored = await queue.get_job([1], "job-1")
        assert stored is not None and stored.status == "running" and stored.lease_until == taken.lease_until

    async def test_claim_with_limit_zero_takes_nothing(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        assert await queue.claim(worker_id="w1", lease_ms=1_000, limit=0) == []

    async def test_concurrent_claimers_never_share_a_job(self, queue: JobQueue) -> None:
        await queue.enqueue_many([job(f"j-{n}") for n in range(60)])

        async def claimer(name: str) -> list[str]:
            got: list[str] = []
            while True:
                batch = await queue.claim(worker_id=name, lease_ms=60_000, limit=3)
                if not batch:
                    return got
                got += [j.id for j in batch]

        results = await asyncio.gather(*(claimer(f"w{n}") for n in range(8)))
        everything = [i for r in results for i in r]
        assert sorted(everything) == sorted(f"j-{n}" for n in range(60))

    async def test_a_lapsed_lease_is_taken_over_with_a_lost_attempt(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        first = await claim_one(queue, "dead-worker", lease_ms=50)
        taken = await eventually(
            lambda: queue.claim(worker_id="rescuer", lease_ms=60_000, limit=1), bool, "the lease lapsing"
        )
        assert taken[0].worker_id == "rescuer" and taken[0].attempts == 2
        (lost,) = taken[0].history
        assert (lost.attempt, lost.status, lost.worker_id) == (1, "lost", "dead-worker")
        assert lost.error and "stopped reporting" in lost.error
        assert lost.started_at == first.updated_at and lost.ended_at >= lost.started_at + 50

    async def test_a_job_that_keeps_losing_its_worker_ends_dead(self, queue: JobQueue) -> None:
        await queue.enqueue(job(max_attempts=2))
        await claim_one(queue, "w1", lease_ms=50)
        await eventually(lambda: queue.claim(worker_id="w2", lease_ms=50, limit=1), bool, "the first takeover")

        async def lapsed_twice() -> Job | None:
            assert await queue.claim(worker_id="w3", lease_ms=60_000, limit=1) == []
            return await queue.get_job([1], "job-1")

        dead = await eventually(lapsed_twice, lambda j: j is not None and j.status == "dead", "the job dying")
        assert dead is not None and dead.attempts == 2 and [a.status for a in dead.history] == ["lost", "lost"]
        assert dead.lease_until is None

    async def test_a_running_job_under_its_lease_is_not_claimed(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1", lease_ms=60_000)
        assert await queue.claim(worker_id="w2", lease_ms=60_000, limit=5) == []

    # -- heartbeat ------------------------------------------------------------------------------------------

    async def test_heartbeat_renews_only_the_holders_lease(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        taken = await claim_one(queue, "w1", lease_ms=1_000)
        assert await queue.heartbeat(job_ids=["job-1"], worker_id="w1", lease_ms=60_000) == []
        renewed = await queue.get_job([1], "job-1")
        assert renewed is not None and renewed.lease_until is not None
        assert renewed.lease_until >= (taken.lease_until or 0) + 50_000
        assert await queue.heartbeat(job_ids=["job-1", "nope"], worker_id="intruder", lease_ms=999_999) == []
        unchanged = await queue.get_job([1], "job-1")
        assert unchanged is not None and unchanged.lease_until == renewed.lease_until

    async def test_heartbeat_keeps_a_job_past_its_first_lease(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1", lease_ms=200)
        deadline = time.monotonic() + 0.6
        while time.monotonic() < deadline:
            await queue.heartbeat(job_ids=["job-1"], worker_id="w1", lease_ms=200)
            assert await queue.claim(worker_id="w2", lease_ms=1_000, limit=1) == []
            await asyncio.sleep(0.02)

    async def test_heartbeat_reports_an_operators_cancel(self, queue: JobQueue) -> None:
        await queue.enqueue_many([job("a"), job("b")])
        await queue.claim(worker_id="w1", lease_ms=60_000, limit=2)
        assert await queue.cancel([1], "b") is True
        assert await queue.heartbeat(job_ids=["a", "b"], worker_id="w1", lease_ms=60_000) == ["b"]
        assert await queue.heartbeat(job_ids=[], worker_id="w1", lease_ms=60_000) == []

    # -- settle ---------------------------------------------------------------------------------------------

    async def test_settle_records_the_attempt(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        taken = await claim_one(queue, "w1")
        await queue.cancel([1], "job-1")  # moves updated_at; the attempt still starts at the claim
        outcome = AttemptOutcome(status="succeeded", worker_id="w1", run_id="run-9")
        await queue.settle(job_id="job-1", worker_id="w1", status="succeeded", run_id="run-9", attempt=outcome)
        done = await queue.get_job([1], "job-1")
        assert done is not None and (done.status, done.run_id, done.lease_until) == ("succeeded", "run-9", None)
        (entry,) = done.history
        assert (entry.attempt, entry.status, entry.worker_id, entry.run_id) == (1, "succeeded", "w1", "run-9")
        assert entry.started_at == taken.updated_at and entry.ended_at >= entry.started_at

    async def test_settle_from_a_worker_that_does_not_hold_the_job_is_ignored(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1")
        await queue.settle(
            job_id="job-1", worker_id="intruder", status="failed", error="x",
            attempt=AttemptOutcome(status="failed", worker_id="intruder"),
        )
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "running" and found.history == () and found.error is None

    async def test_settle_after_a_takeover_is_ignored(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "slow", lease_ms=50)
        await eventually(lambda: queue.claim(worker_id="fast", lease_ms=60_000, limit=1), bool, "takeover")
        await queue.settle(job_id="job-1", worker_id="slow", status="succeeded",
                           attempt=AttemptOutcome(status="succeeded", worker_id="slow"))
        found = await queue.get_job([1], "job-1")
        assert found is not None and (found.status, found.worker_id) == ("running", "fast")
        assert [a.status for a in found.history] == ["lost"]

    async def test_a_lapsed_lease_nobody_took_still_settles(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        taken = await claim_one(queue, "w1", lease_ms=20)
        await eventually(lambda: now_ms(queue), lambda now: now > (taken.lease_until or 0), "the lease lapsing")
        await queue.settle(job_id="job-1", worker_id="w1", status="succeeded",
                           attempt=AttemptOutcome(status="succeeded", worker_id="w1"))
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "succeeded"

    async def test_a_retry_goes_back_to_pending_after_its_delay(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1")
        before = await now_ms(queue)
        await queue.settle(job_id="job-1", worker_id="w1", status="pending", delay_ms=60_000, error="boom",
                           attempt=AttemptOutcome(status="failed", worker_id="w1", error="boom"))
        found = await queue.get_job([1], "job-1")
        assert found is not None and (found.status, found.attempts, found.worker_id) == ("pending", 1, None)
        assert found.run_at >= before + 60_000 and found.error == "boom" and found.lease_until is None
        assert await queue.claim(worker_id="w1", lease_ms=1_000, limit=1) == []

    async def test_a_hand_back_refunds_the_attempt(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1")
        await queue.settle(job_id="job-1", worker_id="w1", status="pending")
        found = await queue.get_job([1], "job-1")
        assert found is not None and (found.status, found.attempts, found.history) == ("pending", 0, ())
        again = await claim_one(queue, "w2")
        assert again.attempts == 1

    async def test_attempts_are_numbered_by_the_history(self, queue: JobQueue) -> None:
        await queue.enqueue(job(max_attempts=5))
        for n in range(2):
            await claim_one(queue, "w1")
            await queue.settle(job_id="job-1", worker_id="w1", status="pending", delay_ms=0,
                               attempt=AttemptOutcome(status="failed", worker_id="w1", error=f"e{n}"))
        await claim_one(queue, "w1")
        await queue.settle(job_id="job-1", worker_id="w1", status="failed", error="gave up",
                           attempt=AttemptOutcome(status="failed", worker_id="w1", error="e2"))
        assert await queue.requeue([1], "job-1")
        await claim_one(queue, "w1")
        await queue.settle(job_id="job-1", worker_id="w1", status="succeeded",
                           attempt=AttemptOutcome(status="succeeded", worker_id="w1"))
        found = await queue.get_job([1], "job-1")
        assert found is not None
        assert [(a.attempt, a.status) for a in found.history] == [
            (1, "failed"), (2, "failed"), (3, "failed"), (4, "succeeded"),
        ]
        assert found.attempts == 1 and found.error is None

    async def test_settle_keeps_the_run_id_when_none_is_given(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1")
        await queue.settle(job_id="job-1", worker_id="w1", status="pending", run_id="run-1")
        await claim_one(queue, "w1")
        await queue.settle(job_id="job-1", worker_id="w1", status="succeeded")
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.run_id == "run-1"

    # -- schedules ------------------------------------------------------------------------------------------

    async def test_due_schedules_are_the_enabled_ones_oldest_first(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        await queue.put_schedules(space_id=1, schedules=[
            schedule("b", next_run_at=now - 1_000),
            schedule("a", next_run_at=now - 2_000),
            schedule("off", next_run_at=now - 5_000, enabled=False),
            schedule("future", next_run_at=now + 3_600_000),
        ])
        due = await queue.due_schedules(10)
        assert [s.action_id for s in due] == ["a", "b"]
        assert [s.action_id for s in await queue.due_schedules(1)] == ["a"]
        assert due[0].missed == 0 and due[0].last_fire_at is None

    async def test_advance_schedule_is_a_compare_and_set(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=1_000)])
        answers = await asyncio.gather(*(
            queue.advance_schedule(space_id=1, action_id="s", from_at=1_000, to_at=2_000 + n, missed=3)
            for n in range(10)
        ))
        assert answers.count(True) == 1
        (stored,) = await queue.list_schedules([1])
        assert stored.next_run_at == 2_000 + answers.index(True)
        assert (stored.last_fire_at, stored.missed) == (1_000, 3)
        assert not await queue.advance_schedule(space_id=1, action_id="s", from_at=1_000, to_at=9, missed=0)
        assert not await queue.advance_schedule(space_id=1, action_id="nope", from_at=1_000, to_at=9, missed=0)

    async def test_put_schedules_makes_the_space_exactly_the_given_set(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("a"), schedule("b")])
        await queue.put_schedules(space_id=2, schedules=[schedule("a", space_id=2)])
        await queue.put_schedules(space_id=1, schedules=[schedule("b"), schedule("c")])
        assert [s.action_id for s in await queue.list_schedules([1])] == ["b", "c"]
        assert [(s.space_id, s.action_id) for s in await queue.list_schedules([2])] == [(2, "a")]
        await queue.put_schedules(space_id=1, schedules=[])
        assert await queue.list_schedules([1]) == []
        assert len(await queue.list_schedules([1, 2])) == 1
        assert await queue.list_schedules([]) == []

    async def test_an_unchanged_schedule_keeps_its_promised_fire(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=1_000, timezone="UTC")])
        await queue.advance_schedule(space_id=1, action_id="s", from_at=1_000, to_at=5_000, missed=2)
        await queue.put_schedules(
            space_id=1, schedules=[schedule("s", next_run_at=9_000, timezone="UTC", max_attempts=7)]
        )
        (kept,) = await queue.list_schedules([1])
        assert (kept.next_run_at, kept.missed, kept.last_fire_at, kept.max_attempts) == (5_000, 2, 1_000, 7)
        await queue.put_schedules(space_id=1, schedules=[schedule("s", cron="0 * * * *", next_run_at=9_000)])
        (changed,) = await queue.list_schedules([1])
        assert (changed.next_run_at, changed.cron, changed.timezone) == (9_000, "0 * * * *", None)

    async def test_a_schedule_switched_back_on_takes_the_new_fire(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=1_000)])
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=2_000, enabled=False)])
        (off,) = await queue.list_schedules([1])
        assert (off.enabled, off.next_run_at) == (False, 1_000)
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=3_000)])
        (on,) = await queue.list_schedules([1])
        assert (on.enabled, on.next_run_at) == (True, 3_000)

    async def test_put_schedules_refuses_another_spaces_schedule(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("keep")])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x"), schedule("y", space_id=2)])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x", cron="* * * *")])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x", timezone="Mars/Olympus")])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x"), schedule("x")])
        assert [s.action_id for s in await queue.list_schedules([1])] == ["keep"]

    async def test_concurrent_writers_leave_one_writers_set(self, queue: JobQueue) -> None:
        sets = [[schedule(f"w{w}-{n}") for n in range(5)] for w in range(6)]
        await asyncio.gather(*(queue.put_schedules(space_id=1, schedules=s) for s in sets))
        names = sorted(s.action_id for s in await queue.list_schedules([1]))
        assert names in [sorted(s.action_id for s in one) for one in sets]

    # -- the operator's view --------------------------------------------------------------------------------

    async def test_list_jobs_pages_newest_first(self, queue: JobQueue) -> None:
        for n in range(5):
            await queue.enqueue(job(f"j{n}", action_id="even" if n % 2 == 0 else "odd"))
        await queue.enqueue(job("elsewhere", space_id=2))
        enqueued = await now_ms(queue)
        await eventually(lambda: now_ms(queue), lambda t: t > enqueued, "the store clock moving on")
        await queue.claim(worker_id="w1", lease_ms=60_000, limit=1)  # j0 becomes the most recently updated
        page = await queue.list_jobs(space_ids=[1], limit=2)
        assert page.total == 5 and page.jobs[0].id == "j0" and len(page.jobs) == 2
        assert (await queue.list_jobs(space_ids=[1], action_id="even")).total == 3
        running = await queue.list_jobs(space_ids=[1], status="running")
        assert [j.id for j in running.jobs] == ["j0"]
        rest = await queue.list_jobs(space_ids=[1], limit=50, offset=2)
        assert len(rest.jobs) == 3 and rest.total == 5
        assert (await queue.list_jobs(space_ids=[1, 2])).total == 6
        assert (await queue.list_jobs(space_ids=[])).total == 0

    async def test_get_job_answers_only_within_the_listed_spaces(self, queue: JobQueue) -> None:
        await queue.enqueue(job(space_id=7))
        assert await queue.get_job([1], "job-1") is None
        assert await queue.get_job([], "job-1") is None
        assert await queue.get_job([1, 7], "job-1") is not None

    async def test_requeue_sends_a_finished_job_back(self, queue: JobQueue) -> None:
        await queue.enqueue(job(max_attempts=1))
        await claim_one(queue, "w1")
        assert await queue.requeue([1], "job-1") is False  # running, not finished
        await queue.settle(job_id="job-1", worker_id="w1", status="dead", error="boom",
                           attempt=AttemptOutcome(status="failed", worker_id="w1", error="boom"))
        assert await queue.requeue([2], "job-1") is False
        before = await now_ms(queue)
        assert await queue.requeue([1], "job-1") is True
        again = await queue.get_job([1], "job-1")
        assert again is not None
        assert (again.status, again.attempts, again.error, again.worker_id) == ("pending", 0, None, None)
        assert again.run_at >= before and len(again.history) == 1 and again.cancel_requested is False
        assert await queue.requeue([1], "job-1") is False
        assert await queue.requeue([], "job-1") is False

    async def test_cancel(self, queue: JobQueue) -> None:
        await queue.enqueue_many([job("running"), job("waiting")])
        assert (await claim_one(queue, "w1")).id == "running"  # enqueued first, so claimed first
        assert await queue.cancel([2], "waiting") is False
        assert await queue.cancel([1], "waiting") is True
        cancelled = await queue.get_job([1], "waiting")
        assert cancelled is not None and (cancelled.status, cancelled.worker_id) == ("cancelled", None)
        assert await queue.cancel([1], "running") is True
        assert await queue.cancel([1], "running") is True  # asked again: still a running job under cancel
        flagged = await queue.get_job([1], "running")
        assert flagged is not None and (flagged.status, flagged.cancel_requested) == ("running", True)
        assert await queue.cancel([1], "waiting") is False
        assert await queue.cancel([1], "missing") is False
        assert await queue.cancel([], "running") is False

    async def test_cancel_pending_by_key(self, queue: JobQueue) -> None:
        for n in range(4):
            await queue.enqueue(job(f"k{n}", key="digest"))
        await queue.enqueue(job("other-key", key="other"))
        await queue.enqueue(job("other-space", space_id=2, key="digest"))
        assert await queue.cancel_pending(space_id=1, key="digest", older_than="k2") == 2
        statuses = {j.id: j.status for j in (await queue.list_jobs(space_ids=[1, 2])).jobs}
        assert statuses == {
            "k0": "cancelled", "k1": "cancelled", "k2": "pending", "k3": "pending",
            "other-key": "pending", "other-space": "pending",
        }
        assert await queue.cancel_pending(space_id=1, key="digest", older_than="unknown") == 0
        await claim_one(queue, "w1")  # k2 (oldest pending) starts running and must be left alone
        assert await queue.cancel_pending(space_id=1, key="digest") == 1
        found = await queue.get_job([1], "k2")
        assert found is not None and found.status == "running"

    async def test_cancel_pending_orders_by_enqueue_within_a_millisecond(self, queue: JobQueue) -> None:
        await queue.enqueue_many([job(f"same-ms-{n}", key="k") for n in range(6)])
        assert await queue.cancel_pending(space_id=1, key="k", older_than="same-ms-3") == 3
        page = await queue.list_jobs(space_ids=[1], status="pending")
        assert sorted(j.id for j in page.jobs) == ["same-ms-3", "same-ms-4", "same-ms-5"]


class KvContract:
    """The key/value contract. Supply a `kv` fixture yielding a fresh, empty `KvStore`."""

    pytestmark = pytest.mark.asyncio

    async def test_set_get_delete(self, kv: KvStore) -> None:
        assert await kv.get("k") is None
        await kv.set("k", "v")
        assert await kv.get("k") == "v"
        await kv.set("k", "w")
        assert await kv.get("k") == "w"
        await kv.delete("k")
        await kv.delete("k")
        assert await kv.get("k") is None

    async def test_keys_are_compared_byte_for_byte(self, kv: KvStore) -> None:
        keys = ["Board", "board", "board ", "bóard", "bo\u0301ard", ""]
        for n, key in enumerate(keys):
            await kv.set(key, str(n))
        assert [await kv.get(key) for key in keys] == [str(n) for n in range(len(keys))]

    async def test_values_round_trip_whole(self, kv: KvStore) -> None:
        value = "😀 \x00 'quoted' \"double\" \\ ; DROP TABLE x; --" + "é" * 10_000
        await kv.set("hostile", value)
        assert await kv.get("hostile") == value
        await kv.set("empty", "")
        assert await kv.get("empty") == ""

    async def test_a_key_past_its_lifetime_answers_nothing(self, kv: KvStore) -> None:
        await kv.set("short", "v", ttl_seconds=0.05)
        await kv.set("long", "v", ttl_seconds=60)
        assert await kv.get("long") == "v"
        await eventually(lambda: kv.get("short"), lambda v: v is None, "the key lapsing")
        assert await kv.get("long") == "v"

    async def test_set_replaces_the_lifetime(self, kv: KvStore) -> None:
        await kv.set("k", "v", ttl_seconds=0.05)
        await kv.set("k", "w")
        await asyncio.sleep(0.1)  # past the first lifetime, which must be gone
        assert await kv.get("k") == "w"

    async def test_increment(self, kv: KvStore) -> None:
        assert await kv.increment("n") == 1
        assert await kv.increment("n", 41) == 42
        assert await kv.increment("n", -50) == -8
        assert await kv.get("n") == "-8"
        await kv.set("big", str(2**63 - 2))
        assert await kv.increment("big") == 2**63 - 1
        with pytest.raises(ValueError):
            await kv.increment("big")
        assert await kv.get("big") == str(2**63 - 1)

    async def test_increments_do_not_race(self, kv: KvStore) -> None:
        results = await asyncio.gather(*(kv.increment("n") for _ in range(40)))
        assert sorted(results) == list(range(1, 41))
        assert await kv.get("n") == "40"

    async def test_increment_keeps_a_live_lifetime_and_restarts_a_lapsed_key(self, kv: KvStore) -> None:
        await kv.set("n", "5", ttl_seconds=0.2)
        assert await kv.increment("n") == 6
        await eventually(lambda: kv.get("n"), lambda v: v is None, "the counter lapsing")
        assert await kv.increment("n", 3) == 3
        await asyncio.sleep(0.25)  # the old lifetime is lost with the old value
        assert await kv.get("n") == "3"

    async def test_increment_refuses_what_is_not_a_counter(self, kv: KvStore) -> None:
        for text in ["abc", "1.5", "", " 1", "1e3", "99999999999999999999"]:
            await kv.set("text", text)
            with pytest.raises(ValueError):
                await kv.increment("text")
            assert await kv.get("text") == text
        with pytest.raises(TypeError):
            await kv.increment("n", 1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await kv.increment("n", True)
        assert await kv.get("n") is None

    async def test_expire(self, kv: KvStore) -> None:
        await kv.set("k", "v")
        await kv.expire("k", 0.05)
        await eventually(lambda: kv.get("k"), lambda v: v is None, "the key lapsing")
        await kv.expire("missing", 10)
        assert await kv.get("missing") is None

    async def test_swap_only_if_absent(self, kv: KvStore) -> None:
        assert await kv.swap("k", None, "first") is True
        assert await kv.swap("k", None, "second") is False
        assert await kv.get("k") == "first"

    async def test_a_lapsed_key_is_absent_for_swap(self, kv: KvStore) -> None:
        await kv.set("k", "old", ttl_seconds=0.05)
        await eventually(lambda: kv.get("k"), lambda v: v is None, "the key lapsing")
        assert await kv.swap("k", "old", "x") is False
        assert await kv.swap("k", None, "new") is True
        assert await kv.get("k") == "new"

    async def test_swap_compares_the_exact_value(self, kv: KvStore) -> None:
        await kv.set("k", "v")
        assert await kv.swap("k", "V", "x") is False
        assert await kv.swap("k", "v ", "x") is False
        assert await kv.swap("k", "v", "w") is True
        assert await kv.swap("k", "w", "w") is True  # writing back the same value is a success
        assert await kv.get("k") == "w"

    async def test_swap_gives_the_written_value_its_lifetime(self, kv: KvStore) -> None:
        await kv.set("k", "v")
        assert await kv.swap("k", "v", "v", ttl_seconds=0.05) is True
        await eventually(lambda: kv.get("k"), lambda v: v is None, "the key lapsing")
        assert await kv.swap("t", None, "token", ttl_seconds=60) is True
        assert await kv.swap("t", "token", "token") is True  # no lifetime now, as `set` would
        await asyncio.sleep(0.05)
        assert await kv.get("t") == "token"

    async def test_exactly_one_racing_writer_wins(self, kv: KvStore) -> None:
        answers = await asyncio.gather(*(kv.swap("lock", None, f"w{n}", ttl_seconds=30) for n in range(20)))
        assert answers.count(True) == 1
        assert await kv.get("lock") == f"w{answers.index(True)}"
        await kv.set("cas", "0")
        moved = await asyncio.gather(*(kv.swap("cas", "0", f"w{n}") for n in range(20)))
        assert moved.count(True) == 1

    @pytest.mark.parametrize(
        ("call", "error"),
        [
            (lambda kv: kv.set("k" * 765, "v"), ValueError),
            (lambda kv: kv.set("😀" * 192, "v"), ValueError),
            (lambda kv: kv.get("é" * 383), ValueError),
            (lambda kv: kv.set("k", "v", ttl_seconds=0), ValueError),
            (lambda kv: kv.set("k", "v", ttl_seconds=-1), ValueError),
            (lambda kv: kv.set("k", "v", ttl_seconds=float("inf")), ValueError),
            (lambda kv: kv.expire("k", 0), ValueError),
            (lambda kv: kv.swap("k", None, "v", ttl_seconds=0), ValueError),
            (lambda kv: kv.set("k", 5), TypeError),
            (lambda kv: kv.set(5, "v"), TypeError),
            (lambda kv: kv.set("k", "\ud800"), ValueError),
            (lambda kv: kv.set("k", "x" * (16 * 1024 * 1024 + 1)), ValueError),
        ],
    )
    async def test_bad_input_is_refused_before_anything_is_written(
        self, kv: KvStore, call: Callable[[KvStore], Awaitable[Any]], error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            await call(kv)
        assert await kv.get("k") is None

    async def test_the_longest_key_fits_whole(self, kv: KvStore) -> None:
        longest = "😀" * 191  # 764 bytes
        await kv.set(longest, "v")
        assert await kv.get(longest) == "v"
        assert await kv.get(longest[:-1]) is None
