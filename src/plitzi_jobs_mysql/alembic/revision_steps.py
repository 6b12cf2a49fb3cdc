"""What the package's own revisions (versions/) share; Alembic loads them by path, so they import this absolutely.

A user's revisions, templated by script.py.mako, call ``plitzi_jobs_mysql.migrations`` instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from alembic import context, op


def table_prefix() -> str:
    """The prefix env.py sets from `-x prefix=...`: every revision works on the same prefixed tables."""
    return str(context.config.attributes.get("table_prefix", ""))


def execute_all(statements: Iterable[str]) -> None:
    """Runs `statements` in order through Alembic's ``op`` (online, on the revision's one connection)."""
    for statement in statements:
        op.execute(statement)
