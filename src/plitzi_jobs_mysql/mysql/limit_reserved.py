"""Slots a queue holds for a while under a limit far from binding, so that its claims run jobs on them with no write.

A slot row valued `0 until worker nonce` is a reservation: held, by the read's rule (LimitSql.rows), until `until`,
whatever runs on it. A claim that found its group with room to spare (limits.py `_stock`) reserves the slots it
takes for RESERVE_LEASES leases instead of naming its jobs in them. The queue's next claims of the group run their
jobs on those reservations without a statement, as long as a reservation outlasts the new job's first lease; a
settle, a retry or a lost race hands it back here, not to the server. A job that runs on past its reservation has
the reservation moved on by its heartbeat, before its lease is renewed (`MysqlJobQueue.heartbeat`): so a slot is
never free on the server while a job on it holds a live lease. A killed replica's reservations come back by
themselves at `until`; a group that stops having room to spare has this queue's idle ones given back at its next
read, so a limit that starts to bind is shared out again at once.

So a never-binding limit costs a claim no statement at all once the queue holds its reservations: a read and a
write per RESERVE_LEASES - 1 leases instead of a write per claim (bench/limits.py).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from .limit_pool import GROUP_PREFIX_CHARS, Pooled

#: How many leases (the claim's `lease_ms`) a reservation lasts from its write.
RESERVE_LEASES = 3
#: A reservation takes a new job only while it outlasts that job's first lease by this much (ms): the job's own
#: compare-and-set, after the claim chose the slot, sets that lease a moment later.
MARGIN_MS = 2_000

#: Beyond this many reservations (in use and idle), this queue forgets them all: they lapse on the server.
MAX_RESERVED = 10_000


def is_reservation(value: str) -> bool:
    """Whether a slot's value is a reservation (four fields; a job's value has three): LimitSql.rows's test."""
    return value.startswith("0 ") and value.count(" ") == 3


def until_of(value: str) -> int:
    return int(value.split(" ")[1])


@dataclass
class ReservedSlots:
    """The reservations one queue holds: key -> the value it wrote, and which are idle (no job of ours on them)."""

    values: dict[str, str] = field(default_factory=dict)
    idle: dict[str, dict[str, None]] = field(default_factory=dict)  # group prefix -> idle keys, oldest first
    _nonces: itertools.count[int] = field(default_factory=itertools.count)
    _tag: str = field(default_factory=lambda: secrets.token_hex(4))

    def new_value(self, until: int, worker_hex: str) -> str:
        """A value no other take writes: the nonce is this queue's tag and a count."""
        return f"0 {until} {worker_hex} {self._tag}{next(self._nonces):x}"

    def add(self, key: str, value: str) -> None:
        """A reservation this queue just wrote, with a job of its own on it."""
        if len(self.values) >= MAX_RESERVED:  # those of jobs never settled here (lapsed leases) pile up otherwise
            self.values.clear()
            self.idle.clear()
        self.values[key] = value

    def owns(self, entry: tuple[str, str | None]) -> bool:
        return entry[1] is not None and self.values.get(entry[0]) == entry[1]

    def available(self, prefix: str, below: str, until: int) -> int:
        """Idle reservations of the group numbered below `below` that last past `until`."""
        self._expire(prefix, until)
        return sum(1 for key in self.idle.get(prefix, {}) if key < below)

    def take(self, prefix: str, below: str, count: int) -> list[Pooled]:
        """Up to `count` idle reservations of the group (after `available` judged them), no longer idle."""
        group = self.idle.get(prefix, {})
        taken = [key for key in group if key < below][:count]
        for key in taken:
            del group[key]
        return [(key, self.values[key]) for key in taken]

    def release(self, entries: Iterable[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
        """Hands these slots back: this queue's reservations go idle; the others are answered, for the pool or the
        server."""
        rest = []
        for key, value in entries:
            if self.owns((key, value)):
                self.idle.setdefault(key[:GROUP_PREFIX_CHARS], {})[key] = None
            else:
                rest.append((key, value))
        return rest

    def moved(self, key: str, old: str, new: str | None) -> None:
        """A reservation's value after a heartbeat moved it on (None: another claimer had it: forgotten)."""
        if self.values.get(key) != old:
            return
        if new is None:
            del self.values[key]
            self.idle.get(key[:GROUP_PREFIX_CHARS], {}).pop(key, None)
        else:
            self.values[key] = new

    def idle_of(self, prefix: str) -> list[Pooled]:
        """The group's idle reservations, forgotten here: for a give-back."""
        keys = list(self.idle.pop(prefix, {}))
        return [(key, self.values.pop(key)) for key in keys]

    def _expire(self, prefix: str, until: int) -> None:
        # An idle reservation too short for a new job is left to lapse on the server: forgotten here.
        group = self.idle.get(prefix, {})
        for key in [key for key in group if until_of(self.values[key]) < until]:
            del group[key]
            del self.values[key]
