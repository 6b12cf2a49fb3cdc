"""What every part of the MySQL job queue shares: its store and statements, the clock its instants come from,
and the retention purge that any claim, enqueue or settle may run."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pymysql

from ..contract import validation as check
from ..contract.clock import RESYNC_MS, InjectedClock, QueueClock, create_store_clock, from_epoch_ms
from ..contract.wakeups import LOCAL_WAKEUPS, WakeupChannel
from ..errors import StoreUnavailableError
from .schema.state import table_names
from .schema.totals import FOLD_BATCH
from .session import Connection, MysqlStore, is_conflict
from .totals_fold import TotalsDrift, fold_totals, totals_drift

# The queue's logger, whichever of its modules logs.
log = logging.getLogger("plitzi_jobs_mysql.mysql.queue")

PURGE_EVERY_MS = 60_000
PURGE_BATCH = 1000
FOLD_BATCHES_PER_PASS = 5
# A claim looks for lapsed leases (a read that steps over every running row) only when its pending read came back
# short of a full block (the backlog is almost drained, or the queue is idle: the read costs what it always did),
# and otherwise at most once per this many ms per queue, or a tenth of the claim's lease if that is shorter. So
# claims beside 10,000 running jobs cost what they cost beside none (bench: "claim p50 with 10,000 running"), and
# an orphaned job waits at most this much longer than its lease before it is taken over.
LAPSED_READ_EVERY_MS = 1_000


class QueueCore:
    """The state and clock of `MysqlJobQueue`, which adds to it its calls (queue.py, schedule_calls.py,
    operator_calls.py)."""

    def __init__(
        self,
        pool: Any,
        *,
        table_prefix: str = "",
        create_tables: bool = True,
        retention_days: int = 90,
        resync_ms: int = RESYNC_MS,
        clock: Callable[[], int] | None = None,
        wakeups: WakeupChannel | None = None,
    ) -> None:
        check.integer("retention_days", retention_days, 1, 36_500)
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a callable answering epoch milliseconds")
        self._store = MysqlStore(pool, table_prefix=table_prefix, create_tables=create_tables)
        #: Workers of this table listen here; `enqueue` of a due job notifies it (a hint: the job is stored).
        self.wakeups: WakeupChannel = wakeups if wakeups is not None else LOCAL_WAKEUPS
        # The same in every process using this table: the database (as the pool names it) and the table.
        database = str(getattr(pool, "_conn_kwargs", {}).get("db") or f"pool-{id(pool)}")
        self.wakeup_topic = f"{database}.{table_names(self._store.prefix).jobs}"
        self._sql = self._store.sql
        self._insert_one = self._sql.insert_jobs + self._sql.insert_job_values
        self._retention_ms = retention_days * 86_400_000
        # ONE source for every instant the queue writes or compares: the server's clock, or the one a test injected
        # in its place (as the memory queue takes); nothing else reads the server's time.
        self._clock: QueueClock = (
            create_store_clock(self._read_clock, resync_ms) if clock is None else InjectedClock(clock)
        )
        self._next_purge_at = 0
        self._spread = 1
        # When this queue last looked for lapsed leases (None: never), and whether its last pending read came
        # back short of a full block: then the next claim looks again (queue.py, `_candidates`).
        self._lapsed_read_at: int | None = None
        self._lapsed_read_every_ms = LAPSED_READ_EVERY_MS  # 0: with every claim (the bench's baseline design)
        self._backlog_short = True

    # -- the clock ------------------------------------------------------------------------------------------

    async def _read_clock(self) -> int:
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.clock))
        return int(rows[0][0])

    async def _now_ms(self) -> int:
        # The hot paths (enqueue, claim, settle) try `self._clock.fresh()` first, which needs no await.
        return await self._clock.now()

    async def now(self) -> datetime:
        return from_epoch_ms(await self._now_ms())

    def resync_clock(self) -> None:
        """Take the store's clock again on the next call, e.g. after a failover to another primary."""
        self._clock.resync()

    # -- retention ------------------------------------------------------------------------------------------

    async def _purge_if_due(self, now: int) -> None:
        """Finished jobs past retention go a bounded batch at a time, at most once a minute per queue, from
        whichever call comes first (claim, enqueue or settle): a replica that only enqueues and settles purges
        too. A failed purge never fails the call that ran it; the next minute tries again."""
        if now < self._next_purge_at:
            return
        self._next_purge_at = now + PURGE_EVERY_MS
        cutoff = now - self._retention_ms

        async def purge(conn: Connection) -> int:
            rows = await conn.fetch(self._sql.finished_before, (cutoff, cutoff, PURGE_BATCH))
            if not rows:
                return 0
            await conn.write(self._sql.purge_finished, ([row[0] for row in rows], cutoff))
            return len(rows)

        try:
            removed = await self._store.run(purge)
        except (pymysql.err.MySQLError, StoreUnavailableError) as error:  # a read-only server included
            if is_conflict(error):
                log.debug("purging finished jobs met a conflict (%s); the next pass tries again", error)
            else:
                log.warning(
                    "purging finished jobs older than the retention period failed (%s); the next pass "
                    "in a minute tries again",
                    error,
                )
            return
        if removed:
            log.info("removed %d finished jobs older than the retention period", removed)
            if removed >= PURGE_BATCH:
                self._next_purge_at = now  # more are waiting: take the next batch on the next call
        await self._fold_totals(now)

    async def _fold_totals(self, now: int) -> None:
        """The job totals' bounded fold, with the purge: a failure only leaves more deltas for the next pass."""
        # A few batches per pass: a burst (a million jobs enqueued in a minute) leaves as many deltas, and every
        # read sums what is not folded yet.
        for _ in range(FOLD_BATCHES_PER_PASS):
            try:
                folded = await self._store.run(lambda conn: fold_totals(conn, self._store.prefix))
            except (pymysql.err.MySQLError, StoreUnavailableError) as error:
                log.debug("folding the job totals failed (%s); the next pass tries again", error)
                return
            if folded < FOLD_BATCH:
                return
        self._next_purge_at = now  # more deltas than one pass takes: the next call folds on

    async def totals_drift(self) -> TotalsDrift:
        """Recounts every job and compares with the kept totals (`stats --verify`): empty when they are exact."""
        return await self._store.run(lambda conn: totals_drift(conn, self._store.prefix))
