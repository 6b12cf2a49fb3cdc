"""The MySQL job queue's schedule calls: what is due, advancing one exactly once, and replacing a space's set."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pymysql

from ..contract import validation as check
from ..records import Schedule, ScheduleInput
from .queue_core import QueueCore
from .rows import schedule_from_row
from .session import is_conflict


class ScheduleCalls(QueueCore):
    """The schedule half of `MysqlJobQueue`."""

    async def due_schedules(self, limit: int) -> list[Schedule]:
        check.limit("limit", limit)
        if limit == 0:
            return []
        now = await self._now_ms()
        rows = await self._store.run(lambda conn: conn.fetch(self._sql.due_schedules, (now, limit)))
        return [schedule_from_row(row) for row in rows]

    async def advance_schedule(self, *, space_id: int, action_id: str, from_at: int, to_at: int, missed: int) -> bool:
        check.advance_args(space_id=space_id, action_id=action_id, from_at=from_at, to_at=to_at, missed=missed)
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
                    [
                        space_id,
                        s.action_id,
                        s.cron,
                        s.timezone,
                        s.environment,
                        int(s.enabled),
                        s.next_run_at,
                        s.max_attempts,
                        now,
                    ]
                )
            values = ", ".join([self._sql.upsert_schedule_values] * len(incoming))
            await self._store.ready()  # the upsert's form is the server's (first use reads the flavour)
            upsert = self._sql.upsert_schedules_aliased if self._store.flavour.row_alias else self._sql.upsert_schedules
            steps.append((upsert.format(values=values), args))
        else:
            steps.append((self._sql.delete_space_schedules, (space_id,)))
        # One transaction behind the space's guard row: concurrent writers replace the set one after another.
        await self._store.retrying(lambda conn: conn.transaction(steps))

    async def list_schedules(
        self, space_ids: Sequence[int] | None, *, limit: int | None = None, offset: int = 0
    ) -> list[Schedule]:
        """The schedules of those spaces (None: of every space) by space and action; `limit`/`offset` page them."""
        spaces = check.list_schedules_args(space_ids, limit, offset)
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
