"""The rules of the capabilities a store may offer (contract/capabilities.py), checked for every store that offers
them and skipped for one that does not: the worker takes these faster paths wherever they are offered, so they
must write exactly what the plain calls would."""

from __future__ import annotations

import asyncio

import pytest

from ..contract.capabilities import AnnouncesDueJobs, DeletesUnchanged, SettlesSucceeded, TakesAbsent
from ..contract.protocols import JobQueue, KvStore
from ..records import AttemptOutcome, SucceededJob
from .support import Advance, claim_one, eventually, job, now_ms, offers, settled_fields


class CapabilityContract:
    """`SettlesSucceeded` and `AnnouncesDueJobs` (a part of `JobQueueContract`)."""

    async def test_settle_succeeded_writes_what_each_jobs_settle_writes(self, queue: JobQueue) -> None:
        batching: SettlesSucceeded = offers(queue, SettlesSucceeded)
        run_ids = ["run-1", None, "run-3 ✓"]
        await queue.enqueue_many([job(f"{kind}-{n}") for n in range(3) for kind in ("one", "many")] + [job("theirs")])
        claimed = {j.id: j for j in await queue.claim(worker_id="w", lease_ms=60_000, limit=6)}
        assert len(claimed) == 6
        await claim_one(queue, "other")  # "theirs": held by another worker
        for n, run_id in enumerate(run_ids):
            outcome = AttemptOutcome(status="succeeded", worker_id="w", run_id=run_id)
            await queue.settle(
                job_id=f"one-{n}", worker_id="w", status="succeeded", run_id=run_id, attempt=outcome,
                claimed_at=claimed[f"one-{n}"].claimed_at,
            )  # fmt: skip
        batch = [
            SucceededJob(job_id=f"many-{n}", run_id=run_id, claimed_at=claimed[f"many-{n}"].claimed_at)
            for n, run_id in enumerate(run_ids)
        ]
        await batching.settle_succeeded(worker_id="w", jobs=[*batch, SucceededJob(job_id="theirs", run_id="x")])
        for n in range(3):
            one, many = await queue.get_job([1], f"one-{n}"), await queue.get_job([1], f"many-{n}")
            assert settled_fields(many) == settled_fields(one)
            assert many is not None and many.status == "succeeded" and many.run_id == run_ids[n]
            assert [(a.attempt, a.status, a.worker_id, a.run_id) for a in many.history] == [
                (1, "succeeded", "w", run_ids[n])
            ]
        theirs = await queue.get_job([1], "theirs")
        assert theirs is not None and (theirs.status, theirs.worker_id, theirs.history) == ("running", "other", ())
        before = [await queue.get_job([1], f"many-{n}") for n in range(3)]
        await batching.settle_succeeded(worker_id="w", jobs=batch)  # a repeat (a lost reply's retry) changes nothing
        assert [await queue.get_job([1], f"many-{n}") for n in range(3)] == before

    async def test_settle_succeeded_leaves_a_later_claim_of_the_same_worker_alone(
        self, queue: JobQueue, advance: Advance
    ) -> None:
        batching: SettlesSucceeded = offers(queue, SettlesSucceeded)
        await queue.enqueue_many([job("lapsed"), job("twice"), job("plain")])
        first = {j.id: j for j in await queue.claim(worker_id="w", lease_ms=50, limit=3)}
        await advance(51)
        again = {j.id: j for j in await queue.claim(worker_id="w", lease_ms=60_000, limit=3)}
        assert sorted(again) == ["lapsed", "plain", "twice"]
        await batching.settle_succeeded(
            worker_id="w",
            jobs=[
                SucceededJob(job_id="lapsed", claimed_at=first["lapsed"].claimed_at),  # the earlier claim's: ignored
                SucceededJob(job_id="twice", claimed_at=again["twice"].claimed_at),
                SucceededJob(job_id="twice", run_id="second mention", claimed_at=again["twice"].claimed_at),
                SucceededJob(job_id="plain"),  # no claim instant: any claim the worker holds
            ],
        )
        lapsed, twice, plain = [await queue.get_job([1], i) for i in ("lapsed", "twice", "plain")]
        assert lapsed is not None and lapsed.status == "running"
        assert twice is not None and twice.status == "succeeded" and twice.run_id is None
        assert [a.status for a in twice.history] == ["lost", "succeeded"]
        assert plain is not None and plain.status == "succeeded"
        await batching.settle_succeeded(worker_id="w", jobs=[])  # nothing to do
        with pytest.raises(TypeError):
            await batching.settle_succeeded(worker_id="w", jobs=[("lapsed", None)])  # type: ignore[list-item]
        with pytest.raises(ValueError):
            await batching.settle_succeeded(worker_id="w", jobs=[SucceededJob(job_id="lapsed", run_id="r" * 192)])
        found = await queue.get_job([1], "lapsed")
        assert found is not None and found.status == "running"

    async def test_a_job_enqueued_due_is_announced_and_one_due_later_is_not(self, queue: JobQueue) -> None:
        announcing: AnnouncesDueJobs = offers(queue, AnnouncesDueJobs)
        assert isinstance(announcing.wakeup_topic, str) and announcing.wakeup_topic
        woken: list[str] = []
        unsubscribe = announcing.wakeups.subscribe(announcing.wakeup_topic, lambda: woken.append("woken"))
        try:
            now = await now_ms(queue)
            await queue.enqueue(job("later", due_at=now + 3_600_000))
            await queue.enqueue_many([job("later-too", due_at=now + 3_600_000)])
            await asyncio.sleep(0)  # a notification reaches a subscriber on this loop at once
            assert woken == []
            await queue.enqueue(job("due", due_at=now))
            await eventually(lambda: _now(woken), lambda seen: len(seen) >= 1, "the enqueue's wake-up")
            await queue.enqueue_many([job("due-too", due_at=now)])
            await eventually(lambda: _now(woken), lambda seen: len(seen) >= 2, "the batch's wake-up")
        finally:
            unsubscribe()


async def _now(value: list[str]) -> list[str]:
    return list(value)


class KvCapabilityContract:
    """`TakesAbsent` and `DeletesUnchanged` (a part of `KvContract`)."""

    async def test_take_absent_answers_per_key_as_swap_from_absent_would(self, kv: KvStore) -> None:
        taking: TakesAbsent = offers(kv, TakesAbsent)
        await kv.set("held", "someone-else", 60)
        await kv.set("lapsed", "old", 0.05)
        await eventually(lambda: kv.get("lapsed"), lambda value: value is None, "the key lapsing")
        answers = await taking.take_absent([("free", "me-1"), ("held", "me-2"), ("lapsed", "me-3"), ("a ", "me-4")], 60)
        assert answers == [True, False, True, True]
        assert [await kv.get(k) for k in ("free", "held", "lapsed", "a ", "a")] == [
            "me-1", "someone-else", "me-3", "me-4", None,
        ]  # fmt: skip
        with pytest.raises(ValueError):
            await taking.take_absent([("dup", "x"), ("dup", "y")], 60)
        with pytest.raises(ValueError):
            await taking.take_absent([("k" * 800, "x")], 60)
        assert await kv.get("dup") is None
        assert await taking.take_absent([], 60) == []

    async def test_take_absent_finds_a_key_holding_the_very_value_given_present(self, kv: KvStore) -> None:
        # As swap(key, None, value): a live key is present whatever it holds, the value given included (a worker's
        # own token on a job it still runs must not let it start the job twice).
        taking: TakesAbsent = offers(kv, TakesAbsent)
        await kv.set("mine", "me-1", 60)
        assert await taking.take_absent([("mine", "me-1"), ("free", "me-2")], 60) == [False, True]
        assert await taking.take_absent([("mine", "me-1")], 60) == [False]
        assert await taking.take_absent([("free", "me-2"), ("mine", "me-1")], None) == [False, False]
        assert [await kv.get(k) for k in ("mine", "free")] == ["me-1", "me-2"]

    async def test_delete_unchanged_deletes_only_keys_still_holding_their_value(self, kv: KvStore) -> None:
        deleting: DeletesUnchanged = offers(kv, DeletesUnchanged)
        for key, value in (("mine", "me-1"), ("taken", "someone-else"), ("also-mine", "me-2")):
            await kv.set(key, value, 60)
        await deleting.delete_unchanged(
            [("mine", "me-1"), ("taken", "me-2"), ("also-mine", "me-2"), ("missing", "x"), ("mine ", "me-1")]
        )
        assert [await kv.get(k) for k in ("mine", "taken", "also-mine")] == [None, "someone-else", None]
        with pytest.raises(ValueError):
            await deleting.delete_unchanged([("k" * 800, "x")])
        await deleting.delete_unchanged([])
