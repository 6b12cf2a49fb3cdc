"""The contract suites against the in-process stores (the queue's clock moved by the tests, not by waiting)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from plitzi_jobs_mysql import JobQueue, KvStore, create_memory_job_queue, create_memory_kv
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.testing import ClockStepContract, JobQueueContract, KvContract
from plitzi_jobs_mysql.testing.limits_contract import LimitsContract
from plitzi_jobs_mysql.testing.support import Advance

from ..support import Clock


class TestMemoryJobQueue(JobQueueContract, ClockStepContract, LimitsContract):
    @pytest.fixture
    def clock(self) -> Clock:
        return Clock(wall_clock_ms())

    @pytest.fixture
    async def queue(self, clock: Clock) -> AsyncIterator[JobQueue]:
        yield create_memory_job_queue(retain_finished=10_000, clock=clock)

    @pytest.fixture
    def advance(self, clock: Clock) -> Advance:
        return clock.advance

    @pytest.fixture
    def rewind(self, clock: Clock) -> Advance:
        return clock.rewind


class TestMemoryKv(KvContract):
    @pytest.fixture
    async def kv(self) -> AsyncIterator[KvStore]:
        yield create_memory_kv()
