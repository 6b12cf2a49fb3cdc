"""The contract suites against the MySQL adapters, over pools opened every way a user might open one.

- autocommit on, and off (aiomysql's default: a plain SELECT leaves a read view open that the pool cannot see);
- `CLIENT.FOUND_ROWS`, which makes an UPDATE report matched rather than changed rows;
- READ COMMITTED, and `sql_mode=''` (where the server would silently truncate what it cannot hold);
- a table prefix.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymysql.constants import CLIENT

from plitzi_jobs_mysql import JobQueue, KvStore, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.testing import JobQueueContract, KvContract

from .conftest import empty_tables, open_pool

POOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "autocommit": ("", {"autocommit": True}),
    "no-autocommit": ("", {"autocommit": False}),
    "found-rows": ("", {"autocommit": True, "client_flag": CLIENT.FOUND_ROWS}),
    "read-committed": (
        "",
        {"autocommit": False, "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"},
    ),
    "sql-mode-empty": ("", {"autocommit": True, "init_command": "SET SESSION sql_mode = ''"}),
    "prefixed": ("pjm_", {"autocommit": False}),
}


@pytest.fixture(params=sorted(POOLS))
async def mysql_pool(request: pytest.FixtureRequest, session_db: str) -> AsyncIterator[tuple[Any, str]]:
    prefix, options = POOLS[request.param]
    empty_tables(session_db, prefix)
    pool = await open_pool(session_db, **options)
    try:
        yield pool, prefix
    finally:
        pool.close()
        await pool.wait_closed()


class TestMysqlJobQueue(JobQueueContract):
    @pytest.fixture
    async def queue(self, mysql_pool: tuple[Any, str]) -> AsyncIterator[JobQueue]:
        pool, prefix = mysql_pool
        yield create_mysql_job_queue(pool, table_prefix=prefix)


class TestMysqlKv(KvContract):
    @pytest.fixture
    async def kv(self, mysql_pool: tuple[Any, str]) -> AsyncIterator[KvStore]:
        pool, prefix = mysql_pool
        yield create_mysql_kv(pool, table_prefix=prefix)
