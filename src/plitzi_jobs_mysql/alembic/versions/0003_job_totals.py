"""Schema 3: exact job totals per space, action and status, kept by triggers, and the status index.

The package's upgrade statements bring the tables there (revision 0001 already runs them on a fresh database; on
tables revision 0001 made with an earlier release, this one does): the totals' table and triggers, a backfill that
locks no job, then the index and the version record in one online ALTER.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 00:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from plitzi_jobs_mysql.alembic.revision_steps import execute_all, table_prefix
from plitzi_jobs_mysql.migrations import upgrade_job_tables
from plitzi_jobs_mysql.mysql.schema.tables import marker, table_names
from plitzi_jobs_mysql.mysql.schema.totals import drop_statements
from plitzi_jobs_mysql.mysql.schema.upgrades import TOTALS_VERSION

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    upgrade_job_tables(op, prefix=table_prefix())


def downgrade() -> None:
    prefix = table_prefix()
    tables = table_names(prefix)
    previous = marker(TOTALS_VERSION - 1)
    execute_all(
        [
            *drop_statements(prefix),
            f"ALTER TABLE `{tables.jobs}` DROP INDEX `job_space_status_recent`, COMMENT = '{previous}'",
            *(f"ALTER TABLE `{table}` COMMENT = '{previous}'" for table in (tables.schedules, tables.kv)),
        ]
    )
