"""The MySQL queue on the caller's own connection: `enqueue(..., connection=)`, `enqueue_many(..., connection=)`
and `complete_in(connection, ...)` run their statements inside whatever transaction the caller has open, so a job
exists exactly when the caller's transaction commits (the outbox pattern), and a handler's own writes commit
together with its job's success.

What the queue asks of the caller's connection, checked without a round trip (`CallerConnection.of`):
- an aiomysql connection in utf8mb4 (as the pool's), on the database the queue's pool names (the statements
  name the queue's tables without a database);
- nothing else: its autocommit, isolation level, sql_mode, time zone and session variables are its own and are
  never changed. The statements carry every instant as a parameter from the queue's clock (never the session's
  NOW()), and strings are escaped as the session's sql_mode asks (aiomysql reads NO_BACKSLASH_ESCAPES).
The queue never sends COMMIT, ROLLBACK, BEGIN or SET on it. Its pool is still used for first use (the schema
check) and for the clock's first reading, so the pool needs a free connection the first time.

On MariaDB Galera each statement carries the causal wait (`SET STATEMENT ... FOR`, nothing of the session); Group
Replication's consistency is a session setting, so on the caller's connection it is the caller's.

On a server conflict (1213 deadlock: the server rolled the caller's transaction back; 1205 lock wait timeout)
the driver's error reaches the caller unretried: only the caller can retry its transaction.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..contract import validation as check
from ..errors import ConnectionCharsetError, LeaseLostError
from .batch_statements import BatchStatements, batch_statements_for
from .queue_core import QueueCore
from .session import Connection, as_text, unavailable

T = TypeVar("T")


class CallerConnection(Connection):
    """The caller's connection: statements only, inside the caller's transaction; never a COMMIT or ROLLBACK."""

    @classmethod
    def of(cls, raw: Any, *, database: str | None, statement_prefix: str) -> CallerConnection:
        if (
            raw is None
            or not callable(getattr(raw, "cursor", None))
            or not callable(getattr(raw, "get_autocommit", None))
        ):
            raise TypeError(f"connection must be an aiomysql connection (pool.acquire()), not {type(raw).__name__}")
        charset = str(getattr(raw, "charset", "") or "").lower()
        if charset != "utf8mb4":
            raise ConnectionCharsetError(
                f"the connection given is in {charset or 'an unknown charset'}, not utf8mb4: open it (or its pool) "
                "with charset='utf8mb4'"
            )
        on = getattr(raw, "db", None)
        on = as_text(on) if on is not None else None
        if database is not None and on != database:
            raise ValueError(
                f"the connection given is on database {on!r}, but the queue's tables are in {database!r}: "
                "use a connection of the queue's pool, or one opened on the same database"
            )
        return cls(raw, statement_prefix)

    @property
    def committed(self) -> bool:
        """Whether what the last statement wrote is committed already (autocommit, no transaction open)."""
        return bool(self.raw.get_autocommit()) and not bool(self.raw.get_transaction_status())

    async def end_read(self) -> None:
        return None  # the caller's transaction is the caller's to end

    async def rollback(self) -> None:
        return None

    async def _write(self, sql: str, args: Any, prefix: str | None) -> tuple[int, int]:
        async with self.raw.cursor() as cur:
            await cur.execute(*self._bind(sql, args, prefix))
            return int(cur.rowcount), int(cur.lastrowid or 0)

    async def transaction(self, steps: Any) -> None:
        raise TypeError("the caller's connection is in the caller's own transaction")

    async def run(self, operation: Callable[[Connection], Awaitable[T]]) -> T:
        """`operation` on this connection; a lost or refused connection is a `StoreUnavailableError`."""
        try:
            return await operation(self)
        except Exception as error:
            mapped = unavailable(error)
            if mapped is None:
                raise
            raise mapped from error


class CallerCalls(QueueCore):
    """The calls of `MysqlJobQueue` that take the caller's connection."""

    @property
    def _batch_sql(self) -> BatchStatements:
        return batch_statements_for(self._store.prefix)

    async def _caller(self, connection: Any) -> CallerConnection:
        """The caller's connection, checked; first use (through the pool) done."""
        store = self._store
        database = getattr(store.pool, "_conn_kwargs", {}).get("db")
        conn = CallerConnection.of(connection, database=None if database is None else as_text(database),
                                   statement_prefix="")  # fmt: skip
        if store.needs_ready:
            await store.ready()
        conn.prefix = store.statement_prefix  # Galera's causal wait, per statement: nothing of the session
        return conn

    def announce_due(self) -> None:
        """Wakes the workers listening on this queue's channel: call it once the transaction that enqueued due jobs
        has committed (an enqueue inside an open transaction announces nothing, since no worker could see the
        job yet). Without it the jobs are still claimed at the workers' next poll."""
        self.wakeups.notify(self.wakeup_topic)

    async def complete_in(self, connection: Any, *, job_id: str, worker_id: str, run_id: str | None = None) -> None:
        """Marks the job `succeeded` inside the caller's transaction, with the attempt `settle` would append, while
        `worker_id` holds it; else `LeaseLostError` and nothing written. The worker's own settle afterwards finds
        the job finished and changes nothing. `connection=None`: on a pooled connection, its own transaction (as
        the memory queue's `complete_in(None, ...)`)."""
        check.complete_in_args(job_id, worker_id, run_id)
        caller = None if connection is None else await self._caller(connection)
        now = self._clock.fresh()
        if now is None:
            now = await self._clock.now()
        args = {"id": job_id, "worker": worker_id, "run_id": run_id, "now": now}
        sql = self._batch_sql.complete_job

        async def complete(conn: Connection) -> int:
            return await conn.write(sql, args)

        # Not retried on the pool either: a retry after a commit whose answer was lost would find the job finished.
        if not await (self._store.run(complete) if caller is None else caller.run(complete)):
            raise LeaseLostError(
                f"job {job_id!r} is not held by worker {worker_id!r} (its lease lapsed and another claim took it, "
                "or it is finished already): nothing was written; let your transaction roll back"
            )
