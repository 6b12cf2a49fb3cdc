"""The job queue over a MySQL pool: claims by single-row compare-and-set, instants from the server's clock."""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pymysql

from .. import validation as check
from ..clock import RESYNC_MS, StoreClock, create_store_clock, from_epoch_ms
from ..errors import StoreUnavailableError
from ..events import Emitter, dead_by_loss
from ..records import (
    LOST_ERROR,
    AttemptOutcome,
    Job,
    JobInput,
    JobPage,
    QueueStats,
    Schedule,
    ScheduleInput,
)
from ..wakeups import LOCAL_WAKEUPS, WakeupChannel
from .packet import room_for_payload
from .rows import job_columns, job_from_columns, job_from_row, schedule_from_row
from .schema import table_names
from .session import Connection, MysqlStore, as_text, is_conflict, is_duplicate

log = logging.getLogger(__name__)
#: A job that dies inside a claim is seen by no worker, so the claim logs it.
_emit = Emitter(None, log)

# A batch is split so no statement nears the server's max_allowed_packet (learned on first use).
BATCH_ROWS = 1000
BATCH_BYTES = 4 * 1024 * 1024
ROW_ROOM = 2048  # a row's fields other than its input, as sent
PURGE_EVERY_MS = 60_000
PURGE_BATCH = 1000
# How wide claimers spread over the oldest due jobs. One claimer takes them strictly oldest first; a claimer that
# loses compare-and-sets widens its window and tries it in its own random order, so many claimers stop fighting
# over the same few rows. The spread relaxes again once claims stop colliding.
MAX_SPREAD = 64
# Compare-and-sets one claim keeps in flight at once, each on its own pooled connection.
CAS_IN_FLIGHT = 8


def _batches(rows: list[tuple[JobInput, str, int]], budget: int) -> list[list[tuple[JobInput, str]]]:
    """Rows (job, encoded input, its size as sent) in statements of at most `budget` bytes of input each; a row
    larger than the budget (it fits a statement alone, `check_fits` said so) goes alone."""
    batches: list[list[tuple[JobInput, str]]] = []
    current: list[tuple[JobInput, str]] = []
    size = 0
    for job, encoded, sent in rows:
        weight = sent + ROW_ROOM
        if current and (len(current) >= BATCH_ROWS or size + weight > budget):
            batches.append(current)
            current, size = [], 0
        current.append((job, encoded))
        size += weight
    if current:
        batches.append(current)
    return batches


class MysqlJobQueue:
    """A `JobQueue` in MySQL. Build it with `create_mysql_job_queue`."""

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
        self._clock: StoreClock = create_store_clock(self._read_clock, resync_ms)
        self._injected_clock = clock
        self._next_purge_at = 0
        self._spread = 1

    # -- the clock ------------------------------------------------------------------------------------------

    async def _read_clock(self) -> int:
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.clock))
        return int(rows[0][0])

    async def _now_ms(self) -> int:
        # An injected clock (a test's, as the memory queue takes) stands in for the server's; every instant the
        # queue writes or compares is a parameter, so nothing else reads the server's time.
        if self._injected_clock is not None:
            return int(self._injected_clock())
        return await self._clock.now()

    async def now(self) -> datetime:
        return from_epoch_ms(await self._now_ms())

    def resync_clock(self) -> None:
        """Take the store's clock again on the next call, e.g. after a failover to another primary."""
        self._clock.resync()

    # -- enqueue --------------------------------------------------------------------------------------------

    def _job_values(self, job: JobInput, encoded: str, now: int) -> list[Any]:
        return [
            job.id, job.space_id, job.action_id, job.environment, job.trigger, encoded, job.due_at,
            job.max_attempts, job.missed, job.key, job.due_at, now, now,
        ]

    async def enqueue(self, job: JobInput) -> bool:
        encoded = check.job_input(job)
        await self._store.ready()
        self._store.check_fits("input", encoded)
        now = await self._now_ms()
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

        created = await self._store.retrying(insert)
        if created and job.due_at <= now:
            self.wakeups.notify(self.wakeup_topic)
        return created

    async def enqueue_many(self, jobs: Sequence[JobInput]) -> list[bool]:
        if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence):
            raise TypeError("jobs must be a sequence of JobInput")
        encoded = [check.job_input(job) for job in jobs]  # every job checked before any is written
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
        await self._purge_if_due(now)
        budget = min(BATCH_BYTES, room_for_payload(self._store.max_packet))
        for batch in _batches(unique, budget):
            created = await self._store.retrying(functools.partial(self._insert_batch, batch=batch, now=now))
            for job_id in created:
                answers[first[job_id]] = True
        if any(answer and job.due_at <= now for answer, job in zip(answers, jobs, strict=True)):
            self.wakeups.notify(self.wakeup_topic)
        return answers

    async def _insert_batch(self, conn: Connection, *, batch: list[tuple[JobInput, str]], now: int) -> set[str]:
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
            rows = await conn.fetch(self._sql.existing_job_ids, ([job.id for job, _ in remaining],))
            existing = {as_text(row[0]) for row in rows}
            remaining = [(job, encoded) for job, encoded in remaining if job.id not in existing]
        return set()

    # -- claim, heartbeat, settle ---------------------------------------------------------------------------

    async def claim(self, *, worker_id: str, lease_ms: int, limit: int) -> list[Job]:
        check.claim_args(worker_id, lease_ms, limit)
        if limit == 0:
            return []
        now = await self._now_ms()
        await self._purge_if_due(now)
        return await self._claim(worker_id, lease_ms, limit, now)

    async def _candidates(self, limit: int, now: int, offset: int) -> list[tuple[int, int, int]]:
        """Up to 2 × limit pending jobs from `offset` on, and up to `limit` lapsed leases, oldest first."""
        rows = await self._store.run(
            lambda conn: conn.fetch(self._sql.claim_candidates, (now, offset, 2 * limit, now, limit))
        )
        candidates = [(int(seq), int(run_at), int(lapsed)) for seq, run_at, lapsed in rows]
        return sorted(candidates, key=lambda r: (r[1], r[0]))

    def _cas_room(self) -> int:
        """How many compare-and-sets to send side by side: no more than the pool can lend at once without
        waiting, less one, so the settles of jobs already running are not queued behind a claim."""
        pool = self._store.pool
        try:
            idle = int(pool.freesize) + int(pool.maxsize) - int(pool.size)
        except (AttributeError, TypeError, ValueError):  # not an aiomysql pool: no way to tell
            return CAS_IN_FLIGHT
        return max(1, min(CAS_IN_FLIGHT, idle - 1))

    async def _take(self, seq: int, lapsed: int, worker_id: str, lease_ms: int, now: int, started: int) -> bool:
        """One compare-and-set on its own borrowed connection: True when this claimer won the job."""
        statement = self._sql.claim_lapsed if lapsed else self._sql.claim_pending
        flavour = self._store.flavour

        async def take(conn: Connection) -> int:
            at = self._won_at(now, started)
            args = {"worker": worker_id, "lease_until": at + lease_ms, "now": at, "lost": LOST_ERROR, "seq": seq}
            # A row another transaction holds fails at once (MariaDB) rather than after the server's
            # innodb_lock_wait_timeout: someone else has it, so it is skipped like a lost race.
            return await conn.write(statement, args, prefix=flavour.claim_prefix)

        try:
            return bool(await self._store.run(take))
        except pymysql.err.MySQLError as error:
            if not is_conflict(error):
                raise
            return False  # on Galera a conflicting write loses at COMMIT: a lost race, never a win

    async def _claim(self, worker_id: str, lease_ms: int, limit: int, now: int) -> list[Job]:
        # One claimer takes the oldest jobs strictly in order (spread 1, offset 0). A claimer that loses
        # compare-and-sets starts its read at a random block among the oldest `spread` blocks instead.
        offset = random.randrange(self._spread) * limit
        candidates = await self._candidates(limit, now, offset)
        if len(candidates) < limit and offset:
            candidates = await self._candidates(limit, now, 0)  # the backlog is shorter than the spread
        flavour = self._store.flavour
        started = time.monotonic_ns()
        won: list[int] = []
        lost = 0
        failure: BaseException | None = None
        for attempt in range(2):
            if flavour.skip_locked_hint:
                candidates = await self._store.run(functools.partial(self._unlocked, candidates=candidates))
            # The compare-and-sets of one claim run side by side, each its own single-row statement on its own
            # pooled connection (never two held at once, so a small pool cannot deadlock): a claim costs three
            # round trips of wall time rather than one per job. Candidates lost to other claimers are replaced
            # by the next ones, so no more than `limit` are ever won.
            waiting = list(candidates)
            while waiting and len(won) < limit and failure is None:
                batch = waiting[: min(limit - len(won), self._cas_room())]
                del waiting[: len(batch)]
                results = await asyncio.gather(
                    *(self._take(seq, lapsed, worker_id, lease_ms, now, started) for seq, _run_at, lapsed in batch),
                    return_exceptions=True,
                )
                for (seq, _run_at, _lapsed), result in zip(batch, results, strict=True):
                    if isinstance(result, BaseException):
                        failure = failure or result
                    elif result:
                        won.append(seq)
                    else:
                        lost += 1
            # Every candidate lost to other claimers, but more were there: read once more rather than leave a
            # worker idle for a whole poll while jobs wait.
            if won or attempt or failure is not None or len(candidates) < 2 * limit:
                break
            candidates = await self._candidates(limit, now, random.randrange(self._spread) * limit)
        self._adapt_spread(lost)
        if failure is not None:
            if not won or not isinstance(failure, Exception):
                raise failure
            # The jobs already won are ours: raising would leave them running with nobody running them until their
            # lease lapsed (a lost attempt each, and a lease of waiting). Hand those out.
            log.warning("claim cut short after winning %d jobs: %s", len(won), failure)
        if not won:
            return []
        # A lapsed job past max_attempts became dead rather than ours: only our running rows come back.
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.claimed_jobs, (won, worker_id)))
        if len(rows) < len(won):
            returned = {int(c["seq"]) for c in map(job_columns, rows)}
            missing = [seq for seq in won if seq not in returned]
            dead = await self._store.run(lambda conn: conn.fetch(self._sql.dead_by_loss, (missing,)))
            for id_, space_id, action_id, attempts, max_attempts in dead:
                _emit(dead_by_loss(as_text(id_), int(space_id), as_text(action_id), int(attempts), int(max_attempts)))
        claimed = sorted(map(job_columns, rows), key=lambda c: (c["run_at"], c["seq"]))
        return [job_from_columns(c) for c in claimed]

    def _won_at(self, now: int, started_ns: int) -> int:
        """A lease counts from the moment its row is won, not from the claim's start: the claim's now advanced
        by the time the claim has taken so far (an injected clock is read again instead). Never a new reading
        of the server's clock, which would borrow a second connection in the middle of the claim."""
        if self._injected_clock is not None:
            return int(self._injected_clock())
        return now + (time.monotonic_ns() - started_ns) // 1_000_000

    async def _unlocked(
        self, conn: Connection, candidates: list[tuple[int, int, int]]
    ) -> list[tuple[int, int, int]]:
        """Where a statement's lock wait cannot be bounded (MySQL), the candidates no transaction holds right
        now. Only a hint: the locks this read takes end with it, and each claim is still a compare-and-set."""
        if not candidates:
            return candidates
        rows = await conn.fetch(self._sql.unlocked_jobs, ([seq for seq, _, _ in candidates],))
        free = {int(row[0]) for row in rows}
        await conn.end_read()
        return [c for c in candidates if c[0] in free]

    def _adapt_spread(self, lost: int) -> None:
        # Widen quickly when claims collide, narrow one step at a time when they stop: halving made the window
        # oscillate, and a window just as wide as the claimers' combined demand runs dry.
        if lost:
            self._spread = min(MAX_SPREAD, self._spread * 2)
        elif self._spread > 1:
            self._spread -= 1

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
                log.warning("purging finished jobs older than the retention period failed (%s); the next pass "
                            "in a minute tries again", error)
            return
        if removed:
            log.info("removed %d finished jobs older than the retention period", removed)
            if removed >= PURGE_BATCH:
                self._next_purge_at = now  # more are waiting: take the next batch on the next call

    async def heartbeat(self, *, job_ids: Sequence[str], worker_id: str, lease_ms: int) -> list[str]:
        ids = list(dict.fromkeys(check.heartbeat_args(job_ids, worker_id, lease_ms)))
        if not ids:
            return []
        now = await self._now_ms()

        async def beat(conn: Connection) -> list[str]:
            await self._renew(conn, ids, worker_id, now + lease_ms)
            rows = await conn.fetch(self._sql.cancel_requested_ids, (ids, worker_id))
            asked = {as_text(row[0]) for row in rows}
            return [job_id for job_id in ids if job_id in asked]

        return await self._store.retrying(beat)

    async def _renew(self, conn: Connection, ids: list[str], worker_id: str, lease_until: int) -> None:
        """All leases in one statement; if a row is held by another transaction, one by one, so the held row
        costs the others nothing (MariaDB bounds each wait to nothing; elsewhere each held row waits the
        server's innodb_lock_wait_timeout). A held row keeps its lease this time; the next beat tries again."""
        prefix = self._store.flavour.claim_prefix
        try:
            await conn.write(self._sql.renew_leases, (lease_until, ids, worker_id), prefix=prefix)
            return
        except pymysql.err.MySQLError as error:
            if not is_conflict(error):
                raise
        held = ids if len(ids) == 1 else []
        for job_id in ids if len(ids) > 1 else []:
            try:
                await conn.write(self._sql.renew_leases, (lease_until, [job_id], worker_id), prefix=prefix)
            except pymysql.err.MySQLError as error:
                if not is_conflict(error):
                    raise
                held.append(job_id)
        if held:
            log.warning("could not renew the leases of %s: another transaction holds their rows; the next "
                        "heartbeat tries again", held)

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
    ) -> None:
        check.settle_args(job_id, worker_id, status, delay_ms, run_id, error, attempt)
        now = await self._now_ms()
        args = {
            "id": job_id,
            "worker": worker_id,
            "status": status,
            "error": error,
            "run_id": run_id,
            "now": now,
            "retry_at": now + (delay_ms or 0),
            "has_attempt": attempt is not None,
            "a_status": attempt.status if attempt else None,
            "a_worker": attempt.worker_id if attempt else None,
            "a_run": attempt.run_id if attempt else None,
            "a_error": attempt.error if attempt else None,
        }
        # Guarded by the holder, so running it twice after a conflict changes nothing the second time.
        await self._store.retrying(lambda conn: conn.write(self._sql.settle, args))
        await self._purge_if_due(now)  # after the settle, which a lease may be waiting on

    # -- schedules ------------------------------------------------------------------------------------------

    async def due_schedules(self, limit: int) -> list[Schedule]:
        check.limit("limit", limit)
        if limit == 0:
            return []
        now = await self._now_ms()
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.due_schedules, (now, limit)))
        return [schedule_from_row(row) for row in rows]

    async def advance_schedule(
        self, *, space_id: int, action_id: str, from_at: int, to_at: int, missed: int
    ) -> bool:
        check.advance_args(space_id, action_id, from_at, to_at, missed)
        now = await self._now_ms()
        args = (to_at, from_at, missed, now, space_id, action_id, from_at)
        try:
            changed = await self._store.run(lambda conn: conn.write(self._sql.advance_schedule, args))
        except pymysql.err.MySQLError as error:
            if not is_conflict(error):
                raise
            return False  # somebody else's write won; the schedule is still due if it was not moved
        return changed > 0

    async def put_schedules(self, *, space_id: int, schedules: Sequence[ScheduleInput]) -> None:
        incoming = check.put_schedules_args(space_id, schedules)
        now = await self._now_ms()
        steps: list[tuple[str, Any]] = [(self._sql.lock_space_schedules, {"space": space_id, "now": now})]
        if incoming:
            keep = [s.action_id for s in incoming]
            steps.append((self._sql.delete_space_schedules_except, (space_id, keep)))
            args: list[Any] = []
            for s in incoming:
                args.extend(
                    [space_id, s.action_id, s.cron, s.timezone, s.environment, int(s.enabled), s.next_run_at,
                     s.max_attempts, now]
                )
            values = ", ".join([self._sql.upsert_schedule_values] * len(incoming))
            steps.append((self._sql.upsert_schedules.format(values=values), args))
        else:
            steps.append((self._sql.delete_space_schedules, (space_id,)))
        # One transaction behind the space's guard row: concurrent writers replace the set one after another.
        await self._store.retrying(lambda conn: conn.transaction(steps))

    async def list_schedules(
        self, space_ids: Sequence[int] | None, *, limit: int | None = None, offset: int = 0
    ) -> list[Schedule]:
        """The schedules of those spaces (None: of every space) by space and action; `limit`/`offset` page them."""
        spaces = check.space_ids_or_all(space_ids)
        if limit is not None:
            check.page(limit, offset)
        if spaces == []:
            return []
        where = "1 = 1" if spaces is None else "space_id IN %s"
        args: list[Any] = [] if spaces is None else [spaces]
        paged = "" if limit is None else " LIMIT %s OFFSET %s"
        if limit is not None:
            args += [limit, offset]
        statement = self._sql.list_schedules.format(where=where, page=paged)
        rows = await self._store.run(lambda conn: conn.fetch(statement, args))
        return [schedule_from_row(row) for row in rows]

    # -- an operator's view ---------------------------------------------------------------------------------

    async def list_jobs(
        self,
        *,
        space_ids: Sequence[int] | None,
        action_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> JobPage:
        """The `JobQueue` rule; `space_ids=None` (an operator's view) lists every space's jobs."""
        spaces = check.list_jobs_args(space_ids, action_id, status, limit, offset)
        if spaces == []:
            return JobPage(jobs=[], total=0)
        where = ["1 = 1"] if spaces is None else ["space_id IN %s"]
        args: list[Any] = [] if spaces is None else [spaces]
        if action_id is not None:
            where.append("action_id = %s")
            args.append(action_id)
        if status is not None:
            where.append("status = %s")
            args.append(status)
        condition = " AND ".join(where)

        async def page(conn: Connection) -> JobPage:
            rows = await conn.fetch(self._sql.list_jobs.format(where=condition), [*args, limit, offset])
            total = await conn.fetch(self._sql.count_jobs.format(where=condition), args)
            return JobPage(jobs=[job_from_row(row) for row in rows], total=int(total[0][0]))

        return await self._store.run(page)

    async def stats(self, *, space_ids: Sequence[int] | None = None) -> QueueStats:
        spaces = None if space_ids is None else check.space_ids(space_ids)
        now = await self._now_ms()
        if spaces == []:
            return QueueStats.from_groups(now, [])
        where = "1 = 1" if spaces is None else "space_id IN %(spaces)s"
        statement = self._sql.job_stats.format(where=where)
        rows = await self._store.run(lambda conn: conn.fetch(statement, {"now": now, "spaces": spaces}))
        return QueueStats.from_groups(
            now,
            (
                (int(space), as_text(action), as_text(status), int(count), int(due or 0),
                 None if oldest is None else int(oldest), int(lapsed or 0))
                for space, action, status, count, due, oldest, lapsed in rows
            ),
        )  # fmt: skip

    async def get_job(self, space_ids: Sequence[int], job_id: str) -> Job | None:
        spaces = check.scoped_job(space_ids, job_id)
        if not spaces:
            return None
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.get_job, (job_id, spaces)))
        return job_from_row(rows[0]) if rows else None

    async def _operator_args(self, space_ids: Sequence[int], job_id: str) -> dict[str, Any] | None:
        """The arguments of an operator's change to one job, or None when no space is listed."""
        spaces = check.scoped_job(space_ids, job_id)
        return {"id": job_id, "spaces": spaces, "now": await self._now_ms()} if spaces else None

    async def requeue(self, space_ids: Sequence[int], job_id: str) -> bool:
        args = await self._operator_args(space_ids, job_id)
        if args is None:
            return False
        requeued = await self._store.retrying(lambda conn: conn.write(self._sql.requeue, args)) > 0
        if requeued:
            self.wakeups.notify(self.wakeup_topic)
        return requeued

    async def cancel(self, space_ids: Sequence[int], job_id: str) -> bool:
        args = await self._operator_args(space_ids, job_id)
        if args is None:
            return False
        spaces = args["spaces"]

        async def cancel(conn: Connection) -> bool:
            if await conn.write(self._sql.cancel_pending_job, args):
                return True
            if await conn.write(self._sql.request_cancel, args):
                return True
            # Already asked: still a running job whose cancel stands.
            return bool(await conn.fetch(self._sql.is_running, (job_id, spaces)))

        return await self._store.retrying(cancel)

    async def cancel_pending(self, *, space_id: int, key: str, older_than: str | None = None) -> int:
        check.cancel_pending_args(space_id, key, older_than)
        now = await self._now_ms()

        async def cancel(conn: Connection) -> int:
            args = {"now": now, "space": space_id, "key": key}
            if older_than is None:
                return await conn.write(self._sql.cancel_keyed, args)
            rows = await conn.fetch(self._sql.job_seq, (older_than,))
            if not rows:
                return 0
            return await conn.write(self._sql.cancel_keyed_before, {**args, "before": rows[0][0]})

        return await self._store.retrying(cancel)


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
