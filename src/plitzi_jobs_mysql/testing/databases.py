"""A uniquely named database per test, dropped afterwards even when a test left a session in it."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
from collections.abc import Iterator
from typing import Any

import pymysql

from ..url import MysqlUrl, parse_mysql_url

__all__ = ["connect", "fresh_database", "server_sessions"]

logger = logging.getLogger(__name__)

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_]{1,40}$")


def connect(url: MysqlUrl | str, **extra: Any) -> pymysql.connections.Connection[Any]:
    parsed = parse_mysql_url(url) if isinstance(url, str) else url
    kwargs = parsed.pymysql_kwargs()
    kwargs.setdefault("connect_timeout", 10)
    kwargs["autocommit"] = True
    kwargs.update(extra)
    conn = pymysql.connect(**kwargs)
    try:
        parsed.check_tls(conn)  # ssl-mode=REQUIRED or stricter: never a silent plain-text fallback
    except ConnectionError:
        conn.close()
        raise
    return conn


def server_sessions(cur: Any, where: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """``(id, user, db, command)`` of the server's sessions matching ``where`` (columns ID, USER, DB, COMMAND).

    MySQL 8.0.22+ reads performance_schema.processlist: its information_schema.PROCESSLIST converts every
    session's statement text to utf8mb3 even when only other columns are asked for, and fails (3854) on a
    statement holding bytes that are not UTF-8 (a binary kv key). MariaDB has only information_schema's."""
    columns = "ID, USER, DB, COMMAND"
    for table in ("performance_schema.processlist", "information_schema.PROCESSLIST"):
        try:
            cur.execute(f"SELECT {columns} FROM {table} WHERE {where}", args)
        except pymysql.err.MySQLError as exc:
            if exc.args and exc.args[0] in (1142, 1146) and table.startswith("performance"):
                continue  # no such table (MariaDB, performance_schema off) or no right to it
            raise
        return [tuple(row) for row in cur.fetchall()]
    raise AssertionError("unreachable")


@contextlib.contextmanager
def fresh_database(url: str, prefix: str = "pjm_test") -> Iterator[str]:
    """Create a uniquely named ``utf8mb4_bin`` database on the server ``url`` names, yield its URL, drop it.

    The yielded URL is ``url`` with its database part replaced (rendered as ``mysql://…``).
    """
    if not _PREFIX_RE.match(prefix):
        raise ValueError("prefix must be 1-40 letters, digits or underscores")
    parsed = parse_mysql_url(url)
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    conn = connect(parsed.with_database(None))
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    finally:
        conn.close()
    logger.debug("created database %s", name)
    try:
        yield parsed.with_database(name).render(hide_password=False)
    finally:
        _drop_database(parsed.with_database(None), name)


def _drop_database(server: MysqlUrl, name: str) -> None:
    try:
        conn = connect(server)
    except pymysql.err.OperationalError as exc:
        logger.warning("could not connect to drop database %s (server gone?): %s", name, exc)
        return
    try:
        with conn.cursor() as cur:
            # A connection left inside a transaction holds metadata locks that would make DROP wait for
            # a year; wait briefly, then end the sessions still using the database and try again.
            cur.execute("SET SESSION lock_wait_timeout = 2")
            for attempt in range(3):
                try:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                    logger.debug("dropped database %s", name)
                    return
                except pymysql.err.OperationalError as exc:
                    if attempt == 2:
                        raise
                    logger.warning("DROP DATABASE %s waited too long (%s); ending its sessions", name, exc)
                    for thread_id, *_ in server_sessions(cur, "DB = %s AND ID <> CONNECTION_ID()", (name,)):
                        with contextlib.suppress(pymysql.err.MySQLError):
                            cur.execute(f"KILL {int(thread_id)}")
    finally:
        conn.close()
