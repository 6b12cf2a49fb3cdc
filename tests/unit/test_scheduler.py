"""The leaderless producer: due schedules become jobs, once each, and an outage becomes one job."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import plitzi_jobs_mysql.runtime.scheduler as scheduler_module
from plitzi_jobs_mysql.contract.protocols import JobQueue
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.records import MissedFires, Schedule, ScheduleInput
from plitzi_jobs_mysql.runtime.scheduler import PARK_MS, create_scheduler
from plitzi_jobs_mysql.runtime.schedules import ActionEntry, ScheduleTrigger, schedule_job_id

from ..support import Clock, wait_for

MINUTE = 60_000
T = int(datetime(2024, 1, 15, 10, 0, tzinfo=UTC).timestamp() * 1000)  # a whole minute


class Lookups:
    def __init__(self, actions: dict[int, list[ActionEntry]] | None = None) -> None:
        self.actions = actions or {}
        self.calls: list[int] = []

    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        self.calls.append(space_id)
        return list(self.actions.get(space_id, []))


class SpacedLookups(Lookups):
    async def list_scheduled_spaces(self) -> list[int]:
        return sorted(self.actions)


class Proxy:
    """A queue that forwards everything, with a hook before chosen methods."""

    def __init__(self, inner: JobQueue, **before: Callable[..., Awaitable[None]]) -> None:
        self.inner = inner
        self.before = before
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            if name in self.before:
                await self.before[name](*args, **kwargs)
            return await target(*args, **kwargs)

        return call


def schedule(
    cron: str = "* * * * *",
    next_run_at: int = T,
    *,
    space_id: int = 1,
    action_id: str = "digest",
    timezone: str | None = None,
    max_attempts: int = 4,
) -> ScheduleInput:
    return ScheduleInput(
        space_id=space_id,
        action_id=action_id,
        cron=cron,
        environment="main",
        enabled=True,
        next_run_at=next_run_at,
        max_attempts=max_attempts,
        timezone=timezone,
    )


async def setup(*schedules: ScheduleInput, now: int = T) -> tuple[Clock, JobQueue]:
    clock = Clock(now)
    queue = create_memory_job_queue(clock=clock)
    by_space: dict[int, list[ScheduleInput]] = {}
    for s in schedules:
        by_space.setdefault(s.space_id, []).append(s)
    for space_id, items in by_space.items():
        await queue.put_schedules(space_id=space_id, schedules=items)
    return clock, queue


async def stored(queue: JobQueue, space_id: int = 1, action_id: str = "digest") -> Schedule:
    [found] = [s for s in await queue.list_schedules([space_id]) if s.action_id == action_id]
    return found


async def test_a_due_fire_becomes_a_job_with_the_stored_instant_as_its_id() -> None:
    clock, queue = await setup(schedule(max_attempts=4))
    clock.now = T + 7_000
    result = await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    job_id = schedule_job_id(1, "digest", T)
    assert result.enqueued == [job_id]
    assert result.duplicates == []
    assert result.missed == []
    job = await queue.get_job([1], job_id)
    assert job is not None
    assert (job.trigger, job.input, job.due_at, job.max_attempts, job.environment) == (
        "schedule",
        {},
        T,
        4,
        "main",
    )
    assert job.missed is None
    assert (await stored(queue)).last_fire_at == T


async def test_nothing_due_produces_nothing() -> None:
    _clock, queue = await setup(schedule(next_run_at=T + MINUTE))
    result = await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert (result.enqueued, result.duplicates, result.missed) == ([], [], [])


async def test_a_sweep_seven_seconds_late_does_not_skip_a_minute() -> None:
    clock, queue = await setup(schedule("* * * * *"))
    scheduler = create_scheduler(queue=queue, lookups=Lookups())
    produced: list[str] = []
    for minute in range(5):
        clock.now = T + minute * MINUTE + 7_000
        result = await scheduler.sweep()
        produced += result.enqueued
        assert result.missed == []
        assert (await stored(queue)).next_run_at == T + (minute + 1) * MINUTE
    assert produced == [schedule_job_id(1, "digest", T + m * MINUTE) for m in range(5)]


async def test_an_outage_of_ninety_minutes_gives_one_job_that_says_ninety_went_by() -> None:
    clock, queue = await setup(schedule("* * * * *"))
    clock.now = T + 90 * MINUTE + 5_000
    result = await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert result.enqueued == [schedule_job_id(1, "digest", T)]
    assert result.missed == [MissedFires(space_id=1, action_id="digest", count=90)]
    page = await queue.list_jobs(space_ids=[1])
    assert page.total == 1
    assert page.jobs[0].missed == 90
    after = await stored(queue)
    # The first fire after now, not the 91 that went by.
    assert after.next_run_at == T + 91 * MINUTE
    assert after.missed == 90


async def test_an_hourly_outage_counts_hours_not_minutes() -> None:
    clock, queue = await setup(schedule("0 * * * *"))
    clock.now = T + 5 * 60 * MINUTE + 30 * MINUTE
    result = await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert result.missed == [MissedFires(space_id=1, action_id="digest", count=5)]
    assert (await stored(queue)).next_run_at == T + 6 * 60 * MINUTE


async def test_a_fire_exactly_on_time_asks_from_the_next_minute() -> None:
    _clock, queue = await setup(schedule("* * * * *"))
    await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert (await stored(queue)).next_run_at == T + MINUTE


async def test_the_next_fire_is_read_on_the_schedule_zone() -> None:
    berlin_nine = int(datetime(2024, 1, 15, 8, 0, tzinfo=UTC).timestamp() * 1000)
    clock, queue = await setup(schedule("0 9 * * *", berlin_nine, timezone="Europe/Berlin"))
    clock.now = berlin_nine + 1_000
    await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert (await stored(queue)).next_run_at == berlin_nine + 24 * 60 * MINUTE


async def test_an_expression_with_no_next_fire_is_parked_four_years_out() -> None:
    clock, queue = await setup(schedule("0 0 30 2 *"))  # valid, never fires
    clock.now = T + 3_000
    result = await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert result.enqueued == [schedule_job_id(1, "digest", T)]
    assert (await stored(queue)).next_run_at == T + 3_000 + PARK_MS
    assert PARK_MS == 2_108_160 * MINUTE


async def test_two_schedulers_sweeping_together_produce_one_job_per_fire() -> None:
    clock, base = await setup(schedule("* * * * *"), schedule("*/5 * * * *", action_id="report"))
    clock.now = T + 30 * MINUTE + 1_000
    arrived = 0
    both = asyncio.Event()

    async def rendezvous(limit: int) -> None:
        # Both replicas read the same due schedules before either enqueues anything.
        nonlocal arrived
        arrived += 1
        if arrived == 2:
            both.set()
        await both.wait()

    class Together(Proxy):
        async def due_schedules(self, limit: int) -> list[Schedule]:
            due = await base.due_schedules(limit)
            await rendezvous(limit)
            return due

    queue = Together(base)
    first = create_scheduler(queue=queue, lookups=Lookups())
    second = create_scheduler(queue=queue, lookups=Lookups())
    one, two = await asyncio.gather(first.sweep(), second.sweep())

    ids = {schedule_job_id(1, "digest", T), schedule_job_id(1, "report", T)}
    assert sorted(one.enqueued + two.enqueued) == sorted(ids)
    assert sorted(one.duplicates + two.duplicates) == sorted(ids)
    assert (await base.list_jobs(space_ids=[1])).total == 2
    # Each outage is reported once, by the replica whose advance moved past it.
    missed = sorted((m.action_id, m.count) for m in one.missed + two.missed)
    assert missed == [("digest", 30), ("report", 6)]
    assert (await stored(base)).missed == 30
    assert (await stored(base, action_id="report")).missed == 6


async def test_a_schedule_advanced_elsewhere_does_not_report_its_misses_here() -> None:
    clock, base = await setup(schedule("* * * * *"))
    clock.now = T + 10 * MINUTE

    async def advanced_elsewhere(**kwargs: Any) -> None:
        await base.advance_schedule(space_id=1, action_id="digest", from_at=T, to_at=T + 11 * MINUTE, missed=10)

    queue = Proxy(base, advance_schedule=advanced_elsewhere)
    result = await create_scheduler(queue=queue, lookups=Lookups()).sweep()
    assert result.missed == []
    assert (await stored(base)).missed == 10  # counted once, by the one that moved it


async def test_the_fire_is_enqueued_before_the_schedule_moves() -> None:
    _clock, base = await setup(schedule("* * * * *"))

    async def store_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("store down")

    broken = Proxy(base, enqueue=store_down)
    with pytest.raises(ConnectionError):
        await create_scheduler(queue=broken, lookups=Lookups()).sweep()
    assert (await stored(base)).next_run_at == T  # still due: nothing lost

    # A process that dies after the enqueue but before the advance: the retry is a no-op, then advances.
    crashing = Proxy(base, advance_schedule=store_down)
    with pytest.raises(ConnectionError):
        await create_scheduler(queue=crashing, lookups=Lookups()).sweep()
    assert crashing.calls.index("enqueue") < crashing.calls.index("advance_schedule")
    assert (await stored(base)).next_run_at == T
    again = await create_scheduler(queue=base, lookups=Lookups()).sweep()
    assert again.duplicates == [schedule_job_id(1, "digest", T)]
    assert again.enqueued == []
    assert (await stored(base)).next_run_at == T + MINUTE
    assert (await base.list_jobs(space_ids=[1])).total == 1


async def test_batch_bounds_one_pass() -> None:
    _clock, queue = await setup(*(schedule(action_id=f"a{i}") for i in range(5)))
    scheduler = create_scheduler(queue=queue, lookups=Lookups(), batch=2)
    assert len((await scheduler.sweep()).enqueued) == 2


async def test_reconcile_writes_a_spaces_schedules_from_its_actions() -> None:
    _clock, queue = await setup(now=T + 30_000)
    lookups = Lookups(
        {
            3: [
                ActionEntry(id="hourly", schedule=ScheduleTrigger(cron="0 * * * *")),
                ActionEntry(id="berlin", schedule=ScheduleTrigger(cron="0 9 * * *", timezone="Europe/Berlin")),
                ActionEntry(id="mars", schedule=ScheduleTrigger(cron="0 9 * * *", timezone="Mars/Base")),
                ActionEntry(id="plain"),
            ]
        }
    )
    scheduler = create_scheduler(queue=queue, lookups=lookups, environment="staging", max_attempts=6)
    await scheduler.reconcile(3)
    rows = {s.action_id: s for s in await queue.list_schedules([3])}
    assert set(rows) == {"hourly", "berlin"}  # the unknown zone is not read as UTC
    assert rows["hourly"].next_run_at == T + 60 * MINUTE
    assert rows["hourly"].environment == "staging"
    assert rows["hourly"].max_attempts == 6
    assert rows["berlin"].timezone == "Europe/Berlin"


async def test_reconcile_keeps_a_promised_fire_and_follows_changes() -> None:
    clock, queue = await setup(now=T + 30_000)
    lookups = Lookups(
        {
            3: [
                ActionEntry(id="hourly", schedule=ScheduleTrigger(cron="0 * * * *")),
                ActionEntry(id="daily", schedule=ScheduleTrigger(cron="0 0 * * *")),
                ActionEntry(id="gone", schedule=ScheduleTrigger(cron="* * * * *")),
            ]
        }
    )
    other_space = Lookups({4: [ActionEntry(id="kept", schedule=ScheduleTrigger(cron="* * * * *"))]})
    await create_scheduler(queue=queue, lookups=other_space).reconcile(4)
    scheduler = create_scheduler(queue=queue, lookups=lookups)
    await scheduler.reconcile(3)
    clock.now = T + 40 * MINUTE
    lookups.actions[3] = [
        ActionEntry(id="hourly", schedule=ScheduleTrigger(cron="0 * * * *")),
        ActionEntry(id="daily", schedule=ScheduleTrigger(cron="*/10 * * * *")),
    ]
    await scheduler.reconcile(3)
    rows = {s.action_id: s for s in await queue.list_schedules([3])}
    assert set(rows) == {"hourly", "daily"}
    assert rows["hourly"].next_run_at == T + 60 * MINUTE  # unchanged: the promised fire stays
    assert rows["daily"].next_run_at == T + 40 * MINUTE  # changed: taken anew
    assert [s.action_id for s in await queue.list_schedules([4])] == ["kept"]

    lookups.actions[3] = []
    await scheduler.reconcile(3)
    assert await queue.list_schedules([3]) == []


async def test_start_reconciles_the_listed_spaces_and_sweeps_on_a_timer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler_module.random, "random", lambda: 0.0)  # no jitter
    clock, queue = await setup(now=T)
    lookups = SpacedLookups({5: [ActionEntry(id="tick", schedule=ScheduleTrigger(cron="* * * * *"))]})
    scheduler = create_scheduler(queue=queue, lookups=lookups, poll_ms=10)
    scheduler.start()
    try:
        await wait_for(lambda: lookups.calls == [5])
        clock.now = T + 61_000
        job_id = schedule_job_id(5, "tick", T)  # reconciled at T: the fire at T itself
        await wait_for(lambda: queue.get_job([5], job_id), within=5, what="the fire's job")
    finally:
        scheduler.stop()
    assert not scheduler.running


async def test_start_uses_the_spaces_argument_without_list_scheduled_spaces() -> None:
    _clock, queue = await setup(now=T)
    lookups = Lookups({9: [ActionEntry(id="tick", schedule=ScheduleTrigger(cron="* * * * *"))]})
    scheduler = create_scheduler(queue=queue, lookups=lookups, spaces=[9])
    scheduler.start()
    try:
        await wait_for(lambda: lookups.calls == [9])
    finally:
        scheduler.stop()


async def test_start_without_spaces_warns_and_only_sweeps(caplog: pytest.LogCaptureFixture) -> None:
    _clock, queue = await setup(now=T)
    lookups = Lookups()
    scheduler = create_scheduler(queue=queue, lookups=lookups)
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.scheduler"):
        scheduler.start()
    try:
        assert "which spaces to watch" in caplog.text
        assert len(scheduler._tasks) == 1
    finally:
        scheduler.stop()


async def test_a_failing_timed_sweep_is_reported_and_the_timer_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler_module.random, "random", lambda: 0.0)
    _clock, base = await setup(schedule())
    errors: list[BaseException] = []

    async def store_down(limit: int) -> None:
        raise ConnectionError("down")

    scheduler = create_scheduler(
        queue=Proxy(base, due_schedules=store_down), lookups=Lookups(), poll_ms=5, on_error=errors.append
    )
    scheduler.start()
    try:
        await wait_for(lambda: len(errors) >= 2)
    finally:
        scheduler.stop()
    assert all(isinstance(e, ConnectionError) for e in errors)


async def test_one_failing_space_does_not_stop_the_others_reconciling() -> None:
    _clock, queue = await setup(now=T)
    errors: list[BaseException] = []

    class Flaky(SpacedLookups):
        async def list_actions(self, space_id: int) -> list[ActionEntry]:
            if space_id == 1:
                raise RuntimeError("space 1 unreadable")
            return await super().list_actions(space_id)

    lookups = Flaky({1: [], 2: [ActionEntry(id="tick", schedule=ScheduleTrigger(cron="* * * * *"))]})
    scheduler = create_scheduler(queue=queue, lookups=lookups, on_error=errors.append)
    scheduler.start()
    try:
        await wait_for(lambda: lookups.calls == [2] and len(errors) == 1)
    finally:
        scheduler.stop()
    assert [s.action_id for s in await queue.list_schedules([2])] == ["tick"]


async def test_one_pass_at_a_time_per_replica() -> None:
    _clock, base = await setup(schedule())
    release = asyncio.Event()
    entered = 0

    async def slow(limit: int) -> None:
        nonlocal entered
        entered += 1
        await release.wait()

    scheduler = create_scheduler(queue=Proxy(base, due_schedules=slow), lookups=Lookups())
    first = asyncio.create_task(scheduler._guarded(scheduler.sweep))
    await wait_for(lambda: entered == 1)
    await scheduler._guarded(scheduler.sweep)  # lands on top: skipped at once
    assert entered == 1
    release.set()
    await first
    await scheduler._guarded(scheduler.sweep)
    assert entered == 2


def test_arguments_are_checked() -> None:
    queue = create_memory_job_queue()
    with pytest.raises(ValueError):
        create_scheduler(queue=queue, lookups=Lookups(), batch=0)
    with pytest.raises(ValueError):
        create_scheduler(queue=queue, lookups=Lookups(), poll_ms=0)


# -- one bad schedule, slow lookups, and what an operator sees -----------------------------------------------------


def scheduler_records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "plitzi_jobs_mysql.scheduler" and r.levelno == level]


async def test_one_schedule_whose_fire_cannot_be_enqueued_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock, base = await setup(
        schedule(action_id="poison", next_run_at=T - MINUTE), schedule(action_id="digest", next_run_at=T)
    )

    async def refuse_poison(job: Any) -> None:
        if job.action_id == "poison":
            raise ValueError("this fire cannot be stored")

    scheduler = create_scheduler(queue=Proxy(base, enqueue=refuse_poison), lookups=Lookups())
    clock.now = T + 1_000
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql.scheduler"):
        result = await scheduler.sweep()  # the poisoned one is the oldest due: it must not starve the rest
    assert result.enqueued == [schedule_job_id(1, "digest", T)]
    [logged] = scheduler_records(caplog, logging.ERROR)
    assert "space 1" in logged.getMessage() and "'poison'" in logged.getMessage()
    assert logged.exc_info is not None and "cannot be stored" in str(logged.exc_info[1])
    assert (await stored(queue=base, action_id="poison")).next_run_at == T - MINUTE  # still due, not skipped


async def test_a_slow_reconcile_does_not_hold_up_due_fires(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module.random, "random", lambda: 0.0)
    _clock, queue = await setup(schedule(space_id=3, action_id="tick", next_run_at=T))
    stuck = asyncio.Event()

    class SlowLookups(SpacedLookups):
        async def list_actions(self, space_id: int) -> list[ActionEntry]:
            self.calls.append(space_id)
            await stuck.wait()  # a lookups backend that hangs
            return []

    lookups = SlowLookups({3: []})
    scheduler = create_scheduler(queue=queue, lookups=lookups, poll_ms=10)
    scheduler.start()
    try:
        await wait_for(lambda: lookups.calls == [3])
        job_id = schedule_job_id(3, "tick", T)
        await wait_for(lambda: queue.get_job([3], job_id), within=5, what="a sweep while the reconcile was stuck")
    finally:
        stuck.set()
        scheduler.stop()


async def test_invalid_schedules_from_lookups_are_skipped_with_a_warning_and_the_rest_reconciled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    _clock, queue = await setup(now=T)
    too_long = "x" * 175  # fine as an action id, too long for its fires' job ids
    lookups = Lookups(
        {
            1: [
                ActionEntry(id="good", schedule=ScheduleTrigger(cron="*/5 * * * *")),
                ActionEntry(id="bad-cron", schedule=ScheduleTrigger(cron="61 * * * *")),
                ActionEntry(id="bad-zone", schedule=ScheduleTrigger(cron="0 7 * * *", timezone="Mars/Olympus")),
                ActionEntry(id=too_long, schedule=ScheduleTrigger(cron="0 7 * * *")),
                ActionEntry(id="never", schedule=ScheduleTrigger(cron="0 0 30 2 *")),
                ActionEntry(id="unscheduled"),
            ]
        }
    )
    scheduler = create_scheduler(queue=queue, lookups=lookups)
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.scheduler"):
        await scheduler.reconcile(1)
    assert [s.action_id for s in await queue.list_schedules([1])] == ["good"]
    warned = {r.getMessage() for r in scheduler_records(caplog, logging.WARNING)}
    assert len(warned) == 4
    expected = [("'bad-cron'", "cron"), ("'bad-zone'", "Mars/Olympus"), (too_long[:20], "job id"), ("'never'", "never")]
    for action, reason in expected:
        assert any("space 1" in m and action in m and reason in m for m in warned), (action, warned)


async def test_missed_fires_are_logged_at_warning_with_their_count_and_fires_reach_the_hook(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from plitzi_jobs_mysql.contract.events import EventKind, JobEvent

    clock, queue = await setup(schedule("* * * * *"))
    clock.now = T + 90 * MINUTE + 5_000
    events: list[JobEvent] = []
    scheduler = create_scheduler(queue=queue, lookups=Lookups(), on_event=events.append)
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.scheduler"):
        await scheduler.sweep()
    [missed] = scheduler_records(caplog, logging.WARNING)
    assert "space 1" in missed.getMessage() and "'digest'" in missed.getMessage() and "90" in missed.getMessage()
    job_id = schedule_job_id(1, "digest", T)
    assert [(e.kind, e.job_id, e.fire_at, e.count) for e in events] == [
        (EventKind.FIRED, job_id, T, None),
        (EventKind.MISSED, job_id, T, 90),
    ]


async def test_a_stuck_sweep_does_not_skip_reconciles(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module.random, "random", lambda: 0.0)
    _clock, base = await setup(schedule())
    stuck = asyncio.Event()
    sweeping = asyncio.Event()

    async def hang(limit: int) -> None:
        sweeping.set()
        await stuck.wait()

    lookups = SpacedLookups({4: []})
    scheduler = create_scheduler(queue=Proxy(base, due_schedules=hang), lookups=lookups, poll_ms=5, reconcile_ms=20)
    scheduler.start()
    try:
        await wait_for(sweeping.is_set)
        calls = len(lookups.calls)
        await wait_for(lambda: len(lookups.calls) >= calls + 2)  # reconciles go on while the sweep hangs
    finally:
        stuck.set()
        scheduler.stop()
