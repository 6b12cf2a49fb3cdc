"""A worker's own claim handing it a job it still holds (issue 18, items 1 and 2): never two runs at once, and a
settle of the earlier claim never lands on the later one. Written once, run on each store: tests/unit runs them on
the memory queue, tests/mysql on MySQL (a subclass supplies `store`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from plitzi_jobs_mysql.contract.protocols import JobQueue, KvStore
from plitzi_jobs_mysql.errors import StoreUnavailableError
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import RetryLater, create_job_worker

from .support import Clock, Gate, Proxy, T, eventually, job, wait_for, wait_for_job

#: Builds the store under test on a clock the test moves: (queue, kv), the kv None unless `with_kv`.
Store = Callable[[Clock, bool], tuple[JobQueue, KvStore | None]]


class LostHandBackReply:
    """The queue, with the first hand-back of a job applied by the store and its reply lost (a cut connection),
    and the worker's retry of it held until `go` is set (`retried` once it returned)."""

    def __init__(self, inner: JobQueue) -> None:
        self.inner = inner
        self.hand_backs = 0
        self.go = asyncio.Event()
        self.retried = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def settle(self, **kwargs: Any) -> None:
        if kwargs["status"] == "pending" and kwargs.get("attempt") is None:
            self.hand_backs += 1
            if self.hand_backs == 1:
                await self.inner.settle(**kwargs)
                raise StoreUnavailableError("the connection was cut after the statement reached the server")
            if self.hand_backs == 2:
                await self.go.wait()
                try:
                    await self.inner.settle(**kwargs)
                finally:
                    self.retried.set()
                return
        await self.inner.settle(**kwargs)


class Reclaims:
    """The scenarios; a subclass supplies the `store` fixture."""

    @pytest.fixture(params=[False, True], ids=["no-kv", "kv"])
    def with_kv(self, request: pytest.FixtureRequest) -> bool:
        return bool(request.param)

    async def test_a_lease_that_lapsed_under_a_running_handler_is_taken_back_without_a_second_run(
        self, store: Store, with_kv: bool
    ) -> None:
        clock = Clock(T)
        queue, kv = store(clock, with_kv)
        await queue.enqueue(job("a", due_at=T))
        gate = Gate()
        worker = create_job_worker(queue=queue, handler=gate, kv=kv, workers=2, lease_ms=1_000, worker_id="w1")
        assert await worker.poll() == 1
        await wait_for(lambda: gate.running == 1)
        await clock.advance(1_001)  # no heartbeat landed for a whole lease (a store blip, a stalled loop)
        assert await worker.poll() == 0  # its own claim takes the job back: the run goes on, no second one starts
        assert gate.started == ["a"]
        taken = await queue.get_job([1], "a")
        assert taken is not None and (taken.status, taken.worker_id, taken.attempts) == ("running", "w1", 2)
        gate.release.set()
        done = await wait_for_job(queue, "a", "succeeded")
        await worker.stop()
        assert gate.started == ["a"] and gate.most == 1
        # The truth: the first claim lapsed (`lost`), the run finished under the second.
        assert [(a.attempt, a.status, a.worker_id) for a in done.history] == [(1, "lost", "w1"), (2, "succeeded", "w1")]
        assert done.run_id == "run-a"

    async def test_heartbeats_that_fail_for_a_lease_under_the_timers_never_start_a_second_run(
        self, store: Store, with_kv: bool
    ) -> None:
        clock = Clock(T)
        base, kv = store(clock, with_kv)
        await base.enqueue(job("a", due_at=T))
        blip = asyncio.Event()

        async def heartbeat(**kwargs: Any) -> None:
            if blip.is_set():
                raise StoreUnavailableError("the store blipped")

        queue = Proxy(base, heartbeat=heartbeat)
        gate = Gate()
        errors: list[BaseException] = []
        worker = create_job_worker(
            queue=queue,
            handler=gate,
            kv=kv,
            workers=2,
            lease_ms=300,
            poll_ms=10,
            worker_id="w1",
            on_error=errors.append,
        )
        worker.start()
        try:
            await wait_for(lambda: gate.running == 1)
            blip.set()
            await clock.advance(301)  # the lease lapses while no heartbeat lands
            await eventually(
                lambda: base.get_job([1], "a"),
                lambda found: found is not None and found.attempts == 2,
                "this worker's own claim taking the job back",
            )
            blip.clear()
            claims = len(queue.called("claim"))
            await wait_for(
                lambda: len(queue.called("claim")) >= claims + 3, what="three more claims"
            )  # each free to start it
            assert gate.started == ["a"]
            gate.release.set()
            done = await wait_for_job(base, "a", "succeeded")
        finally:
            gate.release.set()
            await worker.stop()
        assert gate.started == ["a"] and gate.most == 1  # one run, across both claims
        assert [(a.status, a.worker_id) for a in done.history] == [("lost", "w1"), ("succeeded", "w1")]

    async def test_a_hand_back_whose_reply_was_lost_never_lands_on_the_claim_that_followed(
        self, store: Store, with_kv: bool
    ) -> None:
        clock = Clock(T)
        base, kv = store(clock, with_kv)
        await base.enqueue(job("a", due_at=T))
        queue = LostHandBackReply(base)
        runs: list[int] = []
        running = 0
        most = 0
        release = asyncio.Event()

        async def handler(job: Job) -> str:
            nonlocal running, most
            runs.append(job.attempts)
            running += 1
            most = max(most, running)
            try:
                if len(runs) == 1:
                    raise RetryLater("not yet", delay_ms=0)
                await release.wait()
                return "done"
            finally:
                running -= 1

        worker = create_job_worker(queue=queue, handler=handler, kv=kv, workers=2, worker_id="w1")
        assert await worker.poll() == 1
        await wait_for(lambda: queue.hand_backs == 2, what="the hand-back's retry")  # its reply was lost
        handed_back = await base.get_job([1], "a")
        assert handed_back is not None and (handed_back.status, handed_back.attempts) == ("pending", 0)
        # Due again: this worker's claim takes it, but its run waits for the earlier claim's retry to be over.
        assert await worker.poll() == 0
        claimed = await base.get_job([1], "a")
        assert claimed is not None and (claimed.status, claimed.worker_id, claimed.attempts) == ("running", "w1", 1)
        queue.go.set()
        await queue.retried.wait()
        after_retry = await base.get_job([1], "a")
        assert after_retry is not None and (after_retry.status, after_retry.attempts) == ("running", 1)
        release.set()
        done = await wait_for_job(base, "a", "succeeded")
        await worker.stop()
        assert runs == [1, 1] and most == 1
        assert done.attempts == 1 and [(a.status, a.worker_id) for a in done.history] == [("succeeded", "w1")]
