"""Fleet-wide limits held by the store across worker processes (the replica program), while some are SIGKILLed.

4 replicas x 8 handlers drain a limited action beside an unlimited one. The ledger (one row per run, on the
server's clock) shows the limited action's running count never above its concurrency at any instant (a killed
run counted as running until just after its kill), its claims (each attempt's `started_at`, the store's claim
instant) never more than `rate` in any window, every job succeeded once, and the unlimited jobs not held back;
the concurrency and the rate hold the same way while replicas are SIGKILLed and while the fault proxy cuts
connections.
Longer runs: PLITZI_LIMITS_JOBS=5000 (issue 21.3's size).
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pymysql
import pytest

from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements
from plitzi_jobs_mysql.mysql.session import as_text
from plitzi_jobs_mysql.url import parse_mysql_url
from tests.harness.injectors import ProxyCuts
from tests.harness.replica import LedgerRow, ensure_ledger, read_ledger

from ..conftest import assert_totals_exact, sql
from .test_killed_workers import Fleet, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LEASE_MS = 1_500
JOBS = int(os.environ.get("PLITZI_LIMITS_JOBS", "240"))
CONCURRENCY = 3
RATED = max(40, JOBS // 6)  # jobs of the action limited to 10 starts per 500 ms
#: (concurrency, handlers per replica): a limit of 3 binds from the first claim; one of 36 for 4 x 12 handlers starts
#: with room to spare, so claims reserve slots for a while (mysql/limit_reserved.py), and binds once they run.
SIZES = {"near": (CONCURRENCY, 8), "roomy": (36, 12)}


def insert(url: str, action_id: str, count: int, sleep_ms: int) -> None:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    now = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6)) DIV 1000)"
    try:
        with conn.cursor() as cur:
            for statement in mysql_job_schema_statements():
                cur.execute(statement)
            cur.executemany(
                "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, "
                "max_attempts, status, run_at, attempts, created_at, updated_at, history) VALUES "
                f"(%s, 1, %s, 'main', 'manual', %s, 0, 20, 'pending', %s, 0, {now}, {now}, '[]')",
                [(f"{action_id}-{n:05d}", action_id, json.dumps({"sleep_ms": sleep_ms}), n) for n in range(count)],
            )
    finally:
        conn.close()


#: Every rate entry the limit writes, as the server wrote it (the instant of the start it records, by the server's
#: NOW, which the limit judges its windows on): a test-only log kept by triggers on the kv table.
RATE_LOG = "rate_entries_written"


def insert_rated(url: str, count: int) -> None:
    """`count` jobs of the action `rated`, and the log of the rate entries their starts will write."""
    insert(url, "rated", count, sleep_ms=1)
    statements = [f"CREATE TABLE IF NOT EXISTS {RATE_LOG} (n BIGINT AUTO_INCREMENT PRIMARY KEY, v LONGTEXT)"]
    for event, row in (("INSERT", "ins"), ("UPDATE", "upd")):
        statements.append(
            f"CREATE TRIGGER {RATE_LOG}_{row} AFTER {event} ON action_kv FOR EACH ROW INSERT INTO {RATE_LOG} (v) "
            "SELECT NEW.v FROM DUAL WHERE LEFT(NEW.k, 1) = X'FF' AND SUBSTRING(NEW.k, 18, 1) = 'r'"
        )
    for statement in statements:
        sql(url, statement)


def server_now(url: str) -> datetime:
    value: datetime = sql(url, "SELECT UTC_TIMESTAMP(6)")[0][0]
    return value


def most_running(runs: list[LedgerRow], killed_at: dict[str, datetime]) -> int:
    """The most runs open at one instant; an end before a start at the same instant counts first."""
    edges: list[tuple[datetime, int]] = []
    for run in runs:
        end = run.ended_at or killed_at.get(run.worker_id)
        assert end is not None, f"run {run} neither ended nor was killed"
        edges += [(run.started_at, 1), (end, -1)]
    most = running = 0
    for _at, step in sorted(edges):
        running += step
        most = max(most, running)
    return most


def most_in_window(instants: list[int], window_ms: int) -> int:
    instants = sorted(instants)
    most, first = 0, 0
    for last, at in enumerate(instants):
        while at - instants[first] >= window_ms:
            first += 1
        most = max(most, last - first + 1)
    return most


def start_fleet(database_url: str, tmp_path: Path, concurrency: int = CONCURRENCY, workers: int = 8) -> Fleet:
    ensure_ledger(database_url)
    return Fleet(database_url, tmp_path, workers=workers, lease_ms=LEASE_MS, poll_ms=100, produce=False,
                 backoff_base_ms=100, backoff_max_ms=400, log_level="INFO",
                 limit=[f"limited={concurrency}", "rated=,10,500"])  # fmt: skip


@pytest.fixture
def fleet(database_url: str, tmp_path: Path) -> Iterator[Fleet]:
    started = start_fleet(database_url, tmp_path)
    try:
        yield started
    finally:
        started.stop_all()


def finished(url: str) -> bool:
    return sql(url, "SELECT COUNT(*) FROM action_jobs WHERE status IN ('pending', 'running')")[0][0] == 0


@pytest.mark.parametrize("size", SIZES)
def test_concurrency_holds_across_processes_while_workers_are_killed(
    size: str, database_url: str, tmp_path: Path
) -> None:
    concurrency, workers = SIZES[size]
    fleet = start_fleet(database_url, tmp_path, concurrency, workers)
    try:
        _drain_with_kills(fleet, database_url, concurrency)
    finally:
        fleet.stop_all()


def _drain_with_kills(fleet: Fleet, database_url: str, concurrency: int) -> None:
    rng = random.Random(21)
    # The roomy limit's runs are longer, so that 36 at once is within what this machine's fleet can claim.
    jobs, sleep_ms = (JOBS, 15) if concurrency == CONCURRENCY else (JOBS * 3, 150)
    # The rated jobs run beside the limit of 3 only: with them beside the roomy 36, the fleet peaked below 36 in
    # some runs of this drill (34 in 3 of 4 runs on 2026-12-04; in 1 of 4 once claims meeting a rate's jobs kept
    # the roomy group on its reservations), and this check must know the limit bound.
    rated = RATED if concurrency == CONCURRENCY else 0
    insert(database_url, "limited", jobs, sleep_ms=sleep_ms)
    insert(database_url, "free", JOBS, sleep_ms=2)
    insert_rated(database_url, rated)
    for _ in range(4):
        fleet.spawn()
    killed_at: dict[str, datetime] = {}
    started = time.monotonic()
    for _ in range(2):
        wait_until(lambda: bool(sql(database_url, "SELECT 1 FROM ledger WHERE outcome = 'running' AND "
                                    "action_id = 'limited' LIMIT 1")), "a limited run in progress", 30)  # fmt: skip
        time.sleep(rng.uniform(0.05, 0.3))
        victim = rng.choice(fleet.alive())
        fleet.kill(victim)
        killed_at[victim] = server_now(database_url)
        fleet.spawn()
    wait_until(lambda: finished(database_url), "every job finishing", 180)
    elapsed = time.monotonic() - started
    fleet.stop_all()

    ledger = read_ledger(database_url)
    limited = [r for r in ledger if r.action_id == "limited"]
    assert most_running(limited, killed_at) <= concurrency
    assert most_running(limited, killed_at) == concurrency, "the limit was reached (it binds in this run)"
    statuses = Counter(r[0] for r in sql(database_url, "SELECT status FROM action_jobs"))
    assert statuses == {"succeeded": jobs + JOBS + rated}, statuses
    assert_totals_exact(database_url)
    if rated:
        assert_rate_held(database_url, rated)
    # Nothing run twice, but for a kill between a run's end and its settle (at-least-once): then the earlier run
    # was a killed worker's and the job's history holds the `lost` attempt that followed.
    done = Counter(r.job_id for r in ledger if r.outcome != "running")
    assert len(done) == jobs + JOBS + rated
    histories = {as_text(i): json.loads(h) for i, h in sql(database_url, "SELECT id, history FROM action_jobs")}
    for job_id in [job_id for job_id, runs in done.items() if runs > 1]:
        earlier = [r for r in ledger if r.job_id == job_id and r.outcome != "running"][:-1]
        assert {r.worker_id for r in earlier} <= set(killed_at), (job_id, earlier)
        assert "lost" in [h["status"] for h in histories[job_id]], (job_id, histories[job_id])
    free_done = max(r.ended_at for r in ledger if r.action_id == "free" and r.ended_at)
    limited_done = max(r.ended_at for r in limited if r.ended_at)
    assert free_done < limited_done, "the unlimited action finished first: it was not held behind the limited one"
    print(f"\n{jobs + JOBS} jobs in {elapsed:.1f} s, {len(killed_at)} kills, most limited running at once: "
          f"{most_running(limited, killed_at)} of {concurrency}")  # fmt: skip


def test_rate_holds_across_processes(fleet: Fleet, database_url: str) -> None:
    insert_rated(database_url, RATED)
    insert(database_url, "free", RATED, sleep_ms=1)
    for _ in range(4):
        fleet.spawn()
    wait_until(lambda: finished(database_url), "every job finishing", 120)
    fleet.stop_all()
    assert_rate_held(database_url, RATED)


def assert_rate_held(database_url: str, count: int) -> None:
    """Every start of the `rated` jobs: never more than 10 in any 500 ms, and no faster than the rate allows overall.

    Judged on the rate entries as the server wrote them (RATE_LOG), each the server's instant of a start, which is
    what the limit's windows are made of; a job's own `started_at` is its claimer's earlier reading of that clock,
    older by however long the claim's statements then took (up to a proxy stall, 1.5 s). Each start writes one
    entry, lost races included, so the log holds at least one per attempt; with the limit off it holds none."""
    claims = [
        int(attempt["started_at"])
        for (history,) in sql(database_url, "SELECT history FROM action_jobs WHERE action_id = 'rated'")
        for attempt in json.loads(history)
    ]
    assert len(claims) >= count
    starts = [int(v) for (v,) in sql(database_url, f"SELECT v FROM {RATE_LOG}")]
    assert len(starts) >= len(claims), f"{len(starts)} rate entries written for {len(claims)} starts"
    assert most_in_window(starts, 500) <= 10
    span = max(claims) - min(claims)
    assert span >= (count // 10 - 1) * 500 - 50, f"{count} starts at 10 per 500 ms took only {span} ms"


@pytest.mark.parametrize("size", SIZES)
def test_concurrency_holds_while_the_proxy_cuts_connections(size: str, database_url: str, tmp_path: Path) -> None:
    """The replicas reach the server through the fault proxy, which cuts a connection every ~200 ms (often after a
    statement went out and before its reply: a slot taken, or given back, with nobody told). The ledger goes
    through a clean line."""
    fault = ProxyCuts(every_s=0.2)
    package = fault.package_url(database_url)
    assert fault.proxy is not None
    proxy = fault.proxy
    ensure_ledger(database_url)
    concurrency, workers = SIZES[size]
    count = max(60, JOBS // 2)
    # The roomy limit's runs are longer and more (36 at once within the fleet's reach, for as long as the cuts need).
    limited_count, sleep_ms = (count, 15) if concurrency == CONCURRENCY else (5 * count, 150)
    insert(database_url, "limited", limited_count, sleep_ms=sleep_ms)
    insert(database_url, "free", count, sleep_ms=2)
    insert_rated(database_url, RATED)
    fleet = Fleet(package, tmp_path, ledger_url=database_url, workers=workers, lease_ms=LEASE_MS, poll_ms=100,
                  produce=False, backoff_base_ms=100, backoff_max_ms=400, log_level="INFO",
                  limit=[f"limited={concurrency}", "rated=,10,500"])  # fmt: skip
    stop = threading.Event()

    def cutting() -> None:
        rng = random.Random(5)
        while not stop.wait(rng.uniform(0.1, 0.3)):
            proxy.cut()

    cutter = threading.Thread(target=cutting, daemon=True)
    cutter.start()
    try:
        for _ in range(4):
            fleet.spawn()
        wait_until(lambda: finished(database_url), "every job finishing", 180)
    finally:
        stop.set()
        cutter.join()
        fleet.stop_all()
        fault.close()
    ledger = read_ledger(database_url)
    limited = [r for r in ledger if r.action_id == "limited"]
    assert sum(proxy.injected.values()) >= 10, proxy.injected
    assert most_running(limited, {}) <= concurrency
    statuses = Counter(r[0] for r in sql(database_url, "SELECT status FROM action_jobs"))
    assert statuses == {"succeeded": limited_count + count + RATED}, statuses
    assert_totals_exact(database_url)
    assert_rate_held(database_url, RATED)
    done = Counter(r.job_id for r in ledger if r.outcome != "running")
    assert len(done) == limited_count + count + RATED
    histories = {as_text(i): json.loads(h) for i, h in sql(database_url, "SELECT id, history FROM action_jobs")}
    for job_id in [job_id for job_id, runs in done.items() if runs > 1]:
        # A second run only after a settle the cuts kept from landing for a whole lease: a `lost` attempt.
        assert "lost" in [h["status"] for h in histories[job_id]], (job_id, histories[job_id])
    print(f"\nproxy cuts {dict(proxy.injected)}: most limited running at once {most_running(limited, {})} of "
          f"{concurrency}, {sum(runs > 1 for runs in done.values())} job(s) run again after a lost settle")  # fmt: skip
