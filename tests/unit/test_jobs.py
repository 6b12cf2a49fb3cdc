"""The assembly: one queue between a scheduler and a worker, started and stopped together."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

import plitzi_jobs_mysql.runtime.scheduler as scheduler_module
from plitzi_jobs_mysql.assembly.action_jobs import create_action_jobs
from plitzi_jobs_mysql.memory import create_memory_job_queue, create_memory_kv
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.schedules import ActionEntry, ScheduleTrigger, schedule_job_id

from ..support import Clock, wait_for

T = int(datetime(2024, 1, 15, 10, 0, tzinfo=UTC).timestamp() * 1000)


class Lookups:
    def __init__(self, actions: dict[int, list[ActionEntry]]) -> None:
        self.actions = actions

    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        return list(self.actions.get(space_id, []))

    async def list_scheduled_spaces(self) -> list[int]:
        return sorted(self.actions)


async def handler(job: Job) -> str:
    return "ok"


def test_without_a_queue_it_runs_in_memory_and_says_it_is_for_one_replica(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.jobs"):
        jobs = create_action_jobs(lookups=Lookups({}), handler=handler)
    assert "ONE replica" in caplog.text
    assert jobs.queue is jobs.scheduler.queue is jobs.worker.queue


def test_a_given_queue_is_used_silently_and_options_reach_both_halves(caplog: pytest.LogCaptureFixture) -> None:
    queue = create_memory_job_queue()
    kv = create_memory_kv()
    errors: list[BaseException] = []
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql.jobs"):
        jobs = create_action_jobs(
            lookups=Lookups({}),
            handler=handler,
            queue=queue,
            kv=kv,
            workers=7,
            environment="staging",
            schedule_poll_ms=5_000,
            poll_ms=250,
            lease_ms=9_000,
            backoff_base_ms=1_000,
            backoff_max_ms=8_000,
            batch=50,
            max_attempts=9,
            reconcile_ms=60_000,
            spaces=[3, 4],
            worker_id="pod-1",
            on_error=errors.append,
            on_event=print,
        )
    assert caplog.text == ""
    assert jobs.queue is queue
    s, w = jobs.scheduler.settings, jobs.worker.settings
    assert (s.environment, s.poll_ms, s.batch, s.max_attempts, s.reconcile_ms, s.spaces) == (
        "staging",
        5_000,
        50,
        9,
        60_000,
        [3, 4],
    )
    assert (w.workers, w.poll_ms, w.lease_ms, w.backoff_base_ms, w.backoff_max_ms, w.worker_id) == (
        7,
        250,
        9_000,
        1_000,
        8_000,
        "pod-1",
    )
    assert jobs.worker.kv is kv
    assert s.on_error == errors.append and w.on_error == errors.append
    assert s.on_event is print and w.on_event is print


async def test_a_schedule_becomes_a_job_and_runs_then_stop_ends_both(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module.random, "random", lambda: 0.0)
    clock = Clock(T + 30_000)
    queue = create_memory_job_queue(clock=clock)
    ran: list[Job] = []

    async def record(job: Job) -> str:
        ran.append(job)
        return "run-1"

    lookups = Lookups({2: [ActionEntry(id="tick", schedule=ScheduleTrigger(cron="* * * * *"))]})
    jobs = create_action_jobs(lookups=lookups, handler=record, queue=queue, schedule_poll_ms=10, poll_ms=10)
    jobs.start()
    try:
        await wait_for(lambda: queue.list_schedules([2]), what="the reconcile on start")
        clock.now = T + 61_000
        await wait_for(lambda: len(ran) == 1)
    finally:
        await jobs.stop()
    assert ran[0].id == schedule_job_id(2, "tick", T + 60_000)
    assert ran[0].trigger == "schedule"
    assert not jobs.scheduler.running and not jobs.worker.running
    assert jobs.worker.in_flight() == 0
    job = await queue.get_job([2], ran[0].id)
    assert job is not None and job.status == "succeeded" and job.run_id == "run-1"


async def test_produce_false_runs_only_the_worker() -> None:
    queue = create_memory_job_queue()
    jobs = create_action_jobs(lookups=Lookups({1: []}), handler=handler, queue=queue, produce=False)
    jobs.start()
    try:
        assert not jobs.scheduler.running
        assert jobs.worker.running
    finally:
        await jobs.stop()
    assert not jobs.worker.running
