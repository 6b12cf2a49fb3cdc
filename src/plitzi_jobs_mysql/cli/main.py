"""`plitzi-jobs-mysql` (`python -m plitzi_jobs_mysql`): the schema for users' migrations, and an operator's view.

    plitzi-jobs-mysql ddl [--prefix P] [--upgrades|--totals] print the statements: `... ddl | mariadb app`
    plitzi-jobs-mysql migrate --url URL [--prefix P] [--dry-run]   create/upgrade the tables (idempotent)
    plitzi-jobs-mysql jobs list [--space N] [...]            newest first; --action, --status, --limit, --after/--offset
    plitzi-jobs-mysql jobs show|cancel [--space N] ID         the job wherever it is, or only in those spaces
    plitzi-jobs-mysql jobs retry [--space N] [--force] ID    --force to run a succeeded job again
    plitzi-jobs-mysql jobs cancel-all|retry-all --space N [--action A] [--status dead] [--dry-run] [--yes]
                                                             every job of a space (or action): counts, and
                                                             refuses without --yes
    plitzi-jobs-mysql pause|resume --space N [--action A]   claims skip (again take) the space's or action's jobs
    plitzi-jobs-mysql paused --space N                       what is paused there, and since when
    plitzi-jobs-mysql schedules list [--space N]             by space and action; --limit, --offset
    plitzi-jobs-mysql stats [--space N]                      per space and action: counts by status, the oldest
                                                             due job's age, lapsed leases
    plitzi-jobs-mysql limits [--space N]                     fleet-wide limits: running / concurrency, starts / rate
    plitzi-jobs-mysql dashboard [--host 127.0.0.1] [--port 8787] [--read-only] [--token-env NAME] [--space N]
                                                             the operators' dashboard in the browser (web extra)
    plitzi-jobs-mysql --version

Without `--space`, `jobs list`, `schedules list` and `stats` cover every space (a page at a time), and `jobs
show|retry|cancel` find the job by its id alone. Instants print in ISO UTC with their age by the server's clock,
durations as `3d 4h`; `--json` keeps epoch milliseconds.

`--url` defaults to PLITZI_MYSQL_URL; `--json` prints machine-readable output. Exit codes: 0 done; 1 the job is
in a state the operation does not apply to; 2 anything else wrong (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import pymysql

from ..contract import readable
from ..errors import SchemaMismatchError
from ..migrations import sql_script
from ..mysql.schema.migrate import (
    DEFAULT_RETENTION_DAYS,
    PlannedTable,
    finished_past_retention,
    plan_migration,
    run_migration,
)
from ..mysql.schema.state import (
    ABSENT,
    ORIGINAL,
    UNRECORDED,
    mysql_job_schema_statements,
    mysql_job_schema_upgrades,
    table_names,
)
from ..mysql.schema.totals import totals_statements
from ..records import JobStatus
from .bulk import add_parsers as add_bulk_parsers
from .connect import ENV_URL, PROG, CliError, connect, database_url, explain, run_queue, table_prefix
from .dashboard import add_parser as add_dashboard_parser
from .jobs import cmd_jobs_cancel, cmd_jobs_list, cmd_jobs_retry, cmd_jobs_show, cmd_schedules_list
from .limits import add_parser as add_limits_parser
from .output import print_json, scope, table, when
from .pauses import add_parsers as add_pause_parsers

__all__ = ["main"]

STATUS_ORDER = tuple(status.value for status in JobStatus)


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error; the contract here is one line on stderr.
    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see --help)")


# -- the schema and the counts (the jobs and schedules commands: cli_jobs.py) -----------------------------------


def cmd_ddl(args: argparse.Namespace) -> int:
    prefix = table_prefix(args)
    statements = mysql_job_schema_upgrades(prefix) if args.upgrades else mysql_job_schema_statements(prefix)
    if args.totals:  # after the upgrades, once the tables are this package's (docs/migrations.md)
        statements = totals_statements(prefix)
    if not statements:
        print("no upgrade statements in this release", file=sys.stderr)
    sys.stdout.write(sql_script(statements))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    url = database_url(args)
    prefix = table_prefix(args)
    conn = connect(url, prefix)
    try:
        if args.dry_run:
            plan = plan_migration(conn, prefix)
            for planned in plan.tables:
                print(f"`{planned.table.name}`: {planned.table.describe()}; {planned.action}")
            refusal = plan.refusal()
            if refusal is not None:
                raise CliError(str(refusal))
            if _converts_jobs(plan.tables, prefix):  # the original's columns say the same: status, updated_at (ms)
                count, oldest = finished_past_retention(conn, prefix)
                if count:
                    print(_retention_notice(count, oldest, dry_run=True).removeprefix(f"{PROG}: "))
            print(f"dry run: nothing changed (`{PROG} ddl --upgrades` prints the statements)")
            return 0
        plan, after = run_migration(
            conn, prefix, waiting=lambda: print(f"{PROG}: waiting for another migrate of these tables", file=sys.stderr)
        )
        past = finished_past_retention(conn, prefix) if _converts_jobs(plan.tables, prefix) else (0, None)
    except SchemaMismatchError as error:
        raise CliError(str(error)) from None
    except pymysql.err.MySQLError as error:
        raise explain(error, url, prefix) from None
    finally:
        conn.close()
    for planned in plan.tables:
        print(f"{PROG}: table `{planned.table.name}` {_migrated(planned)}", file=sys.stderr)
    version = after.tables[0].version
    print(f"{PROG}: the schema is up to date (schema {version}) in database `{url.database}`", file=sys.stderr)
    count, oldest = past
    if count:
        print(_retention_notice(count, oldest), file=sys.stderr)
    return 0


def _converts_jobs(tables: Sequence[PlannedTable], prefix: str) -> bool:
    """Whether the plan converts the TypeScript original's jobs table (bringing its finished jobs over)."""
    jobs = table_names(prefix).jobs
    return any(p.table.found == ORIGINAL and p.table.name == jobs for p in tables)


def _retention_notice(count: int, oldest: int | None, *, dry_run: bool = False) -> str:
    """What the first claim will do to the finished jobs the conversion brought over, and how to keep them."""
    since = f" (the oldest finished {when(oldest)})" if oldest is not None else ""
    brought = "it would bring" if dry_run else "brought"
    return (
        f"{PROG}: note: {count} finished job(s) {brought} over finished more than {DEFAULT_RETENTION_DAYS} days ago"
        f"{since}; a queue keeps finished jobs `retention_days` (default {DEFAULT_RETENTION_DAYS}), so the first "
        "claim, enqueue or settle starts removing them, a batch at a time. To keep them, create the queue with a "
        "larger retention_days (create_mysql_job_queue(pool, retention_days=3650)), or copy them elsewhere first "
        "(the original table is kept as it was)"
    )


def _migrated(planned: PlannedTable) -> str:
    """What happened to a table, in the words of its plan (another run may have done it first: same result)."""
    found = planned.table.found
    if found == ABSENT:
        return "created"
    if found == ORIGINAL:
        return (
            f"converted from the TypeScript original's layout: {planned.rows} row(s) copied, the original kept as "
            f"`{planned.kept_as}` (drop it once you are satisfied)"
        )
    if found == UNRECORDED:
        return "already there; its schema version recorded"
    return "already there"


def cmd_stats(args: argparse.Namespace) -> int:
    spaces: list[int] | None = args.space
    stats = run_queue(args, lambda q: q.stats(space_ids=spaces))
    drift = run_queue(args, lambda q: q.totals_drift()) if args.verify else None

    def age_of(oldest: int | None) -> float | None:
        return None if oldest is None else (stats.now - oldest) / 1000

    age = age_of(stats.oldest_due_run_at)
    actions = [
        {
            "space_id": a.space_id,
            "action_id": a.action_id,
            "counts": a.counts,
            "total": a.total,
            "pending_due": a.pending_due,
            "oldest_due_run_at": a.oldest_due_run_at,
            "oldest_due_age_seconds": age_of(a.oldest_due_run_at),
            "running_lease_lapsed": a.running_lease_lapsed,
        }
        for a in stats.actions
    ]
    result: dict[str, Any] = {
        "spaces": spaces,
        "now": stats.now,
        "counts": stats.counts,
        "total": stats.total,
        "pending_due": stats.pending_due,
        "oldest_due_run_at": stats.oldest_due_run_at,
        "oldest_due_age_seconds": age,
        "running_lease_lapsed": stats.running_lease_lapsed,
        "actions": actions,
    }
    if drift is not None:
        result["drift"] = [
            {"space_id": space, "action_id": action, "status": status, "kept": kept, "counted": counted}
            for (space, action, status), (kept, counted) in sorted(drift.differences.items())
        ]
    if args.json:
        print_json(result)
        return 1 if drift is not None and drift.differences else 0
    print(f"jobs in `{table_names(table_prefix(args)).jobs}`, {scope(spaces)}, at {when(stats.now)} (server clock)\n")
    print(table(("STATUS", "JOBS"), [*stats.counts.items(), ("total", stats.total)]))
    print(f"\ndue pending jobs: {stats.pending_due}")
    oldest = stats.oldest_due_run_at
    overdue = "none" if oldest is None else f"{readable.duration(stats.now - oldest)} overdue (run at {when(oldest)})"
    print("oldest due job: " + overdue)
    print(f"running jobs whose lease lapsed: {stats.running_lease_lapsed}")
    if stats.actions:
        headers = ("SPACE", "ACTION", *(s.upper() for s in STATUS_ORDER), "TOTAL", "DUE", "OLDEST DUE", "LAPSED")
        rows = [
            (a.space_id, a.action_id, *a.counts.values(), a.total, a.pending_due,
             "-" if a.oldest_due_run_at is None else readable.duration(stats.now - a.oldest_due_run_at),
             a.running_lease_lapsed)
            for a in stats.actions
        ]  # fmt: skip
        print("\nper space and action (OLDEST DUE: how long the oldest due pending job has waited)\n")
        print(table(headers, rows))
    if drift is None:
        return 0
    if not drift.differences:
        print("\nverified: every kept total matches a recount of the jobs")
        return 0
    print("\nDRIFT: kept totals that disagree with a recount of the jobs\n")
    print(table(("SPACE", "ACTION", "STATUS", "KEPT", "COUNTED"),
                [(s, a, st, k, c) for (s, a, st), (k, c) in sorted(drift.differences.items())]))  # fmt: skip
    return 1


# -- the parser --------------------------------------------------------------------------------------------------


def _space_id(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a space id is a whole number, got {text!r}") from None


def _count(text: str) -> int:
    value = _space_id(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _version() -> str:
    def of(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    drivers = ", ".join(f"{name} {of(name)}" for name in ("aiomysql", "PyMySQL"))
    return f"{PROG} {of('plitzi_jobs_mysql')} ({drivers}; Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    prefix = _Parser(add_help=False)
    prefix.add_argument("--prefix", default="", help="table name prefix (letters, digits, _); default none")
    conn = _Parser(add_help=False, parents=[prefix])
    conn.add_argument("--url", default=None, help=f"mysql://user:password@host:3306/database (default ${ENV_URL})")
    common = _Parser(add_help=False, parents=[conn])
    common.add_argument("--json", action="store_true", help="machine-readable output")
    any_space = _Parser(add_help=False)
    any_space.add_argument(
        "--space", action="append", type=_space_id, metavar="N", help="only this space (repeatable); default all"
    )
    paged = _Parser(add_help=False)
    paged.add_argument("--limit", type=_count, default=50, help="at most this many (default 50)")
    paged.add_argument("--offset", type=_count, default=0, help="skip this many (default 0)")
    one_job = _Parser(add_help=False, parents=[common])
    one_job.add_argument(
        "--space", action="append", type=_space_id, metavar="N",
        help="only in this space (repeatable); default: wherever the job is (ids are unique across the table)",
    )  # fmt: skip
    one_job.add_argument("id", help="the job id, exactly as stored")

    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ddl = commands.add_parser("ddl", parents=[prefix], help="print the CREATE TABLE statements (for piping)")
    ddl.add_argument("--upgrades", action="store_true", help="print the upgrade statements instead")
    ddl.add_argument("--totals", action="store_true", help="print the job totals' triggers and backfill instead")
    ddl.set_defaults(func=cmd_ddl)

    migrate = commands.add_parser("migrate", parents=[conn], help="create/upgrade the tables (idempotent)")
    migrate.add_argument("--dry-run", action="store_true", help="print what it would do; change nothing")
    migrate.set_defaults(func=cmd_migrate)

    jobs = commands.add_parser("jobs", help="list, show, retry or cancel jobs").add_subparsers(
        dest="jobs_command", required=True, metavar="ACTION"
    )
    listing = jobs.add_parser("list", parents=[common, any_space, paged], help="jobs, newest first")
    listing.add_argument("--action", default=None, help="only this action id")
    listing.add_argument("--status", default=None, choices=STATUS_ORDER, help="only jobs in this status")
    listing.add_argument(
        "--after", default=None, metavar="CURSOR", help="the page after this cursor (printed under a full page)"
    )
    listing.set_defaults(func=cmd_jobs_list)
    jobs.add_parser("show", parents=[one_job], help="one job with its history").set_defaults(func=cmd_jobs_show)
    retry = jobs.add_parser("retry", parents=[one_job], help="requeue a finished job")
    retry.add_argument("--force", action="store_true", help="also a job that succeeded (it runs again)")
    retry.set_defaults(func=cmd_jobs_retry)
    jobs.add_parser("cancel", parents=[one_job], help="cancel a pending or running job").set_defaults(
        func=cmd_jobs_cancel
    )
    add_bulk_parsers(jobs, common, _space_id)

    schedules = commands.add_parser("schedules", help="the spaces' cron schedules").add_subparsers(
        dest="schedules_command", required=True, metavar="ACTION"
    )
    schedules.add_parser(
        "list", parents=[common, any_space, paged], help="the schedules by space and action"
    ).set_defaults(func=cmd_schedules_list)

    stats = commands.add_parser(
        "stats", parents=[common, any_space], help="per space and action: counts, oldest due job, lapsed leases"
    )
    stats.add_argument(
        "--verify", action="store_true", help="also recount every job: report drift of the kept totals (exit 1)"
    )
    stats.set_defaults(func=cmd_stats)
    add_pause_parsers(commands, common, _space_id)
    add_dashboard_parser(commands, conn, _space_id)
    add_limits_parser(commands, [common], _space_id)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # The command reports every failure itself, in one line; the library's own log lines would repeat it.
    logging.getLogger("plitzi_jobs_mysql").addHandler(logging.NullHandler())
    try:
        args = build_parser().parse_args(argv)
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except CliError as error:
        print(f"{PROG}: {error}" if not str(error).startswith(PROG) else str(error), file=sys.stderr)
        return error.code
    except BrokenPipeError:  # `... | head`: the reader left; not an error worth a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
