"""The server's time-zone tables, loaded once so ``SET time_zone='Europe/Berlin'`` works."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pymysql

from ..url import parse_mysql_url
from .databases import connect
from .host import find_binary

__all__ = ["load_time_zones"]

logger = logging.getLogger(__name__)

_TZ_LOCK = "plitzi_jobs_mysql.load_time_zones"


def _zoneinfo_dir() -> str | None:
    for candidate in (os.environ.get("TZDIR"), "/usr/share/zoneinfo", "/usr/lib/zoneinfo"):
        if candidate and os.path.isfile(os.path.join(candidate, "Europe", "Berlin")):
            return candidate
    # The tzdata wheel (a dependency of the package) ships a compiled zoneinfo tree.
    spec = importlib.util.find_spec("tzdata")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(location, "zoneinfo")
        if os.path.isfile(os.path.join(candidate, "Europe", "Berlin")):
            return candidate
    return None


def _tzinfo_sql(is_mariadb: bool) -> str:
    names = ("mariadb-tzinfo-to-sql", "mysql_tzinfo_to_sql")
    if not is_mariadb:
        names = ("mysql_tzinfo_to_sql", "mariadb-tzinfo-to-sql")
    tool = find_binary(names)
    if tool is None:
        raise RuntimeError(
            "cannot load the time-zone tables: neither mariadb-tzinfo-to-sql nor mysql_tzinfo_to_sql is "
            "installed (install mariadb-server or mysql-server, or load them yourself with "
            "'mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb mysql')"
        )
    zoneinfo = _zoneinfo_dir()
    if zoneinfo is None:
        raise RuntimeError("cannot load the time-zone tables: no zoneinfo directory (install the tzdata package)")
    result = subprocess.run([tool, zoneinfo], capture_output=True, check=False, timeout=120, stdin=subprocess.DEVNULL)
    if result.returncode != 0:
        raise RuntimeError(
            f"{tool} {zoneinfo} failed with exit code {result.returncode}: "
            + result.stderr.decode("utf-8", errors="replace")[-2000:]
        )
    return result.stdout.decode("utf-8", errors="replace")


def _sql_batches(script: str, max_bytes: int = 1 << 20) -> Iterator[str]:
    """Split a tzinfo script at statement ends (';' at the end of a line) into batches below max_bytes."""
    batch: list[str] = []
    size = 0
    for statement in re.split(r";[ \t]*\n", script):
        statement = statement.strip()
        if not statement:
            continue
        if batch and size + len(statement) > max_bytes:
            yield ";\n".join(batch)
            batch, size = [], 0
        batch.append(statement)
        size += len(statement) + 2
    if batch:
        yield ";\n".join(batch)


def _zone_count(cursor: Any) -> int:
    cursor.execute("SELECT COUNT(*) FROM mysql.time_zone_name")
    row = cursor.fetchone()
    return int(row[0]) if row else 0


def load_time_zones(url: str) -> None:
    """Fill the zone tables of the server ``url`` names when ``mysql.time_zone_name`` is empty.

    Quick (one query) when they are already loaded; concurrent callers on one server are serialised with
    ``GET_LOCK``, so the tables are loaded once.
    """
    parsed = parse_mysql_url(url)
    conn = connect(parsed, database="mysql", client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cur:
            if _zone_count(cur) > 0:
                return
            cur.execute("SELECT GET_LOCK(%s, 300)", (_TZ_LOCK,))
            row = cur.fetchone()
            if not row or row[0] != 1:
                raise RuntimeError("timed out waiting for another process loading the time-zone tables")
            try:
                if _zone_count(cur) > 0:
                    return
                cur.execute("SELECT VERSION()")
                version_row = cur.fetchone()
                version = str(version_row[0]) if version_row else ""
                started = time.monotonic()
                script = _tzinfo_sql(is_mariadb="mariadb" in version.lower())
                logger.info("loading time-zone tables into %s", parsed.render(hide_password=True))
                for batch in _sql_batches(script):
                    cur.execute(batch)
                    while cur.nextset():
                        pass
                count = _zone_count(cur)
                logger.info("loaded %d time-zone names in %.1f s", count, time.monotonic() - started)
                if count == 0:
                    raise RuntimeError("loading the time-zone tables left mysql.time_zone_name empty")
            finally:
                cur.execute("SELECT RELEASE_LOCK(%s)", (_TZ_LOCK,))
                cur.fetchall()
    finally:
        conn.close()
