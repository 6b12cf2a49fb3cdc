"""Pauses (issue 20.3): what a claim costs facing 100,000 due jobs of a paused action, beside one facing none.

    python bench/pauses.py [--jobs 1000] [--paused 100000] [--samples 300]

Two tables side by side in one database: `none_` holding `--jobs` due jobs of action `bench`, and `paused_`
holding the same plus `--paused` due jobs of action `stopped`, all older than the `bench` ones (so without the
pause they would be claimed first), paused with `queue.pause` (timed: it marks them in bounded batches).
claim(limit=10) by one claimer alternates table by table, claim by claim, so the ratio is between figures sharing
the same noise; claimed jobs are put back pending between claims (untimed). Target: paused / none <= 1.25. Then
`--paused` more jobs of the paused action are written straight in SQL, unmarked (as jobs enqueued under a pause
are), and the first claims that meet them are timed: each marks what it met, so they cost more only until done.

The server is PLITZI_MYSQL_URL if set, else a throwaway one; the bench's database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiomysql
from common import bench_url, log, numbers, open_tables, percentile, put_back

from plitzi_jobs_mysql import create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.state import table_names
from plitzi_jobs_mysql.url import parse_mysql_url

CLAIM_LIMIT = 10
LEASE_MS = 600_000
TARGET = 1.25


def insert(conn: Any, prefix: str, action: str, count: int, first: int, tag: str) -> None:
    """`count` due jobs of `action`, run_at from `first` on, one ms apart."""
    with conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO `{table_names(prefix).jobs}` (id, space_id, action_id, environment, `trigger`, input, "
            "due_at, max_attempts, status, run_at, attempts, created_at, updated_at, history) "
            f"SELECT CONCAT('{tag}', seq), 1, '{action}', 'main', 'manual', '{{}}', {first} + seq, 3, 'pending', "
            f"{first} + seq, 0, 0, 0, '[]' FROM " + numbers(count)
        )
        cur.execute(f"ANALYZE TABLE `{table_names(prefix).jobs}`")


async def claim(queue: Any, conn: Any, prefix: str, full: bool = True) -> float:
    started = time.perf_counter()
    jobs = await queue.claim(worker_id="bench", lease_ms=LEASE_MS, limit=CLAIM_LIMIT)
    took = (time.perf_counter() - started) * 1000
    if (full and len(jobs) != CLAIM_LIMIT) or any(job.action_id != "bench" for job in jobs):
        raise RuntimeError(f"{prefix}: a claim took {[(job.id, job.action_id) for job in jobs]}")
    if jobs:
        put_back(conn, prefix, jobs)
    return took


async def run(url: str, args: argparse.Namespace) -> int:
    where = parse_mysql_url(url)
    conn, version, now = open_tables(url, ("none_", "paused_"))
    hour = 3_600_000
    log(f"server {version}; filling {args.jobs:,} + ({args.jobs:,} and {args.paused:,} paused) jobs")
    insert(conn, "none_", "bench", args.jobs, now - hour, "b")
    insert(conn, "paused_", "stopped", args.paused, now - 3 * hour, "s")
    insert(conn, "paused_", "bench", args.jobs, now - hour, "b")
    pool = await aiomysql.create_pool(minsize=10, maxsize=10, autocommit=True, **where.aiomysql_kwargs())
    try:
        queues = {prefix: create_mysql_job_queue(pool, table_prefix=prefix) for prefix in ("none_", "paused_")}
        for queue in queues.values():
            await queue.now()
        started = time.perf_counter()
        await queues["paused_"].pause(space_id=1, action_id="stopped")
        pause_s = time.perf_counter() - started
        times: dict[str, list[float]] = {prefix: [] for prefix in queues}
        for i in range(args.samples + 20):
            for prefix, queue in queues.items():
                took = await claim(queue, conn, prefix)
                if i >= 20:  # warm-up
                    times[prefix].append(took)
        p50 = {prefix: statistics.median(values) for prefix, values in times.items()}
        ratio = p50["paused_"] / p50["none_"]
        ok = ratio <= TARGET
        print(f"## Pauses (bench/pauses.py; {version})\n")
        print(f"pause(space_id=1, action_id='stopped') over {args.paused:,} due jobs: {pause_s:.1f} s\n")
        print(f"### claim(limit={CLAIM_LIMIT}), one claimer, {args.samples} claims per table, interleaved\n")
        print("| table | due jobs | p50 ms | p99 ms | p50 / none |")
        print("|---|---|---|---|---|")
        for prefix, shape in (("none_", f"{args.jobs:,}"), ("paused_", f"{args.jobs:,} + {args.paused:,} paused")):
            print(f"| {prefix} | {shape} | {p50[prefix]:.2f} | {percentile(times[prefix], 99):.2f} | "
                  f"{p50[prefix] / p50['none_']:.2f}x |")  # fmt: skip
        print(f"\n{args.paused:,} paused due jobs vs none: {ratio:.2f}x (target <= {TARGET}x): "
              f"{'met' if ok else 'NOT met'}\n")  # fmt: skip
        insert(conn, "paused_", "stopped", args.paused, now - 2 * hour, "late")
        lazy = []
        started = time.perf_counter()
        while True:
            lazy.append(await claim(queues["paused_"], conn, "paused_", full=False))
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT COUNT(*) FROM `{table_names('paused_').jobs}` WHERE held = 0 AND action_id = 'stopped'"
                )
                if not cur.fetchone()[0]:
                    break
        print(f"{args.paused:,} unmarked jobs of the paused action (enqueued under the pause): marked by the next "
              f"{len(lazy)} claims in {time.perf_counter() - started:.1f} s (p50 {statistics.median(lazy):.2f} ms, "
              f"max {max(lazy):.2f} ms)")  # fmt: skip
    finally:
        pool.close()
        await pool.wait_closed()
        conn.close()
    return 1 if not ok and args.strict else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--paused", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--strict", action="store_true", help="exit 1 when the target is missed")
    args = parser.parse_args()
    with bench_url("pjm_bench_pauses") as url:
        return asyncio.run(run(url, args))


if __name__ == "__main__":
    raise SystemExit(main())
