"""The Alembic environment (inside the package; the root alembic.ini points at it), against the real server.

`alembic upgrade head` / `downgrade base` / `upgrade head` work with and without a prefix, and the tables they
make are identical (as information_schema reads them) to the ones the adapters create on first use and to
sql/schema.sql piped through the `mariadb` client; the adapters then work on them with `create_tables=False`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiomysql
import pymysql
import pytest

from plitzi_jobs_mysql import JobInput, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.testing import fresh_database
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import mariadb_client

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("action_jobs", "action_schedules", "action_kv")
#: The package's newest Alembic revision.
HEAD = "0002"


def alembic(url: str | None, *args: str, prefix: str | None = None) -> subprocess.CompletedProcess[str]:
    """Runs `alembic -c alembic.ini [-x url=…] [-x prefix=…] ARGS`, without PLITZI_MYSQL_URL."""
    env = {k: v for k, v in os.environ.items() if k != "PLITZI_MYSQL_URL"}
    command = [sys.executable, "-m", "alembic", "-c", str(ROOT / "alembic.ini")]
    if url is not None:
        command += ["-x", f"url={url}"]
    if prefix is not None:
        command += ["-x", f"prefix={prefix}"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def pipe_to_mariadb(url: str, script: str) -> None:
    command, env = mariadb_client(url)
    result = subprocess.run(command, input=script, capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr


def query(url: str, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            rows = list(cur.fetchall())
        conn.commit()
        return rows
    finally:
        conn.close()


def table_list(url: str) -> set[str]:
    return {str(row[0]) for row in query(url, "SHOW TABLES")}


def schema_snapshot(url: str, prefix: str = "") -> dict[str, Any]:
    """Columns, indexes, table options and version records of the three tables as information_schema reports them.

    Table names are given without the prefix, so tables made with different prefixes compare equal when their
    definitions do.
    """
    database = parse_mysql_url(url).database
    names = [prefix + t for t in TABLES]
    where = "TABLE_SCHEMA = %s AND TABLE_NAME IN (%s, %s, %s)"
    args = [database, *names]
    columns = query(
        url,
        "SELECT TABLE_NAME, ORDINAL_POSITION, COLUMN_NAME, COLUMN_TYPE, DATA_TYPE, IS_NULLABLE,"
        " COLUMN_DEFAULT, CHARACTER_MAXIMUM_LENGTH, CHARACTER_SET_NAME, COLLATION_NAME, COLUMN_KEY, EXTRA"
        f" FROM information_schema.COLUMNS WHERE {where} ORDER BY TABLE_NAME, ORDINAL_POSITION",
        args,
    )
    indexes = query(
        url,
        "SELECT TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX, COLUMN_NAME, NON_UNIQUE, SUB_PART, INDEX_TYPE,"
        f" COLLATION, NULLABLE FROM information_schema.STATISTICS WHERE {where}"
        " ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX",
        args,
    )
    tables = query(
        url,
        "SELECT TABLE_NAME, ENGINE, TABLE_COLLATION, ROW_FORMAT, CREATE_OPTIONS, TABLE_COMMENT"
        f" FROM information_schema.TABLES WHERE {where} ORDER BY TABLE_NAME",
        args,
    )

    def strip(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [(str(row[0])[len(prefix) :], *row[1:]) for row in rows]

    snapshot = {"columns": strip(columns), "indexes": strip(indexes), "tables": strip(tables)}
    assert len(snapshot["tables"]) == 3, f"expected the three tables, found {snapshot['tables']}"
    return snapshot


async def open_pool(url: str) -> Any:
    return await aiomysql.create_pool(**parse_mysql_url(url).aiomysql_kwargs(), minsize=1, maxsize=4, autocommit=False)


async def adapter_tables_snapshot(mysql_url: str, prefix: str) -> dict[str, Any]:
    """The tables the adapters create on first use, in a database of their own."""
    with fresh_database(mysql_url, "pjm_adapters") as url:
        pool = await open_pool(url)
        try:
            await create_mysql_job_queue(pool, table_prefix=prefix).now()
        finally:
            pool.close()
            await pool.wait_closed()
        assert table_list(url) == {prefix + t for t in TABLES}
        return schema_snapshot(url, prefix)


def schema_sql_snapshot(mysql_url: str) -> dict[str, Any]:
    """The tables sql/schema.sql makes when piped through the `mariadb` client."""
    with fresh_database(mysql_url, "pjm_sqlfile") as url:
        pipe_to_mariadb(url, (ROOT / "sql" / "schema.sql").read_text(encoding="utf-8"))
        pipe_to_mariadb(url, (ROOT / "sql" / "upgrades.sql").read_text(encoding="utf-8"))
        return schema_snapshot(url)


async def adapters_work_without_ddl(url: str, prefix: str) -> None:
    pool = await open_pool(url)
    try:
        queue = create_mysql_job_queue(pool, table_prefix=prefix, create_tables=False)
        now = int((await queue.now()).timestamp() * 1000)
        job = JobInput(
            id="job-1",
            space_id=7,
            action_id="a",
            environment="main",
            trigger="manual",
            input={"n": 1},
            due_at=now - 1000,
            max_attempts=3,
        )
        assert await queue.enqueue(job) is True
        claimed = await queue.claim(worker_id="w1", lease_ms=30_000, limit=5)
        assert [j.id for j in claimed] == ["job-1"]
        assert claimed[0].status == "running" and claimed[0].attempts == 1
        kv = create_mysql_kv(pool, table_prefix=prefix, create_tables=False)
        await kv.set("k", "v")
        assert await kv.get("k") == "v"
    finally:
        pool.close()
        await pool.wait_closed()


@pytest.mark.parametrize("prefix", ["", "app_"])
async def test_upgrade_downgrade_upgrade_makes_the_adapters_tables(
    mysql_url: str, database_url: str, prefix: str
) -> None:
    version_table = f"{prefix}plitzi_jobs_alembic_version"
    # A user's own Alembic history in the same database must be left alone.
    query(database_url, "CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)")
    query(database_url, "INSERT INTO alembic_version VALUES ('users_own')")

    ok(alembic(database_url, "upgrade", "head", prefix=prefix))
    assert table_list(database_url) == {prefix + t for t in TABLES} | {version_table, "alembic_version"}
    assert query(database_url, f"SELECT version_num FROM `{version_table}`") == [(HEAD,)]
    first = schema_snapshot(database_url, prefix)

    ok(alembic(database_url, "downgrade", "base", prefix=prefix))
    assert table_list(database_url) == {version_table, "alembic_version"}
    assert query(database_url, f"SELECT version_num FROM `{version_table}`") == []

    ok(alembic(database_url, "upgrade", "head", prefix=prefix))
    again = schema_snapshot(database_url, prefix)
    assert again == first
    assert query(database_url, "SELECT version_num FROM alembic_version") == [("users_own",)]
    current = ok(alembic(database_url, "current", prefix=prefix))
    assert f"{HEAD} (head)" in current.stdout

    assert first == await adapter_tables_snapshot(mysql_url, prefix)
    assert first == schema_sql_snapshot(mysql_url)

    await adapters_work_without_ddl(database_url, prefix)


def test_two_prefixes_keep_separate_histories(database_url: str) -> None:
    ok(alembic(database_url, "upgrade", "head", prefix="one_"))
    ok(alembic(database_url, "upgrade", "head", prefix="two_"))
    ok(alembic(database_url, "downgrade", "base", prefix="one_"))
    tables = table_list(database_url)
    assert {"two_" + t for t in TABLES} <= tables
    assert not {"one_" + t for t in TABLES} & tables


def test_url_from_the_environment(database_url: str) -> None:
    env = {**os.environ, "PLITZI_MYSQL_URL": database_url}
    command = [sys.executable, "-m", "alembic", "-c", str(ROOT / "alembic.ini"), "upgrade", "head"]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    ok(result)
    assert {t for t in TABLES} <= table_list(database_url)


def test_offline_sql_needs_no_database() -> None:
    result = ok(alembic(None, "upgrade", "head", "--sql", prefix="p_"))
    assert "CREATE TABLE IF NOT EXISTS `p_action_jobs`" in result.stdout
    assert "p_plitzi_jobs_alembic_version" in result.stdout


def failure_line(result: subprocess.CompletedProcess[str]) -> str:
    """Alembic prints a CommandError as one `FAILED: …` line (and logs it once): no traceback."""
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    lines = [line for line in output.splitlines() if line.startswith("FAILED:")]
    assert len(lines) == 1, output
    return lines[0]


def test_no_url_is_a_clear_error() -> None:
    line = failure_line(alembic(None, "upgrade", "head"))
    assert "no database URL" in line and "PLITZI_MYSQL_URL" in line


def test_bad_url_bad_prefix_unreachable_server_are_clear_errors(mysql_url: str) -> None:
    assert "invalid MySQL URL" in failure_line(alembic("postgres://x@y/z", "upgrade", "head"))
    assert "names no database" in failure_line(alembic(mysql_url, "upgrade", "head"))
    assert "table_prefix" in failure_line(alembic(mysql_url + "x", "upgrade", "head", prefix="bad-prefix"))
    line = failure_line(alembic("mysql://root@127.0.0.1:1/x", "upgrade", "head"))
    assert "cannot connect" in line


class RecordingOp:
    def __init__(self) -> None:
        self.sql: list[str] = []

    def execute(self, sqltext: Any, /) -> None:
        self.sql.append(sqltext)


def test_migration_helpers_run_the_schema_functions_and_need_no_alembic() -> None:
    from plitzi_jobs_mysql.migrations import create_job_tables, drop_job_tables
    from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements, mysql_job_schema_upgrades

    op = RecordingOp()
    create_job_tables(op, prefix="x_")
    assert op.sql == mysql_job_schema_statements("x_") + mysql_job_schema_upgrades("x_")
    op = RecordingOp()
    drop_job_tables(op, prefix="x_")
    assert op.sql == [f"DROP TABLE IF EXISTS `x_{t}`" for t in TABLES]
    # A bad prefix raises before anything is executed.
    op = RecordingOp()
    with pytest.raises(ValueError):
        create_job_tables(op, prefix="x-")
    assert op.sql == []
    # Importing the helpers does not import Alembic (an optional dependency).
    code = "import sys; sys.modules['alembic'] = None; import plitzi_jobs_mysql.migrations"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_downgrade_one_revision_undoes_the_priorities_step(database_url: str) -> None:
    ok(alembic(database_url, "upgrade", "head"))
    head = schema_snapshot(database_url)
    query(database_url, "INSERT INTO action_kv (k, v) VALUES ('kept', 'v')")
    ok(alembic(database_url, "downgrade", "0001"))
    columns = query(database_url, "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                                  "AND TABLE_NAME = 'action_jobs' ORDER BY ORDINAL_POSITION")  # fmt: skip
    assert "priority" not in [c[0] for c in columns]
    comments = query(database_url, "SELECT DISTINCT TABLE_COMMENT FROM information_schema.TABLES "
                                   "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE 'action\\_%'")  # fmt: skip
    assert comments == [("plitzi_jobs_mysql schema 1",)]
    ok(alembic(database_url, "upgrade", "head"))
    assert schema_snapshot(database_url) == head
    assert query(database_url, "SELECT v FROM action_kv") == [("v",)]
