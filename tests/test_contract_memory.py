"""The contract suites against the in-process stores."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from plitzi_jobs_mysql import JobQueue, KvStore, create_memory_job_queue, create_memory_kv
from plitzi_jobs_mysql.testing import JobQueueContract, KvContract


class TestMemoryJobQueue(JobQueueContract):
    @pytest.fixture
    async def queue(self) -> AsyncIterator[JobQueue]:
        yield create_memory_job_queue(retain_finished=10_000)


class TestMemoryKv(KvContract):
    @pytest.fixture
    async def kv(self) -> AsyncIterator[KvStore]:
        yield create_memory_kv()
