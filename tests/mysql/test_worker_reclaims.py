"""A worker's own claim handing it back a job it still holds, on MySQL (the scenarios: tests/reclaims.py). The
queue's instants come from the test's clock; the kv's lifetimes stay the server's."""

from __future__ import annotations

from typing import Any

import pytest

from plitzi_jobs_mysql import create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.contract.protocols import JobQueue, KvStore

from ..reclaims import Reclaims, Store
from ..support import Clock


class TestReclaimsOnMysql(Reclaims):
    @pytest.fixture
    def store(self, database_pool: Any) -> Store:
        def build(clock: Clock, with_kv: bool) -> tuple[JobQueue, KvStore | None]:
            kv = create_mysql_kv(database_pool) if with_kv else None
            return create_mysql_job_queue(database_pool, clock=clock), kv

        return build
