"""The MySQL queue's pauses (`pause`, `resume`, `list_paused`).

A pause is a row of the kv table under a key no kv call can write: `0xFF` never occurs in UTF-8, and every kv
key is a UTF-8 string, so `0xFF pause:<space>:<action>` (`<action>` empty for the whole space) is the queue's
own. Its value is the instant it was paused.

The jobs a pause covers carry `held = 1`, which puts them out of the claim index's ranges (`job_claim` is
(status, held, priority, run_at)): a claim facing any number of paused jobs reads what it reads with none.
`pause` marks the scope's pending and running jobs in batches; a job that becomes due later under a pause
(an enqueue, a hand-back, a requeue) is marked by the first claim that meets it (claim.py, `hold`), and that
mark is guarded by the pause row itself, read under a shared lock in the same statement, so it cannot land
after a `resume` deleted the row and cleared the marks. `resume` deletes the row, then clears the marks of
the scope's jobs in batches (a job still under another pause is marked again by the next claim that meets it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from ..contract import validation as check
from ..records import JobStatus, PausedAction
from .bulk_calls import BulkCalls
from .schema.tables import table_names
from .session import as_text
from .statements import PAUSE_ROWS, PAUSES_FROM

#: Jobs one claim marks held at most (a bulk batch's size: bulk_calls.py).
HOLD_BATCH = 500
_EVERY_STATUS = [status.value for status in JobStatus]


def pause_key(space_id: int, action_id: str | None) -> bytes:
    return PAUSES_FROM + f"{space_id}:{action_id or ''}".encode()


@dataclass(frozen=True)
class PauseStatements:
    covered: str  # which of these seqs a pause covers (a plain read: a claim asks it only while pauses exist)
    #: Up to HOLD_BATCH due pending jobs of those priorities a pause covers (a plain read), asked once a claim
    #: met one: jobs enqueued under a pause are marked a batch at a time, not a claim's few candidates at a time.
    covered_due: str
    hold: str  # mark these seqs held, each only while a pause row covering it exists (read under a shared lock)
    release: str
    insert: str
    delete: str
    listed: str


def pause_statements(jobs: str, kv: str) -> PauseStatements:
    """The pause statements for those tables (backquoted names)."""
    # The pause row's own key for each job, built in SQL as `pause_key` builds it in Python.
    covering = (
        f"EXISTS (SELECT 1 FROM {kv} WHERE k IN (CONCAT(X'FF', 'pause:', space_id, ':'), "
        f"CONCAT(X'FF', 'pause:', space_id, ':', action_id)))"
    )
    hold = (
        f"UPDATE {jobs} FORCE INDEX (PRIMARY) SET held = 1 "
        f"WHERE seq IN %s AND held = 0 AND status IN ('pending', 'running') AND {covering}"
    )
    release = f"UPDATE {jobs} FORCE INDEX (PRIMARY) SET held = 0 WHERE seq IN %s AND held = 1"
    # Keys go as hex (UNHEX(%s), X'…'): a 0xFF byte in a statement's text makes every concurrent read of
    # information_schema.processlist fail on MySQL 9 (3854, "Cannot convert string … to utf8mb3").
    insert = f"INSERT INTO {kv} (k, v, expires_at) VALUES (UNHEX(%s), %s, NULL) ON DUPLICATE KEY UPDATE k = k"
    delete = f"DELETE FROM {kv} WHERE k = UNHEX(%s)"
    listed = f"SELECT k, v FROM {kv} WHERE {PAUSE_ROWS} ORDER BY k"
    covered = f"SELECT seq FROM {jobs} FORCE INDEX (PRIMARY) WHERE seq IN %s AND held = 0 AND {covering}"
    covered_due = (
        f"SELECT seq FROM {jobs} FORCE INDEX (job_claim) WHERE status = 'pending' AND held = 0 AND priority IN %s "
        f"AND run_at <= %s AND {covering} LIMIT {HOLD_BATCH}"
    )
    return PauseStatements(covered, covered_due, hold, release, insert, delete, listed)


@functools.cache
def pause_statements_for(prefix: str) -> PauseStatements:
    t = table_names(prefix)
    return pause_statements(f"`{t.jobs}`", f"`{t.kv}`")


class PauseCalls(BulkCalls):
    """The pause half of `MysqlJobQueue`'s operator calls (bulk_calls.py pages the jobs)."""

    async def pause(self, *, space_id: int, action_id: str | None = None) -> None:
        """Claims skip the pending jobs of the space (of that action) from now on; running ones finish. Pausing
        again keeps the first pause's instant."""
        check.bulk_args(space_id, action_id)
        sql = pause_statements_for(self._store.prefix)
        key = pause_key(space_id, action_id)
        now = await self._now_ms()
        await self._store.retrying(lambda conn: conn.write(sql.insert, (key.hex(), str(now))))

        async def mark(seqs: list[int], _now: int) -> int:
            return await self._store.retrying(lambda conn: conn.write(sql.hold, (seqs,)))

        await self._bulk(space_id, action_id, [JobStatus.PENDING.value, JobStatus.RUNNING.value], mark)

    async def resume(self, *, space_id: int, action_id: str | None = None) -> None:
        """That pause lifted, its jobs claimable again; resuming what is not paused changes nothing."""
        check.bulk_args(space_id, action_id)
        sql = pause_statements_for(self._store.prefix)
        key = pause_key(space_id, action_id)
        if not await self._store.retrying(lambda conn: conn.write(sql.delete, (key.hex(),))):
            return

        async def clear(seqs: list[int], _now: int) -> int:
            return await self._store.retrying(lambda conn: conn.write(sql.release, (seqs,)))

        if await self._bulk(space_id, action_id, _EVERY_STATUS, clear):
            self.wakeups.notify(self.wakeup_topic)

    async def list_paused(self, space_ids: Sequence[int]) -> list[PausedAction]:
        """The pauses of those spaces, by space: the whole space's first, then its actions' by id."""
        spaces = set(check.space_ids(space_ids))
        listed = pause_statements_for(self._store.prefix).listed
        rows = await self._store.run(lambda conn: conn.fetch(listed))
        found = []
        for k, v in rows:
            space, _, action = bytes(k)[len(PAUSES_FROM) :].decode().partition(":")
            if int(space) in spaces:
                found.append(PausedAction(space_id=int(space), action_id=action or None, since=int(as_text(v))))
        return sorted(found, key=lambda p: (p.space_id, p.action_id is not None, p.action_id or ""))
