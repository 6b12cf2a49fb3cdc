"""What the bench scripts share: where their database comes from, how a worker is timed, how claimed jobs are put
back. Each script runs as `python bench/NAME.py`, which puts bench/ on sys.path, so they import it as `common`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pymysql

from plitzi_jobs_mysql import Job, JobQueue, JobWorker, create_job_worker
from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements, table_names
from plitzi_jobs_mysql.mysql.session import bind
from plitzi_jobs_mysql.testing import fresh_database, mysql_server_url
from plitzi_jobs_mysql.url import parse_mysql_url

#: How long a timed run may take before the bench gives up on it (a stuck worker fails loudly, not forever).
WAIT_S = 300


def log(text: str) -> None:
    """A progress line: stderr, so stdout stays the report."""
    print(text, file=sys.stderr, flush=True)


@contextlib.contextmanager
def bench_url(database: str) -> Iterator[str]:
    """The URL of a fresh database named after `database`, dropped at the end: on the server PLITZI_MYSQL_URL
    names if set (a shared server adds its other clients' noise), else on a throwaway one."""
    if not os.environ.get("PLITZI_MYSQL_URL", "").strip():
        log("starting a throwaway server (plitzi_jobs_mysql.testing.server.mysql_server_url)")
    with mysql_server_url() as root, fresh_database(root, database) as url:
        yield url


@contextlib.contextmanager
def server(mysql97: bool) -> Iterator[str]:
    """A root URL: MySQL 9.7 from the Debian root (scripts/mysql_root.sh), else `mysql_server_url()`."""
    if not mysql97:
        with mysql_server_url() as url:
            yield url
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.harness.mysql97 import ChrootMysqlServer

    with ChrootMysqlServer(load_tz=False) as started:
        yield started.url


def open_tables(url: str, prefixes: Iterable[str]) -> tuple[Any, str, int]:
    """An autocommit connection to `url` with the job tables of each prefix made, the server's version, and its
    clock in ms (the fills' due times are the server's, not this machine's)."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION(), TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000")
        version, now = cur.fetchone()
        for prefix in prefixes:
            for statement in mysql_job_schema_statements(prefix):
                cur.execute(statement)
    return conn, str(version), int(now)


def put_back(conn: Any, prefix: str, jobs: list[Job]) -> None:
    """The claimed `jobs` pending again (untimed), so the backlog the next claim faces stays as it was."""
    with conn.cursor() as cur:
        cur.execute(
            *bind(
                f"UPDATE `{table_names(prefix).jobs}` SET status = 'pending', attempts = 0, worker_id = NULL, "
                "lease_until = NULL, claimed_at = NULL WHERE id IN %s",
                ([job.id for job in jobs],),
            )
        )


def numbers(count: int) -> str:
    """A derived table of `seq` 1..count, for filling tables in one INSERT … SELECT."""
    digits = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {d}" for d in range(1, 10)) + ")"
    places = len(str(count))
    value = " + ".join(f"d{i}.d * {10**i}" for i in range(places))
    tables = ", ".join(f"{digits} AS d{i}" for i in range(places))
    return f"(SELECT {value} + 1 AS seq FROM {tables} HAVING seq <= {count}) AS numbers"


def percentile(values: list[float], p: float) -> float:
    """The nearest-rank `p`th percentile of `values`."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def seconds_until(done: asyncio.Event, *workers: JobWorker) -> float:
    """Seconds from starting `workers` until they have stopped, once their handlers set `done` (`WAIT_S` at the
    most): a drain is over when its last job is settled, which the stop waits for."""
    started = time.perf_counter()
    for worker in workers:
        worker.start()
    try:
        await asyncio.wait_for(done.wait(), WAIT_S)
    finally:
        for worker in workers:
            await worker.stop()
    return time.perf_counter() - started


async def pickup_ms(
    queue: JobQueue, samples: int, enqueue: Callable[[int], Awaitable[float]], spread_s: float
) -> list[float]:
    """ms from each job becoming claimable to its handler starting, on one idle worker (4 slots): `enqueue(i)`
    makes sample i's job claimable and returns the `time.perf_counter()` at which it became so."""
    started: asyncio.Queue[float] = asyncio.Queue()

    async def handler(job: Job) -> None:
        started.put_nowait(time.perf_counter())

    worker = create_job_worker(queue=queue, handler=handler, workers=4)
    worker.start()
    out: list[float] = []
    try:
        await asyncio.sleep(0.2)  # the worker's first (empty) claim is over: it is idle
        for i in range(samples):
            ready = await enqueue(i)
            began = await asyncio.wait_for(started.get(), 10)
            out.append((began - ready) * 1000)
            await asyncio.sleep(0.05 + spread_s * (i % 7) / 7)  # idle again, at no fixed phase of the poll
    finally:
        await worker.stop()
    return out
