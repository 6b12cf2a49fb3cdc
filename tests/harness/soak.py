"""Soak: a deployment in miniature, run for a while, then checked row by row.

    python -m tests.harness.soak --seconds 120 [--url mysql://root@127.0.0.1:3306/soak]

4 worker processes × 4 slots (single-flight through the kv), 3 scheduler processes sweeping the same schedules,
2 producers and an operator randomly cancelling and requeueing (tasks of this process), against a real server
(--url, else $PLITZI_MYSQL_URL, else a throwaway local one). A progress line every few seconds. Then a checker
reads the tables and the ledger the handlers wrote: every job ended in the state the rules give it, no job ran
twice at once, none vanished, every schedule fired once a minute without a gap, no deadlock or lock-wait error
reached a caller (the processes' logs and this one's), and each process's memory stayed flat. Exit 0 when all
hold, 1 with the failures listed.

    python -m tests.harness.soak --fault proxy|kill|read-only|silent [--jobs 10000]
    python -m tests.harness.soak --fault galera [--jobs 10000]
    python -m tests.harness.soak --fault group-replication [--jobs 10000]

A fault run (issue 14; tests/harness/injectors.py): 2 worker processes × 8 slots, one sweeping scheduler and one
producer push `--jobs` jobs through a fault aimed at the package's connections only, on a throwaway server; the ledger
and the checker keep a clean line. The checker then also allows the `lost` attempts a fault causes (and the `dead`
that running out of attempts gives), and checks the recovery instead: every job left running when the fault ended
taken over or finished within one lease, each worker process running new work and a scheduler firing a due schedule by
themselves, nothing escaping the runtime (the logs' tracebacks belong to logged errors), and the error lines in
proportion to the faults. `galera` runs the HAProxy drill of tests/faults/test_galera_haproxy.py with three node
losses, `group-replication` that of tests/faults/test_group_replication.py (MySQL 9.7) with three member losses.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import itertools
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomysql
import pymysql

from plitzi_jobs_mysql import JobInput, ScheduleInput, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.totals import drift_query
from plitzi_jobs_mysql.testing import LocalMysqlServer, fresh_database, mysql_server_url
from plitzi_jobs_mysql.url import parse_mysql_url
from tests.harness.replica import ensure_ledger, read_ledger, spawn_replica

WORKERS, SLOTS, SCHEDULERS, PRODUCERS = 4, 4, 3, 2
SPACES = (1, 2, 3)
LEASE_MS = 4_000
# As the driver words them ("(1213, 'Deadlock found ...')"): a bare 1213 also turns up in job ids and run ids,
# which the worker's log lines name.
CONFLICT_MARKERS = ("(1213,", "(1205,", "Deadlock", "Lock wait", "deadlock", "lock wait")
#: The end of the exception a handler raises on purpose: its failed attempt is logged with that traceback.
ASKED_FAILURE = "as its input asks"
#: Memory may grow this much between the first and the last samples of a process and still count as flat.
RSS_SLACK_KB = 40 * 1024
RSS_SLACK_RATIO = 1.35
#: After a fault: how long past one lease a busy 2-core machine may take to hand an orphan on (a claim poll, a
#: loaded server).
ORPHAN_SLACK_S = 3.0
#: A space no scheduler reconciles: its one schedule, due when a fault ends, shows the sweep recovered.
PROBE_SPACE = 9
#: Logged errors and warnings a process may write per injected fault (plus a fixed allowance): more is a storm.
LOG_LINES_PER_FAULT = 4
LOG_LINES_FIXED = 40
LOG_LINES_PER_DOWN_S = 10
#: What the runtime lets escape, as opposed to what it logs and survives.
ESCAPE_MARKERS = (
    "Task exception was never retrieved",
    "Exception in callback",
    "the replica failed",
    "Unhandled exception",
    "was never awaited",
)

# What a job's input asks its handler to do, and the status the rules then give the job.
KINDS = [
    ({}, "succeeded", 60),
    ({"fail": "error", "fail_times": 1}, "succeeded", 12),  # a failed attempt, retried with backoff, then fine
    ({"fail": "retry", "fail_times": 1, "retry_delay_ms": 200}, "succeeded", 8),  # handed back, attempt refunded
    ({"fail": "permanent"}, "dead", 5),
    ({"fail": "error"}, "dead", 3),  # fails every time: dead after max_attempts
]


_LOG_HEADER = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def unexpected_tracebacks(log: str) -> int:
    """Tracebacks in a process's log, less those of the failures the handlers raise on purpose (a failed
    attempt is logged with its traceback, and the soak asks for many)."""
    count = 0
    block: list[str] = []
    for line in [*log.splitlines(), "0000-00-00 00:00:00 end"]:
        if _LOG_HEADER.match(line):
            tracebacks = sum(1 for entry in block if entry.startswith("Traceback"))
            ending = next((entry for entry in reversed(block) if entry.strip()), "")
            if tracebacks and ASKED_FAILURE not in ending:
                count += tracebacks
            block = []
        else:
            block.append(line)
    return count


@dataclass
class Soak:
    url: str
    seconds: float
    logs: Path
    out: Any = sys.stdout
    #: The URL the package's connections use (the processes' queue and kv, the producers), when faults are aimed
    #: at them: through the fault proxy, or as a user of its own. `url` stays the clean line the ledger and the
    #: checker use. None: `url` for everything.
    package_url: str | None = None
    workers: int = WORKERS
    slots: int = SLOTS
    schedulers: int = SCHEDULERS
    producers: int = PRODUCERS
    operator: bool = True
    lease_ms: int = LEASE_MS
    #: Stop producing after this many jobs (else after `seconds`, which then stays the ceiling).
    target_jobs: int | None = None
    #: A fault injected while the load runs (tests/harness/injectors.py); with one, the checker also expects lost
    #: attempts and logged connection errors, and checks the recovery instead.
    fault: Any = None
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    requeued: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: list[str] = field(default_factory=list)
    rss: dict[str, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    report: dict[str, Any] = field(default_factory=dict)
    retried_batches: set[str] = field(default_factory=set)
    client_errors: collections.Counter[str] = field(default_factory=collections.Counter)
    fault_ended_at: Any = None  # the server's clock when the fault stopped

    @property
    def package(self) -> str:
        return self.package_url or self.url

    def say(self, line: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {line}", file=self.out, flush=True)

    # -- the processes ----------------------------------------------------------------------------------------

    def start_processes(self) -> None:
        common = {
            "log_level": "INFO",
            "backoff_base_ms": 200,
            "backoff_max_ms": 1_000,
            "max_attempts": 3,
            "ledger_url": self.url if self.package_url else None,
        }
        for n in range(self.workers):
            name = f"worker-{n + 1}"
            self.procs[name] = spawn_replica(
                self.package,
                log_path=self.logs / f"{name}.log",
                worker_id=name,
                workers=self.slots,
                produce=False,
                kv=True,
                lease_ms=self.lease_ms,
                poll_ms=200,
                **common,
            )
        for n in range(self.schedulers):
            name = f"scheduler-{n + 1}"
            self.procs[name] = spawn_replica(
                self.package,
                log_path=self.logs / f"{name}.log",
                worker_id=name,
                workers=0,
                produce=True,
                schedule_poll_ms=500,
                spaces=list(SPACES),
                schedule={"tick": "* * * * *", "tock": "*/2 * * * *"},
                **common,
            )

    def sample_rss(self) -> None:
        for name, proc in self.procs.items():
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.rss[name].append(int(line.split()[1]))

    def stop_processes(self) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = {}
        for name, proc in self.procs.items():
            try:
                codes[name] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = proc.wait()
        return codes

    # -- the load ---------------------------------------------------------------------------------------------

    async def produce(self, queue: Any, producer: int, until: float, counter: itertools.count[int]) -> None:
        rng = random.Random(producer)
        weights = [k[2] for k in KINDS]
        while time.monotonic() < until and not self.produced_enough():
            batch = []
            for _ in range(rng.randint(1, 6)):
                spec, expect, _ = rng.choices(KINDS, weights)[0]
                job_id = f"p{producer}-{next(counter):06d}"
                # Under a fault, short runs: the point is many claims and settles crossing the faults.
                data = {
                    **spec,
                    "sleep_ms": rng.choice([0, 10, 50, 200, 600] if self.fault is None else [0, 0, 5, 20, 50]),
                }
                batch.append(
                    JobInput(
                        id=job_id,
                        space_id=rng.choice(SPACES),
                        action_id=f"act-{rng.randint(1, 5)}",
                        environment="main",
                        trigger="manual",
                        input=data,
                        due_at=0,
                        max_attempts=3,
                        key=f"k{rng.randint(1, 3)}",
                    )
                )
                self.expected[job_id] = expect
                self.specs[job_id] = spec
            if self.fault is None:
                try:
                    answers = await queue.enqueue_many(batch)
                    if answers != [True] * len(batch):
                        self.errors.append(f"producer {producer}: a fresh id was not created: {answers}")
                except Exception as error:
                    self.errors.append(f"producer {producer}: {error!r}")
                await asyncio.sleep(rng.uniform(0.05, 0.2))
            else:
                await self.enqueue_through_faults(queue, producer, batch)
                await asyncio.sleep(rng.uniform(0.01, 0.05))

    def produced_enough(self) -> bool:
        if self.fault is not None and not self.fault.satisfied():
            return False
        return self.target_jobs is not None and len(self.expected) >= self.target_jobs

    async def enqueue_through_faults(self, queue: Any, producer: int, batch: list[JobInput]) -> None:
        """As a user would under faults: the same batch again until it is in. A retry may find ids its failed
        attempt had written (the reply was lost, not the write): answered False then, and only then."""
        for tries in itertools.count(1):
            try:
                async with asyncio.timeout(10):  # a user's own bound: a connection may go silent
                    answers = await queue.enqueue_many(batch)
            except Exception as error:
                self.client_errors[client_error_kind(error)] += 1
                if not fault_error(error):
                    self.errors.append(f"producer {producer}: an unexpected error under faults: {error!r}")
                if tries >= 200:
                    self.errors.append(f"producer {producer}: a batch could not be enqueued in 200 tries")
                    return
                self.retried_batches.update(job.id for job in batch)
                await asyncio.sleep(0.05)
                continue
            stray = [
                job.id
                for job, created in zip(batch, answers, strict=True)
                if not created and job.id not in self.retried_batches
            ]
            if stray:
                self.errors.append(f"producer {producer}: fresh ids not created on a first try: {stray}")
            return

    async def operate(self, queue: Any, until: float) -> None:
        rng = random.Random(99)
        while time.monotonic() < until:
            await asyncio.sleep(rng.uniform(0.05, 0.25))
            ids = list(self.expected)
            if not ids:
                continue
            job_id = rng.choice(ids[-300:] if rng.random() < 0.5 else ids)
            try:
                found = await queue.get_job(list(SPACES), job_id)
                if found is None:
                    continue
                if rng.random() < 0.6:
                    if await queue.cancel([found.space_id], job_id):
                        self.cancelled.add(job_id)
                elif await queue.requeue([found.space_id], job_id):
                    self.requeued[job_id] += 1
            except Exception as error:
                self.errors.append(f"operator: {error!r}")

    async def progress(self, queue: Any, until: float) -> None:
        started = time.monotonic()
        while time.monotonic() < until and not self.produced_enough():
            self.sample_rss()
            counts = await status_counts(queue)
            rss = " ".join(f"{n.split('-')[0][0]}{n.split('-')[1]}={v[-1] // 1024}M" for n, v in self.rss.items() if v)
            self.say(f"t={time.monotonic() - started:5.0f}s jobs={sum(counts.values())} {dict(counts)} rss {rss}")
            for _ in range(int(min(5.0, max(0.5, until - time.monotonic())) / 0.25)):
                if self.produced_enough():
                    break
                await asyncio.sleep(0.25)

    async def after_fault(self, queue: Any) -> None:
        """Once the fault stops: every orphan (a job left running by a claim, heartbeat or settle the fault cut
        short) is taken over within one lease; each worker process runs jobs again and a scheduler fires again,
        each by itself, with nothing restarted."""
        ended = await queue.now()
        self.fault_ended_at = ended.replace(tzinfo=None)
        self.report["fault"] = {
            "name": self.fault.name,
            "injected": dict(self.fault.injected),
            "client_errors": dict(self.client_errors),
        }
        snapshot = {
            row[0]: (row[1], row[2])
            for row in await asyncio.to_thread(
                self.fetch, "SELECT id, attempts, worker_id FROM action_jobs WHERE status = 'running'"
            )
        }
        started = time.monotonic()
        bound = self.lease_ms / 1000 + ORPHAN_SLACK_S
        slowest = 0.0
        while snapshot:
            rows = await asyncio.to_thread(
                self.fetch, "SELECT id, attempts, worker_id, status FROM action_jobs WHERE id IN %s", (list(snapshot),)
            )
            still = {r[0] for r in rows if r[3] == "running" and (r[1], r[2]) == snapshot[r[0]]}
            slowest = time.monotonic() - started
            snapshot = {k: v for k, v in snapshot.items() if k in still}
            if snapshot and slowest > bound:
                self.errors.append(
                    f"{len(snapshot)} jobs running when the fault ended were not taken over or "
                    f"finished within one lease ({self.lease_ms} ms + {ORPHAN_SLACK_S} s), e.g. "
                    f"{sorted(snapshot)[:3]}"
                )
                break
            await asyncio.sleep(0.1)
        self.report["fault"]["running_at_end_settled_within_s"] = round(slowest, 1)
        # The same processes take new work and fire a due schedule, on their own.
        probes = []
        for n in range(self.workers * self.slots * 4):
            job_id = f"recovery-{n:04d}"
            probes.append(
                JobInput(
                    id=job_id,
                    space_id=SPACES[0],
                    action_id="recovery",
                    environment="main",
                    trigger="manual",
                    input={"sleep_ms": 300},
                    due_at=0,
                    max_attempts=3,
                )
            )
            self.expected[job_id] = "succeeded"
            self.specs[job_id] = {}
        await queue.enqueue_many(probes)
        if self.schedulers:
            now = int(ended.timestamp() * 1000)
            await queue.put_schedules(
                space_id=PROBE_SPACE,
                schedules=[
                    ScheduleInput(
                        space_id=PROBE_SPACE,
                        action_id="recovery",
                        cron="0 0 1 1 *",
                        environment="main",
                        enabled=True,
                        next_run_at=now - 60_000,
                        max_attempts=3,
                    )
                ],
            )
            asked = time.monotonic()
            deadline = asked + 30
            while not await asyncio.to_thread(
                self.fetch, "SELECT 1 FROM action_jobs WHERE space_id = %s AND `trigger` = 'schedule'", (PROBE_SPACE,)
            ):
                if time.monotonic() > deadline:
                    self.errors.append("no scheduler swept a due schedule within 30 s after the fault ended")
                    break
                await asyncio.sleep(0.2)
            self.report["fault"]["due_schedule_fired_within_s"] = round(time.monotonic() - asked, 1)

    def fetch(self, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
        conn = pymysql.connect(**parse_mysql_url(self.url).pymysql_kwargs(), autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(statement, args)
                return [tuple(v.decode() if isinstance(v, bytes) else v for v in row) for row in cur.fetchall()]
        finally:
            conn.close()

    async def run(self) -> bool:
        ensure_ledger(self.url)
        kwargs = parse_mysql_url(self.url).aiomysql_kwargs()
        pool = await aiomysql.create_pool(**kwargs, minsize=1, maxsize=8, autocommit=True)
        package_pool = pool
        if self.package_url:
            package_pool = await aiomysql.create_pool(
                **parse_mysql_url(self.package_url).aiomysql_kwargs(),
                minsize=1,
                maxsize=4,
                autocommit=True,
                connect_timeout=5,
            )
        try:
            queue = create_mysql_job_queue(pool)
            await queue.now()  # the tables, before the processes race to make them
            producing_queue = create_mysql_job_queue(package_pool) if package_pool is not pool else queue
            self.start_processes()
            what = f"{self.target_jobs} jobs, at most " if self.target_jobs else ""
            self.say(
                f"{self.workers} workers x {self.slots} slots, {self.schedulers} schedulers, {self.producers} "
                f"producers{', operator' if self.operator else ''}; {what}{self.seconds:.0f} s against "
                f"{parse_mysql_url(self.url)}" + (f"; fault: {self.fault.name}" if self.fault else "")
            )
            started = time.monotonic()
            until = started + self.seconds
            counter = itertools.count()
            loads = [
                *(self.produce(producing_queue, p, until, counter) for p in range(self.producers)),
                self.progress(queue, until),
            ]
            if self.operator:
                loads.append(self.operate(queue, until))
            fault_task = asyncio.create_task(self.fault.inject(self)) if self.fault else None
            try:
                await asyncio.gather(*loads)
            finally:
                if fault_task is not None:
                    self.fault.stop()
                    await fault_task
            load_ended = time.monotonic()
            self.report["load_s"] = round(load_ended - started, 1)
            if self.fault is not None:
                await self.after_fault(queue)
            self.say("load stopped; waiting for the queue to drain")
            drain_deadline = time.monotonic() + 120
            while True:
                self.sample_rss()
                # One read for both: a job counted by neither of two reads (running, then pending again after a
                # failed attempt) would end the wait early.
                if not (await asyncio.to_thread(self.fetch, UNFINISHED))[0][0]:
                    break
                if time.monotonic() > drain_deadline:
                    self.errors.append(f"the queue did not drain within 120 s: {dict(await status_counts(queue))}")
                    break
                await asyncio.sleep(0.5)
            self.report["drain_s"] = round(time.monotonic() - min(until, load_ended), 1)
            codes = self.stop_processes()
            bad = {n: c for n, c in codes.items() if c != 0}
            if bad:
                self.errors.append(f"processes did not close cleanly on SIGTERM: {bad}")
            self.check()
        finally:
            self.stop_processes()
            for opened in {id(pool): pool, id(package_pool): package_pool}.values():
                opened.close()
                await opened.wait_closed()
        for line in self.errors:
            self.say("FAIL " + line)
        self.say(("OK " if not self.errors else "FAILED ") + json.dumps(self.report, default=str))
        return not self.errors

    # -- the checker ------------------------------------------------------------------------------------------

    def check(self) -> None:
        conn = pymysql.connect(**parse_mysql_url(self.url).pymysql_kwargs(), autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT id, status, attempts, max_attempts, history, `trigger`, space_id, action_id, "
                    "due_at, missed FROM action_jobs"
                )
                rows = cur.fetchall()
                # The kept job totals say what a recount says, whatever the faults did (issue 24).
                cur.execute(drift_query())
                drift = cur.fetchall()
        finally:
            conn.close()
        if drift:
            self.errors.append(f"job totals drifted from a recount (space, action, status, kept, counted): {drift}")
        jobs = {r[0].decode(): r for r in rows}
        ledger = read_ledger(self.url)
        runs: dict[str, list[Any]] = collections.defaultdict(list)
        for row in ledger:
            runs[row.job_id].append(row)

        # None vanished, none appeared from nowhere.
        manual = {k for k, r in jobs.items() if r[5] == b"manual"}
        missing = set(self.expected) - manual
        if missing:
            self.errors.append(f"{len(missing)} produced jobs vanished, e.g. {sorted(missing)[:5]}")
        if manual - set(self.expected):
            self.errors.append(f"unknown jobs: {sorted(manual - set(self.expected))[:5]}")
        # Every job ended in the state the rules give it.
        wrong = []
        outcomes: collections.Counter[str] = collections.Counter()
        for job_id, expect in self.expected.items():
            row = jobs.get(job_id)
            if row is None:
                continue
            status = row[1]
            outcomes[status] += 1
            history = json.loads(row[4])
            lost_here = sum(1 for h in history if h["status"] == "lost")
            allowed = {expect} | ({"cancelled"} if job_id in self.cancelled else set())
            if lost_here and len(history) >= int(row[3]):
                allowed.add("dead")  # a fault cost it attempts: out of attempts is the rule then
            if status not in allowed:
                wrong.append((job_id, status, sorted(allowed), [h["status"] for h in history]))
            if status == "succeeded" and (not history or history[-1]["status"] != "succeeded"):
                wrong.append((job_id, status, "history does not end in success", history))
            if status == "dead" and job_id not in self.requeued:
                if self.specs[job_id].get("fail") == "permanent":
                    ok = history[-1]["status"] == "failed" and len(history) == lost_here + 1
                else:
                    ok = len(history) == int(row[3])
                if not ok:
                    wrong.append((job_id, status, f"{len(history)} attempts against the rules", history))
        if wrong:
            self.errors.append(f"{len(wrong)} jobs ended in a state the rules do not give them, e.g. {wrong[:3]}")
        # No lost attempts without a kill: nothing was killed in the soak.
        lost = [k for k, r in jobs.items() if any(h["status"] == "lost" for h in json.loads(r[4]))]
        if lost and self.fault is None:
            self.errors.append(f"{len(lost)} jobs have lost attempts though no process died, e.g. {lost[:5]}")
        # A job runs to success once; again only after a lost attempt (its settle could not be written while the
        # lease held) or an operator's requeue.
        reruns = [k for k, v in runs.items() if [r.outcome for r in v].count("succeeded") > 1]
        unexplained = [k for k in reruns if k not in lost and k not in self.requeued]
        if unexplained:
            self.errors.append(
                f"{len(unexplained)} jobs ran to success twice with no lost attempt or requeue, e.g. {unexplained[:3]}"
            )
        # None ran twice at once, and every run came to an end.
        overlaps, unfinished = [], [r for r in ledger if r.ended_at is None]
        for job_id, job_runs in runs.items():
            ordered = sorted(job_runs, key=lambda r: r.started_at)
            for before, after in itertools.pairwise(ordered):
                if before.ended_at is None or before.ended_at > after.started_at:
                    overlaps.append((job_id, before.worker_id, after.worker_id))
        if overlaps:
            self.errors.append(f"{len(overlaps)} runs overlapped another run of their job, e.g. {overlaps[:3]}")
        if unfinished:
            self.errors.append(f"{len(unfinished)} ledger runs never ended, e.g. {unfinished[:2]}")
        # Schedules: each fire once, one a minute (or two) without a gap.
        fires: dict[tuple[int, str], list[int]] = collections.defaultdict(list)
        for row in rows:
            if row[5] == b"schedule":
                fires[(int(row[6]), row[7].decode())].append(int(row[8]))
        gaps = []
        for key, instants in fires.items():
            step = 60_000 if key[1] == "tick" else 120_000
            ordered = sorted(instants)
            if len(ordered) != len(set(ordered)):
                gaps.append((key, "a fire twice"))
            if any(b - a != step for a, b in itertools.pairwise(ordered)):
                gaps.append((key, ordered))
        if gaps:
            self.errors.append(f"schedule fires were repeated or skipped: {gaps[:3]}")
        # No deadlock or lock-wait error reached a caller.
        conflicts = []
        for log in sorted(self.logs.glob("*.log")):
            for line in log.read_text(errors="replace").splitlines():
                if any(m in line for m in CONFLICT_MARKERS):
                    conflicts.append(f"{log.name}: {line[:200]}")
        conflicts += [e for e in self.errors if any(m in e for m in CONFLICT_MARKERS)]
        if conflicts:
            self.errors.append(f"{len(conflicts)} deadlock/lock-wait errors reached a caller, e.g. {conflicts[:3]}")
        tracebacks = sum(unexpected_tracebacks(log.read_text(errors="replace")) for log in self.logs.glob("*.log"))
        logged: dict[str, int] = {}
        if self.fault is None:
            if tracebacks:
                self.errors.append(f"{tracebacks} tracebacks in the processes' logs ({self.logs})")
        else:
            # Under a fault the runtime logs what it survived (with its traceback); nothing may escape it, and the
            # volume stays proportional to the faults, not to time spent retrying.
            injected = sum(self.fault.injected.values())
            # A failing call is logged once per try, and the worker tries a claim every poll (200 ms here): a store
            # down for everyone costs lines in proportion to how long, never a hot loop.
            budget = int(
                LOG_LINES_PER_FAULT * injected + LOG_LINES_PER_DOWN_S * self.fault.down_seconds() + LOG_LINES_FIXED
            )
            for log in sorted(self.logs.glob("*.log")):
                text = log.read_text(errors="replace")
                escaped = [m for m in ESCAPE_MARKERS if m in text]
                if escaped:
                    self.errors.append(f"{log.name}: escaped the runtime: {escaped} ({log})")
                # The failures the handlers raise on purpose are logged too (a WARNING, an ERROR when dead).
                logged[log.stem] = sum(
                    1
                    for line in text.splitlines()
                    if (" ERROR " in line or " WARNING " in line) and ASKED_FAILURE not in line
                )
                if logged[log.stem] > budget:
                    self.errors.append(
                        f"{log.name}: {logged[log.stem]} error/warning lines for {injected} faults (budget {budget})"
                    )
            # Each worker process ran work handed out after the fault, by itself.
            recovered = {r.worker_id for r in ledger if r.job_id.startswith("recovery-")}
            idle = {n for n in self.procs if n.startswith("worker-")} - recovered
            if idle:
                self.errors.append(f"worker processes that ran nothing after the fault ended: {sorted(idle)}")
        # Memory stayed flat: the last samples against the first ones after start-up.
        growth = {}
        for name, samples in self.rss.items():
            if len(samples) < 4:
                continue
            third = max(1, len(samples) // 3)
            early, late = statistics.median(samples[1 : third + 1]), statistics.median(samples[-third:])
            growth[name] = (int(early) // 1024, int(late) // 1024)
            if late > early * RSS_SLACK_RATIO and late - early > RSS_SLACK_KB:
                self.errors.append(f"{name}'s memory grew from {early // 1024:.0f} MB to {late // 1024:.0f} MB")
        self.report.update(
            {
                "jobs": len(self.expected),
                "outcomes": dict(outcomes),
                "runs": len(ledger),
                "cancel_accepted": len(self.cancelled),
                "requeued": sum(self.requeued.values()),
                "schedule_fires": sum(len(v) for v in fires.values()),
                "rss_mb_first_last": growth,
                "lost_attempts": sum(sum(1 for h in json.loads(jobs[k][4]) if h["status"] == "lost") for k in lost),
                "reruns": len(reruns),
                "logged_errors": logged,
                "tracebacks_logged": tracebacks,
            }
        )
        if self.fault is not None:
            self.errors.extend(self.fault.verdict(self))


def fault_error(error: BaseException) -> bool:
    """An error a caller may see while the line or the server is faulty: a MySQL error (lost connection, killed
    query, read-only server) or a connection error; never a ValueError, a TypeError or a wrong answer."""
    return isinstance(error, (pymysql.err.MySQLError, ConnectionError, OSError, asyncio.TimeoutError))


def client_error_kind(error: BaseException) -> str:
    code = error.args[0] if isinstance(error, pymysql.err.MySQLError) and error.args else None
    return f"{type(error).__name__}:{code}" if isinstance(code, int) else type(error).__name__


UNFINISHED = "SELECT COUNT(*) FROM action_jobs WHERE status IN ('pending', 'running')"


async def status_counts(queue: Any) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for status in ("pending", "running", "succeeded", "failed", "dead", "cancelled"):
        counts[status] = (await queue.list_jobs(space_ids=list(SPACES), status=status, limit=1)).total
    return counts


@contextlib.contextmanager
def soak_database(url: str | None) -> Iterator[str]:
    if url and parse_mysql_url(url).database:
        yield url
        return
    with contextlib.ExitStack() as stack:
        server = url or stack.enter_context(mysql_server_url())
        yield stack.enter_context(fresh_database(server, "pjm_soak"))


def run_soak(url: str, seconds: float, logs: Path | None = None, out: Any = sys.stdout, **options: Any) -> Soak:
    with contextlib.ExitStack() as stack:
        directory = logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="plitzi-soak-")))
        fault = options.get("fault")
        if fault is not None:
            stack.callback(fault.close)
            options.setdefault("package_url", fault.package_url(url))
        soak = Soak(url=url, seconds=seconds, logs=directory, out=out, **options)
        asyncio.run(soak.run())
        return soak


#: The deployment a fault run uses: 2 worker processes, a sweeping scheduler and a producer, nothing else moving.
FAULT_DEPLOYMENT: dict[str, Any] = {"workers": 2, "slots": 8, "schedulers": 1, "producers": 1, "operator": False}


def galera_soak(jobs: int) -> int:
    """The Galera-behind-HAProxy drill (tests/faults/test_galera_haproxy.py) with more jobs and three node losses."""
    from ..faults.test_galera_haproxy import drill_behind_haproxy
    from .galera import GaleraCluster, galera_missing_reason
    from .haproxy import haproxy_binary

    reason = galera_missing_reason() or (None if haproxy_binary() else "haproxy is missing (apt-get install haproxy)")
    if reason is not None:
        raise SystemExit(reason)
    with GaleraCluster() as cluster:
        try:
            asyncio.run(drill_behind_haproxy(cluster, jobs=jobs, rounds=3))
        except AssertionError as failure:
            print(f"[soak] FAILED galera behind haproxy: {failure}", flush=True)
            return 1
    print("[soak] OK galera behind haproxy", flush=True)
    return 0


def group_replication_soak(jobs: int) -> int:
    """The Group Replication drill (tests/faults/test_group_replication.py) with more jobs and three member losses."""
    from ..faults.test_group_replication import drill_behind_haproxy
    from .group_replication import GroupReplicationCluster, group_replication_missing_reason
    from .haproxy import haproxy_binary

    reason = group_replication_missing_reason() or (
        None if haproxy_binary() else "haproxy is missing (apt-get install haproxy)"
    )
    if reason is not None:
        raise SystemExit(reason)
    with GroupReplicationCluster() as cluster:
        try:
            asyncio.run(drill_behind_haproxy(cluster, jobs=jobs, rounds=3))
        except AssertionError as failure:
            print(f"[soak] FAILED group replication behind haproxy: {failure}", flush=True)
            return 1
    print("[soak] OK group replication behind haproxy", flush=True)
    return 0


def make_fault(name: str, url: str) -> Any:
    from . import injectors as faults

    if name == "proxy":
        return faults.ProxyCuts()
    if name == "kill":
        return faults.Kills(url)
    if name == "read-only":
        return faults.ReadOnly(url, windows=4)
    if name == "silent":
        return faults.SilentConnections()
    raise SystemExit(f"unknown fault {name!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the load runs (default 120)")
    parser.add_argument(
        "--url",
        default=os.environ.get("PLITZI_MYSQL_URL"),
        help="a database or server URL (default $PLITZI_MYSQL_URL, else a throwaway server)",
    )
    parser.add_argument("--logs", default=None, help="keep the processes' logs in this directory")
    parser.add_argument(
        "--fault",
        choices=("proxy", "kill", "read-only", "silent", "galera", "group-replication"),
        default=None,
        help="run 2 workers, a scheduler and a producer through a fault (tests/harness/injectors.py), "
        "on a throwaway server only; --seconds is then the ceiling. 'galera': the HAProxy "
        "drill of tests/faults/test_galera_haproxy.py with three node losses; "
        "'group-replication': tests/faults/test_group_replication.py's, three member losses",
    )
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs a --fault run produces (default 10000)")
    args = parser.parse_args(argv)
    logs = Path(args.logs) if args.logs else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    if args.fault == "galera":
        return galera_soak(args.jobs)
    if args.fault == "group-replication":
        return group_replication_soak(args.jobs)
    if args.fault is not None:
        if args.url:
            raise SystemExit(
                "--fault changes global settings and kills sessions: only on a throwaway server, so it takes no --url"
            )
        # Read-only windows against the default lease (30 s): a 3 s window must cost no second run.
        lease = {"lease_ms": 30_000} if args.fault == "read-only" else {}
        with LocalMysqlServer(load_tz=False) as server, fresh_database(server.url, "pjm_fault") as url:
            soak = run_soak(
                url,
                max(args.seconds, 600.0),
                logs,
                fault=make_fault(args.fault, url),
                target_jobs=args.jobs,
                **FAULT_DEPLOYMENT,
                **lease,
            )
        return 0 if not soak.errors else 1
    with soak_database(args.url) as url:
        soak = run_soak(url, args.seconds, logs)
    return 0 if not soak.errors else 1


if __name__ == "__main__":
    sys.exit(main())
