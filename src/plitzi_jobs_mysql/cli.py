"""`plitzi-jobs-mysql` (`python -m plitzi_jobs_mysql`): the schema for users' migrations, and an operator's view.

    plitzi-jobs-mysql ddl [--prefix P] [--upgrades]          print the statements: `... ddl | mariadb app`
    plitzi-jobs-mysql migrate --url URL [--prefix P] [--dry-run]   create/upgrade the tables (idempotent)
    plitzi-jobs-mysql jobs list [--space N] [...]            newest first; --action, --status, --limit, --offset
    plitzi-jobs-mysql jobs show|cancel --space N ID
    plitzi-jobs-mysql jobs retry --space N [--force] ID      --force to run a succeeded job again
    plitzi-jobs-mysql schedules list [--space N]             by space and action; --limit, --offset
    plitzi-jobs-mysql stats [--space N]                      per space and action: counts by status, the oldest
                                                             due job's age, lapsed leases
    plitzi-jobs-mysql --version

Without `--space`, `jobs list`, `schedules list` and `stats` cover every space (a page at a time).

`--url` defaults to PLITZI_MYSQL_URL; `--json` prints machine-readable output. Exit codes: 0 done; 1 the job is
in a state the operation does not apply to; 2 anything else wrong (one line on stderr, never a traceback).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import pymysql
from pymysql.constants import CR, ER

from .cli_output import job_dict, print_json, schedule_dict, show_job, table, when
from .errors import PlitziJobsError, SchemaMismatchError
from .migrations import sql_script
from .mysql.migrate import PlannedTable, plan_migration, run_migration
from .mysql.queue import MysqlJobQueue, create_mysql_job_queue
from .mysql.schema import (
    ABSENT,
    ORIGINAL,
    UNRECORDED,
    check_prefix,
    mysql_job_schema_statements,
    mysql_job_schema_upgrades,
    table_names,
)
from .records import TERMINAL_STATUSES, Job, JobStatus
from .url import MysqlUrl, parse_mysql_url

__all__ = ["main"]

PROG = "plitzi-jobs-mysql"
ENV_URL = "PLITZI_MYSQL_URL"
CONNECT_TIMEOUT_S = 10
STATUS_ORDER = tuple(status.value for status in JobStatus)
# Server errors that mean "cannot get there" rather than "the SQL was wrong".
UNREACHABLE = frozenset(
    {CR.CR_CONNECTION_ERROR, CR.CR_CONN_HOST_ERROR, CR.CR_UNKNOWN_HOST, CR.CR_SERVER_GONE_ERROR, CR.CR_SERVER_LOST}
)

T = TypeVar("T")


class CliError(Exception):
    """A problem reported as one line on stderr, with an exit code (2 unless said otherwise)."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error; the contract here is one line on stderr.
    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see --help)")


# -- connection settings --------------------------------------------------------------------------------------


def _url(args: argparse.Namespace) -> MysqlUrl:
    raw = (args.url or os.environ.get(ENV_URL, "")).strip()
    if not raw:
        raise CliError(f"no database URL: pass --url mysql://user:password@host:3306/database or set {ENV_URL}")
    try:
        url = parse_mysql_url(raw)
    except ValueError as error:
        raise CliError(str(error)) from None
    if url.database is None:
        raise CliError(f"the URL {url.render()} names no database (expected mysql://…/database)")
    try:
        url.ssl_context()  # a TLS file that cannot be read: say so before connecting
    except ValueError as error:
        raise CliError(str(error)) from None
    return url


def _prefix(args: argparse.Namespace) -> str:
    try:
        return check_prefix(args.prefix)
    except ValueError as error:
        raise CliError(str(error)) from None


def _where(url: MysqlUrl) -> str:
    return f"{url.host}:{url.port}" if url.unix_socket is None else url.unix_socket


def _explain(error: pymysql.err.MySQLError, url: MysqlUrl, prefix: str) -> CliError:
    """One line for what the server (or the network) said."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else None
    message = str(error.args[1]) if len(error.args) > 1 else str(error)
    where = _where(url)
    if code in UNREACHABLE:
        cause = error.__cause__  # aiomysql keeps the reason (refused, a certificate that failed) only here
        if cause is not None and str(cause) not in message:
            message += f" ({cause})"
        return CliError(f"cannot reach the MySQL server at {where}: {message}")
    if code == ER.ACCESS_DENIED_ERROR:
        return CliError(f"the server at {where} refused the login: {message}")
    if code == ER.BAD_DB_ERROR:
        return CliError(f"database `{url.database}` does not exist on the server at {where}")
    if code == ER.NO_SUCH_TABLE:
        return CliError(
            f"{message}: create the tables first (`{PROG} migrate`, the sql/ files or Alembic)"
            f" or check --prefix (now {prefix!r})"
        )
    return CliError(f"MySQL error {code}: {message}" if code is not None else f"MySQL error: {message}")


def _connect(url: MysqlUrl, prefix: str) -> Any:
    kwargs = url.pymysql_kwargs()
    kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    try:
        conn = pymysql.connect(**kwargs, autocommit=True)
    except pymysql.err.MySQLError as error:
        raise _explain(error, url, prefix) from None
    except OSError as error:  # e.g. the server's certificate failed verification
        raise CliError(f"cannot connect to the MySQL server at {_where(url)}: {error}") from None
    try:
        url.check_tls(conn)
    except ConnectionError as error:
        conn.close()
        raise CliError(str(error)) from None
    return conn


def _run_queue(args: argparse.Namespace, operation: Callable[[MysqlJobQueue], Awaitable[T]]) -> T:
    """Runs `operation` on the package's own queue over a small aiomysql pool; never sends DDL."""
    import aiomysql  # only the operator commands need it

    url = _url(args)
    prefix = _prefix(args)

    async def run() -> T:
        kwargs = url.aiomysql_kwargs()
        kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        pool = await aiomysql.create_pool(**kwargs, minsize=1, maxsize=2, autocommit=True)
        try:
            async with pool.acquire() as conn:
                url.check_tls(conn)  # ssl-mode=REQUIRED or stricter: never a silent plain-text fallback
            queue = create_mysql_job_queue(pool, table_prefix=prefix, create_tables=False)
            return await operation(queue)
        finally:
            pool.close()
            await pool.wait_closed()

    try:
        return asyncio.run(run())
    except pymysql.err.MySQLError as error:
        raise _explain(error, url, prefix) from None
    except (ValueError, SchemaMismatchError) as error:  # the queue's validation; tables it will not use
        raise CliError(str(error)) from None
    except PlitziJobsError as error:  # e.g. the server's init_connect switched the connection's charset
        raise CliError(str(error)) from None
    except OSError as error:  # includes TimeoutError, a TLS failure and a refused ssl-mode
        raise CliError(f"cannot reach the MySQL server at {_where(url)}: {error}") from None


# -- commands ----------------------------------------------------------------------------------------------------


def cmd_ddl(args: argparse.Namespace) -> int:
    prefix = _prefix(args)
    statements = mysql_job_schema_upgrades(prefix) if args.upgrades else mysql_job_schema_statements(prefix)
    if not statements:
        print("no upgrade statements in this release", file=sys.stderr)
    sys.stdout.write(sql_script(statements))
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    url = _url(args)
    prefix = _prefix(args)
    conn = _connect(url, prefix)
    try:
        if args.dry_run:
            plan = plan_migration(conn, prefix)
            for planned in plan.tables:
                print(f"`{planned.table.name}`: {planned.table.describe()}; {planned.action}")
            refusal = plan.refusal()
            if refusal is not None:
                raise CliError(str(refusal))
            print(f"dry run: nothing changed (`{PROG} ddl --upgrades` prints the statements)")
            return 0
        plan, after = run_migration(
            conn, prefix, waiting=lambda: print(f"{PROG}: waiting for another migrate of these tables", file=sys.stderr)
        )
    except SchemaMismatchError as error:
        raise CliError(str(error)) from None
    except pymysql.err.MySQLError as error:
        raise _explain(error, url, prefix) from None
    finally:
        conn.close()
    for planned in plan.tables:
        print(f"{PROG}: table `{planned.table.name}` {_migrated(planned)}", file=sys.stderr)
    version = after.tables[0].version
    print(f"{PROG}: the schema is up to date (schema {version}) in database `{url.database}`", file=sys.stderr)
    return 0


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


def _next_page(args: argparse.Namespace, shown: int, total: int | None) -> str:
    """The hint under a full page: how to ask for the next one."""
    more = args.offset + shown < total if total is not None else shown == args.limit and shown > 0
    return f"; next page: --offset {args.offset + shown}" if more else ""


def _scope(spaces: Sequence[int] | None) -> str:
    return "all spaces" if not spaces else "space(s) " + ", ".join(str(s) for s in spaces)


def cmd_jobs_list(args: argparse.Namespace) -> int:
    page = _run_queue(
        args,
        lambda q: q.list_jobs(
            space_ids=args.space, action_id=args.action, status=args.status, limit=args.limit, offset=args.offset
        ),
    )
    if args.json:
        print_json({"jobs": [job_dict(j) for j in page.jobs], "total": page.total})
        return 0
    rows = [
        (j.id, j.space_id, j.action_id, j.status + ("*" if j.cancel_requested else ""),
         f"{j.attempts}/{j.max_attempts}", when(j.run_at), when(j.updated_at), j.error)
        for j in page.jobs
    ]  # fmt: skip
    print(table(("ID", "SPACE", "ACTION", "STATUS", "ATTEMPTS", "RUN AT", "UPDATED AT", "ERROR"), rows))
    if page.jobs:
        shown = f"{args.offset + 1}-{args.offset + len(page.jobs)}"
        print(
            f"\n{shown} of {page.total} job(s) in {_scope(args.space)}"
            + (" (* cancel requested)" if "*" in str(rows) else "")
            + _next_page(args, len(page.jobs), page.total)
        )
    else:
        print(f"\nno jobs here ({page.total} match in {_scope(args.space)})")
    return 0


def _job_or_fail(job: Job | None, args: argparse.Namespace) -> Job:
    if job is None:
        spaces = ", ".join(str(s) for s in args.space)
        raise CliError(f"no job {args.id!r} in space(s) {spaces}")
    return job


def cmd_jobs_show(args: argparse.Namespace) -> int:
    job = _job_or_fail(_run_queue(args, lambda q: q.get_job(args.space, args.id)), args)
    if args.json:
        print_json(job_dict(job))
    else:
        print(show_job(job))
    return 0


def _change(
    args: argparse.Namespace, action: Callable[[MysqlJobQueue], Awaitable[bool]]
) -> tuple[Job, bool, Job | None]:
    async def run(queue: MysqlJobQueue) -> tuple[Job | None, bool, Job | None]:
        before = await queue.get_job(args.space, args.id)
        if before is None:
            return None, False, None
        done = await action(queue)
        return before, done, await queue.get_job(args.space, args.id)

    before, done, after = _run_queue(args, run)
    return _job_or_fail(before, args), done, after


def _report(args: argparse.Namespace, before: Job, done: bool, after: Job | None, message: str) -> int:
    if args.json:
        print_json(
            {
                "id": before.id,
                "done": done,
                "status_before": before.status,
                "status": after.status if after else None,
                "cancel_requested": after.cancel_requested if after else None,
            }
        )
    print(message, file=sys.stdout if done and not args.json else sys.stderr)
    return 0 if done else 1


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    async def requeue(queue: MysqlJobQueue) -> bool:
        job = await queue.get_job(args.space, args.id)
        if job is not None and job.status == JobStatus.SUCCEEDED and not args.force:
            return False  # it did its work: running it again must be asked for
        return await queue.requeue(args.space, args.id)

    before, done, after = _change(args, requeue)
    if not done and before.status == JobStatus.SUCCEEDED and not args.force:
        message = f"{PROG}: job {before.id!r} succeeded; retrying runs it again: add --force if that is what you want"
    elif done:
        message = f"job {before.id!r} was {before.status}; requeued: pending now, attempts reset"
    else:
        finished = ", ".join(sorted(TERMINAL_STATUSES))
        message = f"{PROG}: job {before.id!r} is {before.status}; only a finished job ({finished}) can be retried"
    return _report(args, before, done, after, message)


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    before, done, after = _change(args, lambda q: q.cancel(args.space, args.id))
    if not done:
        message = f"{PROG}: job {before.id!r} is {before.status}; only a pending or running job can be cancelled"
    elif after is not None and after.status == "running":
        message = f"job {before.id!r} is running; its worker was asked to cancel it (on its next heartbeat)"
    else:
        message = f"job {before.id!r} cancelled"
    return _report(args, before, done, after, message)


def cmd_schedules_list(args: argparse.Namespace) -> int:
    schedules = _run_queue(args, lambda q: q.list_schedules(args.space, limit=args.limit, offset=args.offset))
    if args.json:
        print_json([schedule_dict(s) for s in schedules])
        return 0
    rows = [
        (s.space_id, s.action_id, s.cron, s.timezone or "UTC", s.environment, "yes" if s.enabled else "no",
         when(s.next_run_at), when(s.last_fire_at), s.missed, s.max_attempts)
        for s in schedules
    ]  # fmt: skip
    headers = ("SPACE", "ACTION", "CRON", "TIMEZONE", "ENV", "ENABLED", "NEXT RUN", "LAST FIRE", "MISSED", "MAX")
    print(table(headers, rows))
    if schedules:
        shown = f"{args.offset + 1}-{args.offset + len(schedules)}"
        print(f"\nschedules {shown} in {_scope(args.space)}" + _next_page(args, len(schedules), None))
    else:
        print(f"\nno schedules here ({_scope(args.space)}, from --offset {args.offset})")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    spaces: list[int] | None = args.space
    stats = _run_queue(args, lambda q: q.stats(space_ids=spaces))

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
    result = {
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
    if args.json:
        print_json(result)
        return 0
    print(f"jobs in `{table_names(_prefix(args)).jobs}`, {_scope(spaces)}, at {when(stats.now)} (server clock)\n")
    print(table(("STATUS", "JOBS"), [*stats.counts.items(), ("total", stats.total)]))
    print(f"\ndue pending jobs: {stats.pending_due}")
    overdue = "none" if age is None else f"{age:.3f} s overdue (run at {when(stats.oldest_due_run_at)})"
    print("oldest due job: " + overdue)
    print(f"running jobs whose lease lapsed: {stats.running_lease_lapsed}")
    if stats.actions:
        headers = ("SPACE", "ACTION", *(s.upper() for s in STATUS_ORDER), "TOTAL", "DUE", "OLDEST DUE", "LAPSED")
        rows = [
            (a.space_id, a.action_id, *a.counts.values(), a.total, a.pending_due,
             "-" if a.oldest_due_run_at is None else f"{age_of(a.oldest_due_run_at):.1f} s", a.running_lease_lapsed)
            for a in stats.actions
        ]  # fmt: skip
        print("\nper space and action (OLDEST DUE: how long the oldest due pending job has waited)\n")
        print(table(headers, rows))
    return 0


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
    space = _Parser(add_help=False)
    space.add_argument(
        "--space", action="append", type=_space_id, required=True, metavar="N", help="space id (repeatable)"
    )
    any_space = _Parser(add_help=False)
    any_space.add_argument(
        "--space", action="append", type=_space_id, metavar="N", help="only this space (repeatable); default all"
    )
    paged = _Parser(add_help=False)
    paged.add_argument("--limit", type=_count, default=50, help="at most this many (default 50)")
    paged.add_argument("--offset", type=_count, default=0, help="skip this many (default 0)")
    one_job = _Parser(add_help=False, parents=[common, space])
    one_job.add_argument("id", help="the job id, exactly as stored")

    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=_version())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ddl = commands.add_parser("ddl", parents=[prefix], help="print the CREATE TABLE statements (for piping)")
    ddl.add_argument("--upgrades", action="store_true", help="print the upgrade statements instead")
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
    listing.set_defaults(func=cmd_jobs_list)
    jobs.add_parser("show", parents=[one_job], help="one job with its history").set_defaults(func=cmd_jobs_show)
    retry = jobs.add_parser("retry", parents=[one_job], help="requeue a finished job")
    retry.add_argument("--force", action="store_true", help="also a job that succeeded (it runs again)")
    retry.set_defaults(func=cmd_jobs_retry)
    jobs.add_parser("cancel", parents=[one_job], help="cancel a pending or running job").set_defaults(
        func=cmd_jobs_cancel
    )

    schedules = commands.add_parser("schedules", help="the spaces' cron schedules").add_subparsers(
        dest="schedules_command", required=True, metavar="ACTION"
    )
    schedules.add_parser(
        "list", parents=[common, any_space, paged], help="the schedules by space and action"
    ).set_defaults(func=cmd_schedules_list)

    stats = commands.add_parser(
        "stats", parents=[common, any_space], help="per space and action: counts, oldest due job, lapsed leases"
    )
    stats.set_defaults(func=cmd_stats)
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

