"""`stats()` (what `plitzi-jobs-mysql stats` prints): the MySQL queue and its memory twin answer alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from plitzi_jobs_mysql import (
    AttemptOutcome,
    ScheduleInput,
    create_memory_job_queue,
    create_mysql_job_queue,
)
from plitzi_jobs_mysql.memory import wall_clock_ms

from ..conftest import flavour_database, open_pool, session_flavours
from ..support import Clock, job


@pytest.fixture
def clock() -> Clock:
    return Clock(wall_clock_ms())


@pytest.fixture(params=["memory", *session_flavours()])
async def queue(request: pytest.FixtureRequest, clock: Clock) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield create_memory_job_queue(clock=clock)
        return
    with flavour_database(request, request.param) as url:
        pool = await open_pool(url)
        try:
            yield create_mysql_job_queue(pool, clock=clock)
        finally:
            pool.close()
            await pool.wait_closed()


async def test_stats_count_by_status_and_find_the_oldest_due_job(queue: Any, clock: Clock) -> None:
    empty = await queue.stats()
    assert empty.total == 0 and empty.oldest_due_run_at is None and empty.pending_due == 0
    assert list(empty.counts) == ["pending", "running", "succeeded", "failed", "dead", "cancelled"]

    now = int((await queue.now()).timestamp() * 1000)
    for item in (
        job("due-old", due_at=now - 5_000),
        job("due", due_at=now - 1_000),
        job("later", due_at=now + 3_600_000),
        job("done", due_at=now - 9_000),
        job("other", space_id=2, due_at=now - 60_000),
    ):
        assert await queue.enqueue(item)
    # Claimed oldest first: "other" (space 2) then "done", which is settled.
    claimed = await queue.claim(worker_id="w", lease_ms=60_000, limit=2)
    assert [j.id for j in claimed] == ["other", "done"]
    await queue.settle(job_id="done", worker_id="w", status="succeeded",
                       attempt=AttemptOutcome(status="succeeded", worker_id="w"))  # fmt: skip

    stats = await queue.stats()
    assert stats.counts == {"pending": 3, "running": 1, "succeeded": 1, "failed": 0, "dead": 0, "cancelled": 0}
    assert stats.total == 5 and stats.pending_due == 2 and stats.running_lease_lapsed == 0
    assert stats.oldest_due_run_at == now - 5_000 and stats.now >= now

    space_1 = await queue.stats(space_ids=[1])
    assert space_1.counts["running"] == 0 and space_1.total == 4 and space_1.pending_due == 2
    assert (await queue.stats(space_ids=[])).total == 0
    with pytest.raises(TypeError):
        await queue.stats(space_ids="1")

    await clock.advance(60_001)  # the running job's lease lapses, and "later" is not due yet
    lapsed = await queue.stats()
    assert lapsed.running_lease_lapsed == 1 and lapsed.pending_due == 2 and lapsed.now == now + 60_001


async def test_stats_per_space_and_action(queue: Any, clock: Clock) -> None:
    now = int((await queue.now()).timestamp() * 1000)
    for item in (
        job("b-due", due_at=now - 2_000),
        job("b-old", due_at=now - 7_000),
        job("b-later", due_at=now + 60_000),
        job("b-run", due_at=now - 8_000),
        job("x", space_id=2, due_at=now - 1_000),
    ):
        assert await queue.enqueue(replace(item, action_id="x" if item.space_id == 2 else "b"))
    assert await queue.enqueue(replace(job("a-1", due_at=now - 500), action_id="a"))
    claimed = await queue.claim(worker_id="w", lease_ms=1_000, limit=1)
    assert [j.id for j in claimed] == ["b-run"]
    await clock.advance(1_001)  # b-run's lease lapses

    stats = await queue.stats()
    assert [(a.space_id, a.action_id) for a in stats.actions] == [(1, "a"), (1, "b"), (2, "x")]
    a, b, x = stats.actions
    assert (a.total, a.pending_due, a.oldest_due_run_at, a.running_lease_lapsed) == (1, 1, now - 500, 0)
    assert b.counts == {"pending": 3, "running": 1, "succeeded": 0, "failed": 0, "dead": 0, "cancelled": 0}
    assert (b.pending_due, b.oldest_due_run_at, b.running_lease_lapsed) == (2, now - 7_000, 1)
    assert (x.total, x.pending_due) == (1, 1)
    assert stats.total == 6 and stats.pending_due == 4 and stats.running_lease_lapsed == 1
    assert [(s.space_id, s.action_id) for s in (await queue.stats(space_ids=[2])).actions] == [(2, "x")]
    assert (await queue.stats(space_ids=[])).actions == ()


async def test_an_operator_lists_every_space_a_page_at_a_time(queue: Any) -> None:
    now = int((await queue.now()).timestamp() * 1000)
    for space in (1, 2, 3):
        assert await queue.enqueue(job(f"j{space}", space_id=space, due_at=now))
        await queue.put_schedules(space_id=space, schedules=[ScheduleInput(
            space_id=space, action_id="s", cron="0 3 * * *", environment="main", enabled=True, next_run_at=now,
            max_attempts=3)])  # fmt: skip
    everything = await queue.list_jobs(space_ids=None)
    assert everything.total == 3 and {j.id for j in everything.jobs} == {"j1", "j2", "j3"}
    page = await queue.list_jobs(space_ids=None, limit=2, offset=2)
    assert page.total == 3 and len(page.jobs) == 1
    assert (await queue.list_jobs(space_ids=[])).total == 0
    assert [s.space_id for s in await queue.list_schedules(None)] == [1, 2, 3]
    assert [s.space_id for s in await queue.list_schedules(None, limit=2, offset=1)] == [2, 3]
    assert [s.space_id for s in await queue.list_schedules([3, 1], limit=1)] == [1]
    assert await queue.list_schedules([]) == []
    with pytest.raises(ValueError):
        await queue.list_schedules(None, limit=-1)
