"""The demo (`make demo`): two replica processes share one MySQL database; one is killed mid-job; nothing is lost
and nothing runs twice.

    python examples/demo.py [--seconds 45] [--url mysql://user:pass@host:3306]

Against ``--url`` / ``$PLITZI_MYSQL_URL`` (a server URL; the demo works in a fresh database of its own and drops
it at the end), or a throwaway local MariaDB/MySQL started for the run when neither is given. It

1. saves two every-minute schedules (first fires a few seconds away) and enqueues jobs: some now, some delayed,
   two that fail once and are retried, one that asks to be retried later, and one long import;
2. starts two replicas (``python -m tests.harness.replica`` from this checkout: scheduler + worker, their own
   pools, kv single-flight), which sweep the schedules and drain the queue together;
3. kills the replica running the long import with SIGKILL, mid-job: the other takes it over once the lease
   lapses, and the job's history keeps the ``lost`` attempt;
4. shows the jobs moving in a live table, stops the survivor with SIGTERM (it finishes what it runs, exit 0), and
   checks the ledger the handlers wrote: fires produced, jobs run, the lost attempt recovered, nothing run twice.

Exit status 0 when every check holds, 1 when one fails (said on stderr), 2 when the demo could not run at all.
Everything it starts is stopped at the end, on ^C too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiomysql

from plitzi_jobs_mysql import JobInput, ScheduleInput, create_mysql_job_queue, schedule_job_id
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.testing import fresh_database, mysql_server_url
from plitzi_jobs_mysql.url import parse_mysql_url

# The replica program is this checkout's test program (tests/harness/replica.py), not part of the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.harness.replica import LedgerRow, ensure_ledger, read_ledger, spawn_replica

SPACE = 1
SCHEDULES = {"digest": "* * * * *", "report": "* * * * *"}
LEASE_MS = 2_500
BIG_JOB = "import:big"
BIG_SLEEP_MS = 6_000
TERMINAL = {"succeeded", "failed", "dead", "cancelled"}
REPLICA_OPTIONS: dict[str, Any] = {
    "workers": 2,
    "kv": True,
    "lease_ms": LEASE_MS,
    "poll_ms": 200,
    "schedule_poll_ms": 1_000,
    "backoff_base_ms": 2_000,
    "backoff_max_ms": 4_000,
    "schedule": SCHEDULES,
    "spaces": [SPACE],
}


class DemoFailed(Exception):
    """A check did not hold."""


# --------------------------------------------------------------------------------------------------------
# The processes


@dataclass
class Replica:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    killed_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class Cluster:
    url: str
    log_dir: Path
    replicas: list[Replica] = field(default_factory=list)

    def start(self, name: str) -> Replica:
        log_path = self.log_dir / f"{name}.log"
        process = spawn_replica(self.url, log_path=log_path, worker_id=name, **REPLICA_OPTIONS)
        replica = Replica(name=name, process=process, log_path=log_path)
        self.replicas.append(replica)
        return replica

    def by_name(self, name: str) -> Replica | None:
        return next((r for r in self.replicas if r.name == name), None)

    def stop_all(self) -> None:
        """Whatever still runs: SIGTERM (it finishes its jobs), then SIGKILL after a while."""
        for replica in self.replicas:
            if replica.alive:
                with contextlib.suppress(ProcessLookupError):
                    replica.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for replica in self.replicas:
            try:
                replica.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                replica.process.kill()
                replica.process.wait()

    def log_tails(self) -> str:
        parts = []
        for replica in self.replicas:
            try:
                text = replica.log_path.read_text(errors="replace")
            except OSError:
                text = ""
            parts.append(f"--- {replica.name} ({replica.log_path})\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)


# --------------------------------------------------------------------------------------------------------
# The live table


def short_id(job: Job) -> str:
    if job.trigger == "schedule":
        at = datetime.fromtimestamp(job.due_at / 1000, UTC).strftime("%H:%M:%S")
        return f"{job.action_id} fire {at}"
    return job.id


def short_worker(worker_id: str | None) -> str:
    return (worker_id or "").removeprefix("replica-") or "-"


def history_summary(job: Job) -> str:
    return " → ".join(f"{a.status}@{short_worker(a.worker_id)}" for a in job.history) or "-"


COLORS = {"pending": "36", "running": "33", "succeeded": "32", "dead": "31", "failed": "31", "cancelled": "35"}


class Screen:
    """Redraws in place on a terminal; prints what changed (and a count line now and then) otherwise."""

    def __init__(self, seconds: float) -> None:
        self.tty = sys.stdout.isatty()
        self.seconds = seconds
        self.drawn = 0
        self.seen: dict[str, tuple[str, int, str]] = {}
        self.events: list[str] = []
        self.last_counts = 0.0

    def event(self, elapsed: float, text: str) -> None:
        line = f"t={elapsed:5.1f}s  {text}"
        self.events.append(line)
        if not self.tty:
            print(line, flush=True)

    def paint(self, status: str, width: int = 9) -> str:
        text = status.ljust(width)
        return f"\x1b[{COLORS.get(status, '0')}m{text}\x1b[0m" if self.tty else text

    def update(self, elapsed: float, jobs: list[Job], now_ms: int, cluster: Cluster, database: str) -> None:
        jobs = sorted(jobs, key=lambda j: (j.created_at, j.due_at, j.id))
        counts = Counter(j.status for j in jobs)
        summary = " · ".join(f"{s} {counts[s]}" for s in ("pending", "running", "succeeded", "dead") if counts[s])
        if not self.tty:
            for job in jobs:
                state = (job.status, job.attempts, short_worker(job.worker_id))
                if self.seen.get(job.id) != state:
                    self.seen[job.id] = state
                    who = f" on {short_worker(job.worker_id)}" if job.status == "running" else ""
                    print(
                        f"t={elapsed:5.1f}s  {short_id(job):<26} {job.status}{who} (attempts {job.attempts}; "
                        f"history: {history_summary(job)})",
                        flush=True,
                    )
            if elapsed - self.last_counts >= 5:
                self.last_counts = elapsed
                print(f"t={elapsed:5.1f}s  -- {len(jobs)} jobs: {summary}", flush=True)
            return
        lines = [
            f"\x1b[1mplitzi_jobs_mysql demo\x1b[0m — two replicas sharing {database}    t={elapsed:4.1f}s of "
            f"~{self.seconds:.0f}s   (^C stops everything)",
            "   ".join(
                f"{r.name} pid {r.process.pid}: "
                + ("\x1b[32mrunning\x1b[0m" if r.alive else ("\x1b[31mKILLED\x1b[0m" if r.killed_at else "stopped"))
                for r in cluster.replicas
            ),
            "",
            f"{'JOB':<26} {'STATUS':<9} {'ATT':>3}  {'WORKER':<6} {'DUE':>6}  HISTORY",
        ]
        rows = shutil.get_terminal_size((100, 40)).lines - len(lines) - 9
        shown = jobs if len(jobs) <= rows else jobs[-rows:]
        for job in shown:
            due = job.run_at - now_ms
            due_text = f"in {due / 1000:.0f}s" if job.status == "pending" and due > 500 else ""
            lines.append(
                f"{short_id(job):<26} {self.paint(job.status)} {job.attempts:>3}  "
                f"{short_worker(job.worker_id if job.status == 'running' else None):<6} {due_text:>6}  "
                f"{history_summary(job)}"
            )
        lines += ["", f"{len(jobs)} jobs: {summary}", "", *self.events[-5:]]
        out = [f"\x1b[{self.drawn}F" if self.drawn else ""]
        out += [line + "\x1b[K\n" for line in lines]
        out.append("\x1b[J")
        sys.stdout.write("".join(out))
        sys.stdout.flush()
        self.drawn = len(lines)


# --------------------------------------------------------------------------------------------------------
# The run


def job_input(job_id: str, due_at: int, **spec: Any) -> JobInput:
    return JobInput(
        id=job_id,
        space_id=SPACE,
        action_id=job_id.split(":")[0],
        environment="main",
        trigger="manual",
        input=spec,
        due_at=due_at,
        max_attempts=3,
    )


async def epoch_ms(queue: Any) -> int:
    return int((await queue.now()).timestamp() * 1000)


async def seed(queue: Any, seconds: float) -> list[str]:
    """The schedules and the jobs; answers the ids of the jobs enqueued here."""
    now = await epoch_ms(queue)
    await queue.put_schedules(
        space_id=SPACE,
        schedules=[
            # First fires a few seconds away (a schedule saved unchanged keeps it), then every minute.
            ScheduleInput(
                space_id=SPACE,
                action_id=action,
                cron=cron,
                environment="main",
                enabled=True,
                next_run_at=now + 3_000 + 2_000 * i,
                max_attempts=3,
            )
            for i, (action, cron) in enumerate(SCHEDULES.items())
        ],
    )
    jobs = [job_input(BIG_JOB, now - 1_000, sleep_ms=BIG_SLEEP_MS)]
    jobs += [job_input(f"order:{i}", now, sleep_ms=300 + 150 * i) for i in range(1, 7)]
    jobs += [
        job_input(f"email:{i}", now + int(seconds * 1000 * share), sleep_ms=300)
        for i, share in enumerate((0.15, 0.3, 0.45), start=1)
    ]
    jobs += [job_input(f"flaky:{i}", now, sleep_ms=200, fail="error", fail_times=1) for i in (1, 2)]
    jobs += [job_input("busy:1", now, sleep_ms=200, fail="retry", fail_times=1, retry_delay_ms=1_500)]
    await queue.enqueue_many(jobs)
    return [j.id for j in jobs]


async def run(url: str, seconds: float, log_dir: Path, cluster: Cluster) -> int:
    kwargs = parse_mysql_url(url).aiomysql_kwargs()
    pool = await aiomysql.create_pool(**kwargs, minsize=1, maxsize=3, autocommit=True)
    try:
        queue = create_mysql_job_queue(pool)
        ensure_ledger(url)
        mine = await seed(queue, seconds)
        screen = Screen(seconds)
        started = time.monotonic()
        for name in ("replica-A", "replica-B"):
            replica = cluster.start(name)
            screen.event(0.0, f"started {name} (pid {replica.process.pid})")
        victim: Replica | None = None
        big_done_seen = False
        while True:
            elapsed = time.monotonic() - started
            jobs = (await queue.list_jobs(space_ids=[SPACE], limit=500)).jobs
            ledger = read_ledger(url)
            now = await epoch_ms(queue)
            by_id = {j.id: j for j in jobs}
            for replica in cluster.replicas:
                if not replica.alive and replica.killed_at is None and replica.process.returncode != 0:
                    raise DemoFailed(f"{replica.name} exited by itself with status {replica.process.returncode}")
            if victim is None:
                runs = [r for r in ledger if r.job_id == BIG_JOB and r.outcome == "running"]
                if runs and elapsed > 2.5:
                    victim = cluster.by_name(runs[0].worker_id)
                    if victim is None:
                        raise DemoFailed(f"{BIG_JOB} is run by an unknown worker {runs[0].worker_id}")
                    victim.process.send_signal(signal.SIGKILL)
                    victim.process.wait(timeout=10)
                    victim.killed_at = elapsed
                    screen.event(
                        elapsed, f"SIGKILL {victim.name} (pid {victim.process.pid}) in the middle of {BIG_JOB}"
                    )
            big = by_id.get(BIG_JOB)
            if victim is not None and big is not None and not big_done_seen and big.status == "succeeded":
                big_done_seen = True
                screen.event(elapsed, f"{BIG_JOB} recovered: {history_summary(big)}")
            screen.update(elapsed, jobs, now, cluster, parse_mysql_url(url).database or "")
            settled = all(by_id.get(j) is not None and by_id[j].status in TERMINAL for j in mine)
            fired = all(any(j.action_id == a and j.trigger == "schedule" for j in jobs) for a in SCHEDULES)
            if elapsed >= seconds and settled and fired and victim is not None:
                break
            if elapsed >= seconds + 30:
                raise DemoFailed(
                    "the jobs did not settle within 30 s past the run: "
                    + ", ".join(f"{j}={by_id[j].status if j in by_id else 'missing'}" for j in mine)
                )
            await asyncio.sleep(0.5)

        survivors = [r for r in cluster.replicas if r.alive]
        for replica in survivors:
            replica.process.send_signal(signal.SIGTERM)
        for replica in survivors:
            code = await asyncio.to_thread(replica.process.wait, 60)
            screen.event(time.monotonic() - started, f"{replica.name} stopped on SIGTERM, exit {code}")
            if code != 0:
                raise DemoFailed(f"{replica.name} exited {code} on SIGTERM (expected 0)")
        jobs = (await queue.list_jobs(space_ids=[SPACE], limit=500)).jobs
        now = await epoch_ms(queue)
        screen.update(time.monotonic() - started, jobs, now, cluster, parse_mysql_url(url).database or "")
        assert victim is not None
        report(jobs, read_ledger(url), mine, victim, survivors)
        return 0
    finally:
        pool.close()
        await pool.wait_closed()


def overlapping(runs: Sequence[LedgerRow]) -> bool:
    ordered = sorted(runs, key=lambda r: r.started_at)
    for before, after in itertools.pairwise(ordered):
        # A run killed mid-way never wrote its end; the run after it must then have started after the kill,
        # which the lease guarantees: it is read from the job's history below.
        if before.ended_at is not None and before.ended_at > after.started_at:
            return True
    return False


def report(
    jobs: list[Job], ledger: list[LedgerRow], mine: list[str], victim: Replica, survivors: list[Replica]
) -> None:
    by_id = {j.id: j for j in jobs}
    problems: list[str] = []

    fires = [j for j in jobs if j.trigger == "schedule"]
    per_fire = Counter((j.action_id, j.due_at) for j in fires)
    if any(n != 1 for n in per_fire.values()) or any(
        j.id != schedule_job_id(j.space_id, j.action_id, j.due_at) for j in fires
    ):
        problems.append(f"a fire produced more than one job: {per_fire}")
    for action in SCHEDULES:
        if not any(j.action_id == action for j in fires):
            problems.append(f"schedule {action} never fired")
    pending_fires = [j for j in fires if j.status not in TERMINAL]

    runs: dict[str, list[LedgerRow]] = {}
    for row in ledger:
        runs.setdefault(row.job_id, []).append(row)
    twice = [job_id for job_id, rs in runs.items() if sum(r.outcome == "succeeded" for r in rs) > 1]
    overlaps = [job_id for job_id, rs in runs.items() if overlapping(rs)]
    if twice:
        problems.append(f"jobs that succeeded twice: {twice}")
    if overlaps:
        problems.append(f"jobs whose runs overlapped: {overlaps}")
    not_ok = [
        f"{j}={by_id[j].status if j in by_id else 'missing'}"
        for j in mine
        if by_id.get(j) is None or by_id[j].status != "succeeded"
    ]
    if not_ok:
        problems.append(f"jobs that did not succeed: {not_ok}")

    lost = [j for j in jobs if any(a.status == "lost" for a in j.history)]
    recovered = [
        j
        for j in lost
        if j.status == "succeeded"
        and j.history[-1].status == "succeeded"
        and j.history[-1].worker_id != victim.name
        and all(a.worker_id == victim.name for a in j.history if a.status == "lost")
    ]
    big = by_id.get(BIG_JOB)
    if big is None or big.id not in {j.id for j in recovered}:
        problems.append(f"{BIG_JOB} was not recovered from the killed replica: {big and history_summary(big)}")
    for job in recovered:
        # The taking-over run began only once the killed one could no longer be running.
        lost_at = max(a.ended_at for a in job.history if a.status == "lost")
        if job.history[-1].started_at < lost_at:
            problems.append(f"{job.id} was taken over before its lost attempt was recorded")

    succeeded_runs = sum(r.outcome == "succeeded" for r in ledger)
    retried = sorted({r.job_id for r in ledger if r.outcome in ("failed", "retry")})
    print()
    print("Report")
    print(
        f"  fires produced: {len(fires)} ("
        + ", ".join(f"{a} {sum(j.action_id == a for j in fires)}" for a in SCHEDULES)
        + "), one job per fire instant"
        + (
            f"; {len(pending_fires)} fired as the demo stopped, left pending for the next replica"
            if pending_fires
            else ""
        )
    )
    print(
        f"  jobs run: {succeeded_runs} succeeded runs of {len(runs)} jobs, {len(ledger)} runs in the ledger "
        f"(failed once and retried: {', '.join(retried) or 'none'})"
    )
    for job in recovered:
        print(
            f"  lost attempt recovered: {job.id} — lost by {victim.name} (SIGKILL), finished by "
            f"{job.history[-1].worker_id}: {history_summary(job)}"
        )
    print(
        f"  nothing ran twice: no job succeeded twice ({succeeded_runs} successes, {len(runs)} jobs), "
        "no two runs of one job overlapped"
    )
    for replica in survivors:
        print(f"  {replica.name} stopped on SIGTERM with exit 0 after finishing what it ran")
    if problems:
        raise DemoFailed("; ".join(problems))
    print("OK: every check held.")


@contextlib.contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    if not os.environ.get("PLITZI_MYSQL_URL"):
        print("No PLITZI_MYSQL_URL: starting a throwaway local MySQL/MariaDB for the demo…", flush=True)
    with mysql_server_url() as root:
        yield root


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=45, help="how long the replicas run (default 45)")
    parser.add_argument("--url", default=None, help="a MySQL server URL (default: $PLITZI_MYSQL_URL, else a local one)")
    args = parser.parse_args(argv)
    if args.seconds < 10:
        parser.error("--seconds must be at least 10")
    log_dir = Path(tempfile.mkdtemp(prefix="plitzi-demo-"))
    cluster: Cluster | None = None
    keep_logs = False
    try:
        with server(args.url) as root, fresh_database(root, "pjm_demo") as url:
            cluster = Cluster(url=url, log_dir=log_dir)
            try:
                return asyncio.run(run(url, args.seconds, log_dir, cluster))
            finally:
                cluster.stop_all()
    except KeyboardInterrupt:
        if cluster is not None:
            cluster.stop_all()
        print("\ninterrupted: the replicas are stopped and the demo database dropped.", file=sys.stderr)
        return 130
    except DemoFailed as failure:
        print(f"\nFAILED: {failure}", file=sys.stderr)
        keep_logs = True
        if cluster is not None:
            print(f"replica logs ({log_dir}):\n{cluster.log_tails()}", file=sys.stderr)
        return 1
    except Exception as error:  # could not run at all: no server, refused connection, ...
        print(f"\nthe demo could not run: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    finally:
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
