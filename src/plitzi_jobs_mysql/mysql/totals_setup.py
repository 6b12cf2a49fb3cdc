"""First use's part of the job totals (schema/totals.py): their table, triggers and backfill where missing."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import pymysql

from .schema import totals
from .schema.tables import table_names

if TYPE_CHECKING:
    from .session import Connection

log = logging.getLogger("plitzi_jobs_mysql.mysql.session")


async def ensure_totals(conn: Connection, prefix: str, *, ddl: bool) -> bool:
    """Creates what the totals lack where tables were made without them (a fresh database, or sql/schema.sql
    alone): one read once they exist. The backfill is exact whenever it runs after the triggers, and runs once (its
    row's key): of two first uses at once, one counts and the other's duplicate key is taken as done. Answers
    whether the jobs table has both listing indexes."""
    triggers = totals.trigger_names(prefix)
    rows = await conn.fetch(totals.TOTALS_READY, (list(triggers), totals.totals_name(prefix), table_names(prefix).jobs))
    indexed = int(rows[0][2]) == 2
    statements = totals.create_statements(prefix)
    if int(rows[0][0]) == len(triggers) and int(rows[0][1]):
        if int((await conn.fetch(totals.backfilled(prefix)))[0][0]):
            return indexed
        statements = totals.backfill_statements(prefix)  # emptied (TRUNCATE) or cut short: DML only
    elif not ddl:
        log.warning("the job totals' table or triggers are missing and create_tables=False: counts and list "
                    "totals are wrong until `plitzi-jobs-mysql migrate` runs")  # fmt: skip
        return indexed
    log.info("creating the job totals (%s) and their triggers", totals.totals_name(prefix))
    if not conn.autocommit:
        await conn.raw.commit()  # the reads' transaction: the backfill sets the next one's isolation
    for statement in statements:
        try:
            await conn.write(statement)
        except pymysql.err.IntegrityError as error:
            if not totals.lost_backfill_race(error, statement, prefix):
                raise
            log.info("the job totals were backfilled by another connection at the same time")
    return indexed
