"""Worker processes SIGKILLed at random moments, several times, against the real server (the replica program).

Every job still finishes; each run a kill cut short shows as a `lost` attempt naming the killed worker; a job that
kills its worker every time ends `dead` after `max_attempts`; one that kills it only once then succeeds.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements
from plitzi_jobs_mysql.url import parse_mysql_url
from tests.harness.replica import ensure_ledger, read_ledger, spawn_replica

from ..conftest import sql

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

KILLS = 6
LEASE_MS = 1_500


def insert_jobs(url: str, jobs: list[tuple[str, dict[str, Any], int]]) -> None:
    """Enqueued with plain SQL in the package's own row shape, so the test process holds no pool."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in mysql_job_schema_statements():
                cur.execute(statement)
            now = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000)"
            cur.executemany(
                "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, "
                "max_attempts, status, run_at, attempts, created_at, updated_at, history) VALUES "
                f"(%s, 1, 'act', 'main', 'manual', %s, 0, %s, 'pending', 0, 0, {now}, {now}, '[]')",
                [(id_, json.dumps(data), attempts) for id_, data, attempts in jobs],
            )
    finally:
        conn.close()


class Fleet:
    """Replica processes by worker id; every one started is stopped at the end."""

    def __init__(self, url: str, logs: Path, **options: Any) -> None:
        self.url, self.logs, self.options = url, logs, options
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: list[str] = []
        self.serial = 0

    def spawn(self) -> str:
        self.serial += 1
        worker = f"replica-{self.serial}"
        self.procs[worker] = spawn_replica(
            self.url, log_path=self.logs / f"{worker}.log", worker_id=worker, **self.options
        )
        return worker

    def alive(self) -> list[str]:
        return [w for w, p in self.procs.items() if p.poll() is None]

    def kill(self, worker: str) -> None:
        proc = self.procs[worker]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        self.killed.append(worker)

    def stop_all(self) -> dict[str, int | None]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for worker, proc in self.procs.items():
            try:
                codes[worker] = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[worker] = proc.wait()
        return codes

    def log_text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


@pytest.fixture
def fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    ensure_ledger(database_url)
    started = Fleet(
        database_url,
        tmp_path,
        workers=4,
        lease_ms=LEASE_MS,
        poll_ms=100,
        produce=False,
        backoff_base_ms=100,
        backoff_max_ms=400,
        log_level="INFO",
    )
    try:
        yield started
    finally:
        started.stop_all()


def wait_until(condition: Any, what: str, within_s: float, tick: Any = None) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if tick is not None:
            tick()
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        time.sleep(0.05)


def test_sigkilled_workers_lose_no_job_and_a_job_that_kills_every_time_ends_dead(
    fleet: Fleet, database_url: str
) -> None:
    rng = random.Random(6)
    jobs = [(f"job-{n:03d}", {"sleep_ms": rng.randint(100, 700)}, 20) for n in range(80)]
    jobs.append(("crash-always", {"fail": "crash"}, 3))
    # Room for the test's kills (and crash-always's) to land on it too.
    jobs.append(("crash-once", {"fail": "crash", "fail_times": 1, "sleep_ms": 50}, 20))
    insert_jobs(database_url, jobs)
    for _ in range(3):
        fleet.spawn()

    def replace_the_dead() -> None:
        # The crash jobs SIGKILL their own worker: bring the fleet back to three.
        while len(fleet.alive()) < 3:
            fleet.spawn()

    def finished() -> bool:
        rows = sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE status IN ('pending', 'running')")
        return rows[0][0] == 0

    started = time.monotonic()
    for _ in range(KILLS):
        # A random moment, while handlers are mid-run.
        wait_until(
            lambda: bool(sql(database_url, "SELECT 1 FROM ledger WHERE outcome = 'running' LIMIT 1")),
            "a run in progress",
            30,
            replace_the_dead,
        )
        time.sleep(rng.uniform(0.05, 0.6))
        victims = fleet.alive()
        if victims:
            fleet.kill(rng.choice(victims))
        replace_the_dead()
    wait_until(finished, "every job finishing", 90, replace_the_dead)
    elapsed = time.monotonic() - started
    codes = fleet.stop_all()

    rows = {
        r[0].decode(): (r[1], r[2], json.loads(r[3]), r[4])
        for r in sql(database_url, "SELECT id, status, attempts, history, error FROM action_jobs")
    }
    ledger = read_ledger(database_url)
    runs = collections.defaultdict(list)
    for row in ledger:
        runs[row.job_id].append(row)

    # The job that kills its worker every time: dead after max_attempts, each attempt lost.
    status, attempts, history, error = rows.pop("crash-always")
    assert status == "dead" and attempts == 3, (status, attempts, history)
    assert [h["status"] for h in history] == ["lost", "lost", "lost"] and error
    assert len(runs["crash-always"]) == 3
    # The one that kills it once: a lost attempt (more if other kills landed on it), then a success.
    status, attempts, history, _ = rows.pop("crash-once")
    statuses = [h["status"] for h in history]
    assert status == "succeeded" and statuses[-1] == "succeeded" and set(statuses[:-1]) == {"lost"}, statuses

    # Every other job finished, whatever was killed under it.
    assert {v[0] for v in rows.values()} == {"succeeded"}, collections.Counter(v[0] for v in rows.values())
    # Each run a kill cut short (a ledger row left 'running') is exactly one `lost` attempt naming its worker.
    cut_short = collections.Counter((r.job_id, r.worker_id) for r in ledger if r.outcome == "running")
    lost = collections.Counter(
        (job_id, h["worker_id"])
        for job_id, (_, _, history, _) in [*rows.items()]
        for h in history
        if h["status"] == "lost"
    )
    lost_crash = {k: v for k, v in cut_short.items() if k[0].startswith("crash")}
    cut_short_here = {k: v for k, v in cut_short.items() if k not in lost_crash}
    assert {k: lost[k] for k in cut_short_here} == cut_short_here
    # A kill can also land between a claim and the handler's first ledger write (a `lost` attempt with no run
    # behind it), or between the handler's end and its settle (batched settles wait a few ms): the run finished,
    # the store never heard, and the job runs again — at-least-once, as a SIGKILL allows nothing better. Only
    # then may a lost attempt stand without a run cut short.
    started_runs = {(r.job_id, r.worker_id) for r in ledger}
    ended_unsettled = {
        (r.job_id, r.worker_id) for r in ledger if r.outcome == "succeeded" and (r.job_id, r.worker_id) in lost
    }
    assert all(k not in started_runs or k in ended_unsettled for k in lost if k not in cut_short_here), (
        lost,
        cut_short_here,
    )
    sigkilled = {w for w, code in codes.items() if code == -signal.SIGKILL}  # by the test or by a crash job
    assert set(fleet.killed) <= sigkilled
    assert {w for _, w in lost} <= sigkilled, (lost, sigkilled)
    # No two runs of one job overlapped, and every success ran exactly once to the end.
    for job_id, job_runs in runs.items():
        ordered = sorted(job_runs, key=lambda r: r.started_at)
        for before, after in itertools.pairwise(ordered):
            assert before.ended_at is None or before.ended_at <= after.started_at, (job_id, before, after)
        unsettled = sum(1 for r in ordered if (r.job_id, r.worker_id) in ended_unsettled)
        expected = 0 if job_id == "crash-always" else 1 + unsettled
        assert [r.outcome for r in ordered].count("succeeded") == expected, (job_id, ordered)
    # No deadlock or lock wait ever reached a caller.
    logs = fleet.log_text()
    # The codes as the driver words them ("(1213, 'Deadlock ...')"): the worker's log lines name job and run ids,
    # in which bare digits like 1213 may turn up.
    for marker in ("(1213,", "(1205,", "Deadlock", "Lock wait"):
        assert marker not in logs, marker
    # The survivors closed cleanly on SIGTERM.
    assert {code for w, code in codes.items() if w not in sigkilled} == {0}, codes
    print(
        f"\nkilled workers: {len(sigkilled)} SIGKILLs ({KILLS} by the test), {sum(lost.values())} lost attempts "
        f"on ordinary jobs ({len(ended_unsettled)} after the run ended, before its settle), "
        f"{len(fleet.procs)} processes, all {len(jobs)} jobs finished in {elapsed:.1f} s"
    )
