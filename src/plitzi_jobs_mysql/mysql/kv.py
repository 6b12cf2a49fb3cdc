"""The key/value store over a MySQL pool: lifetimes judged by the server in the statement that reads or writes."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pymysql
from pymysql.constants import ER

from ..contract import kv_validation as check
from ..contract.capabilities import DeletesUnchanged, TakesAbsent
from ..contract.protocols import KvStore
from ..contract.validation import INT64_MIN
from ..errors import KvRowLockedError, StoreUnavailableError
from .session import RETRIES, Connection, MysqlStore, as_text, error_code, is_conflict, is_duplicate

log = logging.getLogger(__name__)

PURGE_EVERY_S = 60.0
PURGE_BATCH = 1000
INT64_OFFSET = 2**63
# Lock waits a swap sits out (each the server's innodb_lock_wait_timeout) before it says it could not get the row.
LOCK_WAITS = 2


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
        except (pymysql.err.MySQLError, StoreUnavailableError):  # e.g. a read-only server: reads still work
            log.debug("purging lapsed keys failed; the next minute tries again", exc_info=True)

    async def get(self, key: str) -> str | None:
        check.kv_key(key)
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.kv_get, (key,)))
        return str(rows[0][0]) if rows else None

    async def set(self, key: str, value: str, ttl_seconds: float | None = None) -> None:
        ttl = check.kv_write_args(key, value, ttl_seconds)
        if self._store.needs_ready:
            await self._store.ready()
        self._store.refuse_unfit("value", value)
        await self._purge_if_due()
        await self._store.retrying(lambda conn: conn.write(self._sql.kv_set, (key, value, ttl)))

    async def delete(self, key: str) -> None:
        check.kv_key(key)
        await self._store.retrying(lambda conn: conn.write(self._sql.kv_delete, (key,)))

    async def increment(self, key: str, amount: int = 1) -> int:
        check.kv_key(key)
        check.increment_amount(amount)
        # Counted in one statement: the new value comes back as LAST_INSERT_ID() - 2**63, and 0 means the live
        # value was left alone (not an integer, or the sum would leave the signed 64-bit range) -- or that it
        # was counted down to -2**63, the one new value that reads 0 too. Such a count changed the row (2
        # affected rows, with or without CLIENT.FOUND_ROWS), a value left alone never does.
        args = {"k": key, "amount": amount}
        # Retried on a conflict: a statement that lost (a deadlock, or Galera's certification) changed nothing.
        rows, result = await self._store.retrying(lambda conn: conn.write_returning_id(self._sql.kv_increment, args))
        if result != 0:
            return result - INT64_OFFSET
        if rows == 2:
            return INT64_MIN
        current = await self.get(key)
        if current is not None:
            value = check.increment_result(key, check.parse_counter(key, current), amount)  # raises the reason
            if amount == 0:
                return value  # -2**63 plus nothing: a count that changed nothing, so no row reported it
        raise ValueError(f"the value of {key!r} could not be incremented by {amount}")

    async def expire(self, key: str, ttl_seconds: float) -> None:
        check.kv_key(key)
        ttl = check.ttl_ms(ttl_seconds, optional=False)
        await self._store.retrying(lambda conn: conn.write(self._sql.kv_expire, (ttl, key)))

    async def swap(self, key: str, expected: str | None, value: str, ttl_seconds: float | None = None) -> bool:
        ttl = check.kv_write_args(key, value, ttl_seconds, expected)
        if self._store.needs_ready:
            await self._store.ready()
        self._store.refuse_unfit("value", value)

        async def cas(conn: Connection) -> bool:
            if expected is None:
                return await self._insert_if_absent(conn, key, value, ttl)
            return await self._replace(conn, key, expected, value, ttl)

        waits = 0
        for attempt in range(RETRIES):
            try:
                return await self._store.run(cas)
            except pymysql.err.MySQLError as error:
                if not is_conflict(error):
                    raise
                code = error_code(error)
            # A deadlock (1213) or lock wait (1205) is not by itself a lost race: on one server it may come from
            # a purge or a user's transaction, while on Galera a certification failure means another writer's
            # change won. Which one it was, the value in place tells.
            current = await self.get(key)
            if current != expected:
                return False  # another value is in place (for expected=None: any live value)
            if code == ER.LOCK_WAIT_TIMEOUT:
                waits += 1
                if waits >= LOCK_WAITS:
                    break
            log.debug("swap of %r met a conflict (%s) with the expected value still in place; retrying", key, code)
            await asyncio.sleep(random.uniform(0.001, 0.005) * (2**attempt))
        message = (
            f"swap of kv key {key!r} could not get its row in time: another transaction held it past the server's "
            f"innodb_lock_wait_timeout (or kept deadlocking with it) while the expected value was still in place; "
            "nothing was written"
        )
        log.warning("%s", message)
        raise KvRowLockedError(message)

    async def take_absent(self, pairs: Sequence[tuple[str, str]], ttl_seconds: float | None = None) -> list[bool]:
        """`swap(key, None, value, ttl_seconds)` for many keys, answered per pair: one statement when every key
        was absent (a worker's single-flight keys for one claim), a read and per-key swaps when one was not."""
        items = list(pairs)
        ttl = None
        for key, value in items:
            ttl = check.kv_write_args(key, value, ttl_seconds)
        if len({key for key, _ in items}) != len(items):
            raise ValueError("take_absent takes each key once")
        if not items:
            return []
        args = [arg for key, value in items for arg in (key, value, ttl)]
        sql = self._sql.kv_insert_absent.format(values=", ".join([self._sql.kv_insert_absent_values] * len(items)))
        try:
            # All or nothing: a key that exists (live or lapsed) fails the whole statement with 1062.
            await self._store.run(lambda conn: conn.write(sql, args))
            return [True] * len(items)
        except pymysql.err.MySQLError as error:
            if not (is_duplicate(error) or is_conflict(error)):  # a conflict: lost to another writer (Galera)
                raise
        # Nothing was written. A live key is present, whatever it holds (the very value given included); the
        # others are absent or lapsed, which swap() tells apart.
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.kv_holders, ([k for k, _ in items],)))
        live = {as_text(k) for k, _v in rows}
        return [key not in live and await self.swap(key, None, value, ttl_seconds) for key, value in items]

    async def delete_unchanged(self, pairs: Sequence[tuple[str, str]]) -> None:
        """Deletes each key that still holds the value paired with it, in one statement per 500 pairs: a
        worker's single-flight keys given back, never one another worker has taken since."""
        items = list(pairs)
        for key, value in items:
            check.kv_write_args(key, value, None)
        for start in range(0, len(items), 500):
            chunk = items[start : start + 500]
            sql = self._sql.kv_delete_unchanged + " OR ".join([self._sql.kv_delete_unchanged_one] * len(chunk))
            args = [arg for pair in chunk for arg in pair]

            async def delete(conn: Connection, sql: str = sql, args: list[str] = args) -> int:
                return await conn.write(sql, args)

            await self._store.retrying(delete)

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


if TYPE_CHECKING:  # mypy checks the MySQL kv keeps the contract's Protocol and offers the capabilities
    _kv: KvStore = MysqlKv(None)
    _takes: TakesAbsent = MysqlKv(None)
    _deletes: DeletesUnchanged = MysqlKv(None)
