"""The MySQL job queue's operator calls: listing, counting, looking up, requeueing and cancelling jobs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..contract import validation as check
from ..contract.cursor import decode_after, next_after
from ..records import FinishedCount, Job, JobPage, JobStatus, QueueStats
from .listing import MERGED_SPACES_MAX, Listing
from .queue_core import QueueCore
from .rows import job_columns, job_from_row
from .schema import totals
from .schema.state import table_names
from .session import Connection, as_text

STATUSES = tuple(status.value for status in JobStatus)


class OperatorCalls(QueueCore):
    """The operator's half of `MysqlJobQueue`: what the CLI and an admin page call."""

    async def list_jobs(
        self,
        *,
        space_ids: Sequence[int] | None,
        action_id: str | None = None,
        status: str | None = None,
        limit: int = 50,
        offset: int = 0,
        after: str | None = None,
    ) -> JobPage:
        """The `JobQueue` rule; `space_ids=None` (an operator's view) lists every space's jobs."""
        spaces = check.list_jobs_args(space_ids, action_id, status, limit, offset)
        cursor = decode_after(after, offset)
        if spaces == []:
            return JobPage(jobs=[], total=0)
        listing = Listing(self._store.prefix, status=status is not None, cursor=cursor)
        if spaces is not None:
            listing.filter("space_id IN %s", spaces)
        if action_id is not None:
            listing.filter("action_id = %s", action_id)
        if status is not None:
            listing.filter("status = %s", status)
        indexed = self._store.listing_indexes
        one_space = spaces is not None and len(spaces) == 1

        # The total from the kept totals (schema/totals.py): exact, without counting the matching rows.
        async def page(conn: Connection) -> JobPage:
            if one_space or not indexed:
                # Left alone, the optimizer may walk a space's newest rows (its waiting jobs first) to find a
                # status, or take them by `ref` and sort them all for a cursor: the hint names the page's order.
                total = int((await conn.fetch(*listing.total()))[0][0])
                # Nothing matches (or the offset is past it all): no walk of the space's index to find so.
                past = total == 0 or (cursor is None and offset >= total)
                rows = [] if past else await conn.fetch(*listing.page(limit, offset, indexed=indexed and one_space))
            else:
                counted = [(int(space), int(n)) for space, n in await conn.fetch(*listing.by_space())]
                total = sum(n for _, n in counted)
                if not counted or (cursor is None and offset >= total):
                    rows = []
                elif len(counted) <= MERGED_SPACES_MAX:
                    rows = await conn.fetch(*listing.merged([space for space, _ in counted], limit, offset))
                else:
                    rows = await conn.fetch(*listing.page(limit, offset, indexed=False))
            places = [(int(c["updated_at"]), int(c["seq"])) for c in map(job_columns, rows)]
            return JobPage(jobs=[job_from_row(row) for row in rows], total=total,
                           next_after=next_after(places, limit))  # fmt: skip

        return await self._store.run(page)

    async def stats(self, *, space_ids: Sequence[int] | None = None) -> QueueStats:
        spaces = check.space_ids_or_all(space_ids)
        now = await self._now_ms()
        if spaces == []:
            return QueueStats.from_groups(now, [])
        where = "1 = 1" if spaces is None else "space_id IN %(spaces)s"
        # Counts from the kept totals; due jobs, the oldest and lapsed leases from the waiting and running rows
        # through `job_due` (schema/totals.py, stats_read): nothing here grows with the finished history.
        statement = totals.stats_read(self._store.prefix, where)
        rows = await self._store.run(lambda conn: conn.fetch(statement, {"now": now, "spaces": spaces}))
        found: dict[tuple[int, str], dict[str, int | None]] = {}
        for kind, space, action, value in rows:
            group = found.setdefault((int(space), as_text(action)), {})
            group[as_text(kind)] = None if value is None else int(value)
        groups: list[tuple[int, str, str, int, int, int | None, int]] = []
        for (space, action), values in found.items():
            due = max(0, (values.get("pending") or 0) - (values.get("later") or 0))
            groups += [(space, action, status, values.get(status) or 0, 0, None, 0) for status in STATUSES]
            groups.append((space, action, "pending", 0, due, values.get("oldest"), values.get("lapsed") or 0))
        return QueueStats.from_groups(now, groups)

    async def finished_counts(
        self, *, space_ids: Sequence[int] | None, since: int, until: int, bucket_ms: int = 3_600_000
    ) -> list[FinishedCount]:
        spaces = check.finished_counts_args(space_ids, since, until, bucket_ms)
        if spaces == []:
            return []
        where = "1 = 1" if spaces is None else "space_id IN %(spaces)s"
        statement = self._sql.finished_counts.format(where=where)
        args = {"since": since, "until": until, "bucket": bucket_ms, "spaces": spaces}
        rows = await self._store.run(lambda conn: conn.fetch(statement, args))
        counts = [
            FinishedCount(space_id=int(space), action_id=as_text(action), status=as_text(status),
                          bucket_at=int(bucket) * bucket_ms, count=int(count))
            for space, action, status, bucket, count in rows
        ]  # fmt: skip
        return sorted(counts, key=lambda c: (c.bucket_at, c.space_id, c.action_id, c.status))

    async def get_job(self, space_ids: Sequence[int], job_id: str) -> Job | None:
        spaces = check.scoped_job(space_ids, job_id)
        if not spaces:
            return None
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.get_job, (job_id, spaces)))
        return job_from_row(rows[0]) if rows else None

    async def space_of_job(self, job_id: str) -> int | None:
        """The space of the job with this id, or None: ids are unique across the table, so an operator who has only
        the id finds the job through its unique key (one row read, whatever the table holds)."""
        check.job_id(job_id)
        sql = f"SELECT space_id FROM `{table_names(self._store.prefix).jobs}` WHERE id = %s"
        rows = await self._store.run(lambda conn: conn.fetch(sql, (job_id,)))
        return int(rows[0][0]) if rows else None

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
