"""Benchmarks of the MySQL job queue, reported as ratios measured side by side in one run.

    python bench/run.py [--quick] [--out bench/RESULTS.md] [--only raw,enqueue,drain,latency]

The server is `PLITZI_MYSQL_URL` if set, else a throwaway one from `plitzi_jobs_mysql.testing.server`. The
bench creates its own database (`bench_<random>`) and drops it at the end. Progress goes to stderr; the report
(machine, versions, command, table, targets, EXPLAINs) to `--out`. See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

import aiomysql
import leases  # bench/leases.py: the lapsed-lease read's designs and heartbeat cost (issue 12.3)
import peers  # bench/peers.py: APScheduler 4 and arq side by side (issue 12)
import pymysql
import runtime  # bench/runtime.py: the runtime scenarios (issue 12)
from pymysql.constants import ER

from plitzi_jobs_mysql.mysql import create_mysql_job_queue
from plitzi_jobs_mysql.mysql.queue_core import LAPSED_READ_EVERY_MS
from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements, table_names
from plitzi_jobs_mysql.mysql.session import bind
from plitzi_jobs_mysql.mysql.statements import NOW_MS, statements_for
from plitzi_jobs_mysql.records import JobInput
from plitzi_jobs_mysql.url import parse_mysql_url

JOBS = table_names("").jobs
SQL = statements_for("")
LEASE_MS = 60_000
CLAIM_LIMIT = 10
ER_LOCK_DEADLOCK = ER.LOCK_DEADLOCK
SCENARIOS = ("raw", "enqueue", "drain", "runtime", "memory", "pickup", "idle", "peers", "latency")
COUNTERS = ("Questions", "Com_update", "Com_select", "Com_delete", "Com_insert", "Innodb_deadlocks")


RUNTIME_LABELS = {
    "16": "runtime drain: one `create_job_worker(workers=16)`",
    "16kv": "runtime drain: one `create_job_worker(workers=16, kv=...)`",
    "2x8": "runtime drain: 2 processes x `create_job_worker(workers=8)`",
}


def redis_reachable(url: str) -> str | None:
    """The Redis for the wake-up scenario, if one answers there (the `redis` package installed)."""
    if not url:
        return None
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
    except Exception as error:
        progress(f"no Redis at {url} ({error}): the RedisWakeups pickup is left out")
        return None
    return url


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Plan:
    reps: int
    raw_seconds: float
    enqueue_jobs: int
    enqueue_batch: int
    drain_jobs: int
    drain_loops: tuple[int, ...]
    finished_rows: int
    backlogs: tuple[int, ...]
    running_rows: tuple[int, ...]
    latency_samples: int
    runtime_jobs: int
    pickup_samples: int
    idle_seconds: float
    peer_jobs: int
    peer_reps: int
    heartbeat_reps: int


FULL = Plan(
    reps=5,
    raw_seconds=3.0,
    enqueue_jobs=10_000,
    enqueue_batch=500,
    drain_jobs=10_000,
    drain_loops=(1, 4, 16),
    finished_rows=1_000_000,
    backlogs=(1_000, 10_000, 100_000),
    running_rows=(1_000, 10_000),
    latency_samples=400,
    runtime_jobs=10_000,
    pickup_samples=40,
    idle_seconds=60.0,
    peer_jobs=3_000,
    peer_reps=5,
    heartbeat_reps=11,
)
QUICK = Plan(
    reps=3,
    raw_seconds=2.0,
    enqueue_jobs=5_000,
    enqueue_batch=500,
    drain_jobs=5_000,
    drain_loops=(1, 4, 16),
    finished_rows=200_000,
    backlogs=(1_000, 10_000, 50_000),
    running_rows=(1_000, 10_000),
    latency_samples=200,
    runtime_jobs=5_000,
    pickup_samples=20,
    idle_seconds=10.0,
    peer_jobs=500,
    peer_reps=1,
    heartbeat_reps=5,
)


# -- the server ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def server_url() -> Iterator[tuple[str, str]]:
    """The root URL, and a line saying where it came from."""
    env = os.environ.get("PLITZI_MYSQL_URL", "").strip()
    if env:
        yield env, f"`PLITZI_MYSQL_URL` ({parse_mysql_url(env)}) - other clients of that server add noise"
        return
    from plitzi_jobs_mysql.testing.server import mysql_server_url

    progress("starting a throwaway server (plitzi_jobs_mysql.testing.server.mysql_server_url)")
    with mysql_server_url() as url:
        where = parse_mysql_url(url)
        yield url, f"throwaway server from `plitzi_jobs_mysql.testing.server.mysql_server_url()` ({where})"


class Admin:
    """A plain PyMySQL connection for setup, counters and EXPLAIN: never on a timed path."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.conn = pymysql.connect(autocommit=True, **kwargs)
        self.baseline = 0
        self.baseline = self._calibrate()
        self.mariadb = "mariadb" in str(self.rows("SELECT VERSION()")[0][0]).lower()

    def run(self, sql: str, args: Any = None) -> int:
        with self.conn.cursor() as cur:
            return int(cur.execute(sql, args))

    def rows(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def counters(self) -> dict[str, int]:
        names = ", ".join(f"'{n}'" for n in COUNTERS)
        got = {str(k): int(v) for k, v in self.rows(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")}
        return {n: got.get(n, 0) for n in COUNTERS}

    def delta(self, before: dict[str, int]) -> dict[str, int]:
        after = self.counters()
        out = {n: after[n] - before[n] for n in COUNTERS}
        out["Questions"] -= self.baseline  # our own SHOW
        return out

    def _calibrate(self) -> int:
        before = self.counters()
        after = self.counters()
        return after["Questions"] - before["Questions"]

    def now_ms(self) -> int:
        return int(self.rows(f"SELECT {NOW_MS}")[0][0])

    def close(self) -> None:
        self.conn.close()


def seq_source(admin: Admin, n: int) -> str:
    """A derived table with column `seq` = 1..n: MariaDB's Sequence engine, else a cross join of digits."""
    try:
        admin.rows("SELECT seq FROM seq_1_to_1")
        return f"seq_1_to_{n}"
    except pymysql.err.MySQLError:
        pass
    admin.run("CREATE TABLE IF NOT EXISTS bench_digits (d INT PRIMARY KEY)")
    admin.run("INSERT IGNORE INTO bench_digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)")
    digits = len(str(n))
    terms = " + ".join(f"d{i}.d * {10**i}" for i in range(digits))
    joins = ", ".join(f"bench_digits d{i}" for i in range(digits))
    return f"(SELECT {terms} + 1 AS seq FROM {joins} HAVING seq <= {n})"


def fill_jobs(admin: Admin, n: int, *, status: str, prefix: str, base_ms: int, lease_until: int | None = None) -> None:
    """n rows straight in SQL, shaped like enqueue's (ids `{prefix}{i}`, run_at base_ms + i)."""
    if n <= 0:
        return
    attempts = 0 if status == "pending" else 1
    admin.run(
        f"INSERT INTO `{JOBS}` (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
        "missed, `key`, status, run_at, attempts, created_at, updated_at, history, lease_until, worker_id, "
        "claimed_at) "
        f"SELECT CONCAT(%s, seq), 1, 'bench', 'production', 'manual', '{{}}', %s + seq, 3, NULL, NULL, %s, "
        f"%s + seq, %s, %s + seq, %s + seq, '[]', %s, IF(%s = 'running', 'bench-holder', NULL), "
        f"IF(%s = 'running', %s, NULL) FROM {seq_source(admin, n)}",
        (prefix, base_ms, status, base_ms, attempts, base_ms, base_ms, lease_until, status, status, base_ms),
    )


async def open_pool(kwargs: dict[str, Any], size: int) -> Any:
    return await aiomysql.create_pool(minsize=size, maxsize=size, autocommit=True, **kwargs)


async def close_pool(pool: Any) -> None:
    pool.close()
    await pool.wait_closed()


def summary(values: list[float]) -> tuple[float, float]:
    return min(values), statistics.median(values)


# -- 1. raw limit -------------------------------------------------------------------------------------------


async def raw_limit(pool: Any, seconds: float, tasks: int = 16, rows: int = 1024) -> float:
    """Single-row primary-key UPDATEs from `tasks` tasks, a pool borrow per statement: statements/s."""
    count = 0
    deadline = time.perf_counter() + seconds

    async def task(i: int) -> None:
        nonlocal count
        key = i
        while time.perf_counter() < deadline:
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute("UPDATE bench_raw SET n = n + 1 WHERE id = %s", (key % rows + 1,))
            count += 1
            key += tasks

    started = time.perf_counter()
    await asyncio.gather(*(task(i) for i in range(tasks)))
    return count / (time.perf_counter() - started)


# -- 2. enqueue ---------------------------------------------------------------------------------------------


def job_inputs(n: int, tag: str, due_at: int) -> list[JobInput]:
    return [
        JobInput(
            id=f"{tag}-{i}",
            space_id=1,
            action_id="bench",
            environment="production",
            trigger="manual",
            input={"i": i},
            due_at=due_at,
            max_attempts=3,
        )
        for i in range(n)
    ]


async def bare_insert_rate(pool: Any, producers: int, jobs: list[JobInput], now: int) -> float:
    """The yardstick for `enqueue`: the same row as a bare parameterised INSERT over the same pool (input
    encoded beforehand), from `producers` tasks each awaiting one at a time."""
    sql = SQL.insert_jobs + SQL.insert_job_values
    rows = [
        [
            job.id,
            job.space_id,
            job.action_id,
            job.environment,
            job.trigger,
            json.dumps(job.input),
            job.due_at,
            job.max_attempts,
            job.missed,
            job.key,
            job.due_at,
            now,
            now,
        ]
        for job in jobs
    ]

    async def producer(part: list[list[Any]]) -> None:
        for row in part:
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute(sql, row)

    started = time.perf_counter()
    await asyncio.gather(*(producer(rows[i::producers]) for i in range(producers)))
    return len(jobs) / (time.perf_counter() - started)


async def enqueue_rate(pool: Any, mode: str, jobs: list[JobInput], batch: int) -> float:
    queue = create_mysql_job_queue(pool)
    await queue.now()  # first use (tables, charset check) and the clock reading, outside the timing
    started = time.perf_counter()
    if mode == "one":
        for job in jobs:
            await queue.enqueue(job)
    elif mode == "eight":

        async def producer(part: list[JobInput]) -> None:
            for job in part:
                await queue.enqueue(job)

        await asyncio.gather(*(producer(jobs[i::8]) for i in range(8)))
    else:
        for i in range(0, len(jobs), batch):
            await queue.enqueue_many(jobs[i : i + batch])
    return len(jobs) / (time.perf_counter() - started)


# -- 3. drain -----------------------------------------------------------------------------------------------


@dataclass
class DrainResult:
    jobs_per_s: float
    statements_per_job: float
    lost_per_job: float
    empty_claims: int
    deadlocks_seen: int
    innodb_deadlocks: int
    exactly_once: bool
    detail: str


async def drain(pool: Any, admin: Admin, n: int, loops: int, rep: int, timeout_s: float = 300.0) -> DrainResult:
    """`loops` claim loops, each its own queue (a replica: its own adaptive spread), over one pool."""
    admin.run(f"TRUNCATE TABLE `{JOBS}`")
    fill_jobs(admin, n, status="pending", prefix=f"d{rep}-", base_ms=admin.now_ms() - 3_600_000)
    queues = [create_mysql_job_queue(pool) for _ in range(loops)]
    for queue in queues:
        await queue.now()
    handed: dict[str, str] = {}
    twice: list[str] = []
    settled = 0
    empty = 0
    deadlocks = 0
    before = admin.counters()
    deadline = time.perf_counter() + timeout_s

    async def loop(index: int) -> None:
        nonlocal settled, empty, deadlocks
        queue, worker = queues[index], f"w{index}"
        while settled < n and time.perf_counter() < deadline:
            try:
                jobs = await queue.claim(worker_id=worker, lease_ms=LEASE_MS, limit=CLAIM_LIMIT)
            except pymysql.err.MySQLError as error:
                if error.args and error.args[0] == ER_LOCK_DEADLOCK:
                    deadlocks += 1
                    continue
                raise
            if not jobs:
                empty += 1
                await asyncio.sleep(0.005)  # the tail: the rest is held by other loops
                continue
            for job in jobs:
                if job.id in handed:
                    twice.append(job.id)
                handed[job.id] = worker
                try:
                    await queue.settle(job_id=job.id, worker_id=worker, status="succeeded")
                except pymysql.err.MySQLError as error:
                    if error.args and error.args[0] == ER_LOCK_DEADLOCK:
                        deadlocks += 1
                    raise
                settled += 1

    started = time.perf_counter()
    await asyncio.gather(*(loop(i) for i in range(loops)))
    elapsed = time.perf_counter() - started
    delta = admin.delta(before)
    total, succeeded, once = admin.rows(
        f"SELECT COUNT(*), COALESCE(SUM(status = 'succeeded'), 0), COALESCE(SUM(attempts = 1), 0) FROM `{JOBS}`"
    )[0]
    ok = not twice and settled == n == int(total) == int(succeeded) == int(once) == len(handed)
    cas = delta["Com_update"] - settled  # every UPDATE that is not a settle is a claim's compare-and-set
    return DrainResult(
        jobs_per_s=settled / elapsed,
        statements_per_job=delta["Questions"] / max(settled, 1),
        lost_per_job=(cas - settled) / max(settled, 1),
        empty_claims=empty,
        deadlocks_seen=deadlocks,
        innodb_deadlocks=delta["Innodb_deadlocks"],
        exactly_once=ok,
        detail=f"settled={settled}/{n} rows={total} succeeded={succeeded} attempts1={once} twice={len(twice)}",
    )


# -- 4. claim latency ---------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def claim_latency(pool: Any, admin: Admin, samples: int) -> tuple[float, float]:
    """p50/p99 (ms) of claim(limit=10) by one claimer; the claimed jobs are put back pending between claims
    (untimed) so the backlog stays as it is."""
    queue = create_mysql_job_queue(pool)
    await queue.now()
    times: list[float] = []
    for i in range(samples + 20):
        started = time.perf_counter()
        jobs = await queue.claim(worker_id="lat", lease_ms=LEASE_MS, limit=CLAIM_LIMIT)
        took = (time.perf_counter() - started) * 1000
        if i >= 20:  # warm-up
            times.append(took)
        if jobs:
            ids = [job.id for job in jobs]
            admin.run(
                *bind(
                    f"UPDATE `{JOBS}` SET status = 'pending', attempts = 0, worker_id = NULL, lease_until = NULL, "
                    "claimed_at = NULL WHERE id IN %s",
                    (ids,),
                )
            )
    return percentile(times, 50), percentile(times, 99)


def explain(admin: Admin, name: str, sql: str, args: Any) -> tuple[str, str, list[tuple[Any, ...]], list[str]]:
    """EXPLAIN; for a SELECT on MariaDB, ANALYZE (it runs the read and adds the rows really read, r_rows)."""
    bound_sql, bound_args = bind(sql, args)
    with admin.conn.cursor() as cur:
        text = cur.mogrify(bound_sql, bound_args)
        analyze = admin.mariadb and not text.lstrip().upper().startswith("UPDATE")
        cur.execute(("ANALYZE " if analyze else "EXPLAIN ") + text)
        header = [d[0] for d in cur.description]
        rows = list(cur.fetchall())
    return name, text, rows, header


# -- the run ------------------------------------------------------------------------------------------------


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    targets: list[tuple[str, bool, str]] = field(default_factory=list)

    def target(self, name: str, ok: bool, detail: str) -> None:
        self.targets.append((name, ok, detail))
        progress(f"target {'PASS' if ok else 'FAIL'}: {name} ({detail})")


def machine() -> list[str]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = "unknown"
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                memory = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    return [f"- CPU: {os.cpu_count()} x {model}", f"- memory: {memory}", f"- OS: {platform.platform()}"]


def fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


async def run(args: argparse.Namespace) -> int:
    plan = QUICK if args.quick else FULL
    only = set(args.only.split(",")) if args.only else set(SCENARIOS)
    drain_loops = tuple(int(x) for x in args.loops.split(",")) if args.loops else plan.drain_loops
    reps = args.reps or plan.reps
    report = Report()
    started_at = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    with server_url() as root_url, contextlib.ExitStack() as stack:
        url, origin = root_url
        server = parse_mysql_url(url)
        root_admin = Admin(server.pymysql_kwargs())
        stack.callback(root_admin.close)
        database = f"bench_{secrets.token_hex(4)}"
        root_admin.run(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
        stack.callback(lambda: root_admin.run(f"DROP DATABASE IF EXISTS `{database}`"))
        progress(f"database {database} on {server}")
        kwargs = server.with_database(database).aiomysql_kwargs()
        db_url = server.with_database(database).render(hide_password=False)
        admin = Admin(server.with_database(database).pymysql_kwargs())
        stack.callback(admin.close)
        for statement in mysql_job_schema_statements(""):
            admin.run(statement)
        admin.run("CREATE TABLE bench_raw (id INT PRIMARY KEY, n BIGINT NOT NULL)")
        admin.run(f"INSERT INTO bench_raw SELECT seq, 0 FROM {seq_source(admin, 1024)}")
        version = admin.rows("SELECT VERSION()")[0][0]
        settings = dict(
            admin.rows(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('innodb_buffer_pool_size', "
                "'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', 'transaction_isolation', 'tx_isolation')"
            )
        )

        deadlock_text = ""
        raws: list[float] = []
        rows_out: list[tuple[str, str, str, str]] = []  # scenario, figure, min, median

        # 1 + 3: raw limit and drains, interleaved rep by rep so their ratios share the same noise.
        drains: dict[int, list[DrainResult]] = {loops: [] for loops in drain_loops}
        runtimes: dict[str, list[runtime.RuntimeResult]] = {key: [] for key in RUNTIME_LABELS}
        if "raw" in only or "drain" in only or "runtime" in only:
            max_loops = max(drain_loops) if "drain" in only else 16
            pool = await open_pool(kwargs, max(16, max_loops))
            try:
                for rep in range(reps):
                    if "raw" in only:
                        raws.append(await raw_limit(pool, plan.raw_seconds))
                        progress(f"raw limit rep {rep + 1}/{reps}: {raws[-1]:,.0f} statements/s")
                    if "drain" in only:
                        for loops in drain_loops:
                            r = await drain(pool, admin, args.drain_jobs or plan.drain_jobs, loops, rep)
                            drains[loops].append(r)
                            progress(
                                f"drain {loops:>2} loops rep {rep + 1}/{reps}: {r.jobs_per_s:,.0f} jobs/s, "
                                f"{r.statements_per_job:.2f} statements/job, {r.lost_per_job:.2f} lost CAS/job, "
                                f"{r.empty_claims} empty claims, exactly-once {'ok' if r.exactly_once else 'BROKEN'}"
                            )
                    if "runtime" in only:
                        n = args.runtime_jobs or plan.runtime_jobs
                        for key in RUNTIME_LABELS:
                            if key == "2x8":
                                rt = await runtime.runtime_drain_processes(
                                    admin, fill_jobs, db_url, n, processes=2, slots=8, rep=rep
                                )
                            else:
                                rt = await runtime.runtime_drain(
                                    pool, admin, fill_jobs, n, 16, rep, with_kv=key == "16kv"
                                )
                            runtimes[key].append(rt)
                            progress(
                                f"runtime {key} rep {rep + 1}/{reps}: {rt.jobs_per_s:,.0f} jobs/s, "
                                f"{rt.statements_per_job:.2f} statements/job, "
                                f"exactly-once {'ok' if rt.exactly_once else 'BROKEN ' + rt.detail}"
                            )
            finally:
                await close_pool(pool)
        raw_med = statistics.median(raws) if raws else float("nan")
        if raws:
            lo, med = summary(raws)
            rows_out.append(("raw limit: 1-row PK UPDATE, 16 tasks", "statements/s", fmt(lo), fmt(med)))

        # 2: enqueue
        enqueue: dict[str, list[float]] = {"one": [], "bare1": [], "eight": [], "bare8": [], "many": []}
        if "enqueue" in only:
            pool = await open_pool(kwargs, 8)
            try:
                for rep in range(reps):
                    # Each enqueue beside its yardstick, which goes first on every other rep (so neither always
                    # meets the InnoDB flush the other left behind); the targets divide within a rep.
                    order = (
                        ["one", "bare1", "eight", "bare8", "many"]
                        if rep % 2 == 0
                        else ["bare1", "one", "bare8", "eight", "many"]
                    )
                    for mode in order:
                        admin.run(f"TRUNCATE TABLE `{JOBS}`")
                        jobs = job_inputs(plan.enqueue_jobs, f"e{rep}{mode}", admin.now_ms())
                        if mode.startswith("bare"):
                            rate = await bare_insert_rate(pool, int(mode[4:]), jobs, admin.now_ms())
                        else:
                            rate = await enqueue_rate(pool, mode, jobs, plan.enqueue_batch)
                        enqueue[mode].append(rate)
                        progress(f"enqueue {mode} rep {rep + 1}/{reps}: {rate:,.0f} jobs/s")
            finally:
                await close_pool(pool)
            labels = {
                "one": "enqueue: one producer, `enqueue`",
                "bare1": "enqueue yardstick: one producer, bare INSERT of the same row, same pool",
                "eight": "enqueue: eight producers, `enqueue`",
                "bare8": "enqueue yardstick: eight producers, bare INSERT",
                "many": f"enqueue: one producer, `enqueue_many` x{plan.enqueue_batch}",
            }
            for mode, label in labels.items():
                lo, med = summary(enqueue[mode])
                rows_out.append((f"{label} ({plan.enqueue_jobs:,} jobs)", "jobs/s", fmt(lo), fmt(med)))

        drain_n = args.drain_jobs or plan.drain_jobs
        for loops, results in drains.items():
            if not results:
                continue
            name = f"drain {drain_n:,}: {loops} claim loop{'s' if loops > 1 else ''}"
            for label, values, digits in (
                ("jobs/s", [r.jobs_per_s for r in results], 0),
                ("statements/job", [r.statements_per_job for r in results], 2),
                ("lost CAS/job", [r.lost_per_job for r in results], 2),
                ("empty claims", [float(r.empty_claims) for r in results], 0),
            ):
                lo, med = summary(values)
                rows_out.append((name, label, fmt(lo, digits), fmt(med, digits)))
            if raws:
                ratios = [r.jobs_per_s / raw_med for r in results]
                lo, med = summary(ratios)
                rows_out.append((name, "jobs per raw statement", fmt(lo, 3), fmt(med, 3)))

        runtime_n = args.runtime_jobs or plan.runtime_jobs
        for key, results in runtimes.items():
            if not results:
                continue
            name = f"{RUNTIME_LABELS[key]}, {runtime_n:,} jobs"
            for label, values, digits in (
                ("jobs/s", [r.jobs_per_s for r in results], 0),
                ("statements/job", [r.statements_per_job for r in results], 2),
            ):
                lo, med = summary(values)
                rows_out.append((name, label, fmt(lo, digits), fmt(med, digits)))
            if drains.get(16):
                ratios = [r.jobs_per_s / d.jobs_per_s for r, d in zip(results, drains[16], strict=False)]
                lo, med = summary(ratios)
                rows_out.append((name, "x the bare 16-loop drain (same rep)", fmt(lo, 2), fmt(med, 2)))

        # The in-memory queue: claim cost against its backlog, and its drain beside MySQL's.
        memory_latency: dict[int, float] = {}
        memory_rates: list[float] = []
        memory_ok = True
        if "memory" in only:
            for backlog in (1_000, 100_000):
                memory_latency[backlog] = await runtime.memory_claim_latency(backlog, plan.latency_samples)
                progress(f"memory queue: backlog {backlog:,}: claim p50 {memory_latency[backlog]:.3f} ms")
                rows_out.append(
                    (
                        f"memory queue claim(limit=10): backlog {backlog:,}",
                        "p50 ms",
                        "",
                        fmt(memory_latency[backlog], 3),
                    )
                )
            for rep in range(reps):
                rate, ok = await runtime.memory_drain(runtime_n, 16)
                memory_rates.append(rate)
                memory_ok = memory_ok and ok
                progress(f"memory queue drain 16 loops rep {rep + 1}/{reps}: {rate:,.0f} jobs/s")
            lo, med = summary(memory_rates)
            rows_out.append((f"memory queue drain {runtime_n:,}: 16 claim loops", "jobs/s", fmt(lo), fmt(med)))

        # Pickup latency and idle cost: a runtime that is waiting for work.
        pickups: dict[str, list[float]] = {}
        idle_rate: float | None = None
        if "pickup" in only or "idle" in only:
            pool = await open_pool(kwargs, 4)
            try:
                if "pickup" in only:
                    local: list[float] = []
                    remote: list[float] = []
                    redis_remote: list[float] = []
                    redis_url = redis_reachable(args.redis)
                    for rep in range(min(reps, 3)):  # each rep is `pickup_samples` waits of up to a poll
                        local += await runtime.pickup_local(pool, admin, plan.pickup_samples, rep)
                        remote += await runtime.pickup_remote(db_url, admin, plan.pickup_samples, rep)
                        if redis_url:
                            redis_remote += await runtime.pickup_remote(
                                db_url, admin, plan.pickup_samples, rep, redis_url=redis_url
                            )
                        progress(
                            f"pickup rep {rep + 1}/{min(reps, 3)}: same process p50 {runtime.p50(local):.1f} ms, "
                            f"other process p50 {runtime.p50(remote):.1f} ms"
                            + (f", through Redis p50 {runtime.p50(redis_remote):.1f} ms" if redis_url else "")
                        )
                    pickups = {"local": local, "remote": remote}
                    if redis_remote:
                        pickups["redis"] = redis_remote
                    for key, label in (
                        ("local", "pickup: enqueued by the worker's own process"),
                        ("remote", "pickup: enqueued by another process (poll_ms=1000)"),
                        ("redis", "pickup: enqueued by another process, `RedisWakeups`"),
                    ):
                        if key not in pickups:
                            continue
                        values = pickups[key]
                        rows_out.append(
                            (
                                f"{label}, {len(values)} jobs",
                                "p50 / p99 ms",
                                fmt(runtime.p50(values), 1),
                                fmt(runtime.percentile(values, 99), 1),
                            )
                        )
                if "idle" in only:
                    idle_rate = await runtime.idle_cost(pool, admin, plan.idle_seconds)
                    progress(f"idle replica: {idle_rate:.2f} statements/s over {plan.idle_seconds:.0f} s")
                    rows_out.append(
                        (
                            f"idle replica (scheduler + worker + kv, defaults), {plan.idle_seconds:.0f} s",
                            "statements/s",
                            fmt(idle_rate, 2),
                            fmt(idle_rate, 2),
                        )
                    )
            finally:
                await close_pool(pool)

        # The Python peers on the same server (and Redis), beside this package's runtime drain.
        peer_runs: dict[str, list[peers.PeerResult]] = {}
        aps_pickup: list[float] = []
        if "peers" in only:
            redis_url = redis_reachable(args.redis)
            if not peers.apscheduler_available():
                progress("APScheduler 4 is not installed (pip install -e '.[bench]'): left out")
            else:
                bench_url = server.with_database(database)
                pool = await open_pool(kwargs, 16)
                try:
                    for rep in range(plan.peer_reps):
                        # Paired: this package's runtime drains the same count right before, so the ratio
                        # shares the machine's noise of the moment.
                        ours = await runtime.runtime_drain(
                            pool, admin, fill_jobs, plan.peer_jobs, 16, 100 + rep, with_kv=False
                        )
                        peer_runs.setdefault("ours", []).append(
                            peers.PeerResult(ours.jobs_per_s, ours.statements_per_job, ours.exactly_once, ours.detail)
                        )
                        progress(
                            f"runtime drain {plan.peer_jobs:,} (paired with the peers) rep {rep + 1}: "
                            f"{ours.jobs_per_s:,.0f} jobs/s"
                        )
                        r = await peers.apscheduler_drain(bench_url, admin, plan.peer_jobs, 16)
                        peer_runs.setdefault("aps", []).append(r)
                        progress(
                            f"APScheduler 4 drain rep {rep + 1}/{plan.peer_reps}: {r.jobs_per_s:,.0f} jobs/s, "
                            f"{r.statements_per_job:.2f} statements/job, exactly-once "
                            f"{'ok' if r.exactly_once else 'BROKEN ' + r.detail}"
                        )
                finally:
                    await close_pool(pool)
                aps_pickup = await peers.apscheduler_pickup(bench_url, plan.pickup_samples)
                progress(f"APScheduler 4 pickup p50 {runtime.p50(aps_pickup):.1f} ms")
            if peers.arq_available(redis_url):
                assert redis_url is not None
                for rep in range(plan.peer_reps):
                    for key, delay in (("arq", 0.5), ("arq10", 0.01)):
                        r = await peers.arq_drain(redis_url, plan.peer_jobs, 16, poll_delay=delay)
                        peer_runs.setdefault(key, []).append(r)
                        progress(
                            f"arq (poll_delay {delay}s) drain rep {rep + 1}/{plan.peer_reps}: "
                            f"{r.jobs_per_s:,.0f} jobs/s, exactly-once {'ok' if r.exactly_once else 'BROKEN'}"
                        )
            labels = {
                "ours": "this package, one `create_job_worker(workers=16)` (paired run)",
                "aps": "APScheduler 4.0.0a6, SQLAlchemy store on this server, role=worker, 16 slots",
                "arq": "arq on Redis (in memory), max_jobs=16, its default poll_delay 0.5 s",
                "arq10": "arq on Redis (in memory), max_jobs=16, poll_delay 10 ms",
            }
            for key, results in peer_runs.items():
                name = f"peer drain {plan.peer_jobs:,}: {labels[key]}"
                lo, med = summary([r.jobs_per_s for r in results])
                rows_out.append((name, "jobs/s", fmt(lo), fmt(med)))
                spj = [r.statements_per_job for r in results if r.statements_per_job is not None]
                if spj:
                    lo, med = summary(spj)
                    rows_out.append((name, "statements/job", fmt(lo, 2), fmt(med, 2)))
            if aps_pickup:
                rows_out.append(
                    (
                        f"pickup: APScheduler 4, add_job in the worker's process, {len(aps_pickup)} jobs",
                        "p50 / p99 ms",
                        fmt(runtime.p50(aps_pickup), 1),
                        fmt(runtime.percentile(aps_pickup, 99), 1),
                    )
                )

        # 4: claim latency over a big finished table
        latency: dict[str, tuple[float, float]] = {}
        claim_designs: dict[tuple[str, str], tuple[float, float]] = {}
        heartbeats: dict[str, list[float]] = {}
        explains: list[tuple[str, str, list[tuple[Any, ...]], list[str]]] = []
        if "latency" in only:
            finished = args.finished or plan.finished_rows
            admin.run(f"TRUNCATE TABLE `{JOBS}`")
            now = admin.now_ms()
            progress(f"latency: filling {finished:,} succeeded jobs")
            t_fill = time.perf_counter()
            fill_jobs(admin, finished, status="succeeded", prefix="f-", base_ms=now - 86_400_000)
            admin.run(f"ANALYZE TABLE `{JOBS}`")
            progress(f"latency: filled in {time.perf_counter() - t_fill:.1f} s")
            pool = await open_pool(kwargs, 2)
            try:
                have = 0
                for backlog in plan.backlogs:
                    fill_jobs(
                        admin, backlog - have, status="pending", prefix=f"p{have}-", base_ms=now - 3_600_000 + have
                    )
                    have = backlog
                    p50, p99 = await claim_latency(pool, admin, plan.latency_samples)
                    latency[f"{backlog}"] = (p50, p99)
                    progress(f"latency: backlog {backlog:,}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
                    if backlog == plan.backlogs[-1]:
                        t_now = admin.now_ms()
                        explains.append(
                            explain(
                                admin,
                                "claim_pending_candidates (a claim's read while the backlog fills its blocks)",
                                SQL.claim_pending_candidates,
                                (0, t_now, 0, 20),
                            )
                        )
                        explains.append(
                            explain(
                                admin,
                                "claim_pending_candidates, block 16 of the spread",
                                SQL.claim_pending_candidates,
                                (0, t_now, 150, 20),
                            )
                        )
                        explains.append(
                            explain(
                                admin,
                                "claim_candidates (pending and lapsed, UNION ALL: when the "
                                "backlog is short, and at most every "
                                f"{LAPSED_READ_EVERY_MS:,} ms per queue)",
                                SQL.claim_candidates,
                                (0, t_now, 0, 20, t_now, 10),
                            )
                        )
                        seqs = [
                            int(r[0])
                            for r in admin.rows(
                                f"SELECT seq FROM `{JOBS}` WHERE status = 'pending' ORDER BY run_at, seq LIMIT 10"
                            )
                        ]
                        explains.append(
                            explain(
                                admin,
                                "claim_pending (the CAS)",
                                SQL.claim_pending,
                                {"worker": "w", "lease_until": t_now + LEASE_MS, "now": t_now, "seq": seqs[0]},
                            )
                        )
                        explains.append(explain(admin, "claimed_jobs", SQL.claimed_jobs, (seqs, "w")))
                # Running (unexpired) rows: what the lapsed-lease read has to step over.
                have_running = 0
                for running in plan.running_rows:
                    fill_jobs(
                        admin,
                        running - have_running,
                        status="running",
                        prefix=f"r{have_running}-",
                        base_ms=now - 7_200_000 + have_running,
                        lease_until=now + 86_400_000,
                    )
                    have_running = running
                    p50, p99 = await claim_latency(pool, admin, plan.latency_samples)
                    latency[f"{plan.backlogs[-1]}+{running}r"] = (p50, p99)
                    progress(
                        f"latency: backlog {plan.backlogs[-1]:,} + {running:,} running: "
                        f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                    )
                t_now = admin.now_ms()
                explains.append(
                    explain(
                        admin,
                        f"claim_pending_candidates with {have_running:,} running rows",
                        SQL.claim_pending_candidates,
                        (0, t_now, 0, 20),
                    )
                )
                explains.append(
                    explain(
                        admin,
                        f"claim_candidates with {have_running:,} running rows (the lapsed "
                        "half steps over every running row; sent when the backlog is short, and "
                        f"at most every {LAPSED_READ_EVERY_MS:,} ms per queue)",
                        SQL.claim_candidates,
                        (0, t_now, 0, 20, t_now, 10),
                    )
                )
                seqs = [
                    int(r[0])
                    for r in admin.rows(f"SELECT seq FROM `{JOBS}` WHERE status = 'running' ORDER BY seq DESC LIMIT 10")
                ]
                explains.append(
                    explain(
                        admin,
                        f"claimed_jobs with {have_running:,} running rows",
                        SQL.claimed_jobs,
                        (seqs, "bench-holder"),
                    )
                )
                # 4b: the lapsed-lease read's designs and the heartbeat's cost, side by side (bench/leases.py).
                progress("latency: copying the table with KEY job_lease (design (a), measured, not shipped)")
                t_copy = time.perf_counter()
                lease_table = leases.copy_with_lease_index(admin, JOBS)
                progress(f"latency: copied in {time.perf_counter() - t_copy:.1f} s")
                designs = await leases.claims_side_by_side(
                    admin, leases.queues(pool), plan.latency_samples, LEASE_MS, CLAIM_LIMIT
                )
                for (state, name), times in designs.items():
                    p50, p99 = claim_designs[(state, name)] = (percentile(times, 50), percentile(times, 99))
                    progress(
                        f"latency: alternating, running rows {'held' if state == 'running' else 'set aside'}, "
                        f"{name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms"
                    )
                explains.append(
                    explain(
                        admin,
                        f"design (a), not shipped: the lapsed read through job_lease, {have_running:,} running rows",
                        leases.lapsed_read_through_lease_index(lease_table),
                        (t_now, 10),
                    )
                )
                beat_pool = await open_pool(kwargs, leases.HEARTBEAT_TASKS)
                try:
                    heartbeats = await leases.heartbeats_side_by_side(beat_pool, admin, plan.heartbeat_reps)
                finally:
                    await close_pool(beat_pool)
                for name, figures in heartbeats.items():
                    progress(f"heartbeat, {name}: {statistics.median(figures):.3f} ms per heartbeat (median)")
                leases.drop_lease_tables(admin)
            finally:
                await close_pool(pool)
            for key, (p50, p99) in latency.items():
                if "+" in key:
                    backlog, running = key.split("+")
                    label = f"claim(limit=10): backlog {int(backlog):,} + {int(running[:-1]):,} running (leased)"
                else:
                    label = f"claim(limit=10): backlog {int(key):,}"
                rows_out.append((f"{label}, {finished:,} finished", "p50 / p99 ms", fmt(p50, 2), fmt(p99, 2)))
            backlog_label = f"backlog {plan.backlogs[-1]:,} + {plan.running_rows[-1]:,} running"
            state_labels = {
                "running": backlog_label,
                "none": f"backlog {plan.backlogs[-1]:,}, the running rows set aside",
            }
            design_labels = {
                "before": "lapsed-lease read with every claim (before)",
                "shipped": f"lapsed-lease read when short, else every {LAPSED_READ_EVERY_MS:,} ms (shipped)",
                "index": "KEY job_lease, lapsed read through it with every claim (design (a), not shipped)",
            }
            for (state, name), (p50, p99) in claim_designs.items():
                rows_out.append(
                    (
                        f"claim(limit=10), alternating, {state_labels[state]}: {design_labels[name]}",
                        "p50 / p99 ms",
                        fmt(p50, 2),
                        fmt(p99, 2),
                    )
                )
            beat = f"heartbeat of {leases.HEARTBEAT_JOBS} jobs, {leases.HEARTBEAT_TASKS} tasks, {backlog_label}"
            beat_labels = {
                "shipped": "table as before (the shipped design changes no heartbeat)",
                "index": "with KEY job_lease (design (a))",
            }
            for name, figures in heartbeats.items():
                low, mid = summary(figures)
                rows_out.append((f"{beat}: {beat_labels[name]}", "ms per heartbeat", fmt(low, 3), fmt(mid, 3)))

        # -- targets -----------------------------------------------------------------------------------------
        def med_jobs(loops: int) -> float:
            return statistics.median(r.jobs_per_s for r in drains[loops])

        if all(drains.get(k) for k in (1, 4, 16)):
            j1, j4, j16 = med_jobs(1), med_jobs(4), med_jobs(16)
            report.target(
                "no collapse: drain 16 >= 4 >= 1 claimers",
                j16 >= j4 >= j1,
                f"{j16:,.0f} / {j4:,.0f} / {j1:,.0f} jobs/s; 16/1 = {j16 / j1:.2f}x",
            )
            if raws:
                report.target(
                    "drain 16 >= 0.15 jobs per raw statement",
                    j16 / raw_med >= 0.15,
                    f"{j16:,.0f} / {raw_med:,.0f} = {j16 / raw_med:.3f}",
                )
                report.target(
                    "drain 1 >= 0.07 jobs per raw statement",
                    j1 / raw_med >= 0.07,
                    f"{j1:,.0f} / {raw_med:,.0f} = {j1 / raw_med:.3f}",
                )
            spj = statistics.median(r.statements_per_job for r in drains[16])
            report.target("<= 3 statements per job at 16 claimers", spj <= 3, f"{spj:.2f} (median)")
        if runtimes["16"] and drains.get(16):
            bare = med_jobs(16)
            for key in ("16", "16kv"):
                if runtimes[key]:
                    rate = statistics.median(r.jobs_per_s for r in runtimes[key])
                    report.target(
                        f"{RUNTIME_LABELS[key]} >= 0.85 x the bare 16-loop drain",
                        rate >= 0.85 * bare,
                        f"{rate:,.0f} / {bare:,.0f} = {rate / bare:.2f}x",
                    )
        if runtimes["16"] and runtimes["16kv"]:
            plain = statistics.median(r.statements_per_job for r in runtimes["16"])
            single = statistics.median(r.statements_per_job for r in runtimes["16kv"])
            report.target(
                "the kv single-flight key costs <= 1.5 statements/job",
                single - plain <= 1.5,
                f"{single:.2f} - {plain:.2f} = {single - plain:.2f}",
            )
        if memory_latency:
            ratio = memory_latency[100_000] / memory_latency[1_000]
            report.target(
                "memory queue claim p50 at 100,000 waiting <= 1.25 x at 1,000",
                ratio <= 1.25,
                f"{memory_latency[100_000]:.3f} / {memory_latency[1_000]:.3f} ms = {ratio:.2f}x",
            )
        if memory_rates and drains.get(16):
            rate, bare = statistics.median(memory_rates), med_jobs(16)
            report.target(
                "memory queue drain (16 loops) >= 10 x the MySQL 16-loop drain",
                rate >= 10 * bare,
                f"{rate:,.0f} / {bare:,.0f} = {rate / bare:.1f}x",
            )
        if memory_rates:
            report.target("exactly-once in every memory drain", memory_ok, "every rep" if memory_ok else "BROKEN")
        if peer_runs.get("aps") and peer_runs.get("ours"):
            pairs = [o.jobs_per_s / a.jobs_per_s for o, a in zip(peer_runs["ours"], peer_runs["aps"], strict=True)]
            ratio = statistics.median(pairs)
            report.target(
                "runtime drain >= 5 x APScheduler 4's (16 slots each, same server, paired reps)",
                ratio >= 5,
                f"median of paired ratios {ratio:.1f}x ({', '.join(f'{x:.1f}' for x in pairs)})",
            )
            our_spj = statistics.median(r.statements_per_job or 0.0 for r in peer_runs["ours"])
            aps_spj = statistics.median(r.statements_per_job or 0.0 for r in peer_runs["aps"])
            report.target(
                "fewer statements per job than APScheduler 4", our_spj < aps_spj, f"{our_spj:.2f} vs {aps_spj:.2f}"
            )
        for key in ("arq", "arq10"):
            if peer_runs.get(key) and peer_runs.get("ours"):
                ours = statistics.median(r.jobs_per_s for r in peer_runs["ours"])
                theirs = statistics.median(r.jobs_per_s for r in peer_runs[key])
                delay = "0.5 s (default)" if key == "arq" else "10 ms"
                report.target(
                    f"runtime drain >= arq on Redis, poll_delay {delay}",
                    ours >= theirs,
                    f"{ours:,.0f} / {theirs:,.0f} = {ours / theirs:.2f}x",
                )
        broken_peers = [r.detail for results in peer_runs.values() for r in results if not r.exactly_once]
        if peer_runs:
            report.target("exactly-once in every peer drain", not broken_peers, "; ".join(broken_peers) or "every rep")
        if pickups:
            local_p50, remote_p50 = runtime.p50(pickups["local"]), runtime.p50(pickups["remote"])
            report.target("pickup p50, enqueued by the same process, <= 20 ms", local_p50 <= 20, f"{local_p50:.1f} ms")
            report.target(
                "pickup p50, enqueued by another process, <= poll_ms/2 + 50 ms = 550 ms",
                remote_p50 <= 550,
                f"{remote_p50:.1f} ms",
            )
            if "redis" in pickups:
                redis_p50 = runtime.p50(pickups["redis"])
                report.target(
                    "pickup p50 across processes with RedisWakeups <= 30 ms", redis_p50 <= 30, f"{redis_p50:.1f} ms"
                )
        if idle_rate is not None:
            report.target("an idle replica costs <= 2 statements/s", idle_rate <= 2, f"{idle_rate:.2f}")
        if latency:
            first, last = f"{plan.backlogs[0]}", f"{plan.backlogs[-1]}"
            ratio = latency[last][0] / latency[first][0]
            report.target(
                f"claim p50 at backlog {int(last):,} <= 1.25 x p50 at {int(first):,}",
                ratio <= 1.25,
                f"{latency[last][0]:.2f} / {latency[first][0]:.2f} ms = {ratio:.2f}x",
            )
            if claim_designs:
                busy, idle = claim_designs[("running", "shipped")][0], claim_designs[("none", "shipped")][0]
                before = claim_designs[("running", "before")][0] / claim_designs[("none", "before")][0]
                report.target(
                    f"claim p50 with {plan.running_rows[-1]:,} running <= 1.25 x none running "
                    f"(backlog {int(last):,}, alternating)",
                    busy <= 1.25 * idle,
                    f"{busy:.2f} / {idle:.2f} ms = {busy / idle:.2f}x (before: {before:.2f}x)",
                )
            if heartbeats:
                shipped, indexed = (statistics.median(heartbeats[n]) for n in ("shipped", "index"))
                report.target(
                    "heartbeat cost <= 1.10 x before",
                    True,
                    "1.00x: the shipped design sends the same heartbeat statements to the same table; "
                    f"design (a)'s KEY job_lease measured {indexed:.3f} / {shipped:.3f} ms = "
                    f"{indexed / shipped:.2f}x (rep-by-rep ratios "
                    + ", ".join(f"{i / s:.2f}" for s, i in zip(heartbeats["shipped"], heartbeats["index"], strict=True))
                    + ")",
                )
            sorts = [
                name
                for name, _, rows, header in explains
                if any("filesort" in str(dict(zip(header, r, strict=True)).get("Extra") or "") for r in rows)
            ]
            over_backlog = [name for name in sorts if name.startswith(("claim_candidates", "claim_pending_candidates"))]
            small = [name for name in sorts if name not in over_backlog]
            report.target(
                "no filesort over the backlog (claim candidate reads)",
                not over_backlog,
                (", ".join(over_backlog) or "none")
                + (f"; elsewhere, over the <= {CLAIM_LIMIT} won rows only: {', '.join(small)}" if small else ""),
            )
        for mode, bare_mode, label in (("one", "bare1", "one producer"), ("eight", "bare8", "eight producers")):
            if enqueue[mode] and enqueue[bare_mode]:
                # The median of the reps' own ratios: a rep lasts well under a second at eight producers, so one
                # stall (a flush, another process) moves a rep's pair, not the ratio of two medians from
                # different reps.
                pairs = [r / b for r, b in zip(enqueue[mode], enqueue[bare_mode], strict=True)]
                ratio = statistics.median(pairs)
                rate, bare = statistics.median(enqueue[mode]), statistics.median(enqueue[bare_mode])
                report.target(
                    f"enqueue, {label}, >= 0.8 x a bare INSERT of the same row (paired reps)",
                    ratio >= 0.8,
                    f"median of paired ratios {ratio:.2f}x ({', '.join(f'{p:.2f}' for p in pairs)}); "
                    f"medians {rate:,.0f} / {bare:,.0f} jobs/s",
                )
        if enqueue["one"] and enqueue["many"]:
            one, many = statistics.median(enqueue["one"]), statistics.median(enqueue["many"])
            report.target(
                "enqueue_many >= 5 x one producer's enqueue",
                many >= 5 * one,
                f"{many:,.0f} / {one:,.0f} = {many / one:.1f}x",
            )
        all_runtimes = [r for results in runtimes.values() for r in results]
        if all_runtimes:
            broken_rt = [r.detail for r in all_runtimes if not r.exactly_once]
            report.target("exactly-once in every runtime drain", not broken_rt, "; ".join(broken_rt) or "every rep")
        all_drains = [r for results in drains.values() for r in results]
        if all_drains:
            seen = sum(r.deadlocks_seen for r in all_drains)
            innodb = sum(r.innodb_deadlocks for r in all_drains)
            report.target(
                "zero deadlocks",
                seen == 0 and innodb == 0,
                f"1213 seen by callers: {seen}; Innodb_deadlocks delta: {innodb}",
            )
            if innodb:
                status = str(admin.rows("SHOW ENGINE INNODB STATUS")[0][2])
                start = status.find("LATEST DETECTED DEADLOCK")
                end = status.find("------------\nTRANSACTIONS", start)
                if start >= 0:
                    deadlock_text = status[start : end if end > 0 else start + 6000]
            broken = [r.detail for r in all_drains if not r.exactly_once]
            report.target("exactly-once in every drain", not broken, "; ".join(broken) or "every rep")

        elapsed = time.perf_counter() - t0
        write_report(
            args, report, plan, origin, version, settings, rows_out, explains, started_at, elapsed, deadlock_text
        )
    progress(f"done in {elapsed:.0f} s; wrote {args.out}")
    return 0 if all(ok for _, ok, _ in report.targets) else 1


def write_report(
    args: argparse.Namespace,
    report: Report,
    plan: Plan,
    origin: str,
    version: str,
    settings: dict[str, Any],
    rows_out: list[tuple[str, str, str, str]],
    explains: list[tuple[str, str, list[tuple[Any, ...]], list[str]]],
    started_at: dt.datetime,
    elapsed: float,
    deadlock_text: str,
) -> None:
    out: list[str] = ["# Benchmark results", ""]
    mode = "quick" if args.quick else "full"
    out += [
        f"- date: {started_at:%Y-%m-%d %H:%M} UTC, {elapsed:.0f} s, mode **{mode}**",
        f"- command: `{' '.join(['python', *sys.argv])}`",
        *machine(),
        f"- server: {version}; {origin}",
        "- server settings: " + ", ".join(f"{k}={v}" for k, v in sorted(settings.items())),
        f"- Python {platform.python_version()}, aiomysql {metadata.version('aiomysql')}, "
        f"PyMySQL {metadata.version('PyMySQL')}",
        f"- reps: {args.reps or plan.reps} per scenario; raw limit and drains interleaved rep by rep; "
        "figures are min / median over reps (for latency: p50 / p99 over one run of "
        f"{plan.latency_samples} claims)",
    ]
    if args.quick:
        out.append(
            f"- **quick mode**: drain of {args.drain_jobs or plan.drain_jobs:,} jobs (full: 10,000), "
            f"{args.finished or plan.finished_rows:,} finished rows (full: 1,000,000), backlogs "
            f"{'/'.join(f'{b:,}' for b in plan.backlogs)} (full: 1,000/10,000/100,000)"
        )
    out += [
        "",
        "Client and server share the machine; every jobs/s figure is to be read against the raw limit "
        "measured in the same run.",
        "",
        "## Figures",
        "",
        "| scenario | figure | min | median |",
        "|---|---|---:|---:|",
    ]
    out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows_out]
    out += ["", "## Targets", "", "| target | result | measured |", "|---|---|---|"]
    out += [f"| {name} | **{'PASS' if ok else 'FAIL'}** | {detail} |" for name, ok, detail in report.targets]
    if explains:
        out += ["", "## EXPLAIN", ""]
        for name, text, rows, header in explains:
            flagged = any("filesort" in str(dict(zip(header, r, strict=True)).get("Extra") or "") for r in rows)
            out += [
                f"### {name}{' - **Using filesort**' if flagged else ''}",
                "",
                "```sql",
                text,
                "```",
                "",
                "| " + " | ".join(header) + " |",
                "|" + "---|" * len(header),
            ]
            out += ["| " + " | ".join("" if v is None else str(v) for v in r) + " |" for r in rows]
            out.append("")
    if deadlock_text:
        out += ["", "## The last deadlock InnoDB detected", "", "```", deadlock_text.strip(), "```"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(out) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer reps and smaller sizes (about 3½ minutes)")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"))
    parser.add_argument("--only", default="", help=f"comma list of {','.join(SCENARIOS)} (default: all)")
    parser.add_argument("--loops", default="", help="drain claim loops, comma list (default 1,4,16)")
    parser.add_argument("--reps", type=int, default=0, help="override the repetitions")
    parser.add_argument("--drain-jobs", type=int, default=0, help="override the drain size")
    parser.add_argument(
        "--redis",
        default=os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
        help="Redis for the RedisWakeups pickup scenario ('' leaves it out)",
    )
    parser.add_argument("--runtime-jobs", type=int, default=0, help="override the runtime drain size")
    parser.add_argument("--finished", type=int, default=0, help="override the finished rows for latency")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
