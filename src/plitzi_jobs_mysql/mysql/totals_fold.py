"""The bounded pass that folds the job totals' deltas (schema/totals.py), and the drift check that recounts them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .schema import totals
from .session import Connection, as_text


async def fold_totals(conn: Connection, prefix: str, batch: int = totals.FOLD_BATCH) -> int:
    """Folds up to `batch` deltas into one row per (space, action, status), in one transaction under READ
    COMMITTED (no gap lock: the triggers' inserts never wait on it). It deletes exactly the rows it read, and
    rolls back if another pass took some first. Answers how many rows it read (0: nothing worth folding)."""
    rows = await conn.fetch(totals.fold_candidates(prefix), (batch,))
    sums: dict[tuple[int, str, str], int] = {}
    for _id, space, action, status, n in rows:
        key = (int(space), as_text(action), as_text(status))
        sums[key] = sums.get(key, 0) + int(n)
    if len(rows) <= len(sums):
        return 0  # one row per group already: nothing to fold
    kept = [(key, n) for key, n in sums.items() if n != 0]
    raw = conn.raw
    if not conn.autocommit:
        await raw.commit()  # the read's transaction: isolation can only be set between transactions
    async with raw.cursor() as cur:
        await cur.execute("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        await cur.execute("START TRANSACTION")
        try:
            await cur.execute(totals.fold_delete(prefix, [bytes(row[0]) for row in rows]))
            if int(cur.rowcount) != len(rows):
                await cur.execute("ROLLBACK")  # another pass folded some of them
                return 0
            if kept:
                args: list[Any] = []
                for (space, action, status), n in kept:
                    args += [space, action, status, n]
                values = ", ".join([f"({totals.DELTA_ID}, %s, %s, %s, %s)"] * len(kept))
                await cur.execute(totals.fold_insert(prefix) + values, args)
            await cur.execute("COMMIT")
        except BaseException:
            await raw.rollback()
            raise
    return len(rows)


@dataclass(frozen=True)
class TotalsDrift:
    """Where the kept totals disagree with a recount: (space_id, action_id, status) -> (kept, counted)."""

    differences: dict[tuple[int, str, str], tuple[int, int]]

    @property
    def exact(self) -> bool:
        return not self.differences


async def totals_drift(conn: Connection, prefix: str) -> TotalsDrift:
    """Recounts every job (a full scan: an operator's check, not a hot path) and compares (`drift_query`)."""
    rows = await conn.fetch(totals.drift_query(prefix))
    return TotalsDrift({(int(s), as_text(a), as_text(st)): (int(k), int(c)) for s, a, st, k, c in rows})
