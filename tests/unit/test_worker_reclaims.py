"""A worker's own claim handing it back a job it still holds, on the memory queue (the scenarios: tests/reclaims.py)."""

from __future__ import annotations

import pytest

from plitzi_jobs_mysql.contract.protocols import JobQueue, KvStore
from plitzi_jobs_mysql.memory import create_memory_job_queue, create_memory_kv

from ..reclaims import Reclaims, Store
from ..support import Clock


class TestReclaimsInMemory(Reclaims):
    @pytest.fixture
    def store(self) -> Store:
        def build(clock: Clock, with_kv: bool) -> tuple[JobQueue, KvStore | None]:
            return create_memory_job_queue(clock=clock), create_memory_kv(clock=clock) if with_kv else None

        return build
