"""`plitzi-jobs-mysql dashboard`: the operators' dashboard (plitzi_jobs_mysql.web) served by uvicorn over a small
pool of the package's own queue. It binds 127.0.0.1 unless told otherwise, and refuses any other address without a
token: whoever reaches it could read every job's input and retry or cancel jobs."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import os
import sys
from typing import Any

import pymysql

from ..errors import PlitziJobsError, SchemaMismatchError
from ..mysql.queue import create_mysql_job_queue
from .connect import CONNECT_TIMEOUT_S, PROG, CliError, database_url, explain, server_at, table_prefix

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1", "[::1]")
POOL_SIZE = 4


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _token(args: argparse.Namespace) -> str | None:
    if args.token_env is None:
        return None
    token = os.environ.get(args.token_env, "")
    if not token:
        raise CliError(f"--token-env {args.token_env}: that environment variable is not set or is empty")
    return token


def cmd_dashboard(args: argparse.Namespace) -> int:
    try:
        import uvicorn
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        from ..web import create_dashboard
        from ..web.app import check_settings
    except ImportError as error:
        raise CliError(f"the dashboard needs the web extra ({error.name} is missing): "
                       "pip install 'plitzi_jobs_mysql[web]'") from None  # fmt: skip
    url = database_url(args)
    prefix = table_prefix(args)
    token = _token(args)
    loopback = is_loopback(args.host)
    if not loopback and token is None:
        raise CliError(
            f"refusing to serve on {args.host} without a token: anyone who reaches it could read job inputs and "
            "change jobs; pass --token-env NAME (an environment variable holding at least 16 characters)"
        )
    try:
        check_settings(args.space, args.read_only, token)  # before connecting
    except (TypeError, ValueError) as error:
        raise CliError(str(error)) from None
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("plitzi_jobs_mysql").setLevel(logging.WARNING)

    async def serve() -> None:
        import aiomysql

        kwargs = url.aiomysql_kwargs()
        kwargs.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
        pool = await aiomysql.create_pool(**kwargs, minsize=1, maxsize=POOL_SIZE, autocommit=True)
        try:
            async with pool.acquire() as conn:
                url.check_tls(conn)
            queue = create_mysql_job_queue(pool, table_prefix=prefix, create_tables=False)
            await queue.get_job([0], "-")  # first use: the tables' version and the connection's charset
            app: Any = create_dashboard(queue, spaces=args.space, read_only=args.read_only, token=token)
            if loopback:  # a page on another site cannot reach it through a name of its own (DNS rebinding)
                app = TrustedHostMiddleware(app, allowed_hosts=[*LOOPBACK_NAMES, args.host])
            config = uvicorn.Config(app, host=args.host, port=args.port, lifespan="off", server_header=False,
                                    log_config=None, proxy_headers=False)  # fmt: skip
            server = uvicorn.Server(config)
            shown = f"[{args.host}]" if ":" in args.host else args.host
            print(
                f"{PROG}: dashboard of database `{url.database}` at {server_at(url)} on http://{shown}:{args.port}/"
                + (" (read-only)" if args.read_only else "") + (" (token required)" if token else ""),
                file=sys.stderr, flush=True,
            )  # fmt: skip
            await server.serve()
        finally:
            pool.close()
            await pool.wait_closed()

    try:
        asyncio.run(serve())
    except pymysql.err.MySQLError as error:
        raise explain(error, url, prefix) from None
    except (ValueError, SchemaMismatchError, PlitziJobsError) as error:
        raise CliError(str(error)) from None
    except OSError as error:
        raise CliError(f"cannot reach the MySQL server at {server_at(url)} or serve on {args.host}: {error}") from None
    return 0


def add_parser(commands: Any, conn: argparse.ArgumentParser, space_type: Any) -> None:
    parser = commands.add_parser(
        "dashboard", parents=[conn], help="serve the operators' dashboard in the browser (the web extra)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8787, help="port (default 8787)")
    parser.add_argument("--read-only", action="store_true", help="no retry, cancel, pause or bulk operation")
    parser.add_argument("--token-env", default=None, metavar="NAME",
                        help="demand the token held in this environment variable on every request")  # fmt: skip
    parser.add_argument("--space", action="append", type=space_type, metavar="N",
                        help="show only this space (repeatable); default all")  # fmt: skip
    parser.set_defaults(func=cmd_dashboard)
