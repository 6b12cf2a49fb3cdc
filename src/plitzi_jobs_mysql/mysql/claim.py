"""The MySQL job queue's claim: candidates read in claim order, then taken by single-row compare-and-set."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pymysql

from ..contract import validation as check
from ..contract.events import Emitter, EventHook, dead_by_loss
from ..contract.limits import limits_arg
from ..records import LOST_ERROR, ActionLimit, Job
from .claim_values import DIED, LOST, WON, Candidate
from .limit_saturated import FROM_THE_START
from .limit_statements import past_args, past_groups, with_groups
from .limit_takes import Plan
from .limits import LimitedClaims
from .pause_calls import pause_statements_for
from .queue_core import QueueCore, log
from .rows import job_columns, job_from_columns
from .session import Connection, as_text, is_conflict
from .statements import TAKE_WON

# How many times one claim reads again because lapsed jobs it met died (each death is final, so this is rare).
MAX_DEATH_REREADS = 4

#: A job that dies inside a claim is seen by no worker, so the claim logs it.
_emit = Emitter(None, log)

# How wide claimers spread over the oldest due jobs. One claimer takes them strictly oldest first; a claimer that
# loses compare-and-sets widens its window and tries it in its own random order, so many claimers stop fighting
# over the same few rows. The spread relaxes again once claims stop colliding.
MAX_SPREAD = 64
# Compare-and-sets one claim keeps in flight at once, each on its own pooled connection.
CAS_IN_FLIGHT = 8
# Due priorities read in one statement (a UNION ALL of one index range each); more are read only when these
# hold fewer jobs than the claim wants.
PRIORITIES_PER_READ = 8
# Reads of one claim's candidates that met jobs of a paused scope (marked held, so the next read is past them).
MAX_HOLD_REREADS = 3


def _candidate(row: Sequence[Any]) -> Candidate:
    seq, run_at, lapsed, priority = row
    return int(seq), int(run_at), int(lapsed), int(priority)


def _claim_order(candidate: Candidate) -> tuple[int, int, int]:
    seq, run_at, _lapsed, priority = candidate
    return priority, run_at, seq


class ClaimCalls(LimitedClaims, QueueCore):
    """The claim half of `MysqlJobQueue` (its limits' hooks: limits.py)."""

    async def claim(
        self, *, worker_id: str, lease_ms: int, limit: int, limits: Mapping[str, ActionLimit] | None = None,
        on_limited: EventHook | None = None,
    ) -> list[Job]:  # fmt: skip
        check.claim_args(worker_id=worker_id, lease_ms=lease_ms, limit=limit)
        limited = limits_arg(limits)  # jobs over their limit are left out of the claim (mysql/limits.py)
        plan = Plan(limits=limited, on_limited=on_limited, lease_ms=lease_ms) if limited else None
        if limit == 0:
            return []
        now = self._clock.fresh()
        if now is None:
            now = await self._clock.now()
        if now >= self._next_purge_at:
            await self._purge_if_due(now)
        return await self._claim(worker_id, lease_ms, limit, now, plan)

    async def _candidates(
        self, limit: int, now: int, offset: int, lease_ms: int, plan: Plan | None = None
    ) -> list[Candidate]:
        """Up to 2 × limit pending jobs (the first due priority's from `offset` on) and, when `_lapsed_read_due`,
        up to `limit` lapsed leases, in claim order: priority, then oldest run_at. With limits (a plan), each is
        read with its group."""
        with_lapsed = self._lapsed_read_due(now, lease_ms)
        sql = self._sql
        pauses = pause_statements_for(self._store.prefix)
        pending_read, lapsed_read = sql.claim_pending_candidates, sql.claim_lapsed_candidates
        grouped = False
        past: list[Any] = []  # with limits: the saturated groups the pending reads leave out (limit_saturated.py)
        starts: dict[int, int] = {}
        if plan is not None:
            groups, starts = self._left_out(plan, now)
            grouped = self._read_groups
            if groups:
                pending_read, past = past_groups(pending_read, len(groups)), past_args(groups)
        if grouped:
            pending_read, lapsed_read = with_groups(pending_read), with_groups(lapsed_read)

        def parse(rows: Sequence[Sequence[Any]]) -> list[Candidate]:
            return self._grouped(rows, claim_read=True) if grouped else [_candidate(row) for row in rows]

        async def read(conn: Connection) -> list[Candidate]:
            for attempt in range(MAX_HOLD_REREADS):
                rows = await conn.fetch(sql.due_priorities, (now,))
                found = await read_from(conn, sorted(int(row[0]) for row in rows if row[0] is not None))
                paused = any(row[0] is None and int(row[1]) for row in rows)
                if not (paused and found):
                    return found
                # Jobs of a paused scope met here are marked held, which takes them out of these reads: read again
                # (the last time, take what is left rather than nothing, so a worker is not idle for a poll).
                covered = [int(row[0]) for row in await conn.fetch(pauses.covered, ([c[0] for c in found],))]
                if not covered:
                    return found
                due = sorted({c[3] for c in found if not c[2]})
                if due:
                    rows = await conn.fetch(pauses.covered_due, (due, now))
                    covered = sorted({*covered, *(int(row[0]) for row in rows)})
                if not await conn.write(pauses.hold, (covered,)) or attempt == MAX_HOLD_REREADS - 1:
                    return [c for c in found if c[0] not in covered]
            return []

        async def read_from(conn: Connection, priorities: list[int]) -> list[Candidate]:
            found: list[Candidate] = []
            pending, skip = 0, offset
            lapsed = with_lapsed
            # A read per due priority until enough pending jobs are in hand: the first one alone (it usually
            # holds them all), then a few to a statement.
            size = 1
            while (priorities and pending < 2 * limit) or lapsed:
                chunk, priorities = priorities[:size], priorities[size:]
                size = PRIORITIES_PER_READ
                parts, args = [], []
                from_start = []  # the priorities read from their first job on
                for priority in chunk:
                    parts.append(pending_read)
                    args += [priority, now, *([starts.get(priority, FROM_THE_START), *past] if past else []), skip,
                             2 * limit - pending]  # fmt: skip
                    from_start += [priority] if not skip else []
                    skip = 0
                if lapsed:
                    parts.append(lapsed_read)
                    args += [now, limit]
                    lapsed = False
                statement = parts[0] if len(parts) == 1 else " UNION ALL ".join(f"({part})" for part in parts)
                read = parse(await conn.fetch(statement, tuple(args)))
                if past:
                    self._note_starts(from_start, read)
                pending += sum(1 for c in read if not c[2])
                found += read
            return found

        candidates = await self._store.run(read)
        short = sum(1 for c in candidates if not c[2]) < 2 * limit
        if short and not with_lapsed:
            # The backlog ran out since the last claim: lapsed leases are what is left to take, so look now
            # rather than at the next poll.
            rows = await self._store.run(lambda conn: conn.fetch(lapsed_read, (now, limit)))
            candidates += parse(rows)
            with_lapsed = True
        if with_lapsed:
            self._lapsed_read_at = now
        self._backlog_short = short
        return sorted(candidates, key=_claim_order)

    def _lapsed_read_due(self, now: int, lease_ms: int) -> bool:
        if self._backlog_short or self._lapsed_read_at is None:
            return True
        every = min(self._lapsed_read_every_ms, lease_ms // 10)
        # A clock that went back (an injected one, a failover to another primary) looks again too.
        return not self._lapsed_read_at <= now < self._lapsed_read_at + every

    def _cas_room(self) -> int:
        """How many compare-and-sets to send side by side: no more than the pool can lend at once without
        waiting, less one, so the settles of jobs already running are not queued behind a claim."""
        pool = self._store.pool
        try:
            idle = int(pool.freesize) + int(pool.maxsize) - int(pool.size)
        except (AttributeError, TypeError, ValueError):  # not an aiomysql pool: no way to tell
            return CAS_IN_FLIGHT
        return max(1, min(CAS_IN_FLIGHT, idle - 1))

    async def _take(self, seq: int, lapsed: int, worker_id: str, lease_ms: int, now: int, started: int) -> int:
        """One compare-and-set on its own borrowed connection: WON when this claimer holds the job now, DIED when
        the job was a lapsed one that died instead (past max_attempts), else LOST."""
        flavour = self._store.flavour
        if flavour.nowait_guard:
            statement = self._sql.claim_lapsed_nowait if lapsed else self._sql.claim_pending_nowait
        else:
            statement = self._sql.claim_lapsed if lapsed else self._sql.claim_pending

        async def take(conn: Connection) -> int:
            at = self._won_at(now, started)
            args = {"worker": worker_id, "lease_until": at + lease_ms, "now": at, "lost": LOST_ERROR, "seq": seq}
            # A row another transaction holds fails at once (MariaDB's per-statement bound, MySQL's NOWAIT guard)
            # rather than after the server's innodb_lock_wait_timeout: someone else has it, a lost race.
            rows, told = await conn.write_returning_id(statement, args, prefix=flavour.claim_prefix)
            if not rows:
                return LOST
            if not lapsed or told == TAKE_WON:
                return WON
            # A death changes the job's status, so the totals' trigger runs an INSERT of its own and the OK packet
            # no longer carries the takeover's insert id: the row itself tells (lapsed takes are rare).
            dead = await conn.fetch(self._sql.took_dead, {"seq": seq})
            return DIED if dead and dead[0][0] else WON

        try:
            return await self._store.run(take)
        except pymysql.err.MySQLError as error:
            if not is_conflict(error):
                raise
            return LOST  # on Galera a conflicting write loses at COMMIT: a lost race, never a win

    async def _claim(self, worker_id: str, lease_ms: int, limit: int, now: int, plan: Plan | None) -> list[Job]:
        # One claimer takes the oldest jobs strictly in order (spread 1, offset 0). A claimer that loses
        # compare-and-sets starts its read at a random block among the oldest `spread` blocks instead.
        offset = random.randrange(self._spread) * limit
        candidates = await self._candidates(limit, now, offset, lease_ms, plan)
        if len(candidates) < limit and offset:
            candidates = await self._candidates(limit, now, 0, lease_ms, plan)  # the backlog is shorter than the spread
        candidates = await self._within_limits(candidates, limit, now, plan)
        started = time.monotonic_ns()
        won: list[int] = []
        died: list[int] = []
        lost = 0
        failure: BaseException | None = None
        rereads = 0
        for attempt in range(2 + MAX_DEATH_REREADS):
            dead_before = len(died)
            # The compare-and-sets of one claim run side by side, each its own single-row statement on its own
            # pooled connection (never two held at once, so a small pool cannot deadlock): a claim costs three
            # round trips of wall time rather than one per job. Candidates lost to other claimers are replaced
            # by the next ones, so no more than `limit` are ever won.
            waiting = list(candidates)
            # A death stops the round: the reads were cut at what `limit` needs, so what lies past them may
            # not be next in order any more.
            while waiting and len(won) < limit and failure is None and len(died) == dead_before:
                batch = waiting[: min(limit - len(won), self._cas_room())]
                del waiting[: len(batch)]
                try:
                    at = self._won_at(now, started)
                    taken = await self._take_limited(plan, [c[0] for c in batch], at, lease_ms, worker_id)
                except Exception as error:  # rows taken before it free themselves within a lease
                    failure = error
                    break
                results = await asyncio.gather(
                    *(
                        self._take_within(plan, taken.get(seq), seq, lapsed, worker_id, lease_ms, now, started)
                        for seq, _run_at, lapsed, _ in batch
                    ),
                    return_exceptions=True,
                )
                for (seq, *_), result in zip(batch, results, strict=True):
                    if isinstance(result, BaseException):
                        failure = failure or result
                    elif result == WON:
                        won.append(seq)
                    elif result == DIED:
                        died.append(seq)  # its slot goes to the next candidate
                    else:
                        lost += 1
            if len(won) >= limit or failure is not None:
                break
            if len(died) > dead_before and rereads < MAX_DEATH_REREADS:
                # Jobs that died freed their slots, and more jobs may be due behind them (the lapsed read took
                # only `limit`): read again, as the memory queue's claim goes on down its order.
                rereads += 1
                if plan is not None:
                    plan.refused.clear()  # a death gave its limit slot back: groups refused before may fit now
                candidates = await self._candidates(limit, now, 0, lease_ms, plan)
                candidates = await self._within_limits(candidates, limit, now, plan)
                continue
            # Every candidate lost to other claimers, but more were there: read once more rather than leave a
            # worker idle for a whole poll while jobs wait.
            if won or attempt > rereads or len(candidates) < 2 * limit:
                break
            candidates = await self._candidates(limit, now, random.randrange(self._spread) * limit, lease_ms, plan)
            candidates = await self._within_limits(candidates, limit, now, plan)
        self._adapt_spread(lost)
        if failure is not None:
            if not won or not isinstance(failure, Exception):
                raise failure
            # The jobs already won are ours: raising would leave them running with nobody running them until their
            # lease lapsed (a lost attempt each, and a lease of waiting). Hand those out.
            log.warning("claim cut short after winning %d jobs: %s", len(won), failure)
        rows = []
        if won:
            rows = await self._store.run(lambda conn: conn.fetch(self._sql.claimed_jobs, (won, worker_id)))
        await self._claimed(plan, rows)
        returned = {int(c["seq"]) for c in map(job_columns, rows)}
        # A lapsed job past max_attempts became dead rather than ours: only our running rows come back.
        missing = died + [seq for seq in won if seq not in returned]
        if missing:
            dead = await self._store.run(lambda conn: conn.fetch(self._sql.dead_by_loss, (missing,)))
            for id_, space_id, action_id, attempts, max_attempts in dead:
                _emit(dead_by_loss(as_text(id_), int(space_id), as_text(action_id), int(attempts), int(max_attempts)))
        claimed = sorted(map(job_columns, rows), key=lambda c: (c["priority"], c["run_at"], c["seq"]))
        return [job_from_columns(c) for c in claimed]

    def _won_at(self, now: int, started_ns: int) -> int:
        """A lease counts from the moment its row is won, not from the claim's start: the clock's answer without
        an await, else the claim's now advanced by the time the claim has taken so far. Never a new reading of
        the server's clock, which would borrow a second connection in the middle of the claim."""
        at = self._clock.fresh()
        return now + (time.monotonic_ns() - started_ns) // 1_000_000 if at is None else at

    def _adapt_spread(self, lost: int) -> None:
        # Widen quickly when claims collide, narrow one step at a time when they stop: halving made the window
        # oscillate, and a window just as wide as the claimers' combined demand runs dry.
        if lost:
            self._spread = min(MAX_SPREAD, self._spread * 2)
        elif self._spread > 1:
            self._spread -= 1
