"""The SQL of the MySQL queue's fleet-wide limits (mysql/limits.py says what the rows hold)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..contract.limits import Group
from .schema.tables import table_names
from .statements import nowait_guarded

#: A slot's value once given back: no job, no reservation.
FREE = "0 0 -"


@functools.lru_cache(maxsize=64)
def _past(groups: int) -> str:
    # Each group's placeholders: space, action, whether the whole action (not by_key), key.
    return " AND ".join(["NOT (space_id = %s AND action_id = %s AND (%s OR `key` <=> %s))"] * groups)


@functools.lru_cache(maxsize=64)
def past_groups(pending_read: str, groups: int) -> str:
    """A claim's read of one priority's pending candidates from a run_at on, with these groups left out: its
    placeholders are the read's, then after `run_at <= %s` the run_at it starts at and the groups'."""
    marker = " ORDER BY run_at"
    assert pending_read.count(marker) == 1, pending_read
    return pending_read.replace(marker, f" AND run_at >= %s AND {_past(groups)}{marker}")


def past_args(groups: Sequence[tuple[Group, bool]]) -> list[Any]:
    return [part for (space_id, action_id, key), by_key in groups for part in (space_id, action_id, not by_key, key)]


@functools.lru_cache(maxsize=64)
def with_groups(candidates_read: str) -> str:
    """A claim's read of candidates that also reads each one's group (and id), so that a claim with limits needs
    no read of its own for them: the row is looked up by the read anyway."""
    return candidates_read.replace(", priority FROM", ", priority, space_id, action_id, `key`, id FROM")


@dataclass
class LimitSql:
    kv: str
    jobs: str

    @classmethod
    def for_prefix(cls, prefix: str) -> LimitSql:
        t = table_names(prefix)
        return cls(kv=f"`{t.kv}`", jobs=f"`{t.jobs}`")

    def groups_of(self) -> str:
        return f"SELECT seq, space_id, action_id, `key`, id FROM {self.jobs} WHERE seq IN %s"

    def rows(self, ranges: int) -> str:
        # A slot is held while its job is unfinished and either the reservation (`until`, which covers the moment
        # between the slot's write and the job's) has not passed, or the job runs under a live lease of the worker
        # that took the slot. So a settle to a final status frees the slot by itself, with no write of its own.
        # A reservation (limit_reserved.py: `0 until worker nonce`, four fields where a job's value has three) is
        # held until `until`, whatever runs. Its placeholder (now) comes first.
        where = " OR ".join(["(s.k >= UNHEX(%s) AND s.k < UNHEX(%s))"] * ranges)
        until = "CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(s.v, ' ', 2), ' ', -1) AS SIGNED)"  # a value's second field
        reserved = f"(SUBSTRING(s.k, 18, 1) = 'c' AND s.v LIKE '0 %% %% %%' AND {until} >= %s)"
        return (
            f"SELECT HEX(s.k), s.v, j.seq IS NOT NULL OR {reserved} FROM {self.kv} s LEFT JOIN {self.jobs} j "
            "ON j.seq = CAST(SUBSTRING_INDEX(s.v, ' ', 1) AS UNSIGNED) AND j.status IN ('pending', 'running') "
            f"AND ({until} >= %s "
            "OR (j.status = 'running' AND j.lease_until >= %s AND j.worker_id = UNHEX(SUBSTRING_INDEX(s.v, ' ', -1)))) "
            f"WHERE {where}"
        )

    # The slot writes on MySQL (`nowait`): guarded by a NOWAIT lock on the same rows, as claims are there
    # (statements.nowait_guarded; its placeholders come last: the keys again). MariaDB bounds them per statement.

    def take_many(self, count: int, nowait: bool) -> str:
        # Many slots in one statement: rows are locked in key order (a range over the primary key), as the
        # give-back's are, so two such statements never wait on each other in a cycle.
        cases = " ".join(["WHEN UNHEX(%s) THEN %s"] * count)
        keys = ", ".join(["UNHEX(%s)"] * count)
        guards = " OR ".join(["(k = UNHEX(%s) AND v = %s)"] * count)
        statement = f"UPDATE {self.kv} SET v = CASE k {cases} END WHERE k IN ({keys}) AND ({guards})"
        return nowait_guarded(statement, self.kv, "k", f"IN ({keys})") if nowait else statement

    def values_of(self, count: int) -> str:
        keys = ", ".join(["UNHEX(%s)"] * count)
        return f"SELECT HEX(k), v FROM {self.kv} WHERE k IN ({keys})"

    def take(self, nowait: bool) -> str:
        statement = f"UPDATE {self.kv} SET v = %s WHERE k = UNHEX(%s) AND v = %s"
        return nowait_guarded(statement, self.kv, "k", "= UNHEX(%s)") if nowait else statement

    def take_start(self, at: str, nowait: bool) -> str:
        # The start's instant and the window's cutoff judged in the statement, on one clock for every claimer.
        statement = (
            f"UPDATE {self.kv} SET v = CAST({at} AS CHAR) "
            f"WHERE k = UNHEX(%s) AND v = %s AND CAST(v AS SIGNED) <= {at} - %s"
        )
        return nowait_guarded(statement, self.kv, "k", "= UNHEX(%s)") if nowait else statement

    def insert_start(self, at: str) -> str:
        return f"INSERT INTO {self.kv} (k, v, expires_at) VALUES (UNHEX(%s), CAST({at} AS CHAR), NULL)"

    def notes(self) -> str:
        # Every group's `m` row: 0xFF, 16 bytes of digest, then 'm' at byte 18.
        return f"SELECT v FROM {self.kv} WHERE k >= UNHEX('ff') AND SUBSTRING(k, 18, 1) = 'm'"

    def insert(self) -> str:
        return f"INSERT INTO {self.kv} (k, v, expires_at) VALUES (UNHEX(%s), %s, NULL)"

    def give_back(self, count: int) -> str:
        # Pairs may cross (k1 with v2) only where job 2 holds slot k1: also a slot this queue gives back now.
        # Unguarded (it may wait a lock out): another claimer's take holds a row for a moment, and failing at once
        # would leave a retried job's slot taken until its reservation passes.
        keys = ", ".join(["UNHEX(%s)"] * count)
        return f"UPDATE {self.kv} SET v = '{FREE}' WHERE k IN ({keys}) AND v IN %s"

    def running_in(self) -> str:
        """A group's jobs running under a live lease: what its reservations (limit_reserved.py) hold."""
        return (
            f"SELECT COUNT(*) FROM {self.jobs} FORCE INDEX (job_due) WHERE status = 'running' AND lease_until >= %s "
            "AND space_id = %s AND action_id = %s AND (%s OR `key` <=> %s)"
        )

    def pending_past(self, groups: int) -> str:
        past = _past(groups)
        return (
            f"SELECT seq, run_at, 0, priority, space_id, action_id, `key`, id FROM {self.jobs} FORCE INDEX (job_claim) "
            f"WHERE status = 'pending' AND held = 0 AND run_at <= %s AND {past} ORDER BY priority, run_at, seq LIMIT %s"
        )
