"""What the job totals' triggers cost the write path (issue 24.1): the same queue on the same tables, with the
triggers and without them, alternating rep by rep in one run so both share the machine's noise.

    python bench/totals_cost.py [--jobs 4000] [--reps 5]

Per rep and side: `enqueue` from one producer, `enqueue_many` in batches of 500, and a drain by 4 claim loops
(claim 10, settle succeeded). "without" drops the triggers (the previous release's write path exactly: its
statements are unchanged); "with" recreates them. The tables are emptied between reps (jobs and totals).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import aiomysql

from plitzi_jobs_mysql import AttemptOutcome, JobInput, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema import totals
from plitzi_jobs_mysql.testing import fresh_database, mysql_server_url
from plitzi_jobs_mysql.url import parse_mysql_url


def job(n: int, tag: str) -> JobInput:
    return JobInput(id=f"{tag}-{n}", space_id=1, action_id=f"a{n % 10}", environment="main", trigger="bench",
                    input={"n": n}, due_at=0, max_attempts=3)  # fmt: skip


async def run(url: str, jobs: int, reps: int) -> dict[str, dict[str, list[float]]]:
    pool = await aiomysql.create_pool(**parse_mysql_url(url).aiomysql_kwargs(), minsize=1, maxsize=12, autocommit=True)
    queue = create_mysql_job_queue(pool)
    await queue.get_job([1], "-")

    async def admin(*statements: str) -> None:
        async with pool.acquire() as conn, conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)

    async def drain() -> None:
        async def loop(worker: str) -> None:
            while claimed := await queue.claim(worker_id=worker, lease_ms=60_000, limit=10):
                ok = AttemptOutcome(status="succeeded", worker_id=worker)
                await asyncio.gather(*(queue.settle(job_id=j.id, worker_id=worker, status="succeeded", attempt=ok)
                                       for j in claimed))  # fmt: skip

        await asyncio.gather(*(loop(f"w{i}") for i in range(4)))

    results: dict[str, dict[str, list[float]]] = {"with": {}, "without": {}}
    for rep in range(reps):
        for side in ("without", "with") if rep % 2 else ("with", "without"):
            await admin("TRUNCATE TABLE action_jobs", f"TRUNCATE TABLE `{totals.totals_name()}`",
                        *(f"DROP TRIGGER IF EXISTS `{name}`" for name in totals.trigger_names()))  # fmt: skip
            if side == "with":
                await admin(*totals.totals_triggers())
            figures = results[side]
            started = time.perf_counter()
            for n in range(jobs // 4):
                await queue.enqueue(job(n, f"e{rep}"))
            figures.setdefault("enqueue, one producer", []).append(jobs // 4 / (time.perf_counter() - started))
            started = time.perf_counter()
            for base in range(0, jobs, 500):
                await queue.enqueue_many([job(n, f"m{rep}") for n in range(base, min(jobs, base + 500))])
            figures.setdefault("enqueue_many x500", []).append(jobs / (time.perf_counter() - started))
            started = time.perf_counter()
            await drain()
            figures.setdefault("drain, 4 claim loops (claim 10 + settle)", []).append(
                (jobs + jobs // 4) / (time.perf_counter() - started)
            )
            print(f"rep {rep + 1} {side}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in figures.items()),
                  file=sys.stderr, flush=True)  # fmt: skip
    pool.close()
    await pool.wait_closed()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with mysql_server_url() as root, fresh_database(root, "bench_cost") as url:
        results = asyncio.run(run(url, args.jobs, args.reps))
    print(f"\njobs/s, median of {args.reps} reps alternating (with / without the totals' triggers)\n")
    print("| path | without | with | with / without |\n|---|---|---|---|")
    for name in results["with"]:
        without, with_ = statistics.median(results["without"][name]), statistics.median(results["with"][name])
        print(f"| {name} | {without:,.0f} | {with_:,.0f} | {with_ / without:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
