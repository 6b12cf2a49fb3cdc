"""The MySQL queue's bulk operations: `cancel_all` and `retry_all`, safe beside running workers and claimers.

The jobs are found by a plain read of primary keys (no locks), a page at a time in key order, and each page is
changed by statements of at most `BULK_BATCH` rows, each its own transaction and guarded by the status it changes
from: a claimer meeting one of its rows loses one race and takes another job, and a job that moved on between the
read and the change (claimed, finished) is left alone, or cancelled the way a running job is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..contract import validation as check
from ..records import JobStatus
from .batch_statements import BULK_BATCH, batch_statements_for
from .queue_core import QueueCore


class BulkCalls(QueueCore):
    """The bulk half of `MysqlJobQueue`'s operator calls."""

    async def _bulk(self, space_id: int, action_id: str | None, statuses: list[str],
                    change: Callable[[list[int], int], Awaitable[int]]) -> int:  # fmt: skip
        """Pages of the seqs of the space's (action's) jobs in `statuses`; `change(seqs, now)` changes a page and
        answers how many it changed."""
        sql = batch_statements_for(self._store.prefix)
        read = sql.bulk_seqs.format(action="" if action_id is None else " AND action_id = %(action)s")
        args: dict[str, Any] = {"space": space_id, "statuses": statuses, "action": action_id, "batch": BULK_BATCH}
        if action_id is None:
            del args["action"]
        after, changed = 0, 0
        while True:
            page = {**args, "after": after}
            rows = await self._store.run(lambda conn, page=page: conn.fetch(read, page))  # type: ignore[misc]
            if not rows:
                return changed
            seqs = [int(row[0]) for row in rows]
            now = await self._now_ms()
            changed += await change(seqs, now)
            if len(seqs) < BULK_BATCH:
                return changed
            after = seqs[-1]

    async def cancel_all(self, *, space_id: int, action_id: str | None = None) -> int:
        """Every pending job of the space (of that action) becomes cancelled, and every running one is asked to
        stop, as `cancel` does one; answers how many changed (a running job asked already is not counted)."""
        check.bulk_args(space_id, action_id)
        sql = batch_statements_for(self._store.prefix)

        async def cancel(seqs: list[int], now: int) -> int:
            # Pending first: a job claimed in between is then asked to stop by the second statement. Each is retried
            # alone (guarded by its status, so a repeat changes nothing twice), so each count is its own.
            args = {"seqs": seqs, "now": now}
            cancelled = await self._store.retrying(lambda conn: conn.write(sql.cancel_pending_jobs, args))
            return cancelled + await self._store.retrying(lambda conn: conn.write(sql.request_cancel_jobs, args))

        return await self._bulk(space_id, action_id, [JobStatus.PENDING.value, JobStatus.RUNNING.value], cancel)

    async def retry_all(self, *, space_id: int, action_id: str | None = None, status: str = "dead") -> int:
        """Every job of the space (of that action) in that finished status goes back to pending, as `requeue`
        does one; answers how many changed."""
        check.bulk_args(space_id, action_id)
        finished = check.finished_status(status)
        sql = batch_statements_for(self._store.prefix)

        async def retry(seqs: list[int], now: int) -> int:
            args = {"seqs": seqs, "now": now, "status": finished}
            return await self._store.retrying(lambda conn: conn.write(sql.requeue_jobs, args))

        retried = await self._bulk(space_id, action_id, [finished], retry)
        if retried:
            self.wakeups.notify(self.wakeup_topic)
        return retried
