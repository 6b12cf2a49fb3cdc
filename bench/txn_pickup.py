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
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from typing import Any

import aiomysql

from plitzi_jobs_mysql import Job, JobInput, create_job_worker, create_mysql_job_queue
from plitzi_jobs_mysql.testing import fresh_database
from plitzi_jobs_mysql.url import parse_mysql_url

MODES = ("plain enqueue", "tx, announce_due() after commit", "tx, nothing announced", "tx, wake-up before commit")


@contextlib.contextmanager
def server() -> Iterator[str]:
    url = os.environ.get("PLITZI_MYSQL_URL", "").strip()
    if url:
        yield url
        return
    from plitzi_jobs_mysql.testing.server import mysql_server_url

    with mysql_server_url() as started:
        yield started


async def measure(pool: Any, mode: str, samples: int, hold_ms: int) -> list[float]:
    queue = create_mysql_job_queue(pool)
    started: asyncio.Queue[float] = asyncio.Queue()

    async def handler(job: Job) -> None:
        started.put_nowait(time.perf_counter())

    worker = create_job_worker(queue=queue, handler=handler, workers=4)
    worker.start()
    out: list[float] = []
    try:
        await asyncio.sleep(0.2)  # the worker's first (empty) claim is over: it is idle
        for i in range(samples):
            job = JobInput(id=f"{mode}-{i}", space_id=1, action_id="a", environment="main", trigger="bench",
                           input={}, due_at=0, max_attempts=3)  # fmt: skip
            if mode == "plain enqueue":
                await queue.enqueue(job)
                committed = time.perf_counter()
            else:
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
            began = await asyncio.wait_for(started.get(), 10)
            out.append((began - committed) * 1000)
            await asyncio.sleep(0.05 + 0.3 * (i % 7) / 7)  # idle again, at no fixed phase of the poll
    finally:
        await worker.stop()
    return out


async def run(url: str, samples: int, hold_ms: int) -> None:
    with fresh_database(url, "bench_txn") as db:
        kwargs = parse_mysql_url(db).aiomysql_kwargs()
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
    with server() as url:
        asyncio.run(run(url, args.samples, args.hold_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
