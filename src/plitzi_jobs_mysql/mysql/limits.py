"""The MySQL queue's fleet-wide limits (the rules: contract/limits.py), as single-row compare-and-sets.

Where the state lives: rows of the kv table whose key starts with the byte 0xFF, which no kv call can name (a kv
key is UTF-8 text, and 0xFF never occurs in UTF-8), so no schema step was needed. A group's rows are
`FF | 16 bytes of SHA-256(group) | 'c' or 'r' | 7-digit number`:

- `c` n: concurrency slot n < `concurrency`, valued `seq until worker_hex` ('0 0 -' when given back). A slot is
  held while its job `seq` is unfinished and either `until` (the taking claim's instant + lease) has not passed or
  the job is `running` under a live lease of worker `worker_hex`. `until` covers the moment between taking the slot
  and the job's own compare-and-set, and a claimer killed in between (the slot comes back after one lease); the
  job's own state does the rest, so a settle to a final status frees its slot with no write (a retry, whose job
  is pending again, gives it back). Or `0 until worker nonce`: a reservation, held until `until` whatever runs
  (limit_reserved.py).
- `r` n: rate entry n < `rate`, valued the instant of the start it recorded; a start takes the oldest entry that
  is at least `per_ms` old. So any `per_ms` window holds at most `rate` recorded starts (two starts sharing an
  entry are at least `per_ms` apart).

A claim with limits reads its candidates' (space, action, key) and the groups' rows in two reads, plans which
candidates fit, and takes their slots in one UPDATE, each row guarded by the value it read (the INSERT of a
missing row, which a duplicate key loses; when fewer rows changed than were asked for, a read tells which are
ours, as every value taken is unique), then a rate entry per job, before the jobs' own compare-and-sets; a slot
whose job was then lost is given back at once. Never a lock held across statements, and rows of one statement are
locked in key order: no deadlock, and on Galera/Group Replication a lost certification is a lost race like any
other. Under a limit with room to spare the slots taken are reservations for a while (limit_reserved.py), on which
the queue's next claims run their jobs with no statement: a limit that never binds costs next to nothing
(bench/limits.py measures it).

When every candidate read belongs to a saturated group, the claim reads again past those groups (their jobs
excluded by space and action): it steps over their waiting rows in the `job_claim` index, so the cost of that
second read grows with a saturated group's backlog. For a moment after, the queue's claims read past them at once,
from where that read found the first other job (limit_saturated.py): one read, as without limits.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..contract import validation as check
from ..contract.events import limit_reached
from ..contract.events import limited as limited_event
from ..contract.limits import Group, LimitUsage, group_of
from ..records import ActionLimit
from .claim_values import DIED, LOST, WON, Candidate
from .limit_pool import Pooled
from .limit_reserved import MARGIN_MS, is_reservation
from .limit_statements import FREE, past_args
from .limit_takes import Entry, LimitTakes, Plan
from .rows import job_columns
from .session import Connection, as_text

if TYPE_CHECKING:
    from .queue_core import QueueCore
else:
    QueueCore = object

NUMBER_DIGITS = 7  # ActionLimit's concurrency and rate are at most 1,000,000
#: Slots remembered for a settle to give back; beyond it the oldest are forgotten (they free themselves anyway).
MAX_HOLDS = 100_000
FORGET_GROUPS_MS = 600_000
#: A group has room to spare with at least this many free slots (and 4 per slot a claim wants): far from binding.
ROOM = 32


def _row_key(group: Group, kind: str, number: int) -> str:
    return _group_prefix(group) + (kind.encode() + f"{number:0{NUMBER_DIGITS}d}".encode()).hex()


@functools.lru_cache(maxsize=4096)
def _group_prefix(group: Group) -> str:
    return (b"\xff" + hashlib.sha256(repr(group).encode()).digest()[:16]).hex()


def _free_slots(group: Group, count: int, need: int, present: dict[str, tuple[str, bool]], now: int) -> list[Entry]:
    """Up to `need` free slots among the first `count`, lowest first: free rows, and rows not made yet."""
    free: list[Entry] = []
    for number in range(count):
        key = _row_key(group, "c", number)
        row = present.get(key)
        if row is None or _slot_free(row[1]):
            free.append((key, None if row is None else row[0]))
            if len(free) >= need:
                break
    return free


def _free_entries(
    group: Group, limit: ActionLimit, need: int, present: dict[str, tuple[str, bool]], now: int
) -> tuple[list[Entry], int | None]:
    """Up to `need` rate entries whose start has left the window, oldest first (rows not made yet first), and the
    instant the oldest start still in the window leaves it (None: none is in it)."""
    cutoff = now - limit.per_ms
    missing: list[Entry] = []
    old: list[tuple[int, Entry]] = []
    young: list[int] = []
    assert limit.rate is not None
    prefix = _group_prefix(group)
    for key, (value, _held) in present.items():
        if not key.startswith(prefix + "72") or not value.lstrip("-").isdigit():  # 'r' = 0x72
            continue
        if int(value) <= cutoff:
            old.append((int(value), (key, value)))
        else:
            young.append(int(value))
    seen = sum(1 for key in present if key.startswith(prefix + "72"))
    for number in range(limit.rate):
        if len(missing) >= need or seen >= limit.rate:
            break
        key = _row_key(group, "r", number)
        if key not in present:
            missing.append((key, None))
    opens = min(young) + limit.per_ms if young else None
    return (missing + [entry for _at, entry in sorted(old)])[:need], opens


class LimitedClaims(LimitTakes):
    """Mixed into `MysqlJobQueue`: plans a claim's candidates within their limits, takes and gives back slots."""

    async def _plan(
        self, candidates: list[Candidate], limits: Mapping[str, ActionLimit], now: int, plan: Plan
    ) -> list[Candidate]:
        """The candidates that fit their limits (plan.takes says with which rows); the others' groups go to
        `plan.refused`."""
        sql = self._limits_sql()
        if not candidates:
            return []
        # A job's space, action, key and id never change: those of candidates seen before (a saturated group's
        # jobs come back in every claim) are not read again.
        if now - self._job_groups_since > FORGET_GROUPS_MS or now < self._job_groups_since:
            # Only a TRUNCATE, or an old server's restart after a purge, reuses a seq: forget now and then anyway.
            self._job_groups, self._job_groups_since = {}, now
        known = self._job_groups
        missing = [seq for seq, *_rest in candidates if seq not in known]
        if missing:
            self._read_groups = True  # new jobs come in: the next claim reads their groups with them
            found = await self._store.run(lambda conn: conn.fetch(sql.groups_of(), (missing,)))
            for seq, space_id, action_id, key, id_ in found:
                text_key = None if key is None else as_text(key)
                known[int(seq)] = (int(space_id), as_text(action_id), text_key, as_text(id_))
            while len(known) > MAX_HOLDS:
                del known[next(iter(known))]
        limited: dict[int, tuple[Group, ActionLimit]] = {}
        ids = {seq: known[seq][3] for seq, *_rest in candidates if seq in known}
        for seq, (space_id, action_id, text_key, _id) in [(c[0], known[c[0]]) for c in candidates if c[0] in known]:
            limit = limits.get(action_id)
            if limit is not None:
                limited[seq] = (group_of(space_id, action_id, text_key, limit), limit)
        if not limited:
            return candidates
        groups = {group: limit for group, limit in limited.values()}
        need: dict[Group, int] = {}
        for group, _limit in limited.values():
            need[group] = need.get(group, 0) + 1
        free = self._pooled(groups, need, plan, now)
        at_hand = {group for group, _kind in free}
        unread = {group: limit for group, limit in groups.items() if group not in at_hand}
        if unread:  # the groups whose slots are not at hand (a rate's are never): read them
            read, roomy = await self._read_free(unread, need, now, plan)
            free.update(read)
            # The slots of a group with room to spare are reserved for a while (limit_reserved.py); one whose job
            # is lost to another claimer stays with this queue, as a pooled one does, rather than back with a write.
            plan.reserving.update(seq for seq, (group, _limit) in limited.items() if group in roomy)
            at_hand |= roomy
        plan.pooled.update(seq for seq, (group, _limit) in limited.items() if group in at_hand)
        admitted = []
        for candidate in candidates:
            seq = candidate[0]
            if seq not in limited:
                admitted.append(candidate)
                continue
            group, limit = limited[seq]
            slots = free.get((group, "c"), [])
            ring = free.get((group, "r"), [])
            full = limit.concurrency is not None and not slots
            if full and group not in unread:
                continue  # the claim wants no more of this group than the pool held: not a limit reached
            if group in plan.refused or full or (limit.rate is not None and not ring):
                plan.refused[group] = limit.by_key
                if full:
                    plan.full.add(group)
                if plan.on_limited is not None:
                    reason = limit_reached(limit, full, group[2])
                    plan.on_limited(limited_event(ids[seq], group[0], group[1], reason))
                continue
            slot = slots.pop(0) if limit.concurrency is not None else None
            entry = ring.pop(0) if limit.rate is not None else None
            plan.takes[seq] = (slot, entry)
            plan.per_ms[seq] = limit.per_ms
            admitted.append(candidate)
        return admitted

    def _pooled(
        self, groups: Mapping[Group, ActionLimit], need: Mapping[Group, int], plan: Plan, now: int
    ) -> dict[tuple[Group, str], list[Entry]]:
        """The slots for this claim from the queue's own reservations (limit_reserved.py) or pool (limit_pool.py),
        of each group (concurrency only, its limit noted as it is) that has as many at hand as the claim may take
        of it; the claim reads the others'."""
        pool, reserved = self._slot_pool, self._reserved
        lasting = now + plan.lease_ms + MARGIN_MS  # a reservation must outlast the new job's first lease
        source: dict[Group, Callable[[str, str, int], list[Pooled]]] = {}
        for group, limit in groups.items():
            if limit.rate is not None or limit.concurrency is None or self._noted.get(group) != _note(group, limit):
                continue
            prefix, below = _group_prefix(group), _row_key(group, "c", limit.concurrency)
            wanted = min(need[group], plan.want)
            if reserved.available(prefix, below, lasting) >= wanted:
                source[group] = reserved.take
            elif pool.available(prefix, below) >= wanted:
                source[group] = pool.take
        # As many as there are candidates, when at hand: those past `want` replace lost races.
        return {(group, "c"): [*take(_group_prefix(group), _row_key(group, "c", groups[group].concurrency or 0),
                                     need[group])] for group, take in source.items()}  # fmt: skip

    async def _read_free(
        self, groups: Mapping[Group, ActionLimit], need: Mapping[Group, int], now: int, plan: Plan
    ) -> tuple[dict[tuple[Group, str], list[Entry]], set[Group]]:
        """The free slots and rate entries of these groups, as the server has them now, and the groups with room
        to spare (`_stock`); `plan.opens`: when each rate's window next lets a start in past the entries read."""
        sql = self._limits_sql()
        ranges: list[str] = []
        for group, limit in groups.items():
            for kind, count in (("c", limit.concurrency), ("r", limit.rate), ("m", 1)):
                if count is not None:
                    ranges += [_row_key(group, kind, 0), _row_key(group, kind, count)]
        rows = await self._store.run(lambda conn: conn.fetch(sql.rows(len(ranges) // 2), (now, now, now, *ranges)))
        present: dict[str, tuple[str, bool]] = {as_text(k).lower(): (as_text(v), bool(held)) for k, v, held in rows}
        await self._note_limits(groups, present)
        free: dict[tuple[Group, str], list[Entry]] = {}
        roomy: set[Group] = set()
        for group, limit in groups.items():
            if limit.concurrency is not None:
                free[(group, "c")] = _free_slots(group, limit.concurrency, need[group], present, now)
                self._slot_pool.discard(key for key, _value in free[(group, "c")])
                chosen = free[(group, "c")]
                if limit.rate is None and self._stock(group, limit.concurrency, need[group], present, chosen):
                    roomy.add(group)
                else:  # a limit close to binding: this queue's idle reservations go back to every replica
                    await self._give_back(self._reserved.idle_of(_group_prefix(group)))
            if limit.rate is not None:
                free[(group, "r")], opens = _free_entries(group, limit, need[group], present, now)
                if opens is not None:
                    plan.opens[group] = opens
        return free, roomy

    def _stock(
        self, group: Group, concurrency: int, need: int, present: Mapping[str, tuple[str, bool]], chosen: list[Entry]
    ) -> bool:
        """With room to spare (a limit far from binding: `ROOM` free slots, and 4 per one wanted), the free slot rows
        a read met beyond those it chose go to the pool, so the next claims take them with no read; with little
        room they are left to every replica. Answers whether there was room to spare."""
        prefix, below = _group_prefix(group) + "63", _row_key(group, "c", concurrency)  # 'c' = 0x63
        rows = [(key, value, held) for key, (value, held) in present.items() if key.startswith(prefix) and key < below]
        if concurrency - sum(1 for _key, _value, held in rows if held) < max(4 * need, ROOM):
            return False
        taken = {key for key, _value in chosen}
        spare = [(key, value) for key, value, held in rows if not held and key not in taken]
        self._slot_pool.put(spare[: 2 * need])
        return True

    if TYPE_CHECKING:

        async def _take(self, seq: int, lapsed: int, worker_id: str, lease_ms: int, now: int, started: int) -> int: ...

        def _won_at(self, now: int, started_ns: int) -> int: ...

    async def _within_limits(
        self, candidates: list[Candidate], limit: int, now: int, plan: Plan | None
    ) -> list[Candidate]:
        """The candidates a claim may try; when saturated groups left it short, due jobs read past them."""
        if plan is None:
            return candidates
        limits = plan.limits
        plan.want = limit
        full = len(candidates) >= 2 * limit
        admitted = await self._plan(candidates, limits, now, plan)
        for _round in range(2):
            if len(admitted) >= limit or not plan.refused or not full:
                break
            seen = {c[0] for c in admitted} | {c[0] for c in candidates}
            read = await self._pending_past({**plan.skipped, **plan.refused}, now, 2 * limit)
            plan.past += read
            more = [c for c in read if c[0] not in seen]
            full = len(more) >= limit
            admitted += await self._plan(more, limits, now, plan)
        return admitted

    def _note_starts(self, priorities: list[int], read: list[Candidate]) -> None:
        """A read past the saturated groups of these priorities from the start: where each one's first other job
        is now."""
        for priority in priorities:
            found = [run_at for _seq, run_at, lapsed, p in read if p == priority and not lapsed]
            if found:
                self._saturated.starts_at(priority, min(found))

    def _left_out(self, plan: Plan, now: int) -> tuple[list[tuple[Group, bool]], dict[int, int]]:
        """The saturated groups a claim's pending reads leave out (limit_saturated.py), and where each priority's
        read starts. They are not refused in the plan: a lapsed job of theirs (read apart) may free its slot."""
        self._limits_sql()
        if plan.frees is None:
            plan.frees, plan.now = self._saturated.frees, now
        groups, starts = self._saturated.past(now)
        plan.skipped.update(groups)
        return groups, starts

    async def _take_within(
        self, plan: Plan | None, held: list[Entry] | None, seq: int, lapsed: int, worker_id: str, lease_ms: int,
        now: int, started: int,
    ) -> int:  # fmt: skip
        """`_take`, once `_take_limited` took the rows the plan gave the job (None: it lost one). A job that died
        rather than ran spends no slot: finished, it frees the slot by itself, which goes to the pool. A slot of a
        job lost to another claimer would count for others until its reservation passed: given back, unless it
        came from the pool (a limit with room to spare), where it goes back with no write."""
        if held is None:
            return LOST
        result = LOST
        try:
            result = await self._take(seq, lapsed, worker_id, lease_ms, now, started)
        finally:
            if not held or plan is None:
                pass  # a job of no limit
            elif result == WON:
                plan.held[seq] = held
            elif result == DIED or seq in plan.pooled:
                self._put_back(held)
            else:
                await self._give_back(held)
        return result

    async def _claimed(self, plan: Plan | None, rows: Sequence[Sequence[Any]]) -> None:
        """The claim's read-back: slots of jobs it returns are held until their settle; the others' (a lapsed job
        that went dead rather than ours: finished, so its slot is free) go to the pool."""
        if plan is None:
            return
        jobs = [(int(c["seq"]), as_text(c["id"])) for c in map(job_columns, rows)]
        self._limits_sql()
        holds = self._limit_holds
        for seq, job_id in jobs:
            held = plan.held.pop(seq, [])
            if held:
                holds.setdefault(job_id, []).extend(held)
        while len(holds) > MAX_HOLDS:  # jobs never settled here (their lease lapsed): their slots free themselves
            del holds[next(iter(holds))]
        self._put_back(slot for slot, _entry in plan.takes.values() if slot is not None)  # planned, not tried
        plan.takes.clear()
        self._put_back(entry for held in plan.held.values() for entry in held)
        if plan.frees is not None and not plan.slot_lost:  # the claim's groups refused as full: still full
            self._saturated.remember(plan.refused, plan.full, plan.opens, plan.past, _group_prefix, plan.now,
                                     plan.frees)  # fmt: skip

    async def _note_limits(self, groups: Mapping[Group, ActionLimit], present: Mapping[str, tuple[str, bool]]) -> None:
        """Each group's `m` row says which limit claims work to (for `limit_usage`): written when it changed."""
        for group, limit in groups.items():
            key = _row_key(group, "m", 0)
            value = _note(group, limit)
            if (key in present and present[key][0] == value) or await self._cas_row(
                (key, present[key][0] if key in present else None), value
            ):
                self._noted[group] = value
            else:
                self._noted.pop(group, None)

    async def limit_usage(self, *, space_ids: Sequence[int] | None = None) -> list[LimitUsage]:
        """The `LimitUsage` of every group claims have worked to (of those spaces; None: all)."""
        spaces = check.space_ids_or_all(space_ids)
        sql = self._limits_sql()
        now = await self._now_ms()
        notes = await self._store.run(lambda conn: conn.fetch(sql.notes()))
        usage = []
        for (value,) in notes:
            space_id, action_id, key, concurrency, rate, per_ms = json.loads(as_text(value)[2:])
            if spaces is not None and space_id not in spaces:
                continue
            group: Group = (space_id, action_id, key)
            ranges = [_row_key(group, "c", 0), _row_key(group, "c", concurrency or 0),
                      _row_key(group, "r", 0), _row_key(group, "r", rate or 0)]  # fmt: skip
            rows = await self._store.run(functools.partial(_fetch, sql=sql.rows(2), args=(now, now, now, *ranges)))
            slot, start = _group_prefix(group) + "63", _group_prefix(group) + "72"
            running = started = reserved = 0
            for k, v, held in rows:
                hex_key, text = as_text(k).lower(), as_text(v)
                if hex_key.startswith(slot) and text != FREE and not _slot_free(bool(held)):
                    if is_reservation(text):
                        reserved += 1
                    else:
                        running += 1
                elif hex_key.startswith(start) and text.lstrip("-").isdigit() and int(text) > now - per_ms:
                    started += 1
            if reserved:  # held for a while, with or without a job on them: count the group's running jobs
                args = (now, space_id, action_id, key is None, key)
                found = await self._store.run(functools.partial(_fetch, sql=sql.running_in(), args=args))
                running += min(reserved, max(0, int(found[0][0]) - running))
            usage.append(LimitUsage(space_id=space_id, action_id=action_id, key=key, concurrency=concurrency,
                                    running=running, rate=rate, per_ms=per_ms, started=started))  # fmt: skip
        return sorted(usage, key=lambda u: (u.space_id, u.action_id, u.key or ""))

    async def _pending_past(self, refused: Mapping[Group, bool], now: int, count: int) -> list[Candidate]:
        """Due pending jobs of every group but the refused ones, in claim order; their groups are read with them."""
        args = [now, *past_args(list(refused.items())), count]
        statement = self._limits_sql().pending_past(len(refused))
        return self._grouped(await self._store.run(lambda conn: conn.fetch(statement, args)))

    def _grouped(self, rows: Sequence[Sequence[Any]], *, claim_read: bool = False) -> list[Candidate]:
        """Candidates read with their groups (`with_groups`): the groups are kept for the plan. A claim's own read
        of them that met only jobs already known (a saturated group's backlog, read again by every claim) leaves
        the next claim's read without them: a primary-key lookup per candidate saved."""
        self._limits_sql()
        if claim_read:
            # Three reads in a row that met only known jobs before the claims stop reading groups: a read of
            # candidates lost to other claimers meets known jobs too, and one such read is no backlog read again.
            self._known_reads = 0 if any(int(row[0]) not in self._job_groups for row in rows) else self._known_reads + 1
            self._read_groups = self._known_reads < 3
        for seq, _run_at, _lapsed, _priority, space_id, action_id, key, id_ in rows:
            text_key = None if key is None else as_text(key)
            self._job_groups[int(seq)] = (int(space_id), as_text(action_id), text_key, as_text(id_))
        return [(int(seq), int(run_at), int(lapsed), int(priority)) for seq, run_at, lapsed, priority, *_ in rows]

    async def _settled(self, job_ids: Sequence[str], *, final: bool) -> None:
        """Forgets the slots this queue took for these jobs (their settle has run): a job settled to a final status
        frees its slot by itself (LimitSql.rows); a retried one, pending again, gives it back."""
        holds = self.__dict__.get("_limit_holds")
        if not holds:
            return
        held = [entry for job_id in job_ids for entry in holds.pop(job_id, [])]
        if final:
            self._put_back(held)  # their jobs are done: the next claim may take them without a read
        if held and (final or await self._give_back(held)):
            # A slot came free: a worker waiting on it claims now rather than at its next poll.
            self.wakeups.notify(self.wakeup_topic)


async def _fetch(conn: Connection, *, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    return await conn.fetch(sql, args)


def _note(group: Group, limit: ActionLimit) -> str:
    # Led by "0 ", which the slot rows' join reads as no job (and casts without a warning).
    return "0 " + json.dumps([*group, limit.concurrency, limit.rate, limit.per_ms], ensure_ascii=False)


def _slot_free(held: bool) -> bool:
    # Whether a slot is held is judged in the read (LimitSql.rows), on the server's instant.
    return not held
