"""The jobs, schedules and kv tables at schema 1; the TypeScript original's tables converted in place.

Revision ID: 0001
Revises:
Create Date: 2025-01-01 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from plitzi_jobs_mysql.alembic.revision_steps import table_prefix
from plitzi_jobs_mysql.migrations import create_job_tables, drop_job_tables

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    create_job_tables(op, prefix=table_prefix())


def downgrade() -> None:
    drop_job_tables(op, prefix=table_prefix())
