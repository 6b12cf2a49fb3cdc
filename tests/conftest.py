"""Shared fixtures: one MySQL server for the session (PLITZI_MYSQL_URL, a container, or a throwaway mariadbd)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiomysql
import pymysql
import pytest

from plitzi_jobs_mysql.testing import LocalMysqlServer, fresh_database, load_time_zones, mysql_server_url
from plitzi_jobs_mysql.url import parse_mysql_url


@pytest.fixture(scope="session")
def mysql_url() -> Iterator[str]:
    """A root URL of the session's server (no database), with the time-zone tables loaded."""
    with mysql_server_url() as url:
        load_time_zones(url)
        yield url


@pytest.fixture(scope="session")
def session_db(mysql_url: str) -> Iterator[str]:
    """One database for the session's store tests; each test empties the tables it uses."""
    with fresh_database(mysql_url, "pjm_session") as url:
        yield url


@pytest.fixture
def database_url(mysql_url: str) -> Iterator[str]:
    """A fresh database of its own, dropped after the test."""
    with fresh_database(mysql_url) as url:
        yield url


async def open_pool(url: str, **options: Any) -> Any:
    kwargs = parse_mysql_url(url).aiomysql_kwargs()
    kwargs.update(options)
    kwargs.setdefault("minsize", 1)
    kwargs.setdefault("maxsize", 10)
    kwargs.setdefault("autocommit", True)
    return await aiomysql.create_pool(**kwargs)


@contextlib.asynccontextmanager
async def pooled(url: str, **options: Any) -> AsyncIterator[Any]:
    """`open_pool(url, **options)`, closed (and waited for) on the way out."""
    opened = await open_pool(url, **options)
    try:
        yield opened
    finally:
        opened.close()
        await opened.wait_closed()


@pytest.fixture
async def pool(session_db: str) -> AsyncIterator[Any]:
    """An autocommit pool on the session database."""
    async with pooled(session_db) as opened:
        yield opened


@pytest.fixture
async def database_pool(database_url: str) -> AsyncIterator[Any]:
    """An autocommit pool on a fresh database of its own (`database_url`)."""
    async with pooled(database_url) as opened:
        yield opened


def own_server_fixtures(prefix: str) -> tuple[Any, Any]:
    """`server, database = own_server_fixtures("pjm_x")` in a test module: a throwaway server of the module's own
    (for tests that stop it, kill its sessions or change its globals) and a fresh database on it per test."""

    @pytest.fixture(scope="module")
    def server() -> Iterator[LocalMysqlServer]:
        with LocalMysqlServer(load_tz=False) as started:
            yield started

    @pytest.fixture
    def database(server: LocalMysqlServer) -> Iterator[str]:
        with fresh_database(server.url, prefix) as url:
            yield url

    return server, database


def sql(url: str, statement: str, args: Any = None, **connect: Any) -> list[tuple[Any, ...]]:
    """One statement on its own autocommit connection: for arranging and inspecting tables from outside
    (`connect`: more pymysql.connect arguments, e.g. a connect_timeout)."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True, **connect)
    try:
        with conn.cursor() as cur:
            cur.execute(statement, args)
            return list(cur.fetchall())
    finally:
        conn.close()


def sql_session(url: str, statements: list[str]) -> None:
    """Statements in order on ONE autocommit connection, as a migration tool runs them (the upgrade statements
    hand values to each other in session variables)."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
    finally:
        conn.close()


def mariadb_client(url: str) -> tuple[list[str], dict[str, str]]:
    """The `mariadb` command line (and environment, for the password) that reaches `url`'s database."""
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        pytest.fail("neither the `mariadb` nor the `mysql` client is installed")
    parsed = parse_mysql_url(url)
    command = [client, "--default-character-set=utf8mb4", "-u", parsed.user]
    if parsed.unix_socket:
        command.append(f"--socket={parsed.unix_socket}")
    else:
        command += ["--protocol=TCP", "-h", parsed.host, "-P", str(parsed.port)]
    if parsed.database:
        command.append(parsed.database)
    return command, {**os.environ, "MYSQL_PWD": parsed.password}


def empty_tables(url: str, prefix: str = "") -> None:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs())
    try:
        with conn.cursor() as cur:
            for table in ("action_jobs", "action_schedules", "action_kv"):
                cur.execute(
                    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() "
                    "AND table_name = %s",
                    (prefix + table,),
                )
                if cur.fetchone()[0]:
                    cur.execute(f"TRUNCATE TABLE `{prefix}{table}`")
        conn.commit()
    finally:
        conn.close()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Says where the dashboard's browser tests left their screenshots, when they ran."""
    from tests.harness.dashboard import ARTIFACTS

    shots = sorted(ARTIFACTS.glob("*.png")) if ARTIFACTS.exists() else []
    if shots:
        terminalreporter.write_line(f"dashboard screenshots ({len(shots)}): {ARTIFACTS}")
