"""Which server the pool reaches decides what the statements may say (issue 9 item 10, issue 14 item 4).

MariaDB takes per-statement settings (`SET STATEMENT … FOR`): the Galera causal wait and a claim's lock-wait
bound ride on the statement. MySQL has no such form: a MySQL-based Galera (Percona XtraDB Cluster, which also
reports `wsrep_on`) gets the causal wait as a session variable on each borrowed connection, a Group Replication
member `group_replication_consistency = 'BEFORE'` the same way, and a claim locks its row NOWAIT in the statement
itself. MySQL 8.0.19+ names the upsert's incoming row with an alias. The version strings below are what those
servers report.
"""

from __future__ import annotations

from typing import Any

import pytest

from plitzi_jobs_mysql import create_mysql_job_queue
from plitzi_jobs_mysql.mysql.flavour import Flavour, flavour_of
from plitzi_jobs_mysql.mysql.session import GALERA_CAUSAL

from ..conftest import open_pool

MARIADB = [
    "10.11.19-MariaDB-0+deb12u1",  # Debian 12's, the one these suites run on
    "10.6.16-MariaDB-1:10.6.16+maria~ubu2004-log",  # the mariadb:10.6 image, binary log on
    "5.5.5-10.11.6-MariaDB",  # as MariaDB < 11 announces itself in the handshake
    "11.4.2-MariaDB-ubu2404",
]
MYSQL = [
    "8.0.36",  # MySQL Community
    "8.4.0",
    "8.0.36-28",  # Percona Server
    "8.0.36-28.1",  # Percona XtraDB Cluster 8.0 (its version_comment names the cluster; VERSION() does not)
    "5.7.44-31.65-log",  # Percona XtraDB Cluster 5.7
    "9.7.4-2",  # Oracle MySQL 9.7 LTS as Debian packages it, the one these suites run on beside MariaDB
]


@pytest.mark.parametrize("version", MARIADB)
def test_mariadb_gets_per_statement_settings(version: str) -> None:
    alone, galera = flavour_of(version, False), flavour_of(version, True)
    assert alone.statement_prefix == "" and alone.session_setup is None
    assert alone.claim_prefix == "SET STATEMENT innodb_lock_wait_timeout = 0 FOR "
    assert galera.statement_prefix == GALERA_CAUSAL == "SET STATEMENT wsrep_sync_wait = 7 FOR "
    assert galera.claim_prefix == "SET STATEMENT innodb_lock_wait_timeout = 0, wsrep_sync_wait = 7 FOR "
    assert galera.session_setup is None
    assert not alone.nowait_guard and not galera.nowait_guard
    # MariaDB has no row alias in an upsert, and no Group Replication (whatever a probe might say).
    assert not alone.row_alias and not flavour_of(version, False, True).group_replication


@pytest.mark.parametrize("version", MYSQL)
def test_mysql_gets_no_set_statement(version: str) -> None:
    alone, galera = flavour_of(version, False), flavour_of(version, True)
    group = flavour_of(version, False, True)
    for flavour in (alone, galera, group):
        assert "SET STATEMENT" not in flavour.statement_prefix + flavour.claim_prefix
        assert flavour.nowait_guard
    assert alone.session_setup is None
    assert galera.session_setup == "SET SESSION wsrep_sync_wait = 7"
    assert group.group_replication and group.session_setup == "SET SESSION group_replication_consistency = 'BEFORE'"
    # The row alias came with MySQL 8.0.19; 5.7 has only VALUES().
    assert alone.row_alias == (not version.startswith("5."))


async def test_this_server_is_recognised(session_db: str) -> None:
    pool = await open_pool(session_db, maxsize=1)
    try:
        queue = create_mysql_job_queue(pool)
        assert await queue.get_job([1], "nothing") is None
        async with pool.acquire() as conn, conn.cursor() as cur:
            # Not `@@wsrep_on`: a server without Galera (MySQL) has no such variable and answers 1193.
            await cur.execute("SELECT VERSION()")
            (version,) = await cur.fetchone()
            await cur.execute("SHOW VARIABLES LIKE 'wsrep_on'")
            wsrep_on = [str(value).upper() for _name, value in await cur.fetchall()] == ["ON"]
            await cur.execute("SHOW VARIABLES LIKE 'group_replication_group_name'")
            group = any(value for _name, value in await cur.fetchall())
        assert queue._store.flavour == flavour_of(version, wsrep_on, group)
        assert queue._store.flavour.row_alias == ("mariadb" not in version.lower())
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_mysql_galera_sets_the_causal_wait_on_each_borrowed_session(session_db: str) -> None:
    # The session path run for real: MariaDB has the variable too, so the statement it sends is checked here.
    pool = await open_pool(session_db, maxsize=1)
    try:
        queue = create_mysql_job_queue(pool)
        assert await queue.get_job([1], "nothing") is None
        if not queue._store.flavour.mariadb:
            pytest.skip("MySQL has no wsrep_sync_wait to set (Percona XtraDB Cluster does; not run here)")
        queue._store.flavour = Flavour(mariadb=False, galera=True)
        assert await queue.get_job([1], "nothing") is None
        assert await session_value(pool, "wsrep_sync_wait") == 7
    finally:
        pool.close()
        await pool.wait_closed()


async def session_value(pool: Any, name: str) -> Any:
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"SELECT @@SESSION.{name}")
        return (await cur.fetchone())[0]
