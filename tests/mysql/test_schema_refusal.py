"""A runtime started on tables the store refuses (issue 18.10): the TypeScript original's, or a newer release's.
No retry can heal that, so the worker stops claiming and the scheduler stops sweeping, with ONE error line that
says what to run (naming the database), the failure readable on `ActionJobs.failure`, and `stop()` returning."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import SchemaMismatchError, create_action_jobs, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.schedules import ActionEntry
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import sql, sql_session
from ..harness import ts_original
from ..support import Proxy, wait_for


class Lookups:
    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        return []

    async def list_scheduled_spaces(self) -> list[int]:
        return [1]


async def handler(job: Job) -> None:
    return None


def the_originals_tables(url: str) -> None:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            ts_original.create_tables(cur)
    finally:
        conn.close()


def a_newer_releases_tables(url: str) -> None:
    sql_session(url, mysql_job_schema_statements())
    sql(url, "ALTER TABLE action_jobs COMMENT = 'plitzi_jobs_mysql schema 99'")


@pytest.mark.parametrize(
    ("tables", "fix"),
    [
        (the_originals_tables, "run `plitzi-jobs-mysql migrate --url mysql://…/{database}`"),
        (a_newer_releases_tables, "upgrade plitzi_jobs_mysql on every replica"),
    ],
    ids=["typescript-original", "newer-schema"],
)
async def test_a_runtime_on_tables_it_refuses_stops_with_one_line_naming_the_fix(
    database_url: str, database_pool: Any, caplog: pytest.LogCaptureFixture, tables: Any, fix: str
) -> None:
    tables(database_url)
    database = parse_mysql_url(database_url).database
    queue = Proxy(create_mysql_job_queue(database_pool, create_tables=False))
    jobs = create_action_jobs(
        lookups=Lookups(),
        handler=handler,
        queue=queue,
        kv=create_mysql_kv(database_pool, create_tables=False),
        poll_ms=10,
        schedule_poll_ms=10,
    )
    with caplog.at_level(logging.DEBUG, logger="plitzi_jobs_mysql"):
        jobs.start()
        try:
            failure = await wait_for(lambda: jobs.failure, what="the runtime giving up on the tables")
            # Their timers end: nothing polls the store again.
            await wait_for(lambda: not jobs.worker.running and not jobs.scheduler.running, what="both stopping")
            calls = len(queue.calls)
        finally:
            await asyncio.wait_for(jobs.stop(), 10)
    assert len(queue.calls) == calls
    assert isinstance(failure, SchemaMismatchError)
    assert jobs.worker.failure is jobs.scheduler.failure is failure
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    [line] = errors
    assert line.exc_info is None and "\n" not in line.getMessage()  # one line, no traceback
    assert "stops" in line.getMessage() and fix.format(database=database) in line.getMessage()
    assert "DATABASE" not in line.getMessage()
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs") == [(0,)]
