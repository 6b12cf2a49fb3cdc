"""What `migrate` would do to a database, and doing it, over one PyMySQL connection (the CLI only formats).

It runs exactly what the SQL files and the Alembic revisions run: `mysql_job_schema_statements` then
`mysql_job_schema_upgrades`, in order on one session. The plan is read first, so a table that no step can bring
to the current schema (a newer release's, a foreign one) stops it before anything is written.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql

from ...errors import SchemaMismatchError
from ..session import as_text, bind
from ..statements import NOW_MS, SCHEMA_COLUMNS, SCHEMA_TABLES, TERMINAL, count_rows
from .state import (
    ABSENT,
    CURRENT,
    OLDER,
    ORIGINAL,
    UNRECORDED,
    SchemaState,
    TableState,
    mysql_job_schema_statements,
    mysql_job_schema_upgrades,
    schema_state,
)
from .tables import SCHEMA_VERSION, table_names
from .totals import lost_backfill_race, totals_statements
from .upgrades import LOCK_WAIT_S, kept_originals, lock_is_free, release_lock, take_lock

#: `create_mysql_job_queue`'s default `retention_days`: what the first claim purges past, unless told otherwise.
DEFAULT_RETENTION_DAYS = 90


@dataclass(frozen=True)
class PlannedTable:
    table: TableState
    action: str  # what migrate will do to it, in words
    rows: int | None = None  # rows a copy moves
    kept_as: str | None = None  # where a copy keeps the table it replaces
    blocked: str | None = None  # why nothing can be done


@dataclass(frozen=True)
class MigrationPlan:
    prefix: str
    tables: tuple[PlannedTable, ...]

    @property
    def changes(self) -> bool:
        return any(planned.table.found != CURRENT for planned in self.tables)

    def refusal(self) -> SchemaMismatchError | None:
        blocked = [planned for planned in self.tables if planned.blocked]
        if not blocked:
            return None
        reasons = "; ".join(f"`{p.table.name}`: {p.blocked}" for p in blocked)
        return SchemaMismatchError(f"nothing was changed: {reasons}")


def _fetch(conn: Any, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(*bind(sql, args))
        return list(cur.fetchall())


def read_state(conn: Any, prefix: str) -> SchemaState:
    names = list(table_names(prefix).all())
    return schema_state(prefix, _fetch(conn, SCHEMA_TABLES, (names,)), _fetch(conn, SCHEMA_COLUMNS, (names,)))


def plan_migration(conn: Any, prefix: str) -> MigrationPlan:
    state = read_state(conn, prefix)
    kept = kept_originals(prefix).all()
    present = {as_text(row[0]) for row in _fetch(conn, SCHEMA_TABLES, (list(kept),))}
    planned: list[PlannedTable] = []
    for table, old in zip(state.tables, kept, strict=True):
        if table.found == ABSENT:
            planned.append(PlannedTable(table, f"will be created (schema {SCHEMA_VERSION})"))
        elif table.found == CURRENT:
            planned.append(PlannedTable(table, "nothing to do"))
        elif table.found == UNRECORDED:
            recorded = f"schema {SCHEMA_VERSION} will be recorded in its COMMENT (no data change)"
            planned.append(PlannedTable(table, recorded))
        elif table.found == OLDER and table.version is not None and table.version >= 1:
            # Version 1 is the first this package wrote; every later one has its step.
            planned.append(PlannedTable(table, f"will be upgraded to schema {SCHEMA_VERSION}, step by step"))
        elif table.found == ORIGINAL:
            rows = int(_fetch(conn, count_rows(table.name))[0][0])
            action = (
                f"its {rows} row(s) will be copied into a new schema-{SCHEMA_VERSION} table, swapped in, and the "
                f"original kept as `{old}`"
            )
            taken = f"`{old}` already exists (kept by an earlier migrate?): drop or rename it"
            blocked = taken if old in present else None
            planned.append(PlannedTable(table, action, rows, old, blocked))
        else:
            blocked = f"it is {table.describe()}; {state.fix()}"
            planned.append(PlannedTable(table, "cannot be upgraded", blocked=blocked))
    return MigrationPlan(prefix, tuple(planned))


def run_migration(
    conn: Any, prefix: str, *, waiting: Callable[[], None] | None = None
) -> tuple[MigrationPlan, SchemaState]:
    """Creates what is missing and runs every upgrade step; answers the plan it followed and the state after.

    The plan is read under the same lock the statements take, so with two runs at once the second plans (and
    reports) nothing left to do. Raises SchemaMismatchError, with nothing changed, when the plan is blocked, and
    when a table is still not current afterwards (its original was written to during the copy).
    """
    if waiting is not None and not int(_fetch(conn, lock_is_free(prefix))[0][0] or 0):
        waiting()
    if not int(_fetch(conn, take_lock(prefix))[0][0] or 0):
        raise SchemaMismatchError(f"nothing was changed: another migrate of these tables ran for over {LOCK_WAIT_S} s")
    try:
        plan = plan_migration(conn, prefix)
        refusal = plan.refusal()
        if refusal is not None:
            raise refusal
        with conn.cursor() as cur, warnings.catch_warnings():
            warnings.simplefilter("ignore", pymysql.Warning)  # "already exists" is what IF NOT EXISTS is for
            for statement in mysql_job_schema_statements(prefix) + mysql_job_schema_upgrades(prefix):
                cur.execute(statement)
        after = read_state(conn, prefix)
        if after.up_to_date:
            # Only on this package's own jobs table: a trigger moves with its table, and the TypeScript original's
            # would carry them off to `_old` when step 1 swaps it out (totals.py).
            with conn.cursor() as cur, warnings.catch_warnings():
                warnings.simplefilter("ignore", pymysql.Warning)
                for statement in totals_statements(prefix):
                    try:
                        cur.execute(statement)
                    except pymysql.err.IntegrityError as error:  # a replica's first use backfilled meanwhile
                        if not lost_backfill_race(error, statement, prefix):
                            raise
    finally:
        _fetch(conn, release_lock(prefix))
    if not after.up_to_date:
        stuck = ", ".join(f"`{t.name}` ({t.describe()})" for t in after.tables if t.found != CURRENT)
        raise SchemaMismatchError(
            f"not up to date after the upgrade: {stuck}. Nothing was lost (a copy is only swapped in whole): its "
            "rows changed while they were copied; stop every replica of the TypeScript service and run migrate again"
        )
    return plan, after


def finished_past_retention(conn: Any, prefix: str, days: int = DEFAULT_RETENTION_DAYS) -> tuple[int, int | None]:
    """How many finished jobs finished more than `days` ago, by the server's clock (what the retention purge of a
    queue with that `retention_days` removes, a batch at a time, from its first claim on), and the oldest's end."""
    sql = (
        f"SELECT COUNT(*), MIN(updated_at) FROM `{table_names(prefix).jobs}` "
        f"WHERE status IN {TERMINAL} AND updated_at < {NOW_MS} - %s"
    )
    count, oldest = _fetch(conn, sql, (days * 86_400_000,))[0]
    return int(count), None if oldest is None else int(oldest)
