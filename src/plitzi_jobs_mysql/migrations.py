"""Helpers for a user's OWN Alembic history, and the SQL script form of the schema.

A user's revision calls them with Alembic's ``op``::

    from alembic import op
    from plitzi_jobs_mysql.migrations import create_job_tables, drop_job_tables

    def upgrade() -> None:
        create_job_tables(op, prefix="")

    def downgrade() -> None:
        drop_job_tables(op, prefix="")

and keeps autogenerate away from the job tables in the user's ``env.py``::

    from plitzi_jobs_mysql.migrations import include_object

    context.configure(connection=connection, target_metadata=metadata, include_object=include_object)

Nothing here imports Alembic: ``op`` is anything with an ``execute(sql)`` method, so Alembic stays an
optional dependency (the ``migrations`` extra). The statements run in order on ``op``'s one connection, which the
upgrade statements need (they pass values in session variables).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .mysql.schema.state import mysql_job_schema_statements, mysql_job_schema_upgrades, table_names
from .mysql.schema.tables import SCHEMA_VERSION, marker, side_names
from .mysql.schema.totals import totals_name, totals_statements

__all__ = [
    "ALEMBIC_SCRIPT_LOCATION",
    "create_job_tables",
    "create_job_totals",
    "drop_job_statements",
    "drop_job_tables",
    "include_object",
    "include_object_for",
    "sql_script",
    "upgrade_job_tables",
]

#: `script_location` of the Alembic environment shipped inside the package (for an `alembic.ini` of your own).
ALEMBIC_SCRIPT_LOCATION = "plitzi_jobs_mysql:alembic"


class SupportsExecute(Protocol):
    """What the helpers need of Alembic's ``op`` (``alembic.operations.Operations``)."""

    def execute(self, sqltext: Any, /) -> Any: ...


def create_job_tables(op: SupportsExecute, prefix: str = "") -> None:
    """Creates the jobs, schedules and kv tables (``IF NOT EXISTS``), then applies the upgrades.

    Running the upgrades too means one revision brings both a fresh database and tables made by an earlier
    release of this package to the current schema.
    """
    # Both lists are built before anything runs, so a bad prefix raises ValueError with nothing sent.
    statements = mysql_job_schema_statements(prefix) + mysql_job_schema_upgrades(prefix)
    for statement in statements:
        op.execute(statement)
    create_job_totals(op, prefix)


def create_job_totals(op: SupportsExecute, prefix: str = "") -> None:
    """The job totals' triggers and backfill (harmless to rerun), once the tables are current: online, only when the
    jobs table carries the current version record (a TypeScript original's table kept in place is left alone, its
    copy abandoned because it was written to); offline (``--sql``), always."""
    bind = getattr(op, "get_bind", None)
    if bind is not None and not getattr(getattr(op, "get_context", lambda: None)(), "as_sql", False):
        comment = (
            bind()
            .exec_driver_sql(
                "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
                "AND TABLE_NAME = %s",
                (table_names(prefix).jobs,),
            )
            .scalar()
        )
        if comment != marker(SCHEMA_VERSION):
            return
    for statement in totals_statements(prefix):
        op.execute(statement)


def upgrade_job_tables(op: SupportsExecute, prefix: str = "") -> None:
    """Runs only the upgrade steps: for a revision of your own after a release that adds one."""
    for statement in mysql_job_schema_upgrades(prefix):
        op.execute(statement)
    create_job_totals(op, prefix)


def drop_job_statements(prefix: str = "") -> list[str]:
    """``DROP TABLE IF EXISTS`` for the three tables and the job totals (their triggers go with the jobs table)."""
    t = table_names(prefix)
    return [f"DROP TABLE IF EXISTS `{name}`" for name in (t.jobs, t.schedules, t.kv, totals_name(prefix))]


def drop_job_tables(op: SupportsExecute, prefix: str = "") -> None:
    """Drops the jobs, schedules and kv tables (``IF EXISTS``), with every job, schedule and key in them."""
    for statement in drop_job_statements(prefix):
        op.execute(statement)


def sql_script(statements: list[str]) -> str:
    """The statements as a script for the ``mariadb``/``mysql`` client: each ends with ``;``, and one with ``;``
    inside (the totals' UPDATE trigger, a compound statement) goes between ``DELIMITER`` lines."""
    if not statements:
        return ""
    return "\n\n".join(_scripted(statement.rstrip()) for statement in statements) + "\n"


def _scripted(statement: str) -> str:
    if ";" in statement.rstrip(";"):
        return f"DELIMITER //\n{statement} //\nDELIMITER ;"
    return statement.rstrip(";") + ";"


IncludeObject = Callable[[Any, "str | None", str, bool, Any], bool]


def include_object_for(*prefixes: str) -> IncludeObject:
    """An ``include_object`` for Alembic's ``context.configure`` that hides this package's tables (for each
    prefix; none means the empty prefix) from autogenerate, so it never proposes dropping or altering them.

    Hidden: the three tables and the job totals, the copies `migrate` keeps of the TypeScript original's
    (``*_old``) or builds (``*_new``), and this package's own Alembic version table.
    """
    hidden: set[str] = set()
    for prefix in prefixes or ("",):
        for names in (table_names(prefix), side_names(prefix, "old"), side_names(prefix, "new")):
            hidden.update(names.all())
        hidden.add(totals_name(prefix))
        hidden.add(f"{prefix}plitzi_jobs_alembic_version")

    def include(object_: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        if type_ == "table":
            return name not in hidden
        table = getattr(object_, "table", None)  # a column, index or constraint: judged by its table
        return getattr(table, "name", None) not in hidden

    return include


#: ``include_object`` for tables without a prefix: ``context.configure(..., include_object=include_object)``.
include_object: IncludeObject = include_object_for("")
