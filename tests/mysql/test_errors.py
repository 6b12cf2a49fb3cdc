"""The named errors as the MySQL adapters raise them: a wrong character set, a server that refuses the connection,
a connection lost mid-use, a server refusing writes (the classes themselves: tests/unit/test_errors.py)."""

from __future__ import annotations

import socket
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import (
    ConnectionCharsetError,
    PlitziJobsError,
    StoreUnavailableError,
    create_mysql_job_queue,
    create_mysql_kv,
)

from ..conftest import open_pool, sql


async def test_a_wrong_charset_is_a_connection_charset_error(session_db: str) -> None:
    pool = await open_pool(session_db, charset="latin1")
    try:
        with pytest.raises(PlitziJobsError) as caught:
            await create_mysql_kv(pool).get("k")
        assert isinstance(caught.value, ConnectionCharsetError) and isinstance(caught.value, RuntimeError)
        assert "utf8mb4" in str(caught.value)
    finally:
        pool.close()
        await pool.wait_closed()


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_server_that_refuses_the_connection_is_store_unavailable(session_db: str) -> None:
    pool = await open_pool(session_db, host="127.0.0.1", port=_unused_port(), unix_socket=None, minsize=0)
    try:
        queue = create_mysql_job_queue(pool)
        with pytest.raises(ConnectionError) as caught:  # as the builtin ...
            await queue.now()
        assert isinstance(caught.value, StoreUnavailableError) and isinstance(caught.value, PlitziJobsError)
        cause = caught.value.__cause__  # ... with the driver's own error kept for the operator
        assert isinstance(cause, pymysql.err.OperationalError) and cause.args[0] == 2003, repr(cause)
        assert "2003" in str(caught.value)
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_connection_lost_mid_use_is_store_unavailable(session_db: str) -> None:
    pool = await open_pool(session_db, minsize=1, maxsize=1)
    try:
        kv = create_mysql_kv(pool)
        await kv.set("k", "v")
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute("SELECT CONNECTION_ID()")
            (connection_id,) = await cur.fetchone()
        sql(session_db, f"KILL CONNECTION {int(connection_id)}")  # this test's own pooled connection, nobody else's
        with pytest.raises(PlitziJobsError) as caught:
            await kv.get("k")
        assert isinstance(caught.value, StoreUnavailableError) and isinstance(caught.value, ConnectionError)
        assert isinstance(caught.value.__cause__, pymysql.err.MySQLError), repr(caught.value.__cause__)
        assert await kv.get("k") == "v"  # the pool drops the dead connection and the next call works
    finally:
        pool.close()
        await pool.wait_closed()


async def test_a_server_refusing_writes_is_store_unavailable_and_reads_still_work(session_db: str) -> None:
    writer = await open_pool(session_db)
    readonly: Any = await open_pool(session_db, init_command="SET SESSION TRANSACTION READ ONLY")
    try:
        await create_mysql_kv(writer).set("k", "v")
        kv = create_mysql_kv(readonly)
        assert await kv.get("k") == "v"
        with pytest.raises(StoreUnavailableError) as caught:
            await kv.set("k", "w")
        assert "read-only" in str(caught.value)
        assert isinstance(caught.value.__cause__, pymysql.err.MySQLError)
    finally:
        for pool in (writer, readonly):
            pool.close()
            await pool.wait_closed()
