"""The contract suites against the MySQL adapters, over pools opened every way a user might open one.

- autocommit on, and off (aiomysql's default: a plain SELECT leaves a read view open that the pool cannot see);
- `CLIENT.FOUND_ROWS`, which makes an UPDATE report matched rather than changed rows;
- READ COMMITTED, and `sql_mode=''` (where the server would silently truncate what it cannot hold);
- a table prefix.

The queue's instants come from a clock the tests move (`advance`), except over the `autocommit` pool, where the
server's clock is what is under test and the tests wait for it. The kv store's lifetimes are always the server's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pymysql.constants import CLIENT

from plitzi_jobs_mysql import JobQueue, KvStore, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.testing import ClockStepContract, JobQueueContract, KvContract
from plitzi_jobs_mysql.testing.bulk_contract import Transaction
from plitzi_jobs_mysql.testing.limits_contract import LimitsContract
from plitzi_jobs_mysql.testing.support import Advance, real_time_advance

from ..conftest import empty_tables, open_pool
from ..support import Clock

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
#: The pools over which the queue runs on the server's own clock.
SERVER_CLOCK_POOLS = frozenset({"autocommit"})


@pytest.fixture(params=sorted(POOLS))
async def mysql_pool(request: pytest.FixtureRequest, session_db: str) -> AsyncIterator[tuple[Any, str, str]]:
    prefix, options = POOLS[request.param]
    empty_tables(session_db, prefix)
    pool = await open_pool(session_db, **options)
    try:
        yield pool, prefix, request.param
    finally:
        pool.close()
        await pool.wait_closed()


class TestMysqlJobQueue(JobQueueContract, ClockStepContract, LimitsContract):
    @pytest.fixture
    def clock(self, mysql_pool: tuple[Any, str, str]) -> Clock | None:
        return None if mysql_pool[2] in SERVER_CLOCK_POOLS else Clock(wall_clock_ms())

    @pytest.fixture
    async def queue(self, mysql_pool: tuple[Any, str, str], clock: Clock | None) -> AsyncIterator[JobQueue]:
        pool, prefix, _name = mysql_pool
        yield create_mysql_job_queue(pool, table_prefix=prefix, clock=clock)

    @pytest.fixture
    def advance(self, queue: JobQueue, clock: Clock | None) -> Advance:
        return real_time_advance(queue) if clock is None else clock.advance

    @pytest.fixture
    def rewind(self, clock: Clock | None) -> Advance | None:
        return None if clock is None else clock.rewind

    @pytest.fixture
    def transaction(self, mysql_pool: tuple[Any, str, str]) -> Transaction:
        """A connection of the pool, in a transaction of the caller's: committed on the way out, rolled back if
        the block raised."""
        pool = mysql_pool[0]

        @contextlib.asynccontextmanager
        async def transaction() -> AsyncIterator[Any]:
            async with pool.acquire() as conn:
                await conn.begin()
                try:
                    yield conn
                except BaseException:
                    await conn.rollback()
                    raise
                await conn.commit()

        return transaction


class TestMysqlKv(KvContract):
    @pytest.fixture
    async def kv(self, mysql_pool: tuple[Any, str, str]) -> AsyncIterator[KvStore]:
        pool, prefix, _name = mysql_pool
        yield create_mysql_kv(pool, table_prefix=prefix)
