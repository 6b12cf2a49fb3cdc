"""The schema for users' own migrations, and what a database holds: read on first use and by `migrate`.

The tables and their version record are in `tables.py`, the upgrade steps in `upgrades.py`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...errors import SchemaMismatchError
from .tables import (
    CURRENT_DDL,
    CURRENT_LAYOUTS,
    PREFIX_MAX_CHARS,
    SCHEMA_VERSION,
    TS_LAYOUTS,
    V1_LAYOUTS,
    Tables,
    check_prefix,
    marker_version,
    table_names,
)
from .totals import totals_table
from .upgrades import upgrade_statements

__all__ = [
    "PREFIX_MAX_CHARS",
    "SCHEMA_VERSION",
    "SchemaState",
    "TableState",
    "Tables",
    "check_prefix",
    "mysql_job_schema_statements",
    "mysql_job_schema_upgrades",
    "schema_state",
    "table_names",
]


def mysql_job_schema_statements(prefix: str = "") -> list[str]:
    """`CREATE TABLE IF NOT EXISTS` for the jobs, schedules and kv tables, for users' own migrations.

    Each table is created carrying its version record (its COMMENT), so nothing else needs to run on a fresh
    database.
    """
    # The job totals' table too (its triggers come with the upgrades or first use: schema/totals.py).
    return [*(ddl(name) for ddl, name in zip(CURRENT_DDL, table_names(prefix).all(), strict=True)),
            totals_table(prefix)]  # fmt: skip


def mysql_job_schema_upgrades(prefix: str = "") -> list[str]:
    """Statements that bring tables made by an earlier release, or by the TypeScript original
    (@plitzi/sdk-server 0.37.2), to the current schema; they change nothing on current tables.

    Run them IN ORDER ON ONE SESSION (one connection; `mariadb app < sql/upgrades.sql`, Alembic's `op.execute`):
    they hand values to each other in session variables. Every change is guarded and resumable, and two sessions
    running them at once take turns (see `upgrades.py`).
    """
    return upgrade_statements(prefix)


# -- what a database holds ----------------------------------------------------------------------------------

ABSENT = "absent"
CURRENT = "current"
UNRECORDED = "unrecorded"  # the current columns, made before tables carried a version record
ORIGINAL = "typescript"  # the TypeScript original's table
OLDER = "older"
NEWER = "newer"
DAMAGED = "damaged"  # a version record whose columns are not all there
FOREIGN = "foreign"  # neither a record nor a layout this package knows

ROLES = ("jobs", "schedules", "kv")
_FIX = (
    "run `plitzi-jobs-mysql migrate --url mysql://…/{database}{prefix}` (or sql/upgrades.sql, or the Alembic "
    "revisions; see docs/migrations.md), then start again"
)


@dataclass(frozen=True)
class TableState:
    name: str
    role: str  # jobs | schedules | kv
    found: str  # one of the constants above
    version: int | None = None
    missing: tuple[str, ...] = ()  # current columns it lacks

    @property
    def usable(self) -> bool:
        return self.found in (ABSENT, CURRENT, UNRECORDED)

    def describe(self) -> str:
        if self.found == ABSENT:
            return "absent"
        if self.found == CURRENT:
            return f"schema {self.version}"
        if self.found == UNRECORDED:
            return f"schema {SCHEMA_VERSION} columns, no version record"
        if self.found == ORIGINAL:
            return "the TypeScript original's table (@plitzi/sdk-server 0.37.2)"
        if self.found == OLDER:
            return f"schema {self.version}, older than this release's {SCHEMA_VERSION}"
        if self.found == NEWER:
            return f"schema {self.version}, made by a newer release (this one knows up to {SCHEMA_VERSION})"
        if self.found == DAMAGED:
            return f"schema {self.version} by its record, but without column(s) {', '.join(self.missing)}"
        return "not a table this package made (no version record, unknown columns)"


def classify(name: str, role: str, comment: str | None, layout: str | None) -> TableState:
    """What one table is, from its COMMENT and its columns (`name type,...`; None when it does not exist)."""
    if layout is None:
        return TableState(name, role, ABSENT)
    index = ROLES.index(role)
    expected = CURRENT_LAYOUTS[index]
    version = marker_version(comment)
    present = {column.split(" ")[0] for column in layout.split(",")}
    missing = tuple(column.split(" ")[0] for column in expected.split(",") if column.split(" ")[0] not in present)
    if version is None:
        if layout == expected:
            return TableState(name, role, UNRECORDED, SCHEMA_VERSION)
        if layout == V1_LAYOUTS[index]:  # once the current schema is past 1
            return TableState(name, role, OLDER, 1)
        if layout == TS_LAYOUTS[index]:
            return TableState(name, role, ORIGINAL)
        return TableState(name, role, FOREIGN, missing=missing)
    if version > SCHEMA_VERSION:
        return TableState(name, role, NEWER, version)
    if version < SCHEMA_VERSION:
        return TableState(name, role, OLDER, version)
    if missing:
        return TableState(name, role, DAMAGED, version, missing)
    return TableState(name, role, CURRENT, version)


@dataclass(frozen=True)
class SchemaState:
    prefix: str
    tables: tuple[TableState, ...]
    database: str | None = None  # the database they are in, when known: the fix names it

    @property
    def usable(self) -> bool:
        return all(table.usable for table in self.tables)

    @property
    def up_to_date(self) -> bool:
        return all(table.found == CURRENT for table in self.tables)

    def fix(self) -> str:
        """What makes the tables usable, in words (empty when they are)."""
        wrong = [table for table in self.tables if not table.usable]
        if not wrong:
            return ""
        if any(table.found == NEWER for table in wrong):
            return "upgrade plitzi_jobs_mysql on every replica to the release that made them (never downgrade)"
        if all(table.found == ORIGINAL or (table.found == OLDER and (table.version or 0) >= 1) for table in wrong):
            return _FIX.format(
                database=self.database or "DATABASE", prefix=f" --prefix {self.prefix}" if self.prefix else ""
            )
        if any(table.found == DAMAGED for table in wrong):
            return "restore the missing columns from a backup or `plitzi-jobs-mysql ddl`, or use another table_prefix"
        return "rename or drop those tables, or use another table_prefix"

    def error(self) -> SchemaMismatchError | None:
        """What first use must refuse, naming each table found and the command that fixes it."""
        wrong = [table for table in self.tables if not table.usable]
        if not wrong:
            return None
        found = "; ".join(f"`{table.name}` is {table.describe()}" for table in wrong)
        return SchemaMismatchError(
            f"plitzi_jobs_mysql runs on schema {SCHEMA_VERSION} and will not use these tables: {found}. "
            f"To fix: {self.fix()}"
        )


def schema_state(
    prefix: str, tables: Iterable[tuple[object, object]], columns: Iterable[tuple[object, object, object]]
) -> SchemaState:
    """The state from the rows of `statements.SCHEMA_TABLES` (name, comment) and `SCHEMA_COLUMNS` (table,
    column, type; in ordinal order)."""
    names = table_names(prefix)
    comments = {_text(name): _text(comment) for name, comment in tables}
    layouts: dict[str, list[str]] = {}
    for table, column, kind in columns:
        layouts.setdefault(_text(table), []).append(f"{_text(column)} {_text(kind).lower()}")
    return SchemaState(
        prefix,
        tuple(
            classify(name, role, comments.get(name), ",".join(layouts[name]) if name in layouts else None)
            for name, role in zip(names.all(), ROLES, strict=True)
        ),
    )


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)
