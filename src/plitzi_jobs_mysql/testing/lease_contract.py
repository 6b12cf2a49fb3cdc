"""The queue's contract, part two: a job held by one worker at a time, from claim to settlement."""

from __future__ import annotations

import asyncio

import pytest

from ..contract.protocols import JobQueue
from ..records import AttemptOutcome
from .support import Advance, claim_one, job, now_ms


class LeaseContract:
    """`claim`, `heartbeat` and `settle` (a part of `JobQueueContract`)."""

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

    async def test_a_lapsed_lease_is_taken_over_with_a_lost_attempt(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue(job())
        first = await claim_one(queue, "dead-worker", lease_ms=50)
        await advance(51)
        taken = await queue.claim(worker_id="rescuer", lease_ms=60_000, limit=1)
        assert len(taken) == 1, "a lapsed lease is taken over"
        assert taken[0].worker_id == "rescuer" and taken[0].attempts == 2
        (lost,) = taken[0].history
        assert (lost.attempt, lost.status, lost.worker_id) == (1, "lost", "dead-worker")
        assert lost.error and "stopped reporting" in lost.error
        assert lost.started_at == first.updated_at and lost.ended_at >= lost.started_at + 50

    async def test_a_job_that_keeps_losing_its_worker_ends_dead(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue(job(max_attempts=2))
        await claim_one(queue, "w1", lease_ms=50)
        await advance(51)
        await claim_one(queue, "w2", lease_ms=50)  # the first takeover
        await advance(51)
        assert await queue.claim(worker_id="w3", lease_ms=60_000, limit=1) == []
        dead = await queue.get_job([1], "job-1")
        assert dead is not None and dead.status == "dead"
        assert dead is not None and dead.attempts == 2 and [a.status for a in dead.history] == ["lost", "lost"]
        assert dead.lease_until is None

    async def test_a_cancel_survives_a_lost_lease(self, queue: JobQueue, advance: Advance) -> None:
        # An operator's cancel of a job whose worker then died must reach whoever claims it next.
        await queue.enqueue(job())
        await claim_one(queue, "dead-worker", lease_ms=50)
        assert await queue.cancel([1], "job-1") is True
        await advance(51)
        taken = await claim_one(queue, "rescuer", lease_ms=60_000)
        assert (taken.status, taken.worker_id, taken.cancel_requested) == ("running", "rescuer", True)
        assert await queue.heartbeat(job_ids=["job-1"], worker_id="rescuer", lease_ms=60_000) == ["job-1"]

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

    async def test_heartbeat_keeps_a_job_past_its_first_lease(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1", lease_ms=200)
        for _ in range(6):  # three leases' worth of time, renewed every half lease
            await advance(100)
            await queue.heartbeat(job_ids=["job-1"], worker_id="w1", lease_ms=200)
            assert await queue.claim(worker_id="w2", lease_ms=1_000, limit=1) == []

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
            job_id="job-1",
            worker_id="intruder",
            status="failed",
            error="x",
            attempt=AttemptOutcome(status="failed", worker_id="intruder"),
        )
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "running" and found.history == () and found.error is None

    async def test_settle_after_a_takeover_is_ignored(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "slow", lease_ms=50)
        await advance(51)
        await claim_one(queue, "fast", lease_ms=60_000)  # the takeover
        await queue.settle(
            job_id="job-1",
            worker_id="slow",
            status="succeeded",
            attempt=AttemptOutcome(status="succeeded", worker_id="slow"),
        )
        found = await queue.get_job([1], "job-1")
        assert found is not None and (found.status, found.worker_id) == ("running", "fast")
        assert [a.status for a in found.history] == ["lost"]

    async def test_a_lapsed_lease_nobody_took_still_settles(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue(job())
        taken = await claim_one(queue, "w1", lease_ms=20)
        await advance(21)
        assert await now_ms(queue) > (taken.lease_until or 0)
        await queue.settle(
            job_id="job-1",
            worker_id="w1",
            status="succeeded",
            attempt=AttemptOutcome(status="succeeded", worker_id="w1"),
        )
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "succeeded"

    async def test_a_retry_goes_back_to_pending_after_its_delay(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1")
        before = await now_ms(queue)
        await queue.settle(
            job_id="job-1",
            worker_id="w1",
            status="pending",
            delay_ms=60_000,
            error="boom",
            attempt=AttemptOutcome(status="failed", worker_id="w1", error="boom"),
        )
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
            await queue.settle(
                job_id="job-1",
                worker_id="w1",
                status="pending",
                delay_ms=0,
                attempt=AttemptOutcome(status="failed", worker_id="w1", error=f"e{n}"),
            )
        await claim_one(queue, "w1")
        await queue.settle(
            job_id="job-1",
            worker_id="w1",
            status="failed",
            error="gave up",
            attempt=AttemptOutcome(status="failed", worker_id="w1", error="e2"),
        )
        assert await queue.requeue([1], "job-1")
        await claim_one(queue, "w1")
        await queue.settle(
            job_id="job-1",
            worker_id="w1",
            status="succeeded",
            attempt=AttemptOutcome(status="succeeded", worker_id="w1"),
        )
        found = await queue.get_job([1], "job-1")
        assert found is not None
        assert [(a.attempt, a.status) for a in found.history] == [
            (1, "failed"),
            (2, "failed"),
            (3, "failed"),
            (4, "succeeded"),
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

    # -- the claim instant ----------------------------------------------------------------------------------

    async def test_every_read_carries_the_instant_of_the_jobs_claim(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        waiting = await queue.get_job([1], "job-1")
        assert waiting is not None and waiting.claimed_at is None
        before = await now_ms(queue)
        taken = await claim_one(queue, "w1")
        assert taken.claimed_at is not None and taken.claimed_at >= before
        listed = (await queue.list_jobs(space_ids=[1])).jobs[0]
        stored = await queue.get_job([1], "job-1")
        assert stored is not None and stored.claimed_at == listed.claimed_at == taken.claimed_at

    async def test_claim_instants_of_one_job_strictly_increase(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue(job(max_attempts=50))
        instants: list[int | None] = []
        for _ in range(4):  # claimed again and again within a millisecond, where the clock allows it
            instants.append((await claim_one(queue, "w1")).claimed_at)
            await queue.settle(job_id="job-1", worker_id="w1", status="pending", claimed_at=instants[-1])
        instants.append((await claim_one(queue, "w1", lease_ms=50)).claimed_at)
        await advance(51)
        instants.append((await claim_one(queue, "w1")).claimed_at)  # a takeover, by the same worker
        known = [at for at in instants if at is not None]
        assert len(known) == len(instants)
        assert known == sorted(set(known)), known  # strictly increasing: no two claims share one

    async def test_a_settle_of_an_earlier_claim_is_ignored_even_from_the_same_worker(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        first = await claim_one(queue, "w1")
        await queue.settle(job_id="job-1", worker_id="w1", status="pending", claimed_at=first.claimed_at)
        second = await claim_one(queue, "w1")  # the hand-back refunded the attempt: attempts cannot tell them apart
        assert second.attempts == first.attempts and second.claimed_at != first.claimed_at
        for status in ("pending", "succeeded"):  # a hand-back retried after its reply was lost, a late success
            await queue.settle(job_id="job-1", worker_id="w1", status=status, claimed_at=first.claimed_at)
        found = await queue.get_job([1], "job-1")
        assert found is not None and (found.status, found.attempts, found.worker_id) == ("running", 1, "w1")
        outcome = AttemptOutcome(status="succeeded", worker_id="w1", run_id="r")
        await queue.settle(
            job_id="job-1",
            worker_id="w1",
            status="succeeded",
            run_id="r",
            attempt=outcome,
            claimed_at=second.claimed_at,
        )
        done = await queue.get_job([1], "job-1")
        assert done is not None and (done.status, done.run_id) == ("succeeded", "r")
        assert [(a.status, a.started_at) for a in done.history] == [("succeeded", second.claimed_at)]

    async def test_a_settle_of_a_lapsed_claim_the_same_worker_took_back_is_ignored(
        self, queue: JobQueue, advance: Advance
    ) -> None:
        await queue.enqueue(job())
        first = await claim_one(queue, "w1", lease_ms=50)
        await advance(51)
        second = await claim_one(queue, "w1")  # its heartbeats did not land: its own claim takes the job back
        assert [a.status for a in second.history] == ["lost"]
        outcome = AttemptOutcome(status="succeeded", worker_id="w1")
        await queue.settle(
            job_id="job-1", worker_id="w1", status="succeeded", attempt=outcome, claimed_at=first.claimed_at
        )
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "running" and [a.status for a in found.history] == ["lost"]
        await queue.settle(
            job_id="job-1", worker_id="w1", status="succeeded", attempt=outcome, claimed_at=second.claimed_at
        )
        done = await queue.get_job([1], "job-1")
        assert done is not None and [(a.attempt, a.status) for a in done.history] == [(1, "lost"), (2, "succeeded")]

    async def test_a_bad_claim_instant_is_refused(self, queue: JobQueue) -> None:
        await queue.enqueue(job())
        await claim_one(queue, "w1")
        for bad, error in ((-1, ValueError), ("1", TypeError), (1.5, TypeError)):
            with pytest.raises(error):
                await queue.settle(job_id="job-1", worker_id="w1", status="succeeded", claimed_at=bad)  # type: ignore[arg-type]
        found = await queue.get_job([1], "job-1")
        assert found is not None and found.status == "running"
