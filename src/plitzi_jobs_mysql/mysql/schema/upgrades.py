"""Numbered upgrade steps, as plain statements any MySQL 8 or MariaDB client can run in order on one session.

Neither server can guard DDL without a stored program (MySQL 8 has no `ADD COLUMN IF NOT EXISTS`), so every change
is a guarded statement: its condition is read from information_schema (a table's layout, its version COMMENT) at
the moment it runs, and a false condition runs `DO 0` instead. Hence:

- rerunning the list is harmless (every guard is false on current tables), and
- a run that died half-way resumes: each step changes a table in one atomic statement (an ALTER that also sets the
  version COMMENT, or a RENAME that swaps a finished copy in), and whatever it left before that is redone.

The whole list runs under GET_LOCK on a name derived from the database and the prefix, and no guard is true
unless this session holds it: two replicas migrating at once take turns, and the second finds nothing to do.

Adding a step (say, a column on the jobs table; `_priorities_step` is one): a `Step` whose statements are
`_guarded(f"{_comment(t.jobs)} = '{marker(n - 1)}'", "ALTER TABLE `…` ADD COLUMN …, COMMENT = '{marker(n)}'")` per
table it changes (plus a COMMENT-only ALTER for the tables it leaves alone), appended to STEPS, and
SCHEMA_VERSION = n in tables.py with the new CREATE TABLE there; step 1 keeps building version-1 tables. Build
it from its version (a function of n, as `_priorities_step`), so renumbering it is one constant.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..statements import TERMINAL
from . import totals
from .tables import (
    CLAIM_INDEX,
    CURRENT_LAYOUTS,
    HELD_COLUMN,
    MARKER_TEXT,
    PRIORITY_COLUMN,
    SCHEMA_VERSION,
    SPACE_STATUS_RECENT,
    TS_LAYOUTS,
    V1_LAYOUTS,
    Tables,
    check_prefix,
    jobs_v1,
    kv_v1,
    marker,
    schedules_v1,
    side_names,
    table_names,
)

#: How long a run waits for another run on the same tables to finish.
LOCK_WAIT_S = 600
_NOOP = "DO 0"
_HELD = "IS_USED_LOCK(@pjm_lock) = CONNECTION_ID()"


def _text(value: str) -> str:
    """A string literal. Nothing here holds a backslash, so no sql_mode changes what it means."""
    if "\\" in value:
        raise ValueError("upgrade statements must not contain backslashes")
    return "'" + value.replace("'", "''") + "'"


def _layout(table: str) -> str:
    """The table's columns as `name type,...` (NULL when it does not exist): see tables.layout_of."""
    return (
        "(SELECT GROUP_CONCAT(CONCAT(COLUMN_NAME, ' ', DATA_TYPE) ORDER BY ORDINAL_POSITION SEPARATOR ',') "
        f"FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = {_text(table)})"
    )


def _comment(table: str) -> str:
    return (
        "(SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
        f"AND TABLE_NAME = {_text(table)})"
    )


def _guarded(condition: str, statement: str) -> list[str]:
    """`statement` if `condition` holds when it runs (and this session holds the lock), else nothing."""
    return [
        f"SET @pjm_sql = IF({_HELD} AND ({condition}), {_text(statement)}, '{_NOOP}')",
        "PREPARE pjm_step FROM @pjm_sql",
        "EXECUTE pjm_step",
        "DEALLOCATE PREPARE pjm_step",
    ]


@dataclass(frozen=True)
class Step:
    version: int  # the schema version the step brings the tables to
    title: str
    statements: Callable[[str], list[str]]  # prefix -> guarded statements


# -- step 1: the TypeScript original's tables (and this package's own, before they carried a version) --------

# The original wrote history with JSON.stringify: keys camelCased, no whitespace. A key is always followed by
# `":`, which inside a JSON string would be `\":`, so these replacements touch keys only.
_HISTORY_KEYS = (("startedAt", "started_at"), ("endedAt", "ended_at"), ("workerId", "worker_id"), ("runId", "run_id"))


def _history(column: str) -> str:
    expression = column
    for old, new in _HISTORY_KEYS:
        expression = f"REPLACE({expression}, '\"{old}\":', '\"{new}\":')"
    return expression


def _copy_jobs(source: str, target: str) -> list[str]:
    # Finished jobs first, in the original's key order (no sort: a sort of a million rows with their history read
    # them back one by one); then the waiting and running ones in enqueue order, which `seq` keeps from here on
    # (claims break run_at ties by it). A running job keeps its holder and lease; its claim instant was the
    # original's updated_at. A finished job's run_at is the instant it finished, as this package keeps it (the
    # retention purge reads it): the original's updated_at. Ids go over byte for byte: under the original's
    # case-insensitive key two ids that differ only by case or trailing space could never both exist.
    insert = (
        f"INSERT INTO `{target}` (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
        "missed, `key`, status, run_at, attempts, created_at, updated_at, claimed_at, lease_until, worker_id, "
        "run_id, cancel_requested, error, history) "
        "SELECT CAST(id AS BINARY), space_id, CAST(action_id AS BINARY), CAST(environment AS BINARY), "
        "CAST(trigger_type AS BINARY), input, due_at, max_attempts, missed, NULL, status, "
        f"IF(status IN {TERMINAL}, updated_at, run_at), attempts, "
        "created_at, updated_at, IF(status = 'running', updated_at, NULL), lease_until, CAST(worker_id AS BINARY), "
        f"CAST(run_id AS BINARY), cancel_requested, error, {_history('history')} FROM `{source}` "
    )
    return [
        f"{insert}FORCE INDEX (PRIMARY) WHERE status IN {TERMINAL} ORDER BY id",
        f"{insert}WHERE status NOT IN {TERMINAL} ORDER BY created_at, id",
    ]


def _copy_schedules(source: str, target: str) -> str:
    # The original's primary key order is the new one's (space, action), so this needs no sort either.
    return (
        f"INSERT INTO `{target}` (space_id, action_id, cron, timezone, environment, enabled, next_run_at, "
        "max_attempts, missed, updated_at, last_fire_at) "
        "SELECT space_id, CAST(action_id AS BINARY), CAST(cron AS BINARY), CAST(timezone AS BINARY), "
        "CAST(environment AS BINARY), enabled, next_run_at, max_attempts, missed, updated_at, last_fire_at "
        f"FROM `{source}`"
    )


def _copy_kv(source: str, target: str) -> str:
    # Lifetimes are epoch ms of the server's clock in both, so they carry over as they are.
    return f"INSERT INTO `{target}` (k, v, expires_at) SELECT k, v, expires_at FROM `{source}`"


def _copy(index: int, source: str, target: str) -> list[str]:
    if index == 0:
        return _copy_jobs(source, target)
    return [(_copy_schedules, _copy_kv)[index - 1](source, target)]


# What every write of the original moves (a claim, heartbeat, settle, cancel, put, set): read before and after the
# copy, so a table still being written is not swapped out with writes missing.
_FINGERPRINTS = (
    "COUNT(*), SUM(updated_at), SUM(attempts), SUM(IFNULL(lease_until, 0))",
    "COUNT(*), SUM(updated_at), SUM(next_run_at)",
    "COUNT(*), SUM(IFNULL(expires_at, 0)), SUM(CRC32(v))",
)
_V1 = (jobs_v1, schedules_v1, kv_v1)


def _convert(table: str, new: str, old: str, index: int) -> list[str]:
    """Copies an original's table into a version-1 table and swaps it in; the original is kept as `old`."""
    is_original = f"{_layout(table)} = {_text(TS_LAYOUTS[index])}"
    fingerprint = f"SELECT CONCAT_WS(',', {_FINGERPRINTS[index]}) FROM `{table}` INTO @pjm_{{when}}"
    return [
        "SET @pjm_before = NULL, @pjm_after = NULL",
        *_guarded(is_original, f"DROP TABLE IF EXISTS `{new}`"),  # a copy a crashed run left half-done
        *_guarded(is_original, _V1[index](new)),
        *_guarded(is_original, fingerprint.format(when="before")),
        *(line for copy in _copy(index, table, new) for line in _guarded(is_original, copy)),
        *_guarded(is_original, fingerprint.format(when="after")),
        *_guarded(
            f"{is_original} AND @pjm_before = @pjm_after", f"RENAME TABLE `{table}` TO `{old}`, `{new}` TO `{table}`"
        ),
    ]


def _stamp(table: str, index: int, version: int) -> list[str]:
    """Records the version on a table that has its layout but no record (made before tables carried one); a
    table with the current layout and no record (its COMMENT cleared) records the current version."""
    layout, comment = _layout(table), _comment(table)
    statements: list[str] = []
    for columns, recorded in ((V1_LAYOUTS[index], version), (CURRENT_LAYOUTS[index], SCHEMA_VERSION)):
        if recorded != version and columns == V1_LAYOUTS[index]:
            continue  # the layout did not change since version 1: stamped 1, and the steps take it on
        unrecorded = f"{layout} = {_text(columns)} AND LOCATE({_text(MARKER_TEXT)}, {comment}) = 0"
        statements += _guarded(unrecorded, f"ALTER TABLE `{table}` COMMENT = '{marker(recorded)}'")
    return statements


def _step_1(prefix: str) -> list[str]:
    tables, new, old = table_names(prefix), side_names(prefix, "new"), side_names(prefix, "old")
    statements: list[str] = []
    for index, (table, new_table, old_table) in enumerate(zip(tables.all(), new.all(), old.all(), strict=True)):
        statements += _stamp(table, index, 1)
        statements += _convert(table, new_table, old_table, index)
    return statements


# -- the priorities step: `JobInput.priority`, the pause mark `held`, and the index claims read due jobs through --

#: The schema version the priorities step brings the tables to (one place to renumber it).
PRIORITIES_VERSION = 2


def _priorities_step(version: int) -> Callable[[str], list[str]]:
    """The step from `version - 1` to `version`: one ALTER of the jobs table (the column, the claim index and the
    record at once, so a run that died half-way finds the table either before or after it) and a record-only
    ALTER of the others."""
    before, after = marker(version - 1), marker(version)

    def statements(prefix: str) -> list[str]:
        t = table_names(prefix)
        jobs = (
            f"ALTER TABLE `{t.jobs}` ADD COLUMN {PRIORITY_COLUMN} AFTER `key`, "
            f"ADD COLUMN {HELD_COLUMN} AFTER `priority`, ADD KEY {CLAIM_INDEX}, COMMENT = '{after}'"
        )
        out = _guarded(f"{_comment(t.jobs)} = '{before}'", jobs)
        for table in (t.schedules, t.kv):
            out += _guarded(f"{_comment(table)} = '{before}'", f"ALTER TABLE `{table}` COMMENT = '{after}'")
        return out

    return statements


# -- the totals step: exact job counts per space, action and status ----------------------------------------

#: The schema version the totals step brings the tables to.
TOTALS_VERSION = 3


def totals_step(version: int) -> Callable[[str], list[str]]:
    """The job totals (schema/totals.py) as the step that brings the tables from `version - 1` to `version`: their
    table, then the index and the version record in one online ALTER. The triggers and the backfill (one consistent
    read under READ COMMITTED that locks no job, exact whenever it runs after the triggers) come from the runner once
    the tables are current (`totals.totals_statements`): CREATE TRIGGER cannot be guarded here."""

    def statements(prefix: str) -> list[str]:
        tables = table_names(prefix)
        before, after = marker(version - 1), marker(version)
        steps = [totals.totals_table(prefix)]
        # Tables made by this release and stamped afresh (no record before) have the index already.
        indexed = (
            "(SELECT COUNT(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = "
            f"{_text(tables.jobs)} AND INDEX_NAME = 'job_space_status_recent') > 0"
        )
        steps += _guarded(
            f"{_comment(tables.jobs)} = '{before}' AND NOT {indexed}",
            f"ALTER TABLE `{tables.jobs}` ADD {SPACE_STATUS_RECENT}, COMMENT = '{after}'",
        )
        for table in (tables.jobs, tables.schedules, tables.kv):
            steps += _guarded(f"{_comment(table)} = '{before}'", f"ALTER TABLE `{table}` COMMENT = '{after}'")
        return steps

    return statements


def priorities_downgrade(prefix: str = "", version: int = PRIORITIES_VERSION) -> list[str]:
    """The priorities step undone (an Alembic downgrade): the jobs' priorities and pause marks are lost, nothing
    else (the pauses themselves are rows of the kv table, mysql/pause_calls.py)."""
    t = table_names(prefix)
    before, after = marker(version), marker(version - 1)
    jobs = (
        f"ALTER TABLE `{t.jobs}` DROP KEY `job_claim`, DROP COLUMN `held`, DROP COLUMN `priority`, COMMENT = '{after}'"
    )
    statements = [f"SET @pjm_lock = {_lock_name(prefix)}", f"SET @pjm_locked = GET_LOCK(@pjm_lock, {LOCK_WAIT_S})"]
    statements += _guarded(f"{_comment(t.jobs)} = '{before}'", jobs)
    for table in (t.schedules, t.kv):
        statements += _guarded(f"{_comment(table)} = '{before}'", f"ALTER TABLE `{table}` COMMENT = '{after}'")
    return [*statements, "DO RELEASE_LOCK(@pjm_lock)"]


STEPS: tuple[Step, ...] = (
    Step(1, "the TypeScript original's tables (@plitzi/sdk-server 0.37.2) copied into version-1 tables", _step_1),
    Step(
        PRIORITIES_VERSION,
        "job priorities and pauses: the `priority` and `held` columns and the `job_claim` index",
        _priorities_step(PRIORITIES_VERSION),
    ),
    Step(
        TOTALS_VERSION,
        "exact job totals per space, action and status, kept by triggers; the status index",
        totals_step(TOTALS_VERSION),
    ),
)


def kept_originals(prefix: str) -> Tables:
    """Where step 1 keeps the TypeScript original's tables it replaced."""
    return side_names(prefix, "old")


def _lock_name(prefix: str) -> str:
    # Lock names are server-wide and at most 64 characters: the database and the prefix, hashed. SHA2, which
    # MariaDB and every MySQL have (MySQL 9 has no SHA1() or MD5()), cut to 40 hex digits to fit.
    return f"CONCAT('plitzi_jobs_mysql:', LEFT(SHA2(CONCAT(DATABASE(), '.', {_text(check_prefix(prefix))}), 256), 40))"


def lock_is_free(prefix: str) -> str:
    """1 when no session is running the upgrades on these tables right now."""
    return f"SELECT IS_FREE_LOCK({_lock_name(prefix)})"


def take_lock(prefix: str) -> str:
    """For a runner that plans under the lock too (it nests: the statements' own GET_LOCK then counts twice)."""
    return f"SELECT GET_LOCK({_lock_name(prefix)}, {LOCK_WAIT_S})"


def release_lock(prefix: str) -> str:
    return f"SELECT RELEASE_LOCK({_lock_name(prefix)})"


def upgrade_statements(prefix: str = "") -> list[str]:
    """Every step, under the lock and in strict mode (nothing truncated), restoring the session afterwards."""
    statements = [
        "SET @pjm_sql_mode = @@SESSION.sql_mode",
        "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION'",
        f"SET @pjm_lock = {_lock_name(prefix)}",
        f"SET @pjm_locked = GET_LOCK(@pjm_lock, {LOCK_WAIT_S})",
    ]
    for step in STEPS:
        statements += step.statements(prefix)
    statements += ["DO RELEASE_LOCK(@pjm_lock)", "SET SESSION sql_mode = @pjm_sql_mode"]
    return statements
