"""The queue's contract for the release 0.2 extensions every store keeps alike: the bulk operations, and
`complete_in` / `enqueue(..., connection=)` inside a caller's transaction. The `transaction` fixture opens one on
the store's connection and yields it; its default yields None (a store without connections, or one whose
`connection=None` means its own transaction, as both of the package's stores)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from ..contract.capabilities import BulkOperations, CompletesIn
from ..contract.protocols import JobQueue
from ..errors import LeaseLostError
from ..records import AttemptOutcome
from .support import claim_one, job, offers, settled_fields

#: Opens a transaction on the store's connection and yields it (None for a store without connections); it commits
#: on the way out, or rolls back when the block raised.
Transaction = Callable[[], AbstractAsyncContextManager[Any]]


@contextlib.asynccontextmanager
async def no_transaction() -> AsyncIterator[None]:
    yield None


class BulkContract:
    """`cancel_all`, `retry_all` (`BulkOperations`), and `complete_in` (`CompletesIn`): a part of
    `JobQueueContract`."""

    @pytest.fixture
    def transaction(self) -> Transaction:
        return no_transaction

    async def test_cancel_all_cancels_waiting_jobs_and_asks_running_ones_to_stop(self, queue: JobQueue) -> None:
        bulk: BulkOperations = offers(queue, BulkOperations)
        await queue.enqueue_many([job("run"), job("wait-1"), job("wait-2"), job("other", action_id="other"),
                                  job("elsewhere", space_id=2), job("later", due_at=2**42)])  # fmt: skip
        await claim_one(queue, "w")  # "run", the oldest
        assert await queue.enqueue(job("far", due_at=2**42))  # enqueued after the claim: waiting, far off
        with pytest.raises(ValueError):
            await bulk.cancel_all(space_id=1, action_id="")
        with pytest.raises(TypeError):
            await bulk.cancel_all(space_id="1")  # type: ignore[arg-type]
        assert await bulk.cancel_all(space_id=1, action_id="action-1") == 5  # run, wait-1, wait-2, later, far
        found = {i: await queue.get_job([1, 2], i) for i in ("run", "wait-1", "later", "other", "elsewhere")}
        assert {i: (j.status, j.cancel_requested) for i, j in found.items() if j} == {
            "run": ("running", True), "wait-1": ("cancelled", False), "later": ("cancelled", False),
            "other": ("pending", False), "elsewhere": ("pending", False),
        }  # fmt: skip
        assert await bulk.cancel_all(space_id=1, action_id="action-1") == 0  # asked already: nothing changes
        assert await queue.heartbeat(job_ids=["run"], worker_id="w", lease_ms=60_000) == ["run"]
        assert await bulk.cancel_all(space_id=1) == 1  # "other"
        assert await bulk.cancel_all(space_id=3) == 0

    async def test_retry_all_requeues_the_jobs_finished_in_that_status(self, queue: JobQueue) -> None:
        bulk: BulkOperations = offers(queue, BulkOperations)
        await queue.enqueue_many([job(f"j{n}", max_attempts=1) for n in range(5)] + [job("far", space_id=2)])
        claimed = {j.id: j for j in await queue.claim(worker_id="w", lease_ms=60_000, limit=6)}
        outcomes = {"j0": "dead", "j1": "dead", "j2": "failed", "j3": "succeeded", "j4": "dead", "far": "dead"}
        for job_id, status in outcomes.items():
            attempt = AttemptOutcome(status="failed", worker_id="w", error="no")
            await queue.settle(job_id=job_id, worker_id="w", status=status, error=None if status == "succeeded"
                               else "no", attempt=attempt, claimed_at=claimed[job_id].claimed_at)  # fmt: skip
        for bad in ("pending", "running", "nope", None):
            with pytest.raises(ValueError):
                await bulk.retry_all(space_id=1, status=bad)  # type: ignore[arg-type]
        assert await bulk.retry_all(space_id=1, action_id="other") == 0
        assert await bulk.retry_all(space_id=1) == 3
        found = {i: await queue.get_job([1], i) for i in outcomes if i != "far"}
        assert {i: j.status for i, j in found.items() if j} == {
            "j0": "pending", "j1": "pending", "j2": "failed", "j3": "succeeded", "j4": "pending",
        }  # fmt: skip
        for again in (found["j0"], found["j1"], found["j4"]):  # as `requeue` leaves a job; its history kept
            assert again is not None and (again.attempts, again.error, again.worker_id, len(again.history)) == (
                0, None, None, 1,
            )  # fmt: skip
        claimable = {j.id for j in await queue.claim(worker_id="w2", lease_ms=60_000, limit=10)}
        assert claimable and claimable <= {"j0", "j1", "j4"}
        assert await bulk.retry_all(space_id=1, status="failed") == 1
        assert await bulk.retry_all(space_id=1, status="failed") == 0
        succeeded, far = await queue.get_job([1], "j3"), await queue.get_job([2], "far")
        assert succeeded is not None and succeeded.status == "succeeded"
        assert far is not None and far.status == "dead"

    async def test_complete_in_writes_what_settle_writes(self, queue: JobQueue, transaction: Transaction) -> None:
        completing: CompletesIn = offers(queue, CompletesIn)
        await queue.enqueue_many([job("settled"), job("completed")])
        held = {j.id: j for j in await queue.claim(worker_id="w", lease_ms=60_000, limit=2)}
        outcome = AttemptOutcome(status="succeeded", worker_id="w", run_id="run ✓")
        await queue.settle(job_id="settled", worker_id="w", status="succeeded", run_id="run ✓", attempt=outcome,
                           claimed_at=held["settled"].claimed_at)  # fmt: skip
        async with transaction() as connection:
            await completing.complete_in(connection, job_id="completed", worker_id="w", run_id="run ✓")
        settled, completed = await queue.get_job([1], "settled"), await queue.get_job([1], "completed")
        assert settled_fields(completed) == settled_fields(settled)
        assert completed is not None and completed.status == "succeeded" and completed.run_id == "run ✓"
        # The worker's own settle afterwards changes nothing.
        await queue.settle(job_id="completed", worker_id="w", status="succeeded", run_id="other", attempt=outcome,
                           claimed_at=held["completed"].claimed_at)  # fmt: skip
        assert await queue.get_job([1], "completed") == completed

    async def test_complete_in_raises_lease_lost_when_the_worker_does_not_hold_the_job(
        self, queue: JobQueue, transaction: Transaction
    ) -> None:
        completing: CompletesIn = offers(queue, CompletesIn)
        await queue.enqueue_many([job("theirs"), job("waiting", due_at=2**42)])
        await claim_one(queue, "other")
        for job_id in ("theirs", "waiting", "missing"):
            with pytest.raises(LeaseLostError):
                async with transaction() as connection:
                    await completing.complete_in(connection, job_id=job_id, worker_id="w")
        with pytest.raises(ValueError):
            async with transaction() as connection:
                await completing.complete_in(connection, job_id="theirs", worker_id="other", run_id="r" * 192)
        theirs = await queue.get_job([1], "theirs")
        assert theirs is not None and (theirs.status, theirs.worker_id, theirs.history) == ("running", "other", ())
        waiting = await queue.get_job([1], "waiting")
        assert waiting is not None and waiting.status == "pending"

    async def test_enqueue_in_a_transaction_creates_the_job_once(
        self, queue: JobQueue, transaction: Transaction
    ) -> None:
        enqueue: Any = queue  # `connection=` is an extension: a store's own may not take it
        offers(queue, CompletesIn)
        async with transaction() as connection:
            assert await enqueue.enqueue(job("one"), connection=connection)
            assert not await enqueue.enqueue(job("one"), connection=connection)
            assert await enqueue.enqueue_many([job("two"), job("one"), job("two")], connection=connection) == [
                True, False, False,
            ]  # fmt: skip
        assert not await queue.enqueue(job("two"))
        assert sorted(j.id for j in (await queue.list_jobs(space_ids=[1])).jobs) == ["one", "two"]
