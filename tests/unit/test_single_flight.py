"""Single-flight: with a kv, a run holds its job's key, so no two workers run one job at once; keys are taken with
the claim, renewed with the heartbeat, given back in batches (a retry's at once); and while the kv cannot be
reached, the worker hands its jobs back and pauses claiming, longer each time."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import plitzi_jobs_mysql.runtime.single_flight as single_flight
from plitzi_jobs_mysql.memory import create_memory_job_queue, create_memory_kv
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import HANDBACK_DELAY_MS, RetryLater, create_job_worker

from ..support import Clock, Gate, Proxy, T, job, records, wait_for, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


class PlainKv:
    """Only the `KvStore` protocol of a kv: keys taken one swap each, and given back one by one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("take_absent", "delete_unchanged"):
            raise AttributeError(name)
        return getattr(self.inner, name)


@pytest.fixture(params=["batched", "plain"])
def kv_path(request: pytest.FixtureRequest) -> str:
    """A kv that takes and gives back many keys at once (the memory kv and MySQL's do), or one that does not."""
    return str(request.param)


def kv_on(kv: Any, kv_path: str) -> Any:
    return PlainKv(kv) if kv_path == "plain" else kv


async def test_a_job_whose_key_is_held_elsewhere_is_handed_back_refunded(kv_path: str) -> None:
    clock, queue = fixed_queue()
    kv = create_memory_kv(clock=clock)
    await queue.enqueue(job("a", due_at=T))
    await kv.set(single_flight.kv_key("a"), "another-worker", 30)
    gate = Gate()
    worker = create_job_worker(queue=queue, handler=gate, kv=kv_on(kv, kv_path), worker_id="w1")
    assert await worker.poll() == 0
    found = await queue.get_job([1], "a")
    assert found is not None
    assert (found.status, found.attempts, tuple(found.history)) == ("pending", 0, ())
    assert found.run_at == clock.now + HANDBACK_DELAY_MS
    assert gate.started == []
    assert await kv.get(single_flight.kv_key("a")) == "another-worker"  # theirs, untouched

    await kv.delete(single_flight.kv_key("a"))
    clock.now = found.run_at
    assert await worker.poll() == 1
    await wait_for(lambda: gate.running == 1)
    assert (await kv.get(single_flight.kv_key("a"))) is not None
    gate.release.set()
    await wait_for_job(queue, "a", "succeeded")
    await worker.stop()
    assert await kv.get(single_flight.kv_key("a")) is None  # released after settling


async def test_the_key_is_taken_for_a_lease_renewed_on_each_beat_and_released_only_if_ours(kv_path: str) -> None:
    clock, base = fixed_queue()
    kv = create_memory_kv(clock=clock)
    await base.enqueue(job("a", due_at=T))
    await base.enqueue(job("b", due_at=T))
    gate = Gate()
    worker = create_job_worker(queue=base, handler=gate, kv=kv_on(kv, kv_path), lease_ms=30_000, worker_id="w1")
    assert await worker.poll() == 2
    key_a, key_b = single_flight.kv_key("a"), single_flight.kv_key("b")
    token = await kv.get(key_a)
    assert token is not None and token.startswith("w1:")
    assert await kv.swap(key_a, None, "intruder") is False  # single flight: nobody else gets it
    for _ in range(3):  # 60 s in all, twice the key's lifetime, renewed every 20 s
        clock.now += 20_000
        await worker.beat()
    assert await kv.get(key_a) == token
    await kv.set(key_b, "someone-else")  # b's key was lost and taken over meanwhile
    gate.release.set()
    await wait_for_job(base, "a", "succeeded")
    await wait_for_job(base, "b", "succeeded")
    await worker.stop()
    assert await kv.get(key_a) is None
    assert await kv.get(key_b) == "someone-else"


class RecordingKv:
    """The memory kv, recording each batch of keys given back."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.released: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def delete_unchanged(self, pairs: Any) -> None:
        self.released.append(sorted(key for key, _ in pairs))
        await self.inner.delete_unchanged(pairs)


async def test_finished_jobs_keys_go_back_together_and_at_once_when_urgent_or_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(single_flight, "RELEASE_LINGER_S", 3600.0)  # only urgency, a full batch or hurry() send
    clock = Clock(T)
    kv = RecordingKv(create_memory_kv(clock=clock))
    for name in ("a", "b", "c", "u"):
        await kv.set(name, f"token-{name}", 60)
    releases = single_flight.KeyReleases(kv.delete_unchanged, on_error=lambda error: None)
    finished = [asyncio.create_task(releases.give_back(name, f"token-{name}", urgent=False)) for name in "ab"]
    await releases.give_back("u", "token-u")  # a retry's key: sent at once, with whatever waits already
    assert kv.released == [["a", "b", "u"]]
    await asyncio.gather(*finished)
    lingering = asyncio.create_task(releases.give_back("c", "token-c", urgent=False))
    for _ in range(10):
        await asyncio.sleep(0)  # loop turns, no time: nothing may be sent yet
    assert not lingering.done() and kv.released == [["a", "b", "u"]]
    releases.hurry()  # the worker stops
    await asyncio.wait_for(lingering, 10)
    assert kv.released == [["a", "b", "u"], ["c"]]
    assert [await kv.get(name) for name in "abcu"] == [None] * 4

    many = [f"k{i:02}" for i in range(single_flight.RELEASE_BATCH)]
    for name in many:
        await kv.set(name, "t", 60)
    await asyncio.wait_for(asyncio.gather(*(releases.give_back(name, "t", urgent=False) for name in many)), 10)
    assert kv.released[-1] == many  # a full batch does not wait


async def test_a_retrys_key_goes_back_before_its_next_claim_while_a_finished_jobs_lingers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(single_flight, "RELEASE_LINGER_S", 3600.0)
    clock, queue = fixed_queue()
    kv = RecordingKv(create_memory_kv(clock=clock))
    await queue.enqueue(job("done", due_at=T))
    await queue.enqueue(job("again", due_at=T))
    runs: list[str] = []

    async def handler(job: Job) -> str | None:
        runs.append(job.id)
        if job.id == "again" and runs.count("again") == 1:
            raise RetryLater("not yet", delay_ms=0)
        return None

    worker = create_job_worker(queue=queue, handler=handler, kv=kv, worker_id="w1")
    assert await worker.poll() == 2
    await wait_for_job(queue, "done", "succeeded")
    await wait_for(lambda: any(single_flight.kv_key("again") in batch for batch in kv.released))
    # Due again at once, and its key already free: the next claim runs it (a held key would hand it back for
    # HANDBACK_DELAY_MS, on a clock that does not move).
    assert await worker.poll() == 1
    await wait_for_job(queue, "again", "succeeded")
    assert runs.count("again") == 2
    await worker.stop()
    assert await kv.get(single_flight.kv_key("done")) is None
    assert await kv.get(single_flight.kv_key("again")) is None


def test_long_ids_still_make_a_key_the_kv_takes() -> None:
    key = single_flight.kv_key("😀" * 191)
    assert len(key.encode()) <= 764
    assert single_flight.kv_key("a") != single_flight.kv_key("b")


# -- the kv being down -----------------------------------------------------------------------------------------


class SwitchableKv:
    """A kv that can be switched off: every single-flight call raises until it is back."""

    def __init__(self, clock: Clock, kv_path: str) -> None:
        self.inner = kv_on(create_memory_kv(clock=clock), kv_path)
        self.up = False

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            if not self.up:
                raise ConnectionError("kv unreachable")
            return await target(*args, **kwargs)

        return call


async def test_an_unreachable_kv_pauses_claims_with_a_growing_logged_back_off(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kv_path: str
) -> None:
    monkeypatch.setattr(single_flight, "KV_BACKOFF_FIRST_MS", 40)
    clock, base = fixed_queue()
    queue = Proxy(base)
    kv = SwitchableKv(clock, kv_path)
    await base.enqueue(job("a", due_at=T))
    ran: list[str] = []

    async def handler(job: Job) -> str:
        ran.append(job.id)
        return "ok"

    def claims() -> int:
        return len(queue.called("claim"))

    worker = create_job_worker(queue=queue, handler=handler, kv=kv, worker_id="w1")
    with caplog.at_level(logging.INFO, logger="plitzi_jobs_mysql.worker"):
        for expected_ms in (40, 80, 160):
            before = claims()
            while claims() == before:  # paused until the back-off has passed (the loop's clock: real time)
                assert await worker.poll() == 0
                await asyncio.sleep(0.005)
            found = await base.get_job([1], "a")
            assert found is not None and (found.status, found.attempts, found.history) == ("pending", 0, ())
            assert found.run_at == clock.now + expected_ms  # handed back, attempt refunded, later each time
            assert await worker.poll() == 0 and claims() == before + 1  # and no claim during the pause
            clock.now = found.run_at
        warned = [r.getMessage() for r in records(caplog, logging.WARNING)]
        assert len(warned) == 3 and all("kv store is unreachable" in m for m in warned)
        assert [f"for {ms} ms" in m for ms, m in zip((40, 80, 160), warned, strict=True)] == [True] * 3
        kv.up = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while await worker.poll() == 0:  # polls until the pause is over and a poll starts the handler
            assert loop.time() < deadline, "nothing started in time"
            await asyncio.sleep(0.005)
        await wait_for_job(base, "a", "succeeded")
        await worker.stop()
    assert ran == ["a"]
    assert "answers again after 3 failures" in records(caplog, logging.WARNING)[-1].getMessage()
