"""Pickup latency of a job enqueued inside the caller's transaction (issue 20.1): ms from the caller's COMMIT to
the handler starting, on one worker at the default poll interval (1 s), side by side in one run:

- `plain enqueue`: no transaction, the enqueue's wake-up (the baseline: what an enqueue outside a transaction gets);
- `tx, announce_due() after commit`: what the README's outbox example does;
- `tx, nothing announced`: an enqueue inside an open transaction announces nothing, so the next poll finds it;
- `tx, wake-up before commit`: what an enqueue announcing at once would do (the worker wakes, finds nothing yet,
  and waits a whole poll): shown to say why the enqueue does not announce inside a transaction.

    python bench/txn_pickup.py [--samples 20] [--hold-ms 20]      (make bench-txn)

The server is `PLITZI_MYSQL_URL` if set, else a throwaway one (plitzi_jobs_mysql.testing.server).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from typing import Any

import aiomysql
from common import bench_url, pickup_ms

from plitzi_jobs_mysql import JobInput, create_mysql_job_queue
from plitzi_jobs_mysql.url import parse_mysql_url

MODES = ("plain enqueue", "tx, announce_due() after commit", "tx, nothing announced", "tx, wake-up before commit")


async def measure(pool: Any, mode: str, samples: int, hold_ms: int) -> list[float]:
    queue = create_mysql_job_queue(pool)

    async def enqueue(i: int) -> float:
        """Sample i's job enqueued as `mode` says; the time of its COMMIT."""
        job = JobInput(id=f"{mode}-{i}", space_id=1, action_id="a", environment="main", trigger="bench",
                       input={}, due_at=0, max_attempts=3)  # fmt: skip
        if mode == "plain enqueue":
            await queue.enqueue(job)
            return time.perf_counter()
        async with pool.acquire() as conn:
            await conn.begin()
            await queue.enqueue(job, connection=conn)
            if mode == "tx, wake-up before commit":
                queue.announce_due()
            await asyncio.sleep(hold_ms / 1000)  # the caller's other writes
            await conn.commit()
            committed = time.perf_counter()
            if mode == "tx, announce_due() after commit":
                queue.announce_due()
            return committed

    return await pickup_ms(queue, samples, enqueue, spread_s=0.3)


async def run(url: str, samples: int, hold_ms: int) -> None:
    kwargs = parse_mysql_url(url).aiomysql_kwargs()
    pool = await aiomysql.create_pool(minsize=1, maxsize=10, autocommit=True, **kwargs)
    try:
        await create_mysql_job_queue(pool).enqueue_many([])  # first use: the tables
        print(f"pickup after COMMIT, ms ({samples} samples each, caller holds its transaction {hold_ms} ms, "
              "worker poll_ms=1000)")  # fmt: skip
        print(f"{'mode':36} {'p50':>8} {'p90':>8} {'max':>8}")
        for mode in MODES:
            got = sorted(await measure(pool, mode, samples, hold_ms))
            p90 = got[min(len(got) - 1, int(len(got) * 0.9))]
            print(f"{mode:36} {statistics.median(got):8.1f} {p90:8.1f} {got[-1]:8.1f}", flush=True)
    finally:
        pool.close()
        await pool.wait_closed()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--hold-ms", type=int, default=20)
    args = parser.parse_args()
    with bench_url("bench_txn") as url:
        asyncio.run(run(url, args.samples, args.hold_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
