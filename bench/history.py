"""Operator reads as history grows (issue 24): the same calls on 1,000 jobs and on millions, old code path vs new.

    python bench/history.py [--sizes 1000,1100000] [--big] [--waiting 100000] [--reps 5] [--mysql97]

Each size is its own database: N - waiting finished jobs (succeeded, dead, cancelled; spread over 90 days) and
`--waiting` pending jobs due over the last hour (1,000 jobs: 900 + 100), all in space 1 over ten actions, filled
with INSERT ... SELECT from a digits cross join (MariaDB and MySQL alike) in batches of 100,000; then the totals
are backfilled by the upgrade step's own statement (timed: what `migrate` costs on such a table). `--big` adds
10,100,000 (run it only on a quiet machine). The server is PLITZI_MYSQL_URL if set, a MySQL 9.7 from the Debian
root with `--mysql97`, else a throwaway MariaDB.

"old" runs the statements the previous release ran (COUNT(*) beside every page, stats as one GROUP BY over every
row), "new" the queue's calls as they are now; old and new alternate rep by rep so they share the machine's noise.
Median of `--reps` after one warm-up. Claims and get_job ran the same statements before and after (their trigger
cost is in bench/run.py's throughput figures), so they are measured once.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiomysql
import pymysql
from common import server

from plitzi_jobs_mysql import create_mysql_job_queue
from plitzi_jobs_mysql.contract.cursor import encode_after
from plitzi_jobs_mysql.mysql.schema import totals
from plitzi_jobs_mysql.mysql.statements import JOB_COLUMNS
from plitzi_jobs_mysql.testing import fresh_database
from plitzi_jobs_mysql.url import parse_mysql_url

BATCH = 100_000
SPAN_MS = 90 * 86_400_000
DEPTH = 50_000
JOBS = "action_jobs"
HISTORY = '[{"attempt": 1, "status": "succeeded", "started_at": 0, "ended_at": 0, "worker_id": "w"}]'
# What the previous release sent (statements.py before the totals): an exact COUNT(*) beside every page, and
# stats as one GROUP BY over every row of the spaces.
OLD_PAGE = f"SELECT {JOB_COLUMNS} FROM {JOBS} IGNORE INDEX (job_space_status_recent) WHERE {{where}} "
OLD_PAGE += "ORDER BY updated_at DESC, seq DESC LIMIT %s OFFSET %s"
OLD_COUNT = f"SELECT COUNT(*) FROM {JOBS} WHERE {{where}}"
OLD_STATS = (
    "SELECT space_id, action_id, status, COUNT(*), SUM(status = 'pending' AND run_at <= %(now)s), "
    "MIN(CASE WHEN status = 'pending' AND run_at <= %(now)s THEN run_at END), "
    f"SUM(status = 'running' AND lease_until < %(now)s) FROM {JOBS} WHERE space_id IN %(spaces)s "
    "GROUP BY space_id, action_id, status"
)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _digits(places: int) -> tuple[str, str]:
    one = "(SELECT 0 AS d UNION ALL " + " UNION ALL ".join(f"SELECT {d}" for d in range(1, 10)) + ")"
    value = " + ".join(f"d{i}.d * {10**i}" for i in range(places))
    return value, ", ".join(f"{one} AS d{i}" for i in range(places))


def fill(url: str, finished: int, waiting: int) -> dict[str, float]:
    """The jobs, without the triggers (a bulk load), then the totals backfilled as the upgrade step does."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    timings: dict[str, float] = {}
    with conn.cursor() as cur:
        cur.execute("SELECT TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000")
        now = int(cur.fetchone()[0])
        for name in totals.trigger_names():
            cur.execute(f"DROP TRIGGER IF EXISTS `{name}`")
        started = time.monotonic()
        columns = ("INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, "
                   "max_attempts, status, run_at, attempts, created_at, updated_at, history) ")  # fmt: skip
        for kind, count in (("finished", finished), ("waiting", waiting)):
            for base in range(0, count, BATCH):
                size = min(BATCH, count - base)
                value, digits = _digits(len(str(size - 1)))
                n = f"({base} + {value})"
                if kind == "finished":
                    at = f"({now - SPAN_MS} + {n} * {SPAN_MS // max(count, 1)})"
                    select = (
                        f"SELECT CONCAT('f-', {n}), 1, CONCAT('action-', {n} % 10), 'main', 'bench', '{{\"n\": 1}}', "
                        f"{at} - 1000, 3, ELT(1 + {n} % 5, 'succeeded', 'succeeded', 'succeeded', 'dead', "
                        f"'cancelled'), {at}, 1, {at} - 1000, {at}, '{HISTORY}'"
                    )
                else:
                    at = f"({now} - 3600000 + {n} % 3600000)"
                    select = (
                        f"SELECT CONCAT('w-', {n}), 1, CONCAT('action-', {n} % 10), 'main', 'bench', '{{\"n\": 1}}', "
                        f"{at}, 3, 'pending', {at}, 0, {at}, {at}, '[]'"
                    )
                cur.execute(f"{columns}{select} FROM {digits} WHERE {value} < {size}")
            log(f"    {count:,} {kind} jobs in {time.monotonic() - started:.1f} s")
        timings["fill_s"] = time.monotonic() - started
        for statement in totals.totals_triggers():
            cur.execute(statement)
        cur.execute(f"TRUNCATE TABLE `{totals.totals_name()}`")
        started = time.monotonic()
        for statement in totals.backfill_statements():
            cur.execute(statement)
        timings["backfill_s"] = time.monotonic() - started
        cur.execute(f"ANALYZE TABLE {JOBS}")
        cur.fetchall()
    conn.close()
    return timings


async def _median(call: Callable[[], Awaitable[Any]], reps: int) -> float:
    await call()  # warm-up
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


async def measure(url: str, reps: int) -> dict[str, tuple[float | None, float]]:
    """call -> (old ms or None, new ms)."""
    pool = await aiomysql.create_pool(**parse_mysql_url(url).aiomysql_kwargs(), minsize=1, maxsize=10, autocommit=True)
    try:
        queue = create_mysql_job_queue(pool)
        now = int((await queue.now()).timestamp() * 1000)

        async def old(sql: str, args: Any) -> None:
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute(sql, args)
                await cur.fetchall()

        async def old_list(where: str, args: list[Any], offset: int = 0) -> None:
            await old(OLD_PAGE.format(where=where), [*args, 50, offset])
            await old(OLD_COUNT.format(where=where), args)

        async def claim_and_hand_back() -> None:
            for claimed in await queue.claim(worker_id="bench", lease_ms=60_000, limit=10):
                await queue.settle(job_id=claimed.id, worker_id="bench", status="pending", delay_ms=0)

        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(
                f"SELECT updated_at, seq FROM {JOBS} WHERE space_id = 1 ORDER BY updated_at DESC, seq DESC "
                f"LIMIT 1 OFFSET {DEPTH - 1}"
            )
            row = await cur.fetchone()
        deep = encode_after(int(row[0]), int(row[1])) if row else None
        calls: dict[str, tuple[Callable[[], Awaitable[Any]] | None, Callable[[], Awaitable[Any]]]] = {
            "`claim(limit=10)` + hand-back": (None, claim_and_hand_back),
            "`get_job`": (None, lambda: queue.get_job([1], "f-42")),
            "`list_jobs(space_ids=[1], limit=50)`": (
                lambda: old_list("space_id IN %s", [[1]]),
                lambda: queue.list_jobs(space_ids=[1], limit=50),
            ),
            '`list_jobs(..., status="pending")`': (
                lambda: old_list("space_id IN %s AND status = %s", [[1], "pending"]),
                lambda: queue.list_jobs(space_ids=[1], status="pending", limit=50),
            ),
            '`list_jobs(..., action_id="action-3", status="dead")`': (
                lambda: old_list("space_id IN %s AND action_id = %s AND status = %s", [[1], "action-3", "dead"]),
                lambda: queue.list_jobs(space_ids=[1], action_id="action-3", status="dead", limit=50),
            ),
            "`list_jobs(..., offset=50_000)`": (
                lambda: old_list("space_id IN %s", [[1]], DEPTH),
                lambda: queue.list_jobs(space_ids=[1], limit=50, offset=DEPTH),
            ),
            "`list_jobs(..., after=<cursor 50,000 deep>)`": (
                None,
                lambda: queue.list_jobs(space_ids=[1], limit=50, after=deep),
            ),
            "`stats(space_ids=[1])`": (
                lambda: old(OLD_STATS, {"now": now, "spaces": [1]}),
                lambda: queue.stats(space_ids=[1]),
            ),
        }
        results: dict[str, tuple[float | None, float]] = {}
        for name, (before, after) in calls.items():
            old_ms = await _median(before, reps) if before is not None else None
            new_ms = await _median(after, reps)
            results[name] = (old_ms, new_ms)
            shown = "-" if old_ms is None else f"{old_ms:,.1f}"
            log(f"    {name}: old {shown} ms, new {new_ms:,.1f} ms")
        return results
    finally:
        pool.close()
        await pool.wait_closed()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,1100000", help="total jobs per table, comma-separated")
    parser.add_argument("--big", action="store_true", help="also 10,100,000 jobs (a quiet machine only)")
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--mysql97", action="store_true", help="on MySQL 9.7 from the Debian root")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s] + ([10_100_000] if args.big else [])
    table: dict[int, dict[str, tuple[float | None, float]]] = {}
    fills: dict[int, dict[str, float]] = {}
    with server(args.mysql97) as root:
        for size in sizes:
            waiting = min(args.waiting, size // 10)
            with fresh_database(root, "bench_hist") as url:
                asyncio.run(create_mysql_job_queue_tables(url))
                log(f"  {size:,} jobs ({size - waiting:,} finished + {waiting:,} pending)")
                fills[size] = fill(url, size - waiting, waiting)
                table[size] = asyncio.run(measure(url, args.reps))
    base = sizes[0]
    print(f"\nmedian of {args.reps} ms per call, one space; old = the previous release's statements, new = now; "
          f"(×) = new / new at {base:,} jobs\n")  # fmt: skip
    head = " | ".join(f"old {s:,} | new {s:,}" for s in sizes)
    print(f"| call | {head} |\n|---|" + "---|" * (2 * len(sizes)))
    for name in table[base]:
        cells = []
        for size in sizes:
            old_ms, new_ms = table[size][name]
            ratio = "" if size == base else f" ({new_ms / table[base][name][1]:.1f}×)"
            cells += ["-" if old_ms is None else f"{old_ms:,.1f}", f"{new_ms:,.1f}{ratio}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print()
    for size in sizes:
        print(f"fill {size:,} jobs: {fills[size]['fill_s']:.1f} s; totals backfill: {fills[size]['backfill_s']:.2f} s")
    return 0


async def create_mysql_job_queue_tables(url: str) -> None:
    pool = await aiomysql.create_pool(**parse_mysql_url(url).aiomysql_kwargs(), minsize=1, maxsize=1, autocommit=True)
    try:
        await create_mysql_job_queue(pool).get_job([1], "-")  # first use: tables, totals, triggers
    finally:
        pool.close()
        await pool.wait_closed()


if __name__ == "__main__":
    sys.exit(main())
