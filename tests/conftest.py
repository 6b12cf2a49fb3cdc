"""Shared fixtures: the session's servers, one per flavour (a throwaway MariaDB 10.11 and MySQL 9.7 LTS, or the one
server PLITZI_MYSQL_URL names), each server test running once against each; servers of a test module's own.

`PLITZI_TEST_SERVERS=mariadb` (or `mysql-9.7`) runs only one flavour. The MySQL 9.7 server comes from the root
scripts/mysql_root.sh builds and caches (tests/harness/mysql97.py); where it cannot be had, its tests skip saying
why.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiomysql
import pymysql
import pytest

from plitzi_jobs_mysql.mysql.schema.totals import drift_query
from plitzi_jobs_mysql.testing import LocalMysqlServer, fresh_database, load_time_zones, mysql_server_url
from plitzi_jobs_mysql.testing.server import ENV_URL
from plitzi_jobs_mysql.url import parse_mysql_url

from .harness.mysql97 import ChrootMysqlServer, mysql_root_missing_reason
from .harness.servers import CrashableServer

#: The server flavours every server test runs against, as they appear in test ids.
MARIADB, MYSQL97 = "mariadb", "mysql-9.7"
FLAVOURS = (MARIADB, MYSQL97)


def local_flavours() -> list[str]:
    """The flavours of throwaway server to test against (`PLITZI_TEST_SERVERS` narrows them)."""
    chosen = [name.strip() for name in os.environ.get("PLITZI_TEST_SERVERS", "").split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(FLAVOURS))
    if unknown:
        raise pytest.UsageError(f"PLITZI_TEST_SERVERS names unknown flavours {unknown}; known: {list(FLAVOURS)}")
    return chosen or list(FLAVOURS)


def session_flavours() -> list[str]:
    """The session servers: the one PLITZI_MYSQL_URL names (as "url"), else one throwaway server per flavour."""
    return ["url"] if os.environ.get(ENV_URL, "").strip() else local_flavours()


def throwaway_server(flavour: str, **options: Any) -> CrashableServer:
    """A server of that flavour, not started (its tests skip, saying why, where MySQL 9.7 cannot be had)."""
    if flavour == MYSQL97:
        reason = mysql_root_missing_reason()
        if reason is not None:
            pytest.skip(reason)
        return ChrootMysqlServer(**options)
    return CrashableServer(**options)


def is_mysql(url: str) -> bool:
    """Whether the server at `url` is Oracle MySQL (not MariaDB)."""
    return "mariadb" not in str(sql(url, "SELECT VERSION()")[0][0]).lower()


class SessionServers:
    """The session's servers, started on first use (one per flavour) and stopped at the end of the session."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._urls: dict[str, str] = {}

    def url(self, flavour: str) -> str:
        """A root URL (no database) of the session's server of that flavour, with the time-zone tables loaded."""
        if flavour not in self._urls:
            if flavour == "url":
                url = self._stack.enter_context(mysql_server_url())
                load_time_zones(url)
            else:
                url = self._stack.enter_context(throwaway_server(flavour)).url
            self._urls[flavour] = url
        return self._urls[flavour]

    def close(self) -> None:
        self._stack.close()


@pytest.fixture(scope="session")
def session_servers() -> Iterator[SessionServers]:
    servers = SessionServers()
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(scope="session", params=session_flavours())
def mysql_url(request: pytest.FixtureRequest, session_servers: SessionServers) -> str:
    """A root URL of the session's server of this flavour (no database), with the time-zone tables loaded."""
    return session_servers.url(request.param)


@contextlib.contextmanager
def flavour_database(request: pytest.FixtureRequest, flavour: str, prefix: str = "pjm_test") -> Iterator[str]:
    """A fresh database on the session's server of `flavour`, for a fixture whose own parameters name the
    flavour beside stores that need no server (memory): `params=["memory", *session_flavours()]`."""
    servers: SessionServers = request.getfixturevalue("session_servers")
    with fresh_database(servers.url(flavour), prefix) as url:
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

    @pytest.fixture(scope="module", params=local_flavours())
    def server(request: pytest.FixtureRequest) -> Iterator[LocalMysqlServer]:
        with throwaway_server(request.param, load_tz=False) as started:
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


def assert_totals_exact(url: str, prefix: str = "") -> None:
    """The drift check (mysql/schema/totals.py) from outside: the kept job totals say what a recount says."""
    drift = sql(url, drift_query(prefix))
    assert not drift, f"job totals drifted from a recount (space, action, status, kept, counted): {drift}"


def numbers(count: int) -> str:
    """`FROM {numbers(n)}`: rows `seq` = 1..n on MariaDB and MySQL alike (MariaDB's `seq_1_to_N` tables are its
    own; a recursive CTE would meet MySQL's cte_max_recursion_depth of 1,000). Ends the statement."""
    digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {d}" for d in range(1, 10)) + ")"
    places = len(str(count))
    value = " + ".join(f"d{i}.d * {10**i}" for i in range(places))
    tables = ", ".join(f"{digits} AS d{i}" for i in range(places))
    return f"(SELECT {value} + 1 AS seq FROM {tables}) AS numbers WHERE seq <= {count}"


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
            # TRUNCATE fires no trigger: the job totals (mysql/schema/totals.py) are emptied with their jobs.
            for table in ("action_jobs", "action_schedules", "action_kv", "action_totals"):
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


def _sendable(text: str) -> str:
    # Lone surrogates (the hostile-input tests log undecodable bytes as such) cannot cross to pytest-xdist's
    # controller, whose channel encodes UTF-8 strictly: the worker would die and its tests go unreported.
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A test's report as pytest-xdist can send it: its captured output with lone surrogates escaped."""
    outcome: Any = yield
    report = outcome.get_result()
    report.sections = [(title, _sendable(content)) for title, content in report.sections]
    if isinstance(report.longrepr, str):
        report.longrepr = _sendable(report.longrepr)
