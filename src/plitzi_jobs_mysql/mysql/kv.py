"""The key/value store over a MySQL pool: lifetimes judged by the server in the statement that reads or writes."""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import pymysql

from .. import validation as check
from .session import Connection, MysqlStore, is_conflict, is_duplicate

log = logging.getLogger(__name__)

PURGE_EVERY_S = 60.0
PURGE_BATCH = 1000
INT64_OFFSET = 2**63


def _fingerprint(value: str) -> tuple[int, str]:
    """What the kv statements compare a stored value with: its UTF-8 length and SHA-256, as MySQL's SHA2 gives it."""
    encoded = value.encode("utf-8")
    return len(encoded), hashlib.sha256(encoded).hexdigest()


class MysqlKv:
    """A `KvStore` in MySQL. Build it with `create_mysql_kv`."""

    def __init__(self, pool: Any, *, table_prefix: str = "", create_tables: bool = True) -> None:
        self._store = MysqlStore(pool, table_prefix=table_prefix, create_tables=create_tables)
        self._sql = self._store.sql
        self._next_purge = 0.0

    async def _purge_if_due(self) -> None:
        """Lapsed keys already answer nothing; this only gives their rows back, a bounded batch a minute."""
        if time.monotonic() < self._next_purge:
            return
        self._next_purge = time.monotonic() + PURGE_EVERY_S
        try:
            await self._store.run(lambda conn: conn.write(self._sql.kv_purge_lapsed, (PURGE_BATCH,)))
        except pymysql.err.MySQLError:
            log.debug("purging lapsed keys failed; the next minute tries again", exc_info=True)

    async def get(self, key: str) -> str | None:
        check.kv_key(key)
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.kv_get, (key,)))
        return str(rows[0][0]) if rows else None

    async def set(self, key: str, value: str, ttl_seconds: float | None = None) -> None:
        ttl = check.kv_write_args(key, value, ttl_seconds)
        await self._store.ready()
        self._store.check_fits("value", value)
        await self._purge_if_due()
        await self._store.retrying(lambda conn: conn.write(self._sql.kv_set, (key, value, ttl)))

    async def delete(self, key: str) -> None:
        check.kv_key(key)
        await self._store.retrying(lambda conn: conn.write(self._sql.kv_delete, (key,)))

    async def increment(self, key: str, amount: int = 1) -> int:
        check.kv_key(key)
        check.increment_amount(amount)
        # Counted in one statement: the new value comes back as LAST_INSERT_ID() + 2**63, and 0 means the live
        # value was left alone (not an integer, or the sum would leave the signed 64-bit range).
        args = {"k": key, "amount": amount}
        # Retried on a conflict: a statement that lost (a deadlock, or Galera's certification) changed nothing.
        result = await self._store.retrying(lambda conn: conn.write_returning_id(self._sql.kv_increment, args))
        if result == 0:
            current = await self.get(key)
            if current is not None:
                check.increment_result(key, check.parse_counter(key, current), amount)  # raises the reason
            raise ValueError(f"the value of {key!r} could not be incremented by {amount}")
        return result - INT64_OFFSET

    async def expire(self, key: str, ttl_seconds: float) -> None:
        check.kv_key(key)
        ttl = check.ttl_ms(ttl_seconds, optional=False)
        await self._store.retrying(lambda conn: conn.write(self._sql.kv_expire, (ttl, key)))

    async def swap(self, key: str, expected: str | None, value: str, ttl_seconds: float | None = None) -> bool:
        ttl = check.kv_write_args(key, value, ttl_seconds, expected)
        await self._store.ready()
        self._store.check_fits("value", value)
        try:
            if expected is None:
                return await self._store.run(lambda conn: self._insert_if_absent(conn, key, value, ttl))
            return await self._store.run(lambda conn: self._replace(conn, key, expected, value, ttl))
        except pymysql.err.MySQLError as error:
            if is_conflict(error):  # another writer's change won (on Galera, at COMMIT): a lost race
                return False
            raise

    async def _insert_if_absent(self, conn: Connection, key: str, value: str, ttl: int | None) -> bool:
        for _ in range(2):
            try:
                await conn.write(self._sql.kv_insert, (key, value, ttl))
                return True
            except pymysql.err.IntegrityError as error:
                if not is_duplicate(error):
                    raise
            # Taken, unless what holds it has lapsed: then it is absent, and one racing writer gets it.
            if not await conn.write(self._sql.kv_delete_lapsed_key, (key,)):
                return False
        return False

    async def _replace(self, conn: Connection, key: str, expected: str, value: str, ttl: int | None) -> bool:
        length, digest = _fingerprint(expected)
        if await conn.write(self._sql.kv_replace, (value, ttl, key, length, digest)):
            return True
        # Without CLIENT.FOUND_ROWS an UPDATE that writes back what was there reports 0 rows: still a success.
        return expected == value and bool(await conn.fetch(self._sql.kv_is_live_value, (key, length, digest)))


def create_mysql_kv(pool: Any, *, table_prefix: str = "", create_tables: bool = True) -> MysqlKv:
    """A `KvStore` over an aiomysql pool the caller opened (and closes)."""
    return MysqlKv(pool, table_prefix=table_prefix, create_tables=create_tables)
