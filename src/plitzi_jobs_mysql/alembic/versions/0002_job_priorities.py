"""Job priorities and pauses: the jobs table's `priority` and `held` columns and its `job_claim` index (schema step 2).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from plitzi_jobs_mysql.alembic.revision_steps import execute_all, table_prefix
from plitzi_jobs_mysql.migrations import upgrade_job_tables
from plitzi_jobs_mysql.mysql.schema.upgrades import priorities_downgrade

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The package's upgrade steps: they bring tables made at revision 0001 by an earlier release to the current
    # schema, and change nothing on tables 0001 made with this one.
    upgrade_job_tables(op, prefix=table_prefix())


def downgrade() -> None:
    execute_all(priorities_downgrade(table_prefix()))
