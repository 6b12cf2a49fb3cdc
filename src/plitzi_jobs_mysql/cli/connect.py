"""How the operator commands reach the database: the URL and prefix they were given, a connection or a small
pool of the package's own queue, and the server's errors said in one line (`CliError`)."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CR, ER

from ..errors import PlitziJobsError, SchemaMismatchError
from ..mysql.queue import MysqlJobQueue, create_mysql_job_queue
from ..mysql.schema.state import check_prefix
from ..url import MysqlUrl, parse_database_url

PROG = "plitzi-jobs-mysql"
ENV_URL = "PLITZI_MYSQL_URL"
CONNECT_TIMEOUT_S = 10
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


def database_url(args: argparse.Namespace) -> MysqlUrl:
    raw = (args.url or os.environ.get(ENV_URL, "")).strip()
    if not raw:
        raise CliError(f"no database URL: pass --url mysql://user:password@host:3306/database or set {ENV_URL}")
    try:
        url = parse_database_url(raw)
    except ValueError as error:
        raise CliError(str(error)) from None
    try:
        url.ssl_context()  # a TLS file that cannot be read: say so before connecting
    except ValueError as error:
        raise CliError(str(error)) from None
    return url


def table_prefix(args: argparse.Namespace) -> str:
    try:
        return check_prefix(args.prefix)
    except ValueError as error:
        raise CliError(str(error)) from None


def server_at(url: MysqlUrl) -> str:
    return f"{url.host}:{url.port}" if url.unix_socket is None else url.unix_socket


def explain(error: pymysql.err.MySQLError, url: MysqlUrl, prefix: str) -> CliError:
    """One line for what the server (or the network) said."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else None
    message = str(error.args[1]) if len(error.args) > 1 else str(error)
    where = server_at(url)
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


def connect(url: MysqlUrl, prefix: str) -> Any:
    kwargs = url.pymysql_kwargs()
    kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    try:
        conn = pymysql.connect(**kwargs, autocommit=True)
    except pymysql.err.MySQLError as error:
        raise explain(error, url, prefix) from None
    except OSError as error:  # e.g. the server's certificate failed verification
        raise CliError(f"cannot connect to the MySQL server at {server_at(url)}: {error}") from None
    try:
        url.check_tls(conn)
    except ConnectionError as error:
        conn.close()
        raise CliError(str(error)) from None
    return conn


def run_queue(args: argparse.Namespace, operation: Callable[[MysqlJobQueue], Awaitable[T]]) -> T:
    """Runs `operation` on the package's own queue over a small aiomysql pool; never sends DDL."""
    import aiomysql  # only the operator commands need it

    url = database_url(args)
    prefix = table_prefix(args)

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
        raise explain(error, url, prefix) from None
    except (ValueError, SchemaMismatchError) as error:  # the queue's validation; tables it will not use
        raise CliError(str(error)) from None
    except PlitziJobsError as error:  # e.g. the server's init_connect switched the connection's charset
        raise CliError(str(error)) from None
    except OSError as error:  # includes TimeoutError, a TLS failure and a refused ssl-mode
        raise CliError(f"cannot reach the MySQL server at {server_at(url)}: {error}") from None
