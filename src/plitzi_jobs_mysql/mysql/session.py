"""Borrowing a connection from the user's pool, whatever it was opened with.

- `autocommit=False` (aiomysql's default): on MariaDB a plain SELECT holds a read view while the server's "in
  transaction" flag stays unset, so the pool hands the connection on as clean and the next borrower reads stale
  data (and DDL on the table hangs). Every write here is its own transaction (committed at once, so no two rows
  are ever locked together and claimers cannot deadlock), and every borrow ends with a COMMIT or ROLLBACK.
- A conflict the server reports (deadlock 1213, lock wait 1205, a row held when locked NOWAIT 3572; on Galera a
  certification failure at COMMIT, 1213; on Group Replication one at COMMIT, 3101 or 1180) is a lost race for a
  compare-and-set, and a retry for an idempotent write: never a success.
- A server that cannot be reached, a connection lost mid-call, or a server refusing writes (read-only) is a
  `StoreUnavailableError` (a `ConnectionError`) carrying the driver's error as `__cause__`, so a caller can tell
  "try again later" from a bug without knowing PyMySQL's error numbers.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any, TypeVar

import pymysql
from pymysql.constants import CR, ER

from ..errors import ConnectionCharsetError, PayloadTooLargeError, StoreUnavailableError
from . import packet
from .flavour import CAUSAL_WAIT, GROUP_CONSISTENCY, Flavour, flavour_of
from .schema.state import ABSENT, UNRECORDED, SchemaState, check_prefix, mysql_job_schema_statements, schema_state
from .schema.tables import table_names
from .statements import (
    CLUSTER_PROBE,
    CURRENT_DATABASE,
    SCHEMA_COLUMNS,
    SCHEMA_TABLES,
    Statements,
    statements_for,
)
from .totals_setup import ensure_totals

log = logging.getLogger(__name__)

# A row held by another transaction when the statement locks it NOWAIT (MySQL's claims and renewals).
ER_LOCK_NOWAIT = 3572
# Group Replication's certification failure at COMMIT: 3101 "Plugin instructed the server to rollback the current
# transaction" (the loser of a write conflict between members), or 1180 "Got error 149 - 'Lock deadlock; Retry
# transaction' during COMMIT" (a local transaction aborted by a certified remote one). Both rolled back whole.
ER_TRANSACTION_ROLLBACK_DURING_COMMIT = 3101
CONFLICTS = frozenset({
    ER.LOCK_DEADLOCK, ER.LOCK_WAIT_TIMEOUT, ER_LOCK_NOWAIT, ER_TRANSACTION_ROLLBACK_DURING_COMMIT,
    ER.ERROR_DURING_COMMIT,
})  # fmt: skip
# Cannot connect (socket, TCP, unknown host), gone away, lost mid-call; or the server is shutting down (1053: MySQL
# answers a statement with it on a connection it is about to close).
UNREACHABLE = frozenset({
    CR.CR_CONNECTION_ERROR, CR.CR_CONN_HOST_ERROR, CR.CR_UNKNOWN_HOST, CR.CR_SERVER_GONE_ERROR, CR.CR_SERVER_LOST,
    CR.CR_SERVER_LOST_EXTENDED, ER.SERVER_SHUTDOWN,
})  # fmt: skip
# The server refuses writes: --read-only (1290), a read-only transaction (1792), innodb_read_only (1836), and a
# Galera node outside the primary component (1047, "WSREP has not yet prepared node for application use").
ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION = 1792
ER_READ_ONLY_MODE = 1836
READ_ONLY = frozenset(
    {ER.OPTION_PREVENTS_STATEMENT, ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION, ER_READ_ONLY_MODE, ER.UNKNOWN_COM_ERROR}
)
# A Group Replication member that cannot serve yet: recovering after a (re)join, or out of the group. It refuses
# the session's consistency setting (3796) until it is ONLINE; a load balancer's TCP check sends clients to it
# as soon as its port is open.
ER_GROUP_MEMBER_NOT_ONLINE = 3796
RETRIES = 5
# MariaDB's per-statement setting: reads, updates/deletes and inserts (1 + 2 + 4) wait until this node has applied
# every write the cluster committed before they started.
GALERA_CAUSAL = f"SET STATEMENT {CAUSAL_WAIT} FOR "
# Marks a borrowed connection whose session the adapter already set up.
SESSION_MARK = "_plitzi_jobs_session_set_up"

T = TypeVar("T")


def as_text(value: Any) -> str:
    """VARBINARY columns come back as bytes; they hold UTF-8 text."""
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


def error_code(error: BaseException) -> int | None:
    if isinstance(error, pymysql.err.MySQLError) and error.args and isinstance(error.args[0], int):
        return error.args[0]
    return None


def is_conflict(error: BaseException) -> bool:
    return error_code(error) in CONFLICTS


def is_duplicate(error: BaseException) -> bool:
    return bool(error_code(error) == ER.DUP_ENTRY)


def unavailable(error: BaseException) -> StoreUnavailableError | None:
    """The `StoreUnavailableError` a driver or socket error stands for, or None when it is something else."""
    code = error_code(error)
    if code in UNREACHABLE or isinstance(error, pymysql.err.InterfaceError):
        return StoreUnavailableError(
            f"the MySQL server cannot be reached or the connection was lost ({error}); whether a write in flight "
            "took effect is unknown: retry it once the server answers (the package's writes are safe to repeat)"
        )
    if code in READ_ONLY:
        return StoreUnavailableError(f"the MySQL server refuses writes ({error}): is it a read-only replica?")
    if code == ER_GROUP_MEMBER_NOT_ONLINE:
        return StoreUnavailableError(
            f"the MySQL server is a Group Replication member that is not ONLINE ({error}): it is recovering or out "
            "of the group; retry once it has rejoined, or through another member"
        )
    if isinstance(error, OSError) and not isinstance(error, (TimeoutError, StoreUnavailableError)):
        return StoreUnavailableError(f"the connection to the MySQL server failed ({error!r})")
    return None


def bind(sql: str, args: Any) -> tuple[str, Any]:
    """Expands a list argument into `(%s, %s, ...)`: PyMySQL 1.2 no longer escapes sequences itself."""
    if isinstance(args, dict):
        if list not in map(type, args.values()):
            return sql, args
        flat: dict[str, Any] = {}
        for name, value in args.items():
            if isinstance(value, list):
                names = [f"{name}__{i}" for i in range(len(value))]
                sql = sql.replace(f"%({name})s", "(" + ", ".join(f"%({n})s" for n in names) + ")")
                flat.update(zip(names, value, strict=True))
            else:
                flat[name] = value
        return sql, flat
    if args is None or list not in map(type, args):  # the common case, checked in C (the queue passes plain lists)
        return sql, args
    pieces = sql.split("%s")
    if len(pieces) != len(args) + 1:
        raise ValueError("placeholder count does not match the arguments")
    out = [pieces[0]]
    values: list[Any] = []
    for value, piece in zip(args, pieces[1:], strict=True):
        if isinstance(value, list):
            out.append("(" + ", ".join(["%s"] * len(value)) + ")")
            values.extend(value)
        else:
            out.append("%s")
            values.append(value)
        out.append(piece)
    return "".join(out), values


class Connection:
    """One borrowed connection: reads, and writes that are each their own transaction."""

    def __init__(self, raw: Any, statement_prefix: str = "", explicit_writes: bool = False) -> None:
        self.raw = raw
        self.autocommit: bool = bool(raw.get_autocommit())
        self.prefix = statement_prefix
        self.open_read = False
        # Group Replication: a write runs between BEGIN and COMMIT. Its consistency wait (`BEFORE`) then runs at
        # BEGIN, with no row locked; a lone statement also runs it again for each trigger's statement, holding the
        # rows it changed, while the member's applier waits on them: a deadlock (flavour.py).
        self.explicit_writes = explicit_writes

    def _bind(self, sql: str, args: Any, prefix: str | None = None) -> tuple[str, Any]:
        sql, args = bind(sql, args)
        return (self.prefix if prefix is None else prefix) + sql, args

    async def fetch(self, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
        async with self.raw.cursor() as cur:
            await cur.execute(*self._bind(sql, args))
            self.open_read = not self.autocommit  # a read view the borrow must close
            return list(await cur.fetchall())

    async def end_read(self) -> None:
        """Ends the transaction a read opened (and any locks it took) when autocommit is off."""
        if not self.autocommit and self.open_read:
            await self.raw.commit()
            self.open_read = False

    async def write(self, sql: str, args: Any = None, *, prefix: str | None = None) -> int:
        """Runs one statement as its own transaction; answers the affected rows. `prefix` replaces the
        connection's statement prefix (a claim's bounds its lock wait)."""
        return (await self._write(sql, args, prefix))[0]

    async def write_returning_id(self, sql: str, args: Any = None, *, prefix: str | None = None) -> tuple[int, int]:
        """Like `write`, answering the affected rows and the LAST_INSERT_ID() the statement set (the OK packet's
        insert id)."""
        return await self._write(sql, args, prefix)

    async def _write(self, sql: str, args: Any, prefix: str | None) -> tuple[int, int]:
        try:
            if self.explicit_writes:
                await self.raw.begin()
            async with self.raw.cursor() as cur:
                await cur.execute(*self._bind(sql, args, prefix))
                result = int(cur.rowcount), int(cur.lastrowid or 0)
            if not self.autocommit or self.explicit_writes:
                await self.raw.commit()  # on Galera only a successful COMMIT proves a win
                self.open_read = False
            return result
        except BaseException:
            await self.rollback()
            raise

    async def rollback(self) -> None:
        if not self.autocommit or self.explicit_writes:
            try:
                await self.raw.rollback()
            except Exception:  # the connection is broken; the pool will drop it
                log.debug("rollback failed", exc_info=True)

    async def transaction(self, steps: Sequence[tuple[str, Any]]) -> None:
        """Runs the statements in one explicit transaction (BEGIN works under either autocommit)."""
        await self.raw.begin()
        try:
            async with self.raw.cursor() as cur:
                for sql, args in steps:
                    await cur.execute(*self._bind(sql, args))
            await self.raw.commit()
        except BaseException:
            try:
                await self.raw.rollback()
            except Exception:
                log.debug("rollback failed", exc_info=True)
            raise


class MysqlStore:
    """What the queue and the kv share: the pool, the statements for one prefix, and first use."""

    def __init__(self, pool: Any, *, table_prefix: str, create_tables: bool) -> None:
        if pool is None or not hasattr(pool, "acquire"):
            raise TypeError("pool must be an aiomysql pool (aiomysql.create_pool(..., charset='utf8mb4'))")
        if not isinstance(create_tables, bool):
            raise TypeError("create_tables must be a bool")
        self.pool = pool
        self.prefix = check_prefix(table_prefix)
        self.sql: Statements = statements_for(self.prefix)
        self.create_tables = create_tables
        self.listing_indexes = False  # the jobs table has both listing indexes (read on first use)
        self._ready = False
        self.statement_prefix = ""
        self.flavour = Flavour(mariadb=True, galera=False)  # until first use reads the server's
        self._ready_lock: asyncio.Lock | None = None
        #: The server's `max_allowed_packet`, learned on first use (until then, the smallest default in use).
        self.max_packet = 4 * 1024 * 1024
        self._packet_stale = False

    async def _first_use(self, conn: Connection) -> None:
        """Checks the connection's character set and the tables' schema, creates missing tables; remembered only
        once it succeeded."""
        if self._ready:
            return
        if self._ready_lock is None:
            self._ready_lock = asyncio.Lock()
        async with self._ready_lock:
            if self._ready:
                return
            charset = str(getattr(conn.raw, "charset", "utf8mb4") or "")
            rows = await conn.fetch(self.sql.session_charset)
            client, connection, results = rows[0]
            wrong = [
                f"{name}={value}"
                for name, value in (
                    ("client", charset),
                    ("character_set_client", client),
                    ("character_set_connection", connection),
                    ("character_set_results", results),
                )
                if value is not None and str(value).lower() != "utf8mb4"
            ]
            if wrong:
                raise ConnectionCharsetError(
                    "plitzi_jobs_mysql needs connections in utf8mb4 to store text whole, but this pool's are "
                    f"not ({', '.join(wrong)}): open the pool with aiomysql.create_pool(..., charset='utf8mb4')"
                )
            rows = await conn.fetch(self.sql.server_limits)
            self.max_packet, version = int(rows[0][0]), as_text(rows[0][1])
            state = await self._schema_state(conn)
            if state.error() is not None:
                # Nothing written yet: refusing here is what keeps a write from failing half-way on wrong tables.
                # The caller reports it (a worker or scheduler logs it once and stops), naming the database.
                rows = await conn.fetch(CURRENT_DATABASE)
                mismatch = replace(state, database=as_text(rows[0][0]) if rows and rows[0][0] else None).error()
                assert mismatch is not None
                raise mismatch
            if any(table.found == UNRECORDED for table in state.tables):
                log.info("tables %s carry no version record; `plitzi-jobs-mysql migrate` records it",
                         ", ".join(t.name for t in state.tables if t.found == UNRECORDED))  # fmt: skip
            if self.create_tables:
                await self._create_missing_tables(conn, state)
            if all(table.found != ABSENT for table in state.tables) or self.create_tables:
                await self._ensure_totals(conn, ddl=self.create_tables)
            galera, group = await self._cluster(conn)
            self.flavour = flavour_of(version, galera, group)
            if self.flavour.galera:
                # A node applies other nodes' writes a moment after they commit: without a causal wait, a
                # settle sent to one node right after the claim on another matches nothing and is lost.
                log.info(
                    "Galera cluster detected (%s): every statement waits for the node to be causally up to date",
                    version,
                )
            if self.flavour.group_replication:
                log.info(
                    "Group Replication member detected (%s): each borrowed session sets %s, so every "
                    "statement waits for the member to be up to date with the group",
                    version,
                    GROUP_CONSISTENCY,
                )
            self.statement_prefix = conn.prefix = self.flavour.statement_prefix
            conn.explicit_writes = self.flavour.group_replication
            self._ready = True

    async def _set_up_session(self, conn: Connection) -> None:
        """Where the server has no per-statement form (Percona XtraDB Cluster, Group Replication), the borrowed
        session's."""
        setup = self.flavour.session_setup
        if setup is None or getattr(conn.raw, SESSION_MARK, False):
            return
        # Group Replication refuses to change the consistency inside a transaction (1766): first use's reads may
        # have opened one on a pool without autocommit.
        await conn.end_read()
        async with conn.raw.cursor() as cur:
            await cur.execute(setup)
        setattr(conn.raw, SESSION_MARK, True)

    async def ready(self) -> None:
        """Makes sure first use has run, so what it learns about the server (the packet limit) is known."""
        if not self._ready:
            await self.run(lambda conn: asyncio.sleep(0))
        if self._packet_stale:
            rows = await self.run(lambda conn: conn.fetch(self.sql.server_limits))
            self.max_packet, self._packet_stale = int(rows[0][0]), False
            log.warning("the server's max_allowed_packet is now %d bytes", self.max_packet)

    def check_fits(self, name: str, value: str) -> int:
        """The value's size as sent; `PayloadTooLargeError` if no statement to this server could carry it."""
        return packet.check_fits(name, value, self.max_packet)

    def refuse_unfit(self, name: str, value: str) -> None:
        """`check_fits` for a caller that needs no size: a value short enough to fit anyway is not measured."""
        if not packet.surely_fits(value, self.max_packet):
            packet.check_fits(name, value, self.max_packet)

    @property
    def needs_ready(self) -> bool:
        """Whether `ready()` has anything to do: callers on a hot path skip the await when it has not."""
        return not self._ready or self._packet_stale

    async def _cluster(self, conn: Connection) -> tuple[bool, bool]:
        """(Galera, Group Replication): `wsrep_on` ON; a group named (its variables exist only where the plugin
        is loaded). SHOW VARIABLES answers nothing, rather than 1193, for a variable the server does not have."""
        rows = await conn.fetch(CLUSTER_PROBE)
        found = {as_text(name).lower(): as_text(value) for name, value in rows}
        return found.get("wsrep_on", "").upper() == "ON", bool(found.get("group_replication_group_name", ""))

    async def _schema_state(self, conn: Connection) -> SchemaState:
        names = list(table_names(self.prefix).all())
        tables = await conn.fetch(SCHEMA_TABLES, (names,))
        columns = await conn.fetch(SCHEMA_COLUMNS, (names,)) if tables else []
        return schema_state(self.prefix, tables, columns)

    async def _create_missing_tables(self, conn: Connection, state: SchemaState) -> None:
        """Only what is missing: no DDL (and no metadata lock) at all once the tables exist."""
        for table, statement in zip(state.tables, mysql_job_schema_statements(self.prefix)[: len(state.tables)],
                                    strict=True):  # fmt: skip
            if table.found == ABSENT:
                log.info("creating table %s", table.name)
                await conn.write(statement)

    async def _ensure_totals(self, conn: Connection, *, ddl: bool) -> None:
        self.listing_indexes = await ensure_totals(conn, self.prefix, ddl=ddl)

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        async with self.pool.acquire() as raw:
            conn = Connection(raw, self.statement_prefix, self.flavour.group_replication)
            ok = False
            try:
                await self._first_use(conn)
                await self._set_up_session(conn)
                yield conn
                ok = True
            except Exception as error:
                packet.drop_if_refused(raw, error_code(error))
                raise
            finally:
                await self._end_borrow(conn, ok)

    async def _end_borrow(self, conn: Connection, ok: bool) -> None:
        if not conn.autocommit:
            if not ok:
                await conn.rollback()
            elif conn.open_read:
                # Close the read view a read opened, so the pool hands on a connection without one.
                try:
                    await conn.raw.commit()
                except Exception:
                    log.debug("commit after a read failed", exc_info=True)

    async def run(self, operation: Callable[[Connection], Awaitable[T]]) -> T:
        try:
            # `connection()` written out: every statement of the queue comes through here, and the
            # generator-based context manager cost a measurable share of an enqueue's client CPU.
            async with self.pool.acquire() as raw:
                conn = Connection(raw, self.statement_prefix, self.flavour.group_replication)
                ok = False
                try:
                    if not self._ready:
                        await self._first_use(conn)
                    if self.flavour.session_setup is not None:
                        await self._set_up_session(conn)
                    result = await operation(conn)
                    ok = True
                    return result
                except Exception as error:
                    packet.drop_if_refused(raw, error_code(error))
                    raise
                finally:
                    if not conn.autocommit:  # nothing to end under autocommit: no coroutine for it either
                        await self._end_borrow(conn, ok)
        except Exception as error:
            if error_code(error) != ER.NET_PACKET_TOO_LARGE:
                mapped = unavailable(error)  # refused, lost or read-only: a StoreUnavailableError
                if mapped is None:
                    raise
                raise mapped from error
            # The server refused the statement whole (and dropped that connection): its max_allowed_packet is
            # smaller than first use found (changed, and the server restarted). Read it again on the next call.
            self._packet_stale = True
            raise PayloadTooLargeError(
                f"the server refused a statement larger than its max_allowed_packet, which is smaller than the "
                f"{self.max_packet} bytes found on first use (changed since?); nothing was written, and the limit is "
                "read again on the next call: raise max_allowed_packet on the server or store less"
            ) from error

    async def retrying(self, operation: Callable[[Connection], Awaitable[T]]) -> T:
        """For idempotent operations only: a conflict the server reports is retried, briefly and with jitter."""
        for attempt in range(RETRIES):
            try:
                return await self.run(operation)
            except pymysql.err.MySQLError as error:
                if not is_conflict(error) or attempt == RETRIES - 1:
                    raise
                log.debug("conflict (%s), retrying", error)
                await asyncio.sleep(random.uniform(0.001, 0.005) * (2**attempt))
        raise AssertionError("unreachable")
