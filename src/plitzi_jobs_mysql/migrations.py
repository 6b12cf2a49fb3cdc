"""Helpers for a user's OWN Alembic history, and the SQL script form of the schema.

A user's revision calls them with Alembic's ``op``::

    from alembic import op
    from plitzi_jobs_mysql.migrations import create_job_tables, drop_job_tables

    def upgrade() -> None:
        create_job_tables(op, prefix="")

    def downgrade() -> None:
        drop_job_tables(op, prefix="")

Nothing here imports Alembic: ``op`` is anything with an ``execute(sql)`` method, so Alembic stays an
optional dependency (the ``migrations`` extra).
"""

from __future__ import annotations

from typing import Any, Protocol

from .mysql.schema import mysql_job_schema_statements, mysql_job_schema_upgrades, table_names

__all__ = ["create_job_tables", "drop_job_statements", "drop_job_tables", "sql_script"]


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


def drop_job_statements(prefix: str = "") -> list[str]:
    """``DROP TABLE IF EXISTS`` for the three tables."""
    t = table_names(prefix)
    return [f"DROP TABLE IF EXISTS `{name}`" for name in (t.jobs, t.schedules, t.kv)]


def drop_job_tables(op: SupportsExecute, prefix: str = "") -> None:
    """Drops the jobs, schedules and kv tables (``IF EXISTS``), with every job, schedule and key in them."""
    for statement in drop_job_statements(prefix):
        op.execute(statement)


def sql_script(statements: list[str]) -> str:
    """The statements as a script for the ``mariadb``/``mysql`` client: each ends with ``;``."""
    if not statements:
        return ""
    return "\n\n".join(statement.rstrip().rstrip(";") + ";" for statement in statements) + "\n"
