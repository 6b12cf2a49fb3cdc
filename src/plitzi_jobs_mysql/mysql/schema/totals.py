"""Exact job totals per (space, action, status) without counting the history at read time.

Every status change of a job row is recorded by the server itself: AFTER INSERT / UPDATE / DELETE triggers on the
jobs table append delta rows (+1 for the new status, -1 for the old) to `{prefix}action_totals`, inside the very
statement that changed the job. Pending and running count as one bucket there (a claim or a retry moves none),
and the reads split it by the running rows (`kept_totals`). So the totals cannot drift through kills, cut
connections, retried statements, purges, requeues, the schedule sweep or any transition added later (a caller's
transaction included: its deltas commit or roll back with it), and no status-changing statement has anything to
call.

Why deltas rather than counter rows updated in place: claims run with no lock wait at all (flavour.py: a held row
is a lost race), so a counter row that another claim's statement holds would fail claims that never collided on a
job. An appended row takes no lock anyone else wants: its key is a UUID (DELTA_ID) (no AUTO-INC lock either, which
MariaDB's default innodb_autoinc_lock_mode = 1 takes for INSERT ... SELECT).

A read sums the table; `fold` keeps it short (a bounded pass folds the oldest deltas into one row per group, in a
transaction under READ COMMITTED, so no gap lock stops the triggers' inserts meanwhile). The row with delta_id
0x00…01 and an empty status records that the backfill ran.

The UPDATE trigger is a compound statement (BEGIN IF ... END IF; END): an update that moves no total (a claim, a
heartbeat, a retry) then runs no statement at all, where an INSERT ... SELECT ... WHERE false still ran one (a
drain of claims and settles: 0.78 -> 0.91 of its speed without triggers, bench/totals_cost.py, bench/HISTORY.md).
`ddl --totals` puts it between DELIMITER lines for the `mariadb`/`mysql` client; the other runners send each
statement whole.
Creating triggers needs the TRIGGER privilege and, on a server that writes a binary log, SUPER (or
log_bin_trust_function_creators = 1). CREATE TRIGGER cannot be PREPAREd on MySQL, so no upgrade statement can guard
it: the migration runners (`migrate`, the Alembic helpers, first use) create the triggers and backfill once the
tables are current (`totals_statements`); the upgrade step itself creates the table and changes the version.
"""

from __future__ import annotations

from .tables import check_prefix, table_names

_OPTIONS = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
TOTALS_COMMENT = "plitzi_jobs_mysql job totals (deltas, folded)"
BACKFILLED_ID = "X'00000000000000000000000000000001'"  # the row that says the backfill ran (status '')
#: A delta's key: a time-based UUID per row (the server's clock, node and a clock sequence drawn at its start), so
#: rows stay distinct across the nodes of a cluster and within one statement. Not UUID_SHORT() (it repeats across
#: Galera nodes that share a server_id and started in one second: 1062) nor RAND() (on MySQL 9.7 a 20,000-row
#: INSERT ... SELECT hit 1062 with RAND() in the high bits: its values repeat across a statement's trigger calls).
DELTA_ID = "UNHEX(REPLACE(UUID(), '-', ''))"
#: How many deltas one fold pass takes at most.
FOLD_BATCH = 20_000


def totals_name(prefix: str = "") -> str:
    return f"{check_prefix(prefix)}action_totals"


def trigger_names(prefix: str = "") -> tuple[str, str, str]:
    # Names are at most 64 characters and a prefix may take 48: the jobs table's name (11 more) leaves 5.
    jobs = table_names(prefix).jobs
    return (f"{jobs}_tins", f"{jobs}_tupd", f"{jobs}_tdel")


def totals_table(prefix: str = "") -> str:
    return f"""CREATE TABLE IF NOT EXISTS `{totals_name(prefix)}` (
  `delta_id` BINARY(16) NOT NULL,
  `space_id` BIGINT NOT NULL,
  `action_id` VARBINARY(764) NOT NULL,
  `status` VARCHAR(9) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `n` BIGINT NOT NULL,
  PRIMARY KEY (`delta_id`)
) {_OPTIONS} COMMENT='{TOTALS_COMMENT}'"""


def _bucket(status: str) -> str:
    """The total a status counts in: pending and running are one (`kept_totals` splits it)."""
    return f"IF({status} = 'running', 'pending', {status})"


def totals_triggers(prefix: str = "") -> list[str]:
    """The three triggers that record every status change as deltas (IF NOT EXISTS: rerunning is harmless)."""
    jobs, totals = table_names(prefix).jobs, totals_name(prefix)
    ins, upd, dele = trigger_names(prefix)
    into = f"INSERT INTO `{totals}` (delta_id, space_id, action_id, status, n) "
    # Pending and running are one bucket here (`kept_totals` splits it): a claim, a retry and a takeover write
    # nothing, so the claims' hot path carries no trigger row at all.
    moved = (
        f"NOT ({_bucket('OLD.status')} <=> {_bucket('NEW.status')} AND OLD.space_id <=> NEW.space_id "
        "AND OLD.action_id <=> NEW.action_id)"
    )
    return [
        f"CREATE TRIGGER IF NOT EXISTS `{ins}` AFTER INSERT ON `{jobs}` FOR EACH ROW "
        f"{into}VALUES ({DELTA_ID}, NEW.space_id, NEW.action_id, NEW.status, 1)",
        # A heartbeat, a cancel request, a claim or a retry changes no bucket: nothing is written for it.
        f"CREATE TRIGGER IF NOT EXISTS `{upd}` AFTER UPDATE ON `{jobs}` FOR EACH ROW BEGIN IF {moved} THEN "
        f"{into}VALUES ({DELTA_ID}, OLD.space_id, OLD.action_id, OLD.status, -1), "
        f"({DELTA_ID}, NEW.space_id, NEW.action_id, NEW.status, 1); END IF; END",
        f"CREATE TRIGGER IF NOT EXISTS `{dele}` AFTER DELETE ON `{jobs}` FOR EACH ROW "
        f"{into}VALUES ({DELTA_ID}, OLD.space_id, OLD.action_id, OLD.status, -1)",
    ]


def totals_backfill(prefix: str = "") -> str:
    """Counts the jobs once, in one consistent read, minus the deltas that read already sees: whatever the
    triggers recorded before that snapshot is then not counted twice, and what they record after it adds on. Run
    with the triggers in place; a no-op once the backfill row exists. Run it under READ COMMITTED: INSERT ...
    SELECT then reads the jobs without locking them, so writers never wait on it."""
    jobs, totals = table_names(prefix).jobs, totals_name(prefix)
    # The guard sits in each inner WHERE: a constant the optimizer reads first, so a done backfill scans nothing.
    undone = f"NOT EXISTS (SELECT 1 FROM `{totals}` WHERE delta_id = {BACKFILLED_ID})"
    return (
        f"INSERT INTO `{totals}` (delta_id, space_id, action_id, status, n) "
        f"SELECT {DELTA_ID}, space_id, action_id, status, SUM(n) FROM ("
        f"SELECT space_id, action_id, status, COUNT(*) AS n FROM `{jobs}` WHERE {undone} "
        "GROUP BY space_id, action_id, status "
        f"UNION ALL SELECT space_id, action_id, status, -SUM(n) FROM `{totals}` WHERE status <> '' AND {undone} "
        "GROUP BY space_id, action_id, status) AS counted "
        "GROUP BY space_id, action_id, status HAVING SUM(n) <> 0 "
        f"UNION ALL SELECT {BACKFILLED_ID}, 0, '', '', 0 FROM DUAL WHERE {undone}"
    )


def backfill_statements(prefix: str = "") -> list[str]:
    """The backfill as a session runs it: under READ COMMITTED for that one statement."""
    return ["SET TRANSACTION ISOLATION LEVEL READ COMMITTED", totals_backfill(prefix)]


def lost_backfill_race(error: Exception, statement: str, prefix: str = "") -> bool:
    """Whether a failed statement was a backfill that another connection's, committed after this one's
    snapshot, beat to its row: the whole statement (counts and row) was undone, and the other's counts stand."""
    args: tuple[object, ...] = error.args
    return bool(args) and args[0] == 1062 and statement == totals_backfill(prefix)


def create_statements(prefix: str = "") -> list[str]:
    """Everything the totals need on a jobs table of this package: the table, the triggers, the backfill."""
    return [totals_table(prefix), *totals_triggers(prefix), *backfill_statements(prefix)]


def totals_statements(prefix: str = "") -> list[str]:
    """For a migration runner once the tables are current (this package's own): the triggers, then the backfill.
    Harmless to rerun. Not part of the upgrade list: CREATE TRIGGER cannot be guarded there (MySQL cannot PREPARE
    it), and on the TypeScript original's table, kept in place when its copy is abandoned, a trigger would follow
    the table to `_old` when a later run swaps it out."""
    return [totals_table(prefix), *totals_triggers(prefix), *backfill_statements(prefix)]


def drop_statements(prefix: str = "") -> list[str]:
    return [*(f"DROP TRIGGER IF EXISTS `{name}`" for name in trigger_names(prefix)),
            f"DROP TABLE IF EXISTS `{totals_name(prefix)}`"]  # fmt: skip


# -- reads, the fold and the drift check --------------------------------------------------------------------


# The totals' triggers in place, their table there, and the jobs table's listing indexes (a table made before
# tables carried a version record is used as it is, and lacks the status index until `migrate`).
TOTALS_READY = (
    "SELECT (SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = DATABASE() AND TRIGGER_NAME "
    "IN %s), (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s), "
    "(SELECT COUNT(DISTINCT INDEX_NAME) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME = %s AND INDEX_NAME IN ('job_space_recent', 'job_space_status_recent'))"
)


def backfilled(prefix: str) -> str:
    return f"SELECT COUNT(*) FROM `{totals_name(prefix)}` WHERE delta_id = {BACKFILLED_ID}"


#: For a read of `kept_totals` AS k. MySQL 9.7 pushes the outer filter down into the derived table's union and
#: re-encodes a string literal on the way ('😀' became 'ð\x9f\x98\x80', matching nothing); the rows it would spare
#: are the running ones only. MariaDB reads the hint as a comment.
KEPT = "/*+ NO_DERIVED_CONDITION_PUSHDOWN(k) */"


def kept_totals(prefix: str) -> str:
    """The exact totals per (space_id, action_id, status), as a derived table: the deltas summed, with pending
    and running one bucket (`pending` and `running` deltas both count in it, so the deltas of triggers from before
    the bucket add up the same), split by the running jobs counted from their rows through `job_due`. That count
    grows with what runs at once, never with the history. One statement: one snapshot for both parts."""
    jobs, totals = table_names(prefix).jobs, totals_name(prefix)
    return (
        "SELECT space_id, action_id, status, SUM(n) AS n FROM ("
        f"SELECT space_id, action_id, {_bucket('status')} AS status, n FROM `{totals}` WHERE status <> '' "
        f"UNION ALL SELECT j.space_id, j.action_id, r.status, r.n FROM `{jobs}` AS j FORCE INDEX (job_due) "
        "JOIN (SELECT 'running' AS status, 1 AS n UNION ALL SELECT 'pending', -1) AS r WHERE j.status = 'running'"
        ") AS moves GROUP BY space_id, action_id, status"
    )


def totals_read(prefix: str, where: str) -> str:
    """Totals per space, action and status for a `{where}` over space_id, action_id, status."""
    return f"SELECT {KEPT} space_id, action_id, status, n FROM ({kept_totals(prefix)}) AS k WHERE n <> 0 AND {where}"


def totals_by_space(prefix: str, where: str) -> str:
    """Matching jobs per space (only those with some), by space: what a page over several spaces reads."""
    return (
        f"SELECT {KEPT} space_id, SUM(n) FROM ({kept_totals(prefix)}) AS k WHERE {where} "
        "GROUP BY space_id HAVING SUM(n) <> 0 ORDER BY space_id"
    )


def total_read(prefix: str, where: str) -> str:
    return f"SELECT {KEPT} COALESCE(SUM(n), 0) FROM ({kept_totals(prefix)}) AS k WHERE {where}"


def stats_read(prefix: str, where: str) -> str:
    """`stats()` in one statement (one snapshot), none of it growing with the finished history: (kind, space_id,
    action_id, value) rows where kind is a status (its kept total), 'later' (pending jobs not yet due: the due ones
    are the pending total less these), 'lapsed' (running jobs past their lease) or 'oldest' (a group's oldest due
    run_at: one probe of `job_due` per group with pending jobs, from the oldest due job on)."""
    jobs, totals = table_names(prefix).jobs, totals_name(prefix)
    return (
        f"SELECT {KEPT} status, space_id, action_id, n FROM ({kept_totals(prefix)}) AS k WHERE n <> 0 AND {where} "
        f"UNION ALL SELECT 'later', space_id, action_id, COUNT(*) FROM `{jobs}` FORCE INDEX (job_due) "
        f"WHERE status = 'pending' AND run_at > %(now)s AND {where} GROUP BY space_id, action_id "
        f"UNION ALL SELECT 'lapsed', space_id, action_id, COUNT(*) FROM `{jobs}` FORCE INDEX (job_due) "
        f"WHERE status = 'running' AND lease_until < %(now)s AND {where} GROUP BY space_id, action_id "
        "UNION ALL SELECT 'oldest', g.space_id, g.action_id, "
        f"(SELECT j.run_at FROM `{jobs}` AS j FORCE INDEX (job_due) WHERE j.status = 'pending' AND j.run_at <= %(now)s "
        "AND j.space_id = g.space_id AND j.action_id = g.action_id ORDER BY j.run_at LIMIT 1) "
        f"FROM (SELECT space_id, action_id FROM `{totals}` WHERE status IN ('pending', 'running') AND {where} "
        "GROUP BY space_id, action_id HAVING SUM(n) > 0) AS g"  # the bucket: groups with jobs pending or running
    )


def fold_candidates(prefix: str) -> str:
    return f"SELECT delta_id, space_id, action_id, status, n FROM `{totals_name(prefix)}` WHERE status <> '' LIMIT %s"


def fold_delete(prefix: str, delta_ids: list[bytes]) -> str:
    # Keys as hex literals: the driver would send bytes in a list as a text literal (a warning per key on
    # MySQL, "Invalid utf8mb4 character string"), and hex digits need no escaping.
    keys = ", ".join(f"X'{key.hex()}'" for key in delta_ids)
    return f"DELETE FROM `{totals_name(prefix)}` WHERE delta_id IN ({keys})"


def fold_insert(prefix: str) -> str:
    return f"INSERT INTO `{totals_name(prefix)}` (delta_id, space_id, action_id, status, n) VALUES "


def recount(prefix: str) -> str:
    """What the totals should say, counted from the rows: the drift check's truth."""
    jobs = table_names(prefix).jobs
    return f"SELECT space_id, action_id, status, COUNT(*) AS n FROM `{jobs}` GROUP BY space_id, action_id, status"


def drift_query(prefix: str = "") -> str:
    """(space, action, status, kept, counted) wherever the kept totals and a recount disagree: one statement, so
    both sides are read in one snapshot and writers running meanwhile cannot show up as drift."""
    kept, counted = totals_read(prefix, "1 = 1"), recount(prefix)
    return (
        "SELECT space_id, action_id, status, SUM(kept), SUM(counted) FROM ("
        f"SELECT space_id, action_id, status, n AS kept, 0 AS counted FROM ({kept}) AS k UNION ALL "
        f"SELECT space_id, action_id, status, 0, n FROM ({counted}) AS c"
        ") AS both_sides GROUP BY space_id, action_id, status HAVING SUM(kept) <> SUM(counted)"
    )
