"""Real OS processes sharing one MySQL database: each replica (`tests.harness.replica`) opens its own
pool, and the ledger its handler writes says what ran where and when, on the server's clock.

Nothing here sleeps for a fixed time where a condition can be awaited: every wait polls the tables (or a log) with
a deadline, generous for a busy two-core machine.
"""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiomysql
import pytest

from plitzi_jobs_mysql import ScheduleInput, create_mysql_job_queue, schedule_job_id
from plitzi_jobs_mysql.url import parse_mysql_url
from tests.harness.replica import LedgerRow, read_ledger, spawn_replica

from ..conftest import assert_totals_exact, sql
from ..support import job, wait_for

pytestmark = pytest.mark.slow

MINUTE_MS = 60_000
SPACE = 1


# --------------------------------------------------------------------------------------------------------
# Helpers


class Replicas:
    """Starts replica processes, each logging to its own file; whatever is still running at the end is killed."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url = url
        self.directory = directory
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, **options: Any) -> subprocess.Popen[bytes]:
        process = spawn_replica(self.url, log_path=self.log_path(name), worker_id=name, **options)
        self.processes[name] = process
        return process

    def log_path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def log(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def logs(self) -> str:
        return "\n".join(f"--- {name}\n{self.log(name)[-3000:]}" for name in self.processes)

    async def wait_ready(self, *names: str, within: float = 60) -> None:
        await wait_for(
            lambda: all(" ready (pid " in self.log(name) for name in names),
            within,
            "replicas ready",
            every=0.1,
            detail=self.logs,
        )

    async def wait_exit(self, name: str, within: float = 60) -> int:
        process = self.processes[name]
        await wait_for(lambda: process.poll() is not None, within, f"{name} to exit", every=0.1, detail=self.logs)
        code = process.returncode
        assert code is not None
        return code

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            process.wait(timeout=30)


@pytest.fixture
def replicas(database_url: str, tmp_path: Path) -> Iterator[Replicas]:
    group = Replicas(database_url, tmp_path)
    try:
        yield group
    finally:
        group.kill_all()


@pytest.fixture
async def queue(database_url: str) -> AsyncIterator[Any]:
    """The test's own view of the queue (its own pool); its first use creates the tables."""
    pool = await aiomysql.create_pool(
        **parse_mysql_url(database_url).aiomysql_kwargs(), minsize=1, maxsize=4, autocommit=True
    )
    try:
        q = create_mysql_job_queue(pool)
        await q.list_schedules([SPACE])  # creates the tables before any replica races to
        yield q
    finally:
        pool.close()
        await pool.wait_closed()


def status_counts(url: str) -> dict[str, int]:
    return {str(s): int(n) for s, n in sql(url, "SELECT status, COUNT(*) FROM action_jobs GROUP BY status")}


def server_now(url: str) -> datetime:
    value = sql(url, "SELECT UTC_TIMESTAMP(6)")[0][0]
    assert isinstance(value, datetime)
    return value


async def now_ms(queue: Any) -> int:
    return int((await queue.now()).timestamp() * 1000)


def runs_by_job(ledger: list[LedgerRow]) -> dict[str, list[LedgerRow]]:
    runs: dict[str, list[LedgerRow]] = defaultdict(list)
    for row in ledger:
        runs[row.job_id].append(row)
    return runs


def assert_no_overlap(ledger: list[LedgerRow], killed_at: datetime) -> None:
    """No two runs of one job were ever in progress at once (a run killed mid-way ends at `killed_at`)."""
    for job_id, runs in runs_by_job(ledger).items():
        ordered = sorted(runs, key=lambda r: r.started_at)
        for before, after in itertools.pairwise(ordered):
            end = before.ended_at or killed_at
            assert end <= after.started_at, f"two runs of {job_id} overlap: {before} and {after}"


# --------------------------------------------------------------------------------------------------------
# The producer


async def test_five_schedulers_produce_exactly_one_job_per_fire(database_url: str, queue: Any, replicas: Replicas):
    names = [f"scheduler-{i}" for i in range(5)]
    for name in names:
        replicas.start(name, workers=0, produce=True, schedule_poll_ms=150)
    await replicas.wait_ready(*names)

    actions = [f"digest-{i:03d}" for i in range(150)]
    rounds = 3
    started = await now_ms(queue)
    base = started // MINUTE_MS * MINUTE_MS
    # Each round puts every schedule due at a past minute of its own: disabled first, so that enabling it again
    # takes the new instant (a schedule saved unchanged keeps its promised fire).
    fires = [base - (rounds - r) * MINUTE_MS for r in range(rounds)]
    for fire_at in fires:
        for enabled in (False, True):
            await queue.put_schedules(
                space_id=SPACE,
                schedules=[
                    ScheduleInput(
                        space_id=SPACE,
                        action_id=action,
                        cron="* * * * *",
                        environment="main",
                        enabled=enabled,
                        next_run_at=fire_at,
                        max_attempts=3,
                    )
                    for action in actions
                ],
            )

        async def swept(fire_at: int = fire_at) -> bool:
            schedules = await queue.list_schedules([SPACE])
            return all(s.last_fire_at == fire_at and s.next_run_at > fire_at for s in schedules)

        await wait_for(swept, 60, f"the fire at {fire_at} to be swept", every=0.1, detail=replicas.logs)

    for name in names:
        replicas.processes[name].send_signal(signal.SIGTERM)
    for name in names:
        assert await replicas.wait_exit(name) == 0, replicas.logs()
    finished = await now_ms(queue)

    rows = sql(database_url, "SELECT id, action_id, due_at, `trigger`, status FROM action_jobs")
    jobs = [(bytes(r[0]).decode(), bytes(r[1]).decode(), int(r[2])) for r in rows]
    assert all(bytes(r[3]) == b"schedule" and r[4] == "pending" for r in rows)
    per_fire = Counter((action, due_at) for _, action, due_at in jobs)
    assert all(count == 1 for count in per_fire.values())
    assert all(job_id == schedule_job_id(SPACE, action, due_at) for job_id, action, due_at in jobs)
    for action in actions:
        due = {due_at for a, due_at in per_fire if a == action}
        assert set(fires) <= due, f"{action} is missing fires: {sorted(set(fires) - due)}"
        # Any other fire is a real minute this test happened to run through, and still once.
        for extra in due - set(fires):
            assert extra % MINUTE_MS == 0 and base <= extra <= finished, (action, extra)

    totals = Counter[str]()
    for name in names:
        found = re.findall(r"fires: enqueued=(\d+) duplicates=(\d+)", replicas.log(name))
        assert len(found) == 1, replicas.log(name)
        totals["enqueued"] += int(found[0][0])
        totals["duplicates"] += int(found[0][1])
    # Every job was created by exactly one enqueue, and the schedulers really did race for them.
    assert totals["enqueued"] == len(jobs)
    assert totals["duplicates"] > 0, "the five schedulers never reached the same fire: nothing was contended"


# --------------------------------------------------------------------------------------------------------
# The consumer


async def test_three_workers_drain_two_thousand_jobs_each_exactly_once(
    database_url: str, queue: Any, replicas: Replicas
):
    names = ["worker-a", "worker-b", "worker-c"]
    for name in names:
        replicas.start(name, workers=8, produce=False, poll_ms=200)
    await replicas.wait_ready(*names)

    due = await now_ms(queue)
    total = 2_000
    created = await queue.enqueue_many(
        [job(f"bulk-{i:04d}", space_id=SPACE, action_id="test", due_at=due) for i in range(total)]
    )
    assert all(created)

    await wait_for(
        lambda: status_counts(database_url).get("succeeded", 0) == total,
        120,
        "the drain",
        every=0.1,
        detail=replicas.logs,
    )
    for name in names:
        replicas.processes[name].send_signal(signal.SIGTERM)
    for name in names:
        assert await replicas.wait_exit(name) == 0, replicas.logs()

    assert status_counts(database_url) == {"succeeded": total}
    assert_totals_exact(database_url)
    ledger = read_ledger(database_url)
    assert len(ledger) == total
    assert Counter(row.job_id for row in ledger).most_common(1)[0][1] == 1, "a job ran twice"
    assert {row.job_id for row in ledger} == {f"bulk-{i:04d}" for i in range(total)}
    assert {row.outcome for row in ledger} == {"succeeded"}
    assert {row.attempt for row in ledger} == {1}
    by_worker = Counter(row.worker_id for row in ledger)
    assert set(by_worker) == set(names), f"every worker should have taken a share: {by_worker}"
    attempts = sql(database_url, "SELECT MIN(attempts), MAX(attempts) FROM action_jobs")[0]
    assert tuple(attempts) == (1, 1)


async def test_a_worker_killed_mid_job_loses_the_attempt_and_another_takes_the_job_over(
    database_url: str, queue: Any, replicas: Replicas
):
    lease_ms = 1_500
    for name in ("worker-a", "worker-b"):
        replicas.start(name, workers=3, produce=False, poll_ms=100, lease_ms=lease_ms, kv=True)
    await replicas.wait_ready("worker-a", "worker-b")

    due = await now_ms(queue)
    ids = [f"long-{i}" for i in range(4)]
    await queue.enqueue_many(
        [job(job_id, space_id=SPACE, action_id="test", due_at=due, input={"sleep_ms": 3_000}) for job_id in ids]
    )

    def a_victim() -> list[LedgerRow]:
        return [r for r in read_ledger(database_url) if r.outcome == "running"]

    running = await wait_for(a_victim, 60, "a job to start", every=0.1, detail=replicas.logs)
    victim = running[0].worker_id
    survivor = "worker-b" if victim == "worker-a" else "worker-a"
    process = replicas.processes[victim]
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    killed_at = server_now(database_url)
    assert process.returncode == -signal.SIGKILL

    await wait_for(
        lambda: status_counts(database_url).get("succeeded", 0) == len(ids),
        90,
        "the takeover",
        every=0.1,
        detail=replicas.logs,
    )
    replicas.processes[survivor].send_signal(signal.SIGTERM)
    assert await replicas.wait_exit(survivor) == 0, replicas.logs()

    ledger = read_ledger(database_url)
    runs = runs_by_job(ledger)
    lost = {r.job_id for r in ledger if r.worker_id == victim and r.ended_at is None}
    assert lost, f"{victim} was killed running nothing: {ledger}"
    for job_id in ids:
        current = await queue.get_job([SPACE], job_id)
        assert current is not None and current.status == "succeeded"
        succeeded = [r for r in runs[job_id] if r.outcome == "succeeded"]
        assert len(succeeded) == 1, runs[job_id]
        if job_id in lost:
            # The killed run, then the survivor's, numbered after it; the history keeps the lost attempt.
            assert [(a.status, a.worker_id) for a in current.history] == [("lost", victim), ("succeeded", survivor)]
            assert "stopped reporting" in (current.history[0].error or "")
            assert current.attempts == 2
            assert succeeded[0].worker_id == survivor and succeeded[0].attempt == 2
            assert succeeded[0].started_at >= killed_at
        else:
            assert [a.status for a in current.history] == ["succeeded"]
    assert_no_overlap(ledger, killed_at)


async def test_sigterm_finishes_the_running_job_past_its_lease_and_leaves_the_waiting_ones(
    database_url: str, queue: Any, replicas: Replicas
):
    lease_ms = 1_200
    replicas.start("worker-a", workers=1, produce=False, poll_ms=100, lease_ms=lease_ms, kv=True)
    await replicas.wait_ready("worker-a")

    due = await now_ms(queue)
    # Oldest first for a single claimer: the long job is the one it takes, and its one slot stays busy.
    await queue.enqueue(
        job("long", space_id=SPACE, action_id="test", due_at=due - 1_000, input={"sleep_ms": 4 * lease_ms})
    )
    waiting = [f"waiting-{i}" for i in range(5)]
    await queue.enqueue_many([job(job_id, space_id=SPACE, action_id="test", due_at=due) for job_id in waiting])

    await wait_for(
        lambda: any(r.job_id == "long" for r in read_ledger(database_url)),
        60,
        "the long job",
        every=0.1,
        detail=replicas.logs,
    )
    replicas.processes["worker-a"].send_signal(signal.SIGTERM)
    # Another replica is running while the first drains: it must not take the long job (heartbeats keep its
    # lease), and it takes the waiting ones.
    replicas.start("worker-b", workers=2, produce=False, poll_ms=100, lease_ms=lease_ms, kv=True)

    assert await replicas.wait_exit("worker-a") == 0, replicas.logs()
    ledger = read_ledger(database_url)
    long_runs = [r for r in ledger if r.job_id == "long"]
    assert [(r.worker_id, r.outcome) for r in long_runs] == [("worker-a", "succeeded")]
    assert long_runs[0].ended_at is not None
    assert (long_runs[0].ended_at - long_runs[0].started_at).total_seconds() * 1000 >= 4 * lease_ms
    long_job = await queue.get_job([SPACE], "long")
    assert long_job is not None and long_job.status == "succeeded" and long_job.attempts == 1
    assert [(a.status, a.worker_id) for a in long_job.history] == [("succeeded", "worker-a")]
    assert "SIGTERM: finishing what is running" in replicas.log("worker-a")

    await wait_for(
        lambda: status_counts(database_url).get("succeeded", 0) == 1 + len(waiting),
        60,
        "the others",
        every=0.1,
        detail=replicas.logs,
    )
    replicas.processes["worker-b"].send_signal(signal.SIGTERM)
    assert await replicas.wait_exit("worker-b") == 0, replicas.logs()
    ledger = read_ledger(database_url)
    assert sorted((r.job_id, r.worker_id, r.attempt) for r in ledger if r.job_id != "long") == [
        (job_id, "worker-b", 1) for job_id in waiting
    ]
