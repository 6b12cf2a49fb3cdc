"""Runtime scenarios (issue 12): what users run — `create_job_worker`, `enqueue` from request handlers — rather
than bare claim loops. Imported by bench/run.py; `python bench/runtime.py --child ...` is the process the
multi-process drain and the cross-process pickup start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiomysql
from common import pickup_ms

from plitzi_jobs_mysql import create_job_worker, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.mysql.schema.state import table_names
from plitzi_jobs_mysql.records import Job, JobInput

JOBS = table_names("").jobs
KV = table_names("").kv
HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class RuntimeResult:
    jobs_per_s: float
    statements_per_job: float
    exactly_once: bool
    detail: str


def _check(admin: Any, n: int, handled: int, twice: int) -> tuple[bool, str]:
    total, succeeded, once = admin.rows(
        f"SELECT COUNT(*), COALESCE(SUM(status = 'succeeded'), 0), COALESCE(SUM(attempts = 1), 0) FROM `{JOBS}`"
    )[0]
    ok = twice == 0 and handled == n == int(total) == int(succeeded) == int(once)
    return ok, f"handled={handled}/{n} rows={total} succeeded={succeeded} attempts1={once} twice={twice}"


async def runtime_drain(
    pool: Any,
    admin: Any,
    fill: Callable[..., None],
    n: int,
    slots: int,
    rep: int,
    *,
    with_kv: bool,
    timeout_s: float = 300.0,
) -> RuntimeResult:
    """n due jobs drained by ONE `create_job_worker(workers=slots)` (no-op handler, default lease and poll)."""
    admin.run(f"TRUNCATE TABLE `{JOBS}`")
    admin.run(f"TRUNCATE TABLE `{KV}`")
    fill(admin, n, status="pending", prefix=f"rt{rep}-", base_ms=admin.now_ms() - 3_600_000)
    queue = create_mysql_job_queue(pool)
    kv = create_mysql_kv(pool) if with_kv else None
    await queue.now()
    if kv is not None:
        await kv.get("warm-up")
    seen: set[str] = set()
    twice = 0
    done = asyncio.Event()

    async def handler(job: Job) -> str | None:
        nonlocal twice
        if job.id in seen:
            twice += 1
        seen.add(job.id)
        if len(seen) >= n:
            done.set()
        return None

    worker = create_job_worker(queue=queue, handler=handler, workers=slots, kv=kv)
    before = admin.counters()
    started = time.perf_counter()
    worker.start()
    try:
        await asyncio.wait_for(done.wait(), timeout_s)
    finally:
        await worker.stop()  # returns once every handled job is settled (and its kv key released)
    elapsed = time.perf_counter() - started
    delta = admin.delta(before)
    ok, detail = _check(admin, n, len(seen), twice)
    return RuntimeResult(n / elapsed, delta["Questions"] / n, ok, detail)


async def runtime_drain_processes(
    admin: Any,
    fill: Callable[..., None],
    url: str,
    n: int,
    processes: int,
    slots: int,
    rep: int,
    timeout_s: float = 300.0,
) -> RuntimeResult:
    """n due jobs drained by `processes` processes, each one `create_job_worker(workers=slots)`."""
    admin.run(f"TRUNCATE TABLE `{JOBS}`")
    fill(admin, n, status="pending", prefix=f"rp{rep}-", base_ms=admin.now_ms() - 3_600_000)
    children = [
        subprocess.Popen(  # noqa: ASYNC220 - started before the timing, from the bench's own loop
            [sys.executable, os.path.join(HERE, "runtime.py"), "--child", "drain", "--url", url, "--slots", str(slots)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a drain process did not start")
        polls = 0
        before = admin.counters()
        started = time.perf_counter()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        deadline = started + timeout_s
        while time.perf_counter() < deadline:
            polls += 1
            left = int(admin.rows(f"SELECT COUNT(*) FROM `{JOBS}` WHERE status <> 'succeeded'")[0][0])
            if left == 0:
                break
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - started
        delta = admin.delta(before)
        handled = 0
        twice = 0
        for child in children:
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write("stop\n")
            child.stdin.flush()
            answer = json.loads(child.stdout.readline())
            handled += int(answer["handled"])
            twice += int(answer["twice"])
    finally:
        for child in children:
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
    # The children's own (untimed) stops and the watcher's polls (each plus the SHOW it is calibrated for).
    statements = delta["Questions"] - polls * (1 + admin.baseline)
    ok, detail = _check(admin, n, handled, twice)
    return RuntimeResult(n / elapsed, statements / n, ok, detail)


# -- pickup latency -------------------------------------------------------------------------------------------


def _job(job_id: str, due_at: int) -> JobInput:
    return JobInput(
        id=job_id,
        space_id=1,
        action_id="bench",
        environment="production",
        trigger="manual",
        input={"t": time.time()},
        due_at=due_at,
        max_attempts=3,
    )


async def pickup_local(pool: Any, admin: Any, samples: int, rep: int) -> list[float]:
    """ms from `enqueue` returning to the handler starting, enqueued by the process the worker runs in."""
    admin.run(f"TRUNCATE TABLE `{JOBS}`")
    queue = create_mysql_job_queue(pool)
    now = int((await queue.now()).timestamp() * 1000)

    async def enqueue(i: int) -> float:
        await queue.enqueue(_job(f"pl{rep}-{i}", now - 1000))
        return time.perf_counter()

    return await pickup_ms(queue, samples, enqueue, spread_s=0.1)


def _wakeups(redis_url: str | None, prefix: str) -> Any:
    if not redis_url:
        return None
    from plitzi_jobs_mysql.redis_wakeups import RedisWakeups

    return RedisWakeups(redis_url, channel_prefix=prefix)


async def pickup_remote(url: str, admin: Any, samples: int, rep: int, redis_url: str | None = None) -> list[float]:
    """ms from another process's `enqueue` returning to the handler starting here (default poll_ms); with
    `redis_url`, both sides wake each other through Redis pub/sub."""
    admin.run(f"TRUNCATE TABLE `{JOBS}`")
    prefix = f"bench-{os.getpid()}-{rep}:"
    extra = ["--redis", redis_url, "--channel-prefix", prefix] if redis_url else []
    child = subprocess.Popen(  # noqa: ASYNC220 - started before the timing
        [sys.executable, os.path.join(HERE, "runtime.py"), "--child", "pickup", "--url", url, "--slots", "4", *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    out: list[float] = []
    try:
        assert child.stdin is not None and child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the pickup process did not start")
        pool = await aiomysql.create_pool(minsize=1, maxsize=2, autocommit=True, **_kwargs(url))
        wakeups = _wakeups(redis_url, prefix)
        try:
            queue = create_mysql_job_queue(pool, wakeups=wakeups)
            now = int((await queue.now()).timestamp() * 1000)
            phase = random.Random(rep)
            await asyncio.sleep(phase.uniform(0, 1.0))
            for i in range(samples):
                # Wall clocks of one machine: both processes read the same time.time().
                await queue.enqueue(_job(f"pr{rep}-{i}", now - 1000))
                enqueued = time.time()
                began = float(await asyncio.to_thread(child.stdout.readline))
                out.append((began - enqueued) * 1000)
                # A uniformly random phase against the worker's poll: a fixed pause would lock onto it.
                await asyncio.sleep(phase.uniform(0, 1.0))
        finally:
            if wakeups is not None:
                await wakeups.close()
            pool.close()
            await pool.wait_closed()
        child.stdin.write("stop\n")
        child.stdin.flush()
    finally:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
    return out


async def idle_cost(pool: Any, admin: Any, seconds: float) -> float:
    """Statements/s an idle replica (scheduler and worker, default settings, no jobs, one schedule) sends."""
    from plitzi_jobs_mysql import ActionEntry, ScheduleTrigger, create_action_jobs

    admin.run(f"TRUNCATE TABLE `{JOBS}`")

    class Lookups:
        async def list_actions(self, space_id: int) -> list[ActionEntry]:
            return [ActionEntry(id="nightly", schedule=ScheduleTrigger(cron="0 3 * * *"))]

        async def list_scheduled_spaces(self) -> list[int]:
            return [1]

    async def handler(job: Job) -> str | None:
        return None

    jobs = create_action_jobs(
        lookups=Lookups(), handler=handler, queue=create_mysql_job_queue(pool), kv=create_mysql_kv(pool)
    )
    jobs.start()
    try:
        await asyncio.sleep(2.0)  # start-up: tables checked, schedules reconciled
        before = admin.counters()
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        delta = admin.delta(before)
        return delta["Questions"] / (time.perf_counter() - started)
    finally:
        await jobs.stop()


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def p50(values: list[float]) -> float:
    return statistics.median(values)


# -- the child process ----------------------------------------------------------------------------------------


def _kwargs(url: str) -> dict[str, Any]:
    from plitzi_jobs_mysql.url import parse_mysql_url

    return dict(parse_mysql_url(url).aiomysql_kwargs())


async def _child(mode: str, url: str, slots: int, redis_url: str | None, prefix: str) -> None:
    pool = await aiomysql.create_pool(minsize=1, maxsize=max(slots, 4), autocommit=True, **_kwargs(url))
    loop = asyncio.get_running_loop()
    wakeups = _wakeups(redis_url, prefix)
    try:
        queue = create_mysql_job_queue(pool, wakeups=wakeups)
        await queue.now()
        seen: set[str] = set()
        twice = 0

        async def handler(job: Job) -> str | None:
            nonlocal twice
            if job.id in seen:
                twice += 1
            seen.add(job.id)
            if mode == "pickup":
                print(repr(time.time()), flush=True)
            return None

        worker = create_job_worker(queue=queue, handler=handler, workers=slots)
        if mode == "pickup":
            worker.start()
            if wakeups is not None:
                await wakeups.listening()
        print("ready", flush=True)
        if mode == "drain":
            await loop.run_in_executor(None, sys.stdin.readline)  # go
        worker.start()
        await loop.run_in_executor(None, sys.stdin.readline)  # stop
        await worker.stop()
        if mode == "drain":
            print(json.dumps({"handled": len(seen), "twice": twice}), flush=True)
    finally:
        if wakeups is not None:
            await wakeups.close()
        pool.close()
        await pool.wait_closed()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", choices=("drain", "pickup"), required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--slots", type=int, default=8)
    parser.add_argument("--redis", default="")
    parser.add_argument("--channel-prefix", default="plitzi-jobs:wake:")
    args = parser.parse_args()
    asyncio.run(_child(args.child, args.url, args.slots, args.redis or None, args.channel_prefix))


if __name__ == "__main__":
    main()


# -- the in-memory queue --------------------------------------------------------------------------------------


def _memory_jobs(n: int, due_at: int) -> list[JobInput]:
    return [
        JobInput(
            id=f"m-{i}",
            space_id=1,
            action_id="bench",
            environment="production",
            trigger="manual",
            input={},
            due_at=due_at + i % 1000,
            max_attempts=3,
        )
        for i in range(n)
    ]


async def memory_claim_latency(backlog: int, samples: int) -> float:
    """p50 ms of the memory queue's claim(limit=10) with `backlog` due jobs; the claimed ones go back (untimed)."""
    from plitzi_jobs_mysql import create_memory_job_queue

    queue = create_memory_job_queue()
    now = int((await queue.now()).timestamp() * 1000)
    for start in range(0, backlog, 10_000):
        await queue.enqueue_many(_memory_jobs(min(10_000, backlog - start), now - 3_600_000)[: backlog - start])
    times: list[float] = []
    for i in range(samples + 20):
        started = time.perf_counter()
        jobs = await queue.claim(worker_id="lat", lease_ms=60_000, limit=10)
        took = (time.perf_counter() - started) * 1000
        if i >= 20:
            times.append(took)
        for job in jobs:
            await queue.settle(job_id=job.id, worker_id="lat", status="pending")
    return p50(times)


async def memory_drain(n: int, loops: int) -> tuple[float, bool]:
    """jobs/s of `loops` claim loops (claim(limit=10), then settle each) over one memory queue."""
    from plitzi_jobs_mysql import create_memory_job_queue

    queue = create_memory_job_queue(retain_finished=n)
    now = int((await queue.now()).timestamp() * 1000)
    jobs = [
        JobInput(
            id=f"md-{i}",
            space_id=1,
            action_id="bench",
            environment="production",
            trigger="manual",
            input={},
            due_at=now - 3_600_000 + i,
            max_attempts=3,
        )
        for i in range(n)
    ]
    await queue.enqueue_many(jobs)
    handed: set[str] = set()
    twice = 0
    settled = 0

    async def loop(index: int) -> None:
        nonlocal twice, settled
        worker = f"w{index}"
        while settled < n:
            claimed = await queue.claim(worker_id=worker, lease_ms=60_000, limit=10)
            if not claimed:
                await asyncio.sleep(0.001)
                continue
            for job in claimed:
                if job.id in handed:
                    twice += 1
                handed.add(job.id)
                await queue.settle(job_id=job.id, worker_id=worker, status="succeeded")
                settled += 1
            await asyncio.sleep(0)  # the claimers take turns, as they would over a store

    started = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(loops)))
    elapsed = time.perf_counter() - started
    page = await queue.list_jobs(space_ids=[1], status="succeeded", limit=1)
    return n / elapsed, twice == 0 and settled == n == len(handed) == page.total
