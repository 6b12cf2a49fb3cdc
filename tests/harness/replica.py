"""One replica process of a deployment, for tests, soak runs and the demo.

    python -m tests.harness.replica --url mysql://root@127.0.0.1:3306/db [options]

It opens ITS OWN aiomysql pool (``charset=utf8mb4``, ``autocommit=True``), builds `create_action_jobs` over
`create_mysql_job_queue` (and `create_mysql_kv` with ``--kv``), installs `close_on_signals` (SIGTERM/SIGINT:
stop claiming, finish what runs, close the pool, exit 0) and runs until a signal or ``--max-seconds``. It logs
to stderr through `logging`, never prints.

Flags (defaults in brackets):

    --url URL                 the database (else $PLITZI_MYSQL_URL)
    --ledger-url URL          where the ledger handler writes, on a pool of its own [--url, the package's pool]
    --prefix P                table prefix of the queue, kv and ledger tables [""]
    --workers N               handlers run at once; 0 claims nothing [4]
    --lease-ms MS             lease of a claim [30000]
    --poll-ms MS              claim interval when idle [1000]
    --schedule-poll-ms MS     sweep interval of the scheduler (plus up to 1 s of jitter) [15000]
    --produce / --no-produce  run the scheduler's sweep [--produce]
    --kv                      single-flight through the kv store [off]
    --schedule ACTION=CRON    an action of every space in --spaces with that schedule; repeatable
    --spaces 1,2              spaces whose schedules this replica reconciles from --schedule [none: sweep only]
    --handler NAME            'ledger' (below) or 'noop' (returns at once, writes nothing) [ledger]
    --worker-id ID            the worker id in leases and history [host:pid:random]
    --max-seconds S           stop as on SIGTERM after S seconds [run until a signal]
    --backoff-base-ms MS      first retry delay after a failed attempt [30000]
    --backoff-max-ms MS       retry delay ceiling [900000]
    --max-attempts N          attempts a scheduled job gets [3]
    --pool-size N             connections in the pool [workers + 4]
    --log-level LEVEL         [INFO]
    --limit ACTION=C,R,P      a fleet-wide `ActionLimit` (concurrency C, rate R per P ms; leave any out); repeatable

The ``ledger`` handler writes one row per run into ``{prefix}ledger`` (created by every replica if missing,
see `LEDGER_DDL`): ``id, job_id, space_id, action_id, trigger, attempt, worker_id, pid, started_at, ended_at,
outcome``. ``started_at``/``ended_at`` are the server's clock (``UTC_TIMESTAMP(6)``, so comparable across
processes), ``attempt`` is the job's ``attempts`` as claimed, ``outcome`` is ``running`` until the run ends
(a process killed mid-run leaves it so, with ``ended_at`` NULL), then ``succeeded``, ``failed`` (an exception:
retried with backoff), ``permanent`` (`PermanentFailure`), ``retry`` (`RetryLater`) or ``cancelled``. The
handler answers ``ledger:<row id>`` as the run id, so a job's history points at its ledger rows.

What a run does is read from the job's input:

    {"sleep_ms": 200}                     sleep that long (after the ledger row is written)
    {"fail": "error"}                     raise RuntimeError after the sleep: a failed attempt, retried
    {"fail": "permanent"}                 raise PermanentFailure: the job is dead
    {"fail": "retry", "retry_delay_ms": 500}   raise RetryLater: back to the queue, attempt refunded
    {"fail": "crash"}                     SIGKILL this process right after the ledger row is written
    {"fail": ..., "fail_times": 1}        fail only the job's first run (earlier ledger rows of the job < 1)

On closing it logs ``fires: enqueued=N duplicates=M`` (schedule fires this replica enqueued, and those another
replica had enqueued first), and logs each fire as it goes. `spawn_replica` starts one from Python,
`read_ledger` / `ensure_ledger` read and create the ledger with PyMySQL.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any, Final

from plitzi_jobs_mysql.assembly.action_jobs import create_action_jobs
from plitzi_jobs_mysql.assembly.signals import close_on_signals
from plitzi_jobs_mysql.mysql.kv import create_mysql_kv
from plitzi_jobs_mysql.mysql.queue import MysqlJobQueue
from plitzi_jobs_mysql.mysql.schema.state import check_prefix
from plitzi_jobs_mysql.records import ActionLimit, Job, JobInput
from plitzi_jobs_mysql.runtime.schedules import ActionEntry, ScheduleTrigger
from plitzi_jobs_mysql.runtime.worker import JobHandler, PermanentFailure, RetryLater
from plitzi_jobs_mysql.url import parse_mysql_url

__all__ = [
    "LEDGER_DDL",
    "LedgerRow",
    "ensure_ledger",
    "main",
    "read_ledger",
    "replica_command",
    "spawn_replica",
]

logger = logging.getLogger("plitzi_jobs_mysql.replica")

ENV_URL: Final = "PLITZI_MYSQL_URL"
# The checkout this program lives in: `python -m tests.harness.replica` is found from there whatever the caller's cwd.
CHECKOUT: Final = Path(__file__).resolve().parents[2]

LEDGER_DDL: Final = """CREATE TABLE IF NOT EXISTS `{prefix}ledger` (
  `id` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `job_id` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `space_id` BIGINT NOT NULL,
  `action_id` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `trigger` VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `attempt` INT NOT NULL,
  `worker_id` VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `pid` INT NOT NULL,
  `started_at` DATETIME(6) NOT NULL,
  `ended_at` DATETIME(6) NULL,
  `outcome` VARCHAR(16) CHARACTER SET ascii NOT NULL,
  PRIMARY KEY (`id`),
  KEY `ledger_job` (`job_id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"""

_LEDGER_COLUMNS: Final = (
    "id, job_id, space_id, action_id, `trigger`, attempt, worker_id, pid, started_at, ended_at, outcome"
)


def _ledger_table(prefix: str) -> str:
    return f"`{check_prefix(prefix)}ledger`"


# --------------------------------------------------------------------------------------------------------
# The ledger, read and created from the outside (tests, the demo)


@dataclass(frozen=True, kw_only=True)
class LedgerRow:
    """One run of a handler, as the replica recorded it (instants on the server's UTC clock, naive)."""

    id: int
    job_id: str
    space_id: int
    action_id: str
    trigger: str
    attempt: int
    worker_id: str
    pid: int
    started_at: datetime
    ended_at: datetime | None
    outcome: str


def _connect(url: str) -> Any:
    import pymysql

    kwargs = parse_mysql_url(url).pymysql_kwargs()
    kwargs.setdefault("connect_timeout", 10)
    return pymysql.connect(**kwargs, autocommit=True)


def ensure_ledger(url: str, prefix: str = "") -> None:
    """Creates ``{prefix}ledger`` in the database ``url`` names, if missing."""
    _ledger_table(prefix)
    conn = _connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(LEDGER_DDL.format(prefix=prefix))
    finally:
        conn.close()


def read_ledger(url: str, prefix: str = "") -> list[LedgerRow]:
    """Every ledger row, in the order they were written; empty when the table does not exist yet."""
    import pymysql

    table = _ledger_table(prefix)
    conn = _connect(url)
    try:
        with conn.cursor() as cur:
            try:
                cur.execute(f"SELECT {_LEDGER_COLUMNS} FROM {table} ORDER BY id")
            except pymysql.err.ProgrammingError as exc:
                if exc.args and exc.args[0] == 1146:  # no such table
                    return []
                raise
            rows = cur.fetchall()
    finally:
        conn.close()
    return [
        LedgerRow(
            id=int(r[0]),
            job_id=str(r[1]),
            space_id=int(r[2]),
            action_id=str(r[3]),
            trigger=str(r[4]),
            attempt=int(r[5]),
            worker_id=str(r[6]),
            pid=int(r[7]),
            started_at=r[8],
            ended_at=r[9],
            outcome=str(r[10]),
        )
        for r in rows
    ]


# --------------------------------------------------------------------------------------------------------
# Starting one


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tests.harness.replica",
        description="One replica of a deployment: scheduler and worker over a MySQL queue, handlers writing a ledger.",
    )
    parser.add_argument("--url", default=os.environ.get(ENV_URL, ""), help=f"database URL (else ${ENV_URL})")
    parser.add_argument("--ledger-url", default="", help="the ledger's database, on a pool of its own")
    parser.add_argument("--prefix", default="", help="table prefix")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--lease-ms", type=int, default=30_000)
    parser.add_argument("--poll-ms", type=int, default=1_000)
    parser.add_argument("--schedule-poll-ms", type=int, default=15_000)
    parser.add_argument("--produce", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--kv", action="store_true", help="single-flight through the kv store")
    parser.add_argument("--schedule", action="append", default=[], metavar="ACTION=CRON")
    parser.add_argument("--spaces", default="", help="comma-separated space ids to reconcile")
    parser.add_argument("--handler", choices=("ledger", "noop"), default="ledger")
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--backoff-base-ms", type=int, default=30_000)
    parser.add_argument("--backoff-max-ms", type=int, default=900_000)
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--pool-size", type=int, default=None)
    parser.add_argument("--log-level", default="INFO")
    parser.add_argument("--limit", action="append", default=[], metavar="ACTION=C,R,P")
    return parser


def _option_flags() -> dict[str, argparse.Action]:
    return {action.dest: action for action in _parser()._actions if action.dest != "help"}


def replica_command(url: str, **options: Any) -> list[str]:
    """The command line of a replica: ``options`` are the flags by their dest name (``lease_ms=2000``,
    ``produce=False``, ``kv=True``, ``spaces=[1, 2]``, ``schedule={"digest": "* * * * *"}``)."""
    flags = _option_flags()
    command = [sys.executable, "-m", "tests.harness.replica", "--url", url]
    for name, value in options.items():
        action = flags.get(name)
        if action is None or name == "url":
            raise TypeError(f"unknown replica option {name!r}; known: {', '.join(sorted(flags))}")
        flag = action.option_strings[0]
        if value is None:
            continue
        if isinstance(action, argparse.BooleanOptionalAction):
            command.append(flag if value else "--no-" + flag[2:])
        elif isinstance(action, argparse._StoreTrueAction):
            if value:
                command.append(flag)
        elif name == "schedule":
            items = value.items() if isinstance(value, dict) else (entry.split("=", 1) for entry in value)
            for action_id, cron in items:
                command += [flag, f"{action_id}={cron}"]
        elif name == "limit":
            for entry in [value] if isinstance(value, str) else value:
                command += [flag, entry]
        elif name == "spaces" and not isinstance(value, str):
            command += [flag, ",".join(str(space) for space in value)]
        else:
            command += [flag, str(value)]
    return command


def spawn_replica(
    url: str,
    *,
    log_path: str | os.PathLike[str] | None = None,
    env: dict[str, str] | None = None,
    **options: Any,
) -> subprocess.Popen[bytes]:
    """Starts a replica process (its own session, so a ^C in the terminal reaches only its parent, which then
    stops it). Its stderr is appended to ``log_path`` when given, else inherited. See `replica_command`."""
    command = replica_command(url, **options)
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(CHECKOUT), env.get("PYTHONPATH", "")) if p)
    stderr: IO[bytes] | None = open(log_path, "ab") if log_path is not None else None
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=env,
            start_new_session=True,
        )
    finally:
        if stderr is not None:
            stderr.close()  # the child holds its own copy


# --------------------------------------------------------------------------------------------------------
# Inside the process


class _Lookups:
    """Every space in the list has the same actions: the ``--schedule`` ones."""

    def __init__(self, schedules: dict[str, str]) -> None:
        self.schedules = schedules

    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        return [ActionEntry(id=a, schedule=ScheduleTrigger(cron=c)) for a, c in self.schedules.items()]


class _FireCountingQueue(MysqlJobQueue):
    """The MySQL queue, counting the schedule fires this replica enqueued and the ones it found already there."""

    enqueued = 0
    duplicates = 0

    async def enqueue(self, job: JobInput, *, connection: Any = None) -> bool:
        created = await super().enqueue(job, connection=connection)
        if job.trigger == "schedule":
            if created:
                self.enqueued += 1
            else:
                self.duplicates += 1
            logger.info("fire %s %s", job.id, "enqueued" if created else "duplicate (already enqueued)")
        return created


def _ledger_handler(pool: Any, prefix: str, worker_id: str) -> JobHandler:
    table = _ledger_table(prefix)
    insert = (
        f"INSERT INTO {table} (job_id, space_id, action_id, `trigger`, attempt, worker_id, pid, started_at, "
        "outcome) VALUES (%s, %s, %s, %s, %s, %s, %s, UTC_TIMESTAMP(6), 'running')"
    )
    finish = f"UPDATE {table} SET ended_at = UTC_TIMESTAMP(6), outcome = %s WHERE id = %s"
    count = f"SELECT COUNT(*) FROM {table} WHERE job_id = %s AND id < %s"
    pid = os.getpid()

    async def write(sql: str, args: Sequence[Any]) -> int:
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(sql, args)
            return int(cur.lastrowid or 0)

    async def earlier_runs(job_id: str, row_id: int) -> int:
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(count, (job_id, row_id))
            row = await cur.fetchone()
            return int(row[0]) if row else 0

    async def handler(job: Job) -> str | None:
        spec = job.input
        row_id = await write(insert, (job.id, job.space_id, job.action_id, job.trigger, job.attempts, worker_id, pid))
        mode = spec.get("fail")
        times = spec.get("fail_times")
        failing = bool(mode) and (times is None or await earlier_runs(job.id, row_id) < int(times))
        outcome = "failed"
        try:
            if failing and mode == "crash":
                logger.warning("job %s asks to crash: SIGKILL", job.id)
                for handler in logging.getLogger().handlers:
                    handler.flush()
                os.kill(pid, signal.SIGKILL)
            sleep_ms = int(spec.get("sleep_ms") or 0)
            if sleep_ms > 0:
                await asyncio.sleep(sleep_ms / 1000)
            if failing:
                if mode == "permanent":
                    outcome = "permanent"
                    raise PermanentFailure(f"job {job.id} fails permanently, as its input asks")
                if mode == "retry":
                    outcome = "retry"
                    delay = spec.get("retry_delay_ms")
                    raise RetryLater("retry, as the input asks", None if delay is None else int(delay))
                raise RuntimeError(f"job {job.id} fails, as its input asks")
            outcome = "succeeded"
            return f"ledger:{row_id}"
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        finally:
            try:
                await write(finish, (outcome, row_id))
            except Exception:
                logger.exception("could not write the end of ledger row %d", row_id)

    return handler


async def _noop(job: Job) -> str | None:
    return None


def _limits(entries: Sequence[str]) -> dict[str, ActionLimit]:
    limits = {}
    for entry in entries:
        action_id, _sep, spec = entry.partition("=")
        concurrency, rate, per_ms = ([*spec.split(","), "", ""])[:3]
        limits[action_id] = ActionLimit(concurrency=int(concurrency) if concurrency else None,
                                        rate=int(rate) if rate else None, per_ms=int(per_ms or 1000))  # fmt: skip
    return limits


async def _run(args: argparse.Namespace) -> None:
    import aiomysql

    url = parse_mysql_url(args.url)
    schedules: dict[str, str] = {}
    for entry in args.schedule:
        action_id, sep, cron = entry.partition("=")
        if not sep or not action_id.strip() or not cron.strip():
            raise SystemExit(f"--schedule takes ACTION=CRON, got {entry!r}")
        schedules[action_id.strip()] = cron.strip()
    spaces = [int(part) for part in args.spaces.split(",") if part.strip()]
    pool_size = args.pool_size or args.workers + 4
    # minsize=0: no connection before the runtime runs, so a replica that starts while the fault proxy is already
    # cutting connections rides the cuts out there (CI once lost worker-2 to a cut inside create_pool's handshake).
    pool = await aiomysql.create_pool(**url.aiomysql_kwargs(), minsize=0, maxsize=pool_size, autocommit=True)
    # A separate ledger pool keeps the record of runs out of reach of faults aimed at the package's connections.
    ledger_pool = pool
    if args.ledger_url:
        ledger_pool = await aiomysql.create_pool(
            **parse_mysql_url(args.ledger_url).aiomysql_kwargs(), minsize=1, maxsize=pool_size, autocommit=True
        )
    async with ledger_pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(LEDGER_DDL.format(prefix=args.prefix))
    queue = _FireCountingQueue(pool, table_prefix=args.prefix)
    kv = create_mysql_kv(pool, table_prefix=args.prefix) if args.kv else None
    worker_id = args.worker_id or f"replica:{os.getpid()}"
    handler = _ledger_handler(ledger_pool, args.prefix, worker_id) if args.handler == "ledger" else _noop
    jobs = create_action_jobs(
        lookups=_Lookups(schedules),
        handler=handler,
        queue=queue,
        kv=kv,
        produce=args.produce,
        workers=args.workers,
        schedule_poll_ms=args.schedule_poll_ms,
        poll_ms=args.poll_ms,
        lease_ms=args.lease_ms,
        backoff_base_ms=args.backoff_base_ms,
        backoff_max_ms=args.backoff_max_ms,
        max_attempts=args.max_attempts,
        spaces=spaces or None,
        worker_id=worker_id,
        limits=_limits(args.limit) or None,
    )

    async def after_close() -> None:
        logger.info("fires: enqueued=%d duplicates=%d", queue.enqueued, queue.duplicates)
        for opened in {id(pool): pool, id(ledger_pool): ledger_pool}.values():
            opened.close()
            await opened.wait_closed()

    close_on_signals(jobs, after_close=after_close)
    jobs.start()
    logger.info(
        "replica %s ready (pid %d, workers %d, produce %s, kv %s)",
        worker_id,
        os.getpid(),
        args.workers,
        args.produce,
        args.kv,
    )
    if args.max_seconds is not None:
        asyncio.get_running_loop().call_later(args.max_seconds, os.kill, os.getpid(), signal.SIGTERM)
    await asyncio.Event().wait()  # close_on_signals ends the process


def main(argv: Sequence[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"%(asctime)s {args.worker_id or 'replica'}[%(process)d] %(levelname)s %(name)s: %(message)s",
    )
    if not args.url:
        _parser().error(f"--url is required (or set {ENV_URL})")
    try:
        asyncio.run(_run(args))
    except KeyboardInterrupt:  # a ^C before the handlers were installed
        sys.exit(130)
    except Exception:
        logger.exception("the replica failed")
        sys.exit(2)


if __name__ == "__main__":
    main()
