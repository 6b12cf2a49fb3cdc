"""Priorities (issue 20.2): what a claim costs, and what a drain runs at, with priorities mixed.

    python bench/priorities.py [--small 1000] [--large 100000] [--samples 300] [--drain 3000] [--reps 3]

1. Claim cost: claim(limit=10) by one claimer, p50 and p99, on two tables side by side in one database: `small_`
   holding `--small` due jobs and `large_` holding `--large` due jobs spread evenly over 5 priorities (-20, -10, 0,
   10, 20), and a third, `one_`, holding `--small` due jobs of one priority (today's shape). Claims alternate table
   by table, claim by claim, so every ratio is between figures sharing the same noise; the claimed jobs are put
   back pending between claims (untimed), so every backlog stays as it is. Target: large / small <= 1.25.
2. Drain: `--drain` due jobs drained by one `create_job_worker(workers=16)` (no-op handler), once with the jobs
   spread over 5 priorities and once with all of them at priority 0, alternating ABBA over `--reps` rounds (an
   even number puts each first as often as second).
   Target: mixed within 10% of one priority.

The server is PLITZI_MYSQL_URL if set, else a throwaway one; the bench's database is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

import aiomysql
from common import bench_url, log, numbers, open_tables, percentile, put_back, seconds_until

from plitzi_jobs_mysql import create_job_worker, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.state import table_names
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.url import parse_mysql_url

PRIORITIES = (-20, -10, 0, 10, 20)
CLAIM_LIMIT = 10
LEASE_MS = 600_000
CLAIM_TARGET = 1.25
DRAIN_TARGET = 0.10


def fill(conn: Any, prefix: str, count: int, priorities: tuple[int, ...], now: int, blocks: bool = False) -> None:
    """`count` due jobs, run_at over the last hour, priority by seq in turn (`blocks`: in runs of count / n)."""
    jobs = table_names(prefix).jobs
    pick = f"(seq - 1) * {len(priorities)} DIV {count}" if blocks else f"seq % {len(priorities)}"
    choose = f"ELT(1 + {pick}, {', '.join(map(str, priorities))})"
    with conn.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE `{jobs}`")  # a DELETE would leave the next run delete-marked entries to step over
        cur.execute(
            f"INSERT INTO `{jobs}` (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
            "priority, status, run_at, attempts, created_at, updated_at, history) "
            f"SELECT CONCAT('b', seq), 1, 'bench', 'main', 'manual', '{{}}', {now} - 3600000 + seq * 3600000 DIV "
            f"{count}, 3, {choose}, 'pending', {now} - 3600000 + seq * 3600000 DIV {count}, 0, 0, 0, '[]' FROM "
            + numbers(count)
        )
        cur.execute(f"ANALYZE TABLE `{jobs}`")


async def claim_costs(pool: Any, conn: Any, prefixes: list[str], samples: int) -> dict[str, list[float]]:
    queues = {prefix: create_mysql_job_queue(pool, table_prefix=prefix) for prefix in prefixes}
    for queue in queues.values():
        await queue.now()
    times: dict[str, list[float]] = {prefix: [] for prefix in prefixes}
    for i in range(samples + 20):
        for prefix, queue in queues.items():
            started = time.perf_counter()
            jobs = await queue.claim(worker_id="bench", lease_ms=LEASE_MS, limit=CLAIM_LIMIT)
            took = (time.perf_counter() - started) * 1000
            if len(jobs) != CLAIM_LIMIT:
                raise RuntimeError(f"{prefix}: a claim took {len(jobs)} jobs")
            if i >= 20:  # warm-up
                times[prefix].append(took)
            put_back(conn, prefix, jobs)
    return times


async def drain(pool: Any, conn: Any, count: int, priorities: tuple[int, ...], now: int, blocks: bool) -> float:
    """Jobs per second of one worker draining `count` due jobs."""
    fill(conn, "drain_", count, priorities, now, blocks)
    queue = create_mysql_job_queue(pool, table_prefix="drain_")
    await queue.now()
    seen: set[str] = set()
    done = asyncio.Event()

    async def handler(job: Job) -> str | None:
        seen.add(job.id)
        if len(seen) >= count:
            done.set()
        return None

    worker = create_job_worker(queue=queue, handler=handler, workers=16)
    return count / await seconds_until(done, worker)


async def run(url: str, args: argparse.Namespace) -> int:
    where = parse_mysql_url(url)
    conn, version, now = open_tables(url, ("small_", "large_", "one_", "drain_"))
    log(f"server {version}; filling {args.small:,} + {args.large:,} + {args.small:,} jobs")
    fill(conn, "small_", args.small, PRIORITIES, now)
    fill(conn, "large_", args.large, PRIORITIES, now)
    fill(conn, "one_", args.small, (0,), now)
    pool = await aiomysql.create_pool(minsize=10, maxsize=10, autocommit=True, **where.aiomysql_kwargs())
    failed = False
    try:
        times = await claim_costs(pool, conn, ["small_", "large_", "one_"], args.samples)
        p50 = {prefix: statistics.median(values) for prefix, values in times.items()}
        print(f"## Priorities (bench/priorities.py; {version})\n")
        print(f"### claim(limit={CLAIM_LIMIT}), one claimer, {args.samples} claims per table, interleaved\n")
        print("| due jobs | priorities | p50 ms | p99 ms | p50 / small |")
        print("|---|---|---|---|---|")
        rows = [("small_", args.small, "5"), ("large_", args.large, "5"), ("one_", args.small, "1 (all 0)")]
        for prefix, count, kinds in rows:
            print(f"| {count:,} | {kinds} | {p50[prefix]:.2f} | {percentile(times[prefix], 99):.2f} | "
                  f"{p50[prefix] / p50['small_']:.2f}x |")  # fmt: skip
        ratio = p50["large_"] / p50["small_"]
        claim_ok = ratio <= CLAIM_TARGET
        print(f"\n{args.large:,} over 5 priorities vs {args.small:,}: {ratio:.2f}x (target <= {CLAIM_TARGET}x): "
              f"{'met' if claim_ok else 'NOT met'}\n")  # fmt: skip
        mixed: list[float] = []
        single: list[float] = []
        for rep in range(args.reps):
            order = [("mixed", PRIORITIES), ("one", (0,))]
            if rep % 2:
                order.reverse()
            for name, priorities in order:
                rate = await drain(pool, conn, args.drain, priorities, now, args.blocks)
                (mixed if name == "mixed" else single).append(rate)
                log(f"drain rep {rep} {name}: {rate:,.0f} jobs/s")
        m, s = statistics.median(mixed), statistics.median(single)
        # Each rep's pair ran back to back: their ratio cancels the drift of a shared machine between reps.
        paired = [a / b for a, b in zip(mixed, single, strict=True)]
        ratio = statistics.median(paired)
        drain_ok = abs(ratio - 1) <= DRAIN_TARGET
        print(f"### drain of {args.drain:,} due jobs, one worker (16 slots), {args.reps} reps alternating\n")
        print("| jobs | jobs/s (median) | runs |")
        print("|---|---|---|")
        print(f"| 5 priorities | {m:,.0f} | {', '.join(f'{r:,.0f}' for r in mixed)} |")
        print(f"| one priority | {s:,.0f} | {', '.join(f'{r:,.0f}' for r in single)} |")
        print(f"\nmixed / one priority, per rep: {', '.join(f'{r:.2f}x' for r in paired)}; median {ratio:.2f}x "
              f"(target within {DRAIN_TARGET:.0%}): {'met' if drain_ok else 'NOT met'}")  # fmt: skip
        failed = not (claim_ok and drain_ok)
    finally:
        pool.close()
        await pool.wait_closed()
        conn.close()
    return 1 if failed and args.strict else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--small", type=int, default=1_000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--drain", type=int, default=3_000)
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--blocks", action="store_true", help="the drain's priorities in runs of seq, not in turn")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    with bench_url("pjm_bench_priorities") as url:
        return asyncio.run(run(url, args))


if __name__ == "__main__":
    raise SystemExit(main())
