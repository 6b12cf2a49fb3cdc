"""The worker with `limits=`: the store holds the action to its limit, the others run beside it, and a binding
concurrency limit keeps its slots busy (the settle that frees a slot leads to the next claim, not the next poll)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from plitzi_jobs_mysql import ActionLimit, EventKind
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.options import split_action_jobs_options
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..support import Events, Ledger, PlainQueue, job, wait_for


async def test_concurrency_limit_binds_and_keeps_its_slots_busy() -> None:
    queue = create_memory_job_queue(retain_finished=10_000)
    await queue.enqueue_many([job(f"l{n}", action_id="limited") for n in range(40)])
    await queue.enqueue_many([job(f"o{n}", action_id="other") for n in range(40)])
    ledger = Ledger()
    # A poll of 5 s: any idle gap waiting for it would show as a drain far longer than 40 / 2 x 20 ms.
    worker = create_job_worker(queue=queue, handler=ledger.handler, workers=8, poll_ms=5_000,
                               limits={"limited": ActionLimit(concurrency=2)})  # fmt: skip
    started = time.monotonic()
    worker.start()
    try:
        await wait_for(lambda: len(ledger.runs) == 80, within=20, what="the drain")
    finally:
        await worker.stop()
    elapsed = time.monotonic() - started
    assert ledger.most["limited"] == 2
    assert ledger.most["other"] > 2, "the unlimited action is not held to the other's limit"
    others_done = max(end for action, _s, end in ledger.runs if action == "other") - started
    assert others_done < 0.3, f"the unlimited jobs waited behind the limited ones ({others_done:.2f} s)"
    assert elapsed < 2.0, f"40 limited jobs of 20 ms, 2 at once, took {elapsed:.2f} s: slots sat idle"


async def test_rate_limit_spaces_the_starts() -> None:
    queue = create_memory_job_queue()
    await queue.enqueue_many([job(f"l{n}", action_id="limited") for n in range(9)])
    ledger = Ledger()
    worker = create_job_worker(queue=queue, handler=ledger.handler, workers=8, poll_ms=20,
                               limits={"limited": ActionLimit(rate=3, per_ms=200)})  # fmt: skip
    worker.start()
    try:
        await wait_for(lambda: len(ledger.runs) == 9, within=10, what="the drain")
    finally:
        await worker.stop()
    starts = sorted(start for _a, start, _e in ledger.runs)
    for n in range(len(starts) - 3):
        # Four starts never fall within one 200 ms window (less a little: the ledger's clock is not the store's).
        assert starts[n + 3] - starts[n] >= 0.19, starts


def test_limits_are_checked_and_need_a_queue_that_takes_them() -> None:
    queue = create_memory_job_queue()

    async def handler(job: Job) -> None:
        return None

    with pytest.raises(TypeError, match="ActionLimit"):
        create_job_worker(queue=queue, handler=handler, limits={"a": 3})  # type: ignore[dict-item]

    class Unlimited(PlainQueue):
        async def claim(self, *, worker_id: str, lease_ms: int, limit: int) -> list[Job]:
            return await queue.claim(worker_id=worker_id, lease_ms=lease_ms, limit=limit)

    with pytest.raises(TypeError, match="claim does not"):
        create_job_worker(queue=Unlimited(queue), handler=handler, limits={"a": ActionLimit(concurrency=1)})
    _scheduler, worker = split_action_jobs_options({"limits": {"a": ActionLimit(concurrency=1)}})
    assert worker == {"limits": {"a": ActionLimit(concurrency=1)}}, "create_action_jobs hands limits to its worker"


async def test_a_saturated_action_shows_as_limited_events_at_most_one_a_second() -> None:
    queue = create_memory_job_queue()
    await queue.enqueue_many([job(f"l{n}", action_id="limited") for n in range(3)])
    events = Events()
    release = asyncio.Event()

    async def handler(job: Job) -> None:
        await release.wait()

    worker = create_job_worker(queue=queue, handler=handler, workers=4, poll_ms=10, on_event=events,
                               limits={"limited": ActionLimit(concurrency=1)})  # fmt: skip
    worker.start()
    try:
        await wait_for(lambda: [e for e in events.seen_events if e.kind == EventKind.LIMITED], what="a limited event")
        await asyncio.sleep(0.2)  # twenty polls, each leaving the others waiting
    finally:
        release.set()
        await worker.stop()
    limited = [e for e in events.seen_events if e.kind == EventKind.LIMITED]
    assert len(limited) == 1, limited
    assert limited[0].action_id == "limited" and limited[0].message == "concurrency limit (1 running at once)"


async def test_declared_actions_bring_their_limits_to_the_worker() -> None:
    from plitzi_jobs_mysql import Actions

    actions = Actions()
    running = most = 0

    @actions.action("export", limit=ActionLimit(concurrency=2))
    async def export(job: Job) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1

    queue = create_memory_job_queue()
    await queue.enqueue_many([job(f"e{n}", action_id="export") for n in range(8)])
    worker = create_job_worker(queue=queue, handler=actions, workers=8, poll_ms=10)
    assert worker.settings.limits == {"export": ActionLimit(concurrency=2)}
    worker.start()
    try:
        await wait_for(lambda: _succeeded(queue, 8), what="the drain")
    finally:
        await worker.stop()
    assert most == 2
    given = create_job_worker(queue=queue, handler=actions, limits={"export": ActionLimit(concurrency=5)})
    assert given.settings.limits == {"export": ActionLimit(concurrency=5)}, "limits= given win over the declared"


async def _succeeded(queue: Any, count: int) -> bool:
    return bool((await queue.stats()).counts["succeeded"] >= count)
