"""How a claim takes the limit rows its plan chose (mysql/limits.py says what the rows hold), and gives slots back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pymysql

from ..contract.clock import InjectedClock
from ..contract.events import EventHook
from ..contract.limits import Group
from ..records import ActionLimit
from .claim_values import Candidate
from .limit_pool import SlotPool
from .limit_reserved import MARGIN_MS, RESERVE_LEASES, ReservedSlots, until_of
from .limit_saturated import SaturatedGroups
from .limit_statements import FREE, LimitSql
from .queue_core import log
from .session import Connection, as_text, is_conflict, is_duplicate
from .statements import NOW_MS

if TYPE_CHECKING:
    from .queue_core import QueueCore
else:
    QueueCore = object

#: (key as hex, the value read, or None: the row does not exist yet).
Entry = tuple[str, str | None]


@dataclass
class Plan:
    """What one claim may take: per admitted candidate seq, the slot and the rate entry it will try."""

    limits: Mapping[str, ActionLimit]
    takes: dict[int, tuple[Entry | None, Entry | None]] = field(default_factory=dict)
    per_ms: dict[int, int] = field(default_factory=dict)
    refused: dict[Group, bool] = field(default_factory=dict)  # group -> whether it is one key's (by_key)
    #: The slots taken for jobs this claim won, until the claim's read-back names their jobs.
    held: dict[int, list[Entry]] = field(default_factory=dict)
    #: Told of each due job left waiting, with the limit it is at (the worker's `limited` events).
    on_limited: EventHook | None = None
    #: How many jobs the claim wants (its `limit`).
    want: int = 0
    #: The candidates whose slots came from the queue's pool.
    pooled: set[int] = field(default_factory=set)
    #: The refused groups that were at their concurrency limit (the others: at their rate).
    full: set[Group] = field(default_factory=set)
    #: Per rate-limited group read, when its window next lets a start in (the oldest start read leaves it).
    opens: dict[Group, int] = field(default_factory=dict)
    #: The saturated groups the claim's pending reads leave out (limit_saturated.py).
    skipped: dict[Group, bool] = field(default_factory=dict)
    #: The queue's count of slot frees when the claim first read (limit_saturated.py).
    frees: int | None = None
    now: int = 0
    #: What the claim's reads past refused groups found, and whether a slot the plan chose was lost to another
    #: claimer (then a group refused as full may not be).
    past: list[Candidate] = field(default_factory=list)
    slot_lost: bool = False
    #: The claim's lease (a reservation takes a job only if it outlasts it) and the candidates whose slots it
    #: reserves (their group had room to spare: limit_reserved.py).
    lease_ms: int = 0
    reserving: set[int] = field(default_factory=set)


class LimitTakes(QueueCore):
    """The writes of a claim's limits; its state, made on first use."""

    _limit_holds: dict[str, list[Entry]]
    _limit_sql: LimitSql
    _job_groups: dict[int, tuple[int, str, str | None, str]]  # seq -> (space_id, action_id, key, id)
    _job_groups_since: int
    _slot_pool: SlotPool
    _noted: dict[Group, str]  # each group's `m` row as this queue last read or wrote it
    _saturated: SaturatedGroups  # groups claims read past for a moment (limit_saturated.py)
    _reserved: ReservedSlots  # slots held for a while under limits far from binding (limit_reserved.py)
    #: Whether a claim reads its candidates' groups with them (`with_groups`) or after, for those not known yet.
    _read_groups: bool
    _known_reads: int  # the claims' reads in a row that met only jobs whose groups are known

    def _limits_sql(self) -> LimitSql:
        if "_limit_sql" not in self.__dict__:
            self._limit_sql = LimitSql.for_prefix(self._store.prefix)
            self._limit_holds = {}
            self._job_groups, self._job_groups_since = {}, 0
            self._saturated = SaturatedGroups()
            self._slot_pool, self._noted = SlotPool(on_free=self._saturated.freed), {}
            self._read_groups, self._known_reads = True, 0
            self._reserved = ReservedSlots()
        return self._limit_sql

    async def _take_limited(
        self, plan: Plan | None, seqs: Sequence[int], at: int, lease_ms: int, worker_id: str
    ) -> dict[int, list[Entry]]:
        """The slots and rate entries the plan gave these candidates, taken: the rows each now holds, for those
        that got all of theirs (an unlimited one: none); a candidate left out lost a race for one."""
        takes = {seq: plan.takes.pop(seq) for seq in seqs if plan is not None and seq in plan.takes}
        held: dict[int, list[Entry]] = {seq: [] for seq in seqs if seq not in takes}
        if not takes:
            return held
        worker = worker_id.encode().hex()
        reserved = self._reserved
        wanted: dict[int, tuple[Entry, str]] = {}
        ours: set[str] = set()  # reservations this queue holds already: no write
        for seq, (slot, _) in takes.items():
            if slot is None:
                continue
            if reserved.owns(slot):
                wanted[seq] = (slot, str(slot[1]))
                ours.add(slot[0])
            elif plan is not None and seq in plan.reserving:
                wanted[seq] = (slot, reserved.new_value(at + RESERVE_LEASES * lease_ms, worker))
            else:
                wanted[seq] = (slot, f"{seq} {at + lease_ms} {worker}")
        got = ours | await self._take_slots([(slot, value) for slot, value in wanted.values() if slot[0] not in ours])
        for seq, (slot, value) in wanted.items():
            if plan is not None and seq in plan.reserving and slot[0] in got:
                reserved.add(slot[0], value)
        for seq, (slot_entry, entry) in takes.items():
            mine: list[Entry] = [(slot_entry[0], wanted[seq][1])] if slot_entry is not None else []
            if mine and mine[0][0] not in got:
                if plan is not None:
                    plan.slot_lost = True
                continue
            if entry is not None and plan is not None and not await self._take_start(entry, at, plan.per_ms[seq]):
                await self._give_back(mine)
                continue
            held[seq] = mine
        return held

    async def _take_slots(self, slots: list[tuple[Entry, str]]) -> set[str]:
        """The keys of these slots now holding the value asked (each row guarded by the value the plan read)."""
        existing = [(row, value) for row, value in slots if row[1] is not None]
        got = {row[0] for row, value in slots if row[1] is None and await self._cas_row(row, value)}
        if len(existing) == 1:
            (row, value), *_ = existing
            return got | ({row[0]} if await self._cas_row(row, value) else set())
        if not existing:
            return got
        sql = self._limits_sql()
        count = len(existing)
        args: list[str | None] = [part for (key, _old), value in existing for part in (key, value)]
        args += [key for (key, _old), _value in existing]
        args += [part for (key, old), _value in existing for part in (key, old)]
        keys = [key for (key, _old), _value in existing]

        async def cas(conn: Connection) -> int:
            flavour = self._store.flavour
            if flavour.nowait_guard:
                return await conn.write(sql.take_many(count, True), [*args, *keys])
            return await conn.write(sql.take_many(count, False), args, prefix=flavour.claim_prefix)

        try:
            changed = await self._store.run(cas)
        except pymysql.err.MySQLError as error:
            if not is_conflict(error):
                raise
            changed = -1  # a held row or a lost certification: the statement changed nothing, or a read tells
        if changed == count:
            return got | {key for (key, _old), _value in existing}
        # Fewer rows changed than asked: a value is unique (job, reservation, worker), so the rows holding ours
        # are the ones this claim took.
        rows = await self._store.run(lambda conn: conn.fetch(sql.values_of(count), keys))
        values = {key.lower(): value for (key, _old), value in existing}
        return got | {as_text(k).lower() for k, v in rows if values.get(as_text(k).lower()) == as_text(v)}

    async def _take_start(self, entry: Entry, at: int, per_ms: int) -> bool:
        """A rate entry, for a start at the server's instant (at `at` under an injected clock, as in tests): the
        claimers' own readings of the server's clock differ by their reading's error, the server's does not."""
        sql = self._limits_sql()
        key, old = entry
        injected = isinstance(self._clock, InjectedClock)
        instant = "%s" if injected else NOW_MS
        given = (at,) if injected else ()

        async def cas(conn: Connection) -> int:
            flavour = self._store.flavour  # read in the call: first use learns the server's
            if old is None:
                return await conn.write(sql.insert_start(instant), (key, *given), prefix=flavour.claim_prefix)
            args = (*given, key, old, *given, per_ms, *((key,) if flavour.nowait_guard else ()))
            return await conn.write(sql.take_start(instant, flavour.nowait_guard), args, prefix=flavour.claim_prefix)

        return await self._lost_race_is_false(cas)

    async def _cas_row(self, row: Entry, value: str) -> bool:
        key, old = row
        sql = self._limits_sql()

        async def cas(conn: Connection) -> int:
            flavour = self._store.flavour
            if old is None:
                return await conn.write(sql.insert(), (key, value), prefix=flavour.claim_prefix)
            args = (value, key, old, *((key,) if flavour.nowait_guard else ()))
            return await conn.write(sql.take(flavour.nowait_guard), args, prefix=flavour.claim_prefix)

        return await self._lost_race_is_false(cas)

    async def _lost_race_is_false(self, write: Callable[[Connection], Awaitable[int]]) -> bool:
        try:
            return bool(await self._store.run(write))
        except pymysql.err.MySQLError as error:
            if is_duplicate(error) or is_conflict(error):
                return False  # another claimer made the row first, or holds it (on a cluster: lost at COMMIT)
            raise

    async def _extend_reserved(self, job_ids: Sequence[str], worker_id: str, lease_ms: int, now: int) -> None:
        """Before these jobs' leases are renewed to `now + lease_ms`: a reservation one of them runs on that the new
        lease would outlast is moved on first (limit_reserved.py), so the slot stays held while the job's lease is
        live. A reservation another claimer took meanwhile (it lapsed: so had the job's lease) is forgotten."""
        holds = self.__dict__.get("_limit_holds")
        if not holds:
            return
        reserved, lasting = self._reserved, now + lease_ms + MARGIN_MS
        due = [(job_id, entry) for job_id in job_ids for entry in holds.get(job_id, [])
               if reserved.owns(entry) and until_of(str(entry[1])) < lasting]  # fmt: skip
        if not due:
            return
        worker = worker_id.encode().hex()
        moves = [(entry, reserved.new_value(now + RESERVE_LEASES * lease_ms, worker)) for _job_id, entry in due]
        got = await self._take_slots(moves)
        for (job_id, (key, old)), (_entry, new) in zip(due, moves, strict=True):
            moved = key in got
            reserved.moved(key, str(old), new if moved else None)
            if moved:
                holds[job_id] = [(k, new if (k, v) == (key, old) else v) for k, v in holds[job_id]]
            else:
                log.warning("job %s runs on a limit slot reserved by this queue that another claimer took after "
                            "the reservation lapsed: its limit may be exceeded while it runs", job_id)  # fmt: skip

    def _put_back(self, entries: Iterable[Entry]) -> None:
        """Slots this queue no longer runs a job on, kept for its next claims: its reservations go idle, the
        others to the pool (no write either way)."""
        self._slot_pool.put(self._reserved.release(entries))

    async def _give_back(self, held: Sequence[Entry]) -> bool:
        """Best effort, never raising: a slot whose give-back failed (a cut connection, a lost certification)
        frees itself within a lease, and the claim or settle it follows must not fail for it."""
        if held:
            held = self._reserved.release(held)  # this queue's reservations go idle, with no write
        if not held:
            return True
        statement = self._limits_sql().give_back(len(held))
        args = (*(k for k, _v in held), [v for _k, v in held])
        try:
            await self._store.run(lambda conn: conn.write(statement, args))
        except Exception as error:
            log.warning("could not give back %d limit slot(s) (they free themselves within a lease): %s", len(held),
                        error)  # fmt: skip
            return False
        self._slot_pool.put((key, FREE) for key, _value in held)
        return True
