"""Soak: a deployment in miniature, run for a while, then checked row by row.

    python -m tests.soak --seconds 120 [--url mysql://root@127.0.0.1:3306/soak]

4 worker processes × 4 slots (single-flight through the kv), 3 scheduler processes sweeping the same schedules,
2 producers and an operator randomly cancelling and requeueing (tasks of this process), against a real server
(--url, else $PLITZI_MYSQL_URL, else a throwaway local one). A progress line every few seconds. Then a checker
reads the tables and the ledger the handlers wrote: every job ended in the state the rules give it, no job ran
twice at once, none vanished, every schedule fired once a minute without a gap, no deadlock or lock-wait error
reached a caller (the processes' logs and this one's), and each process's memory stayed flat. Exit 0 when all
hold, 1 with the failures listed.
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

from plitzi_jobs_mysql import JobInput, create_mysql_job_queue
from plitzi_jobs_mysql.testing import fresh_database, mysql_server_url
from plitzi_jobs_mysql.url import parse_mysql_url
from tests.replica import ensure_ledger, read_ledger, spawn_replica

WORKERS, SLOTS, SCHEDULERS, PRODUCERS = 4, 4, 3, 2
SPACES = (1, 2, 3)
LEASE_MS = 4_000
CONFLICT_MARKERS = ("1213", "1205", "Deadlock", "Lock wait", "deadlock", "lock wait")
#: Memory may grow this much between the first and the last samples of a process and still count as flat.
RSS_SLACK_KB = 40 * 1024
RSS_SLACK_RATIO = 1.35

# What a job's input asks its handler to do, and the status the rules then give the job.
KINDS = [
    ({}, "succeeded", 60),
    ({"fail": "error", "fail_times": 1}, "succeeded", 12),  # a failed attempt, retried with backoff, then fine
    ({"fail": "retry", "fail_times": 1, "retry_delay_ms": 200}, "succeeded", 8),  # handed back, attempt refunded
    ({"fail": "permanent"}, "dead", 5),
    ({"fail": "error"}, "dead", 3),  # fails every time: dead after max_attempts
]


@dataclass
class Soak:
    url: str
    seconds: float
    logs: Path
    out: Any = sys.stdout
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    expected: dict[str, str] = field(default_factory=dict)
    specs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: set[str] = field(default_factory=set)
    requeued: collections.Counter[str] = field(default_factory=collections.Counter)
    errors: list[str] = field(default_factory=list)
    rss: dict[str, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    report: dict[str, Any] = field(default_factory=dict)

    def say(self, line: str) -> None:
        print(f"[soak {time.strftime('%H:%M:%S')}] {line}", file=self.out, flush=True)

    # -- the processes ----------------------------------------------------------------------------------------

    def start_processes(self) -> None:
        common = {"log_level": "INFO", "backoff_base_ms": 200, "backoff_max_ms": 1_000, "max_attempts": 3}
        for n in range(WORKERS):
            name = f"worker-{n + 1}"
            self.procs[name] = spawn_replica(
                self.url, log_path=self.logs / f"{name}.log", worker_id=name, workers=SLOTS, produce=False,
                kv=True, lease_ms=LEASE_MS, poll_ms=200, **common,
            )
        for n in range(SCHEDULERS):
            name = f"scheduler-{n + 1}"
            self.procs[name] = spawn_replica(
                self.url, log_path=self.logs / f"{name}.log", worker_id=name, workers=0, produce=True,
                schedule_poll_ms=500, spaces=list(SPACES), schedule={"tick": "* * * * *", "tock": "*/2 * * * *"},
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
        while time.monotonic() < until:
            batch = []
            for _ in range(rng.randint(1, 6)):
                spec, expect, _ = rng.choices(KINDS, weights)[0]
                job_id = f"p{producer}-{next(counter):06d}"
                data = {**spec, "sleep_ms": rng.choice([0, 10, 50, 200, 600])}
                batch.append(JobInput(id=job_id, space_id=rng.choice(SPACES), action_id=f"act-{rng.randint(1, 5)}",
                                      environment="main", trigger="manual", input=data, due_at=0,
                                      max_attempts=3, key=f"k{rng.randint(1, 3)}"))
                self.expected[job_id] = expect
                self.specs[job_id] = spec
            try:
                answers = await queue.enqueue_many(batch)
                if answers != [True] * len(batch):
                    self.errors.append(f"producer {producer}: a fresh id was not created: {answers}")
            except Exception as error:
                self.errors.append(f"producer {producer}: {error!r}")
            await asyncio.sleep(rng.uniform(0.05, 0.2))

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
        while time.monotonic() < until:
            self.sample_rss()
            counts = await status_counts(queue)
            rss = " ".join(f"{n.split('-')[0][0]}{n.split('-')[1]}={v[-1] // 1024}M" for n, v in self.rss.items()
                           if v)
            self.say(f"t={time.monotonic() - started:5.0f}s jobs={sum(counts.values())} {dict(counts)} rss {rss}")
            await asyncio.sleep(min(5.0, max(0.5, until - time.monotonic())))

    async def run(self) -> bool:
        ensure_ledger(self.url)
        kwargs = parse_mysql_url(self.url).aiomysql_kwargs()
        pool = await aiomysql.create_pool(**kwargs, minsize=1, maxsize=8, autocommit=True)
        try:
            queue = create_mysql_job_queue(pool)
            await queue.now()  # the tables, before the processes race to make them
            self.start_processes()
            self.say(f"{WORKERS} workers x {SLOTS} slots, {SCHEDULERS} schedulers, {PRODUCERS} producers, operator; "
                     f"{self.seconds:.0f} s against {parse_mysql_url(self.url)}")
            started = time.monotonic()
            until = started + self.seconds
            counter = itertools.count()
            await asyncio.gather(
                *(self.produce(queue, p, until, counter) for p in range(PRODUCERS)),
                self.operate(queue, until), self.progress(queue, until),
            )
            self.say("load stopped; waiting for the queue to drain")
            drain_deadline = time.monotonic() + 120
            while True:
                self.sample_rss()
                counts = await status_counts(queue)
                if counts.get("pending", 0) + counts.get("running", 0) == 0:
                    break
                if time.monotonic() > drain_deadline:
                    self.errors.append(f"the queue did not drain within 120 s: {dict(counts)}")
                    break
                await asyncio.sleep(0.5)
            self.report["drain_s"] = round(time.monotonic() - until, 1)
            codes = self.stop_processes()
            bad = {n: c for n, c in codes.items() if c != 0}
            if bad:
                self.errors.append(f"processes did not close cleanly on SIGTERM: {bad}")
            self.check()
        finally:
            self.stop_processes()
            pool.close()
            await pool.wait_closed()
        for line in self.errors:
            self.say("FAIL " + line)
        self.say(("OK " if not self.errors else "FAILED ") + json.dumps(self.report, default=str))
        return not self.errors

    # -- the checker ------------------------------------------------------------------------------------------

    def check(self) -> None:
        conn = pymysql.connect(**parse_mysql_url(self.url).pymysql_kwargs(), autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT id, status, attempts, max_attempts, history, `trigger`, space_id, action_id, "
                            "due_at, missed FROM action_jobs")
                rows = cur.fetchall()
        finally:
            conn.close()
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
            allowed = {expect} | ({"cancelled"} if job_id in self.cancelled else set())
            if status not in allowed:
                wrong.append((job_id, status, sorted(allowed), [h["status"] for h in json.loads(row[4])]))
            history = json.loads(row[4])
            if status == "succeeded" and (not history or history[-1]["status"] != "succeeded"):
                wrong.append((job_id, status, "history does not end in success", history))
            if status == "dead" and job_id not in self.requeued:
                want = 1 if self.specs[job_id].get("fail") == "permanent" else 3
                if len(history) != want:
                    wrong.append((job_id, status, f"{len(history)} attempts, wanted {want}", history))
        if wrong:
            self.errors.append(f"{len(wrong)} jobs ended in a state the rules do not give them, e.g. {wrong[:3]}")
        # No lost attempts without a kill: nothing was killed in the soak.
        lost = [k for k, r in jobs.items() if any(h["status"] == "lost" for h in json.loads(r[4]))]
        if lost:
            self.errors.append(f"{len(lost)} jobs have lost attempts though no process died, e.g. {lost[:5]}")
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
        tracebacks = sum(log.read_text(errors="replace").count("Traceback") for log in self.logs.glob("*.log"))
        if tracebacks:
            self.errors.append(f"{tracebacks} tracebacks in the processes' logs ({self.logs})")
        # Memory stayed flat: the last samples against the first ones after start-up.
        growth = {}
        for name, samples in self.rss.items():
            if len(samples) < 4:
                continue
            third = max(1, len(samples) // 3)
            early, late = statistics.median(samples[1:third + 1]), statistics.median(samples[-third:])
            growth[name] = (int(early) // 1024, int(late) // 1024)
            if late > early * RSS_SLACK_RATIO and late - early > RSS_SLACK_KB:
                self.errors.append(f"{name}'s memory grew from {early // 1024:.0f} MB to {late // 1024:.0f} MB")
        self.report.update({
            "jobs": len(self.expected), "outcomes": dict(outcomes), "runs": len(ledger),
            "cancel_accepted": len(self.cancelled), "requeued": sum(self.requeued.values()),
            "schedule_fires": sum(len(v) for v in fires.values()), "rss_mb_first_last": growth,
        })

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


def run_soak(url: str, seconds: float, logs: Path | None = None, out: Any = sys.stdout) -> Soak:
    with contextlib.ExitStack() as stack:
        directory = logs or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="plitzi-soak-")))
        soak = Soak(url=url, seconds=seconds, logs=directory, out=out)
        asyncio.run(soak.run())
        return soak


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the load runs (default 120)")
    parser.add_argument("--url", default=os.environ.get("PLITZI_MYSQL_URL"),
                        help="a database or server URL (default $PLITZI_MYSQL_URL, else a throwaway server)")
    parser.add_argument("--logs", default=None, help="keep the processes' logs in this directory")
    args = parser.parse_args(argv)
    logs = Path(args.logs) if args.logs else None
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
    with soak_database(args.url) as url:
        soak = run_soak(url, args.seconds, logs)
    return 0 if not soak.errors else 1


if __name__ == "__main__":
    sys.exit(main())
