"""Fleet-wide limits (issue 21.4), measured side by side in one run on one server, reported as ratios:

1. drain: one `create_job_worker(workers=16)` draining no-op jobs, without limits, with a limit on the drained
   action that never binds (concurrency 10,000), with a limit on another action only, and with the never-binding
   limit while jobs of an action held at its rate wait among the drained ones;
2. claims beside a saturated action: `claim(limit=10)` of an unlimited action while older jobs of a limited
   action wait with every slot taken, or with every start of its rate's window taken, vs the same claims with no
   limited backlog at all;
3. utilisation: a binding concurrency limit of 4, handlers of 20 and of 100 ms, two workers (two queues, as two
   replicas): the time 4 slots busy all along would take / the time taken.

    python bench/limits.py [--quick] [--reps N]      (make bench-limits; PLITZI_MYSQL_URL or a throwaway server)
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import time
from typing import Any

import aiomysql
import pymysql
from common import bench_url, seconds_until

from plitzi_jobs_mysql import ActionLimit, create_job_worker, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.state import table_names
from plitzi_jobs_mysql.records import Job, JobInput
from plitzi_jobs_mysql.url import parse_mysql_url

RIVER = "River (riverqueue/river#1145): a global concurrency limit of 40 halved throughput (ratio 0.50)"
T = table_names("")


def jobs(action_id: str, count: int, tag: str, due_at: int = 0) -> list[JobInput]:
    return [JobInput(id=f"{tag}-{action_id}-{n}", space_id=1, action_id=action_id, environment="main",
                     trigger="bench", input={}, due_at=due_at + n, max_attempts=3) for n in range(count)]  # fmt: skip


def empty(admin: Any) -> None:
    with admin.cursor() as cur:
        cur.execute(f"TRUNCATE TABLE `{T.jobs}`")
        cur.execute(f"TRUNCATE TABLE `{T.kv}`")


def questions(admin: Any) -> int:
    """The server's count of statements received (every client's: on a shared server, others' too)."""
    with admin.cursor() as cur:
        cur.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


async def drain(pool: Any, admin: Any, n: int, limits: dict[str, ActionLimit] | None) -> tuple[float, float]:
    """Jobs per second, and statements per job, of a drain of `n` no-op jobs (the enqueue not counted); with a
    limit on the action `rated`, `n / 10` jobs of it wait among them (the same due instants), held at its rate."""
    empty(admin)
    queue = create_mysql_job_queue(pool)
    tag = secrets.token_hex(3)
    await queue.enqueue_many(jobs("drained", n, tag))
    if limits and "rated" in limits:
        await queue.enqueue_many(jobs("rated", n // 10, tag))
    done = asyncio.Event()
    seen = 0

    async def handler(job: Job) -> None:
        nonlocal seen
        seen += job.action_id == "drained"
        if seen >= n:
            done.set()

    worker = create_job_worker(queue=queue, handler=handler, workers=16, limits=limits)
    before = questions(admin)
    rate = n / await seconds_until(done, worker)
    return rate, (questions(admin) - before) / n


#: What the limited action's 2,000 older jobs wait on in `claims_beside` (None: there are none).
BESIDE = {"alone": None, "at its concurrency": ActionLimit(concurrency=4),
          "at its rate": ActionLimit(rate=4, per_ms=600_000)}  # fmt: skip


async def claims_beside(pool: Any, admin: Any, beside: str, claims: int) -> float:
    """Mean seconds per `claim(limit=10)` of the unlimited action (each claim's jobs settled after it)."""
    empty(admin)
    queue = create_mysql_job_queue(pool)
    tag = secrets.token_hex(3)
    limits = {"limited": BESIDE[beside] or ActionLimit(concurrency=4)}
    if BESIDE[beside] is not None:
        await queue.enqueue_many(jobs("limited", 2_000, tag))
        held = await queue.claim(worker_id="holder", lease_ms=600_000, limit=10, limits=limits)
        assert len(held) == 4
    await queue.enqueue_many(jobs("other", claims * 10, tag, due_at=10_000))
    spent = 0.0
    for _ in range(claims):
        started = time.perf_counter()
        got = await queue.claim(worker_id="w", lease_ms=60_000, limit=10, limits=limits)
        spent += time.perf_counter() - started
        assert got and {j.action_id for j in got} == {"other"}, [j.action_id for j in got]
        for job in got:
            await queue.settle(job_id=job.id, worker_id="w", status="succeeded")
    return spent / claims


async def utilisation(pool: Any, admin: Any, n: int, concurrency: int, run_s: float) -> tuple[float, float]:
    """The time `concurrency` slots busy all along would take / the time taken, and the longest time fewer than
    `concurrency` jobs ran while more waited (from the first start to the last: jobs wait all along)."""
    empty(admin)
    queues = [create_mysql_job_queue(pool), create_mysql_job_queue(pool)]
    await queues[0].enqueue_many(jobs("limited", n, secrets.token_hex(3)))
    done = asyncio.Event()
    runs: list[tuple[float, float]] = []

    async def handler(job: Job) -> None:
        started = time.perf_counter()
        await asyncio.sleep(run_s)
        runs.append((started, time.perf_counter()))
        if len(runs) >= n:
            done.set()

    limits = {"limited": ActionLimit(concurrency=concurrency)}
    workers = [create_job_worker(queue=q, handler=handler, workers=8, limits=limits) for q in queues]
    used = (n * run_s / concurrency) / await seconds_until(done, *workers)
    return used, longest_gap(runs, concurrency)


def longest_gap(runs: list[tuple[float, float]], concurrency: int) -> float:
    """The longest stretch, up to the last start, in which fewer than `concurrency` of `runs` ran."""
    last_start = max(start for start, _end in runs)
    moves = sorted([(start, 1) for start, _end in runs] + [(end, -1) for _start, end in runs if end < last_start])
    running, short_since, longest = 0, moves[0][0], 0.0
    for at, step in moves:
        short = running < concurrency
        if short:
            longest = max(longest, at - short_since)
        running += step
        if running < concurrency and not short:
            short_since = at
    return longest


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 9)  # 5 left the drain ratios 10% apart between runs
    n = 1_000 if args.quick else 3_000
    with bench_url("bench_limits") as url:
        where = parse_mysql_url(url)
        pool = await aiomysql.create_pool(**where.aiomysql_kwargs(), minsize=1, maxsize=24, autocommit=True)
        admin = pymysql.connect(**where.pymysql_kwargs(), autocommit=True)
        try:
            await create_mysql_job_queue(pool).now()  # creates the tables
            never = {"drained": ActionLimit(concurrency=10_000)}
            other = {"elsewhere": ActionLimit(concurrency=1)}
            # The never-binding limit beside jobs of an action held at its rate (20 starts a second).
            rated = {**never, "rated": ActionLimit(rate=20, per_ms=1_000)}
            rates: dict[str, list[float]] = {"none": [], "never binds": [], "other action": [], "beside a rate": []}
            statements: dict[str, list[float]] = {name: [] for name in rates}
            waits: dict[str, list[float]] = {beside: [] for beside in BESIDE}
            used: dict[float, list[float]] = {0.02: [], 0.1: []}
            gaps: dict[float, list[float]] = {0.02: [], 0.1: []}
            for rep in range(reps):  # interleaved, so drift on a shared machine falls on every variant alike
                variants = (("none", None), ("never binds", never), ("other action", other), ("beside a rate", rated))
                for name, limits in variants:
                    rate, per_job = await drain(pool, admin, n, limits)
                    rates[name].append(rate)
                    statements[name].append(per_job)
                for beside in list(BESIDE)[:: 1 if rep % 2 == 0 else -1]:
                    waits[beside].append(await claims_beside(pool, admin, beside, 30))
                for run_s, count in ((0.02, 240), (0.1, 80)):
                    share, gap = await utilisation(pool, admin, count // (2 if args.quick else 1), 4, run_s)
                    used[run_s].append(share)
                    gaps[run_s].append(gap)
                print(f"rep {rep + 1}/{reps} done", file=sys.stderr)
        finally:
            pool.close()
            await pool.wait_closed()
            admin.close()
    base_rate = statistics.median(rates["none"])
    print(f"\n## Fleet-wide limits ({reps} reps interleaved, medians; {n} no-op jobs per drain, workers=16)\n")
    print("| drain | jobs/s | vs no limits | statements/job |\n|---|---:|---:|---:|")
    for name, values in rates.items():
        rate, per_job = statistics.median(values), statistics.median(statements[name])
        print(f"| {name} | {rate:,.0f} | {rate / base_rate:.2f} | {per_job:.2f} |")
    alone = statistics.median(waits["alone"]) * 1e3
    print(f"\nclaim(limit=10) of an unlimited action: {alone:.2f} ms alone")
    for beside in list(BESIDE)[1:]:
        ms = statistics.median(waits[beside]) * 1e3
        print(f"  {ms:.2f} ms beside 2,000 older jobs of a limited action {beside} (ratio {ms / alone:.2f})")
    for run_s, values in used.items():
        print(f"utilisation of a binding concurrency limit of 4 ({run_s * 1e3:.0f} ms handlers, 2 workers x 8 "
              f"slots): {statistics.median(values):.0%} (min {min(values):.0%}); longest time a slot sat idle while "
              f"jobs waited: {max(gaps[run_s]) * 1e3:.0f} ms (the worker's poll: 1,000 ms)")  # fmt: skip
    print(f"\nbeside: {RIVER}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
