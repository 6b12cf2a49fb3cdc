"""The job queue over a MySQL pool: claims by single-row compare-and-set, instants from the server's clock."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pymysql

from ..contract import validation as check
from ..contract.capabilities import AnnouncesDueJobs, Pausing, SettlesSucceeded
from ..contract.events import Emitter
from ..contract.protocols import JobQueue
from ..contract.wakeups import WakeupChannel
from ..records import AttemptOutcome, JobInput, SucceededJob
from .bulk_calls import BulkCalls
from .caller_calls import CallerCalls
from .claim import ClaimCalls
from .operator_calls import OperatorCalls
from .packet import BATCH_BYTES, batches, room_for_payload
from .pause_calls import PauseCalls
from .queue_core import log
from .schedule_calls import ScheduleCalls
from .session import Connection, as_text, is_conflict, is_duplicate

#: A job that dies inside a claim is seen by no worker, so the claim logs it.
_emit = Emitter(None, log)


class MysqlJobQueue(ClaimCalls, CallerCalls, PauseCalls, BulkCalls, ScheduleCalls, OperatorCalls):
    """A `JobQueue` in MySQL. Build it with `create_mysql_job_queue`."""

    # -- enqueue --------------------------------------------------------------------------------------------

    def _job_values(self, job: JobInput, encoded: str, now: int) -> list[Any]:
        return [
            job.id,
            job.space_id,
            job.action_id,
            job.environment,
            job.trigger,
            encoded,
            job.due_at,
            job.max_attempts,
            job.missed,
            job.key,
            job.priority,
            job.due_at,
            now,
            now,
        ]

    async def enqueue(self, job: JobInput, *, connection: Any = None) -> bool:
        if connection is not None:  # inside the caller's transaction (caller_calls.py)
            return (await self.enqueue_many([job], connection=connection))[0]
        # The hot path of a producer: every check still runs before anything is written, but the steps that
        # usually have nothing to do (first use, the clock's reading, the purge) are not awaited then.
        encoded = check.job_input(job)
        store = self._store
        if store.needs_ready:
            await store.ready()
        store.refuse_unfit("input", encoded)
        now = self._clock.fresh()
        if now is None:
            now = await self._clock.now()
        if now >= self._next_purge_at:
            await self._purge_if_due(now)
        sql = self._insert_one

        async def insert(conn: Connection) -> bool:
            try:
                await conn.write(sql, self._job_values(job, encoded, now))
            except pymysql.err.IntegrityError as error:
                if is_duplicate(error):  # idempotent by id: whoever inserted first created it
                    return False
                raise
            return True

        created = await store.retrying(insert)
        if created and job.due_at <= now:
            self.wakeups.notify(self.wakeup_topic)
        return created

    async def enqueue_many(self, jobs: Sequence[JobInput], *, connection: Any = None) -> list[bool]:
        encoded = check.job_inputs(jobs)  # every job checked before any is written
        caller = None if connection is None else await self._caller(connection)
        await self._store.ready()
        sizes = [self._store.check_fits(f"input of {j.id!r}", text) for j, text in zip(jobs, encoded, strict=True)]
        answers = [False] * len(jobs)
        first: dict[str, int] = {}
        for index, job in enumerate(jobs):
            first.setdefault(job.id, index)  # a repeated id in the batch: the first one creates it
        unique = [(jobs[i], encoded[i], sizes[i]) for i in first.values()]
        if not unique:
            return answers
        now = await self._now_ms()
        if caller is None:  # never on the caller's path: it would wait for a pooled connection
            await self._purge_if_due(now)
        budget = min(BATCH_BYTES, room_for_payload(self._store.max_packet))
        for batch in batches(unique, budget):
            if caller is None:
                created = await self._store.retrying(functools.partial(self._insert_batch, batch=batch, now=now))
            else:  # once: a conflict there is the caller's transaction's to retry
                existing = self._batch_sql.existing_job_ids_locked
                created = await caller.run(
                    functools.partial(self._insert_batch, batch=batch, now=now, existing=existing)
                )
            for job_id in created:
                answers[first[job_id]] = True
        # A job in a transaction still open is seen by no worker: the caller announces it after commit.
        seen = caller is None or caller.committed
        if seen and any(answer and job.due_at <= now for answer, job in zip(answers, jobs, strict=True)):
            self.wakeups.notify(self.wakeup_topic)
        return answers

    async def _insert_batch(
        self, conn: Connection, *, batch: list[tuple[JobInput, str]], now: int, existing: str | None = None
    ) -> set[str]:
        """One multi-row INSERT; if some ids exist it fails whole, so the existing ones are left out and it
        runs again. Every id it answers was created by this call and no other."""
        remaining = batch
        while remaining:
            args: list[Any] = []
            for job, encoded in remaining:
                args.extend(self._job_values(job, encoded, now))
            sql = self._sql.insert_jobs + ", ".join([self._sql.insert_job_values] * len(remaining))
            try:
                await conn.write(sql, args)
                return {job.id for job, _ in remaining}
            except pymysql.err.IntegrityError as error:
                if not is_duplicate(error):
                    raise
            rows = await conn.fetch(existing or self._sql.existing_job_ids, ([job.id for job, _ in remaining],))
            found = {as_text(row[0]) for row in rows}
            remaining = [(job, encoded) for job, encoded in remaining if job.id not in found]
        return set()

    # -- heartbeat, settle (the claim is claim.py's) --------------------------------------------------------

    async def heartbeat(self, *, job_ids: Sequence[str], worker_id: str, lease_ms: int) -> list[str]:
        ids = list(dict.fromkeys(check.heartbeat_args(job_ids=job_ids, worker_id=worker_id, lease_ms=lease_ms)))
        if not ids:
            return []
        now = await self._now_ms()
        await self._extend_reserved(ids, worker_id, lease_ms, now)  # before the leases outlast their slots

        async def beat(conn: Connection) -> list[str]:
            await self._renew(conn, ids, worker_id, now + lease_ms)
            rows = await conn.fetch(self._sql.cancel_requested_ids, (ids, worker_id))
            asked = {as_text(row[0]) for row in rows}
            return [job_id for job_id in ids if job_id in asked]

        return await self._store.retrying(beat)

    async def _renew(self, conn: Connection, ids: list[str], worker_id: str, lease_until: int) -> None:
        """All leases in one statement; if a row is held by another transaction, one by one, so the held row
        costs the others nothing (each statement fails at once on a held row: MariaDB bounds its wait to nothing,
        MySQL's locks the rows NOWAIT). A held row keeps its lease this time; the next beat tries again."""
        flavour = self._store.flavour
        prefix = flavour.claim_prefix

        def renew(chosen: list[str]) -> tuple[str, tuple[Any, ...]]:
            if flavour.nowait_guard:
                return self._sql.renew_leases_nowait, (lease_until, chosen, worker_id, chosen)
            return self._sql.renew_leases, (lease_until, chosen, worker_id)

        try:
            await conn.write(*renew(ids), prefix=prefix)
            return
        except pymysql.err.MySQLError as error:
            if not is_conflict(error):
                raise
        held = ids if len(ids) == 1 else []
        for job_id in ids if len(ids) > 1 else []:
            try:
                await conn.write(*renew([job_id]), prefix=prefix)
            except pymysql.err.MySQLError as error:
                if not is_conflict(error):
                    raise
                held.append(job_id)
        if held:
            log.warning(
                "could not renew the leases of %s: another transaction holds their rows; the next "
                "heartbeat tries again",
                held,
            )

    async def settle(
        self,
        *,
        job_id: str,
        worker_id: str,
        status: str,
        delay_ms: int | None = None,
        run_id: str | None = None,
        error: str | None = None,
        attempt: AttemptOutcome | None = None,
        claimed_at: int | None = None,
    ) -> None:
        call = check.Settle(job_id=job_id, worker_id=worker_id, status=status, delay_ms=delay_ms, run_id=run_id,
                            error=error, attempt=attempt, claimed_at=claimed_at)  # fmt: skip
        now = self._clock.fresh()
        if now is None:
            now = await self._clock.now()
        outcome = call.attempt
        args = {
            "id": call.job_id,
            "worker": call.worker_id,
            "claimed_at": call.claimed_at,
            "status": call.status,
            "error": call.error,
            "run_id": call.run_id,
            "now": now,
            "retry_at": now + (call.delay_ms or 0),
            "has_attempt": outcome is not None,
            "a_status": outcome.status if outcome else None,
            "a_worker": outcome.worker_id if outcome else None,
            "a_run": outcome.run_id if outcome else None,
            "a_error": outcome.error if outcome else None,
        }
        # Guarded by the holder, so running it twice after a conflict changes nothing the second time.
        await self._store.retrying(lambda conn: conn.write(self._sql.settle, args))
        await self._settled([call.job_id], final=call.status != "pending")  # the slot its claim took, if any
        if now >= self._next_purge_at:
            await self._purge_if_due(now)  # after the settle, which a lease may be waiting on

    async def settle_succeeded(self, *, worker_id: str, jobs: Sequence[SucceededJob]) -> None:
        """The `SettlesSucceeded` capability: many succeeded jobs in one statement, each row exactly what its own
        `settle` writes, under the same holder guard (and each job's claim instant, when given)."""
        items = check.settle_succeeded_args(worker_id=worker_id, jobs=jobs)
        if not items:
            return
        now = self._clock.fresh()
        if now is None:
            now = await self._clock.now()
        args: dict[str, Any] = {"worker": worker_id, "now": now, "ids": [item.job_id for item in items]}
        runs, claims = [], []
        for index, item in enumerate(items):
            args[f"i{index}"] = item.job_id
            if item.run_id is not None:
                args[f"r{index}"] = item.run_id
                runs.append(f"WHEN %(i{index})s THEN %(r{index})s ")
            if item.claimed_at is not None:
                args[f"c{index}"] = item.claimed_at
                claims.append(f"WHEN %(i{index})s THEN %(c{index})s ")
        run = f"(CASE id {''.join(runs)}END)" if runs else "NULL"
        claim = f" AND claimed_at <=> (CASE id {''.join(claims)}ELSE claimed_at END)" if claims else ""
        sql = self._sql.settle_succeeded.format(run=run, claim=claim)
        await self._store.retrying(lambda conn: conn.write(sql, args))
        await self._settled([item.job_id for item in items], final=True)
        if now >= self._next_purge_at:
            await self._purge_if_due(now)  # after the settle, which leases may be waiting on


def create_mysql_job_queue(
    pool: Any,
    *,
    table_prefix: str = "",
    create_tables: bool = True,
    retention_days: int = 90,
    clock: Callable[[], int] | None = None,
    wakeups: WakeupChannel | None = None,
) -> MysqlJobQueue:
    """A `JobQueue` over an aiomysql pool the caller opened (and closes): the adapter only borrows connections.

    `clock` (epoch ms, for tests, as `create_memory_job_queue` takes) replaces the server's clock for the queue's
    instants; the kv store's lifetimes stay the server's, judged in the statement.

    `wakeups`: where an `enqueue` of a due job wakes the workers of this table at once (default: the ones in
    this process; `plitzi_jobs_mysql.redis_wakeups.RedisWakeups` reaches other processes too)."""
    return MysqlJobQueue(
        pool,
        table_prefix=table_prefix,
        create_tables=create_tables,
        retention_days=retention_days,
        clock=clock,
        wakeups=wakeups,
    )


if TYPE_CHECKING:  # mypy checks the MySQL queue keeps the contract's Protocol and offers the capabilities
    _queue: JobQueue = MysqlJobQueue(None)
    _settles: SettlesSucceeded = MysqlJobQueue(None)
    _announces: AnnouncesDueJobs = MysqlJobQueue(None)
    _pausing: Pausing = MysqlJobQueue(None)
