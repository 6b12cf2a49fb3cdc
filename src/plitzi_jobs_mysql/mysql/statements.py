"""Every statement the MySQL store sends, in one place.

Rules the statements keep, whatever the pool's autocommit, isolation level or client flags:
- Each change is ONE single-row compare-and-set (or a holder-guarded UPDATE): the WHERE clause is the whole
  precondition, and a row it matches always changes (its status, attempts or instants move), so the affected-rows
  count means the same with and without `CLIENT.FOUND_ROWS`.
- In an UPDATE, assignments run left to right and each sees the ones before it: the history append reads the
  old `worker_id`/`claimed_at` before they are reassigned, and later assignments branch on the NEW `status`.
- Binary identifiers go into JSON through `CONVERT(... USING utf8mb4)`: MySQL 8 writes a bare binary string into
  JSON as base64.
- Instants are parameters from the store clock, except in the kv table, whose lifetimes the server judges in the
  statement itself (`NOW_MS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..records import JobStatus
from .schema.tables import table_names

#: The server's now in epoch ms, exact in any session time zone (UNIX_TIMESTAMP(NOW(3)) is an hour wrong
#: inside a daylight-saving fall-back hour).
NOW_MS = "(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)"

#: The columns a job or schedule is read with; rows.py decodes a row by these names.
JOB_COLUMN_NAMES = tuple(
    "seq id space_id action_id environment trigger input due_at max_attempts missed key priority status run_at "
    "attempts created_at updated_at history lease_until worker_id run_id cancel_requested error claimed_at".split()
)
SCHEDULE_COLUMN_NAMES = tuple(
    "space_id action_id cron timezone environment enabled next_run_at max_attempts missed updated_at "
    "last_fire_at".split()
)
JOB_COLUMNS = ", ".join(f"`{name}`" for name in JOB_COLUMN_NAMES)
SCHEDULE_COLUMNS = ", ".join(f"`{name}`" for name in SCHEDULE_COLUMN_NAMES)
TERMINAL = "(" + ", ".join(f"'{status}'" for status in JobStatus if status.terminal) + ")"
#: Where the pause rows live in the kv table (mysql/pause_calls.py): [PAUSES_FROM, PAUSES_TO), as hex in SQL text:
#: a 0xFF byte in a statement makes concurrent reads of information_schema.processlist fail on MySQL 9 (3854).
PAUSES_FROM, PAUSES_TO = b"\xffpause:", b"\xffpause;"
PAUSE_ROWS = f"k >= X'{PAUSES_FROM.hex()}' AND k < X'{PAUSES_TO.hex()}'"

# What a database holds, read on first use and by `migrate` (schema.schema_state reads the rows): each table's
# version record (its COMMENT) and its columns. Plain reads of the data dictionary, no locks.
SCHEMA_TABLES = (
    "SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME IN %s"
)
SCHEMA_COLUMNS = (
    "SELECT TABLE_NAME, COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
    "AND TABLE_NAME IN %s ORDER BY TABLE_NAME, ORDINAL_POSITION"
)

#: The database a session is in: what a refusal's fix names (`migrate --url mysql://…/DATABASE`).
CURRENT_DATABASE = "SELECT DATABASE()"
# What first use reads to tell a cluster node (flavour.py): Galera's switch, and Group Replication's group name.
CLUSTER_PROBE = "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'group_replication_group_name')"


def count_rows(table: str) -> str:
    """What `migrate --dry-run` reports a copy would move (`table` is one of `table_names`)."""
    return f"SELECT COUNT(*) FROM `{table}`"


# A worker's single-row writes find their row by key, never through `job_due`/`job_claim`: on a small table, or
# rows with equal run_at, the optimizer reads an UPDATE's `status = … AND run_at <= …` as a range of those
# indexes and locks the whole range, so one claim's compare-and-sets (and a settle beside them) met 1205 against
# each other with nobody else writing (issue 18.4). MariaDB and MySQL both take index hints in an UPDATE.
BY_SEQ = "FORCE INDEX (PRIMARY)"
BY_ID = "FORCE INDEX (job_id)"

#: What a lapsed job's takeover reports in its OK packet's insert id (`claim_lapsed`).
TAKE_DIED, TAKE_WON = 1, 2

#: A claim's instant: the claim's now, but always after the job's previous claim, so two claims of one job never
#: share one (even within a millisecond) and a settle carrying its claim's instant tells the claims apart.
NEXT_CLAIM = "GREATEST(%(now)s, COALESCE(claimed_at + 1, 0))"


def nowait_guarded(statement: str, table: str, key: str, match: str) -> str:
    """`statement` (an UPDATE of `table` ending in its WHERE clause) guarded by a lock on the same rows taken
    `FOR UPDATE NOWAIT` first: on a row another transaction holds it fails at once (3572). The guard is an
    uncorrelated scalar subquery, which MySQL evaluates once before it reads a row of the UPDATE (a derived
    table joined to the rows, or `IN (…)`, is merged or materialised lazily, after the UPDATE's own read has
    waited on the held row: measured). Its count is > 0 whenever the UPDATE could match a row anyway."""
    return (
        f"{statement} AND (SELECT COUNT(*) FROM (SELECT {key} FROM {table} WHERE {key} {match} "
        "FOR UPDATE NOWAIT) AS unheld) > 0"
    )


def _upsert_schedules(table: str, incoming: Callable[[str], str], alias: str) -> str:
    """The schedules' upsert, `incoming(col)` naming the new row's value (the stored one is qualified by the
    table: beside a row alias a bare column name is ambiguous). An unchanged schedule keeps its promised fire,
    unless it is being switched back on (a week switched off is not a week of missed fires): next_run_at is
    decided BEFORE cron/zone/enabled are overwritten."""
    new = incoming

    def old(col: str) -> str:
        return f"{table}.{col}"

    return (
        f"INSERT INTO {table} (space_id, action_id, cron, timezone, environment, enabled, next_run_at, "
        f"max_attempts, missed, updated_at) VALUES {{values}}{alias} ON DUPLICATE KEY UPDATE "
        f"next_run_at = IF({old('cron')} = {new('cron')} AND {old('timezone')} <=> {new('timezone')} "
        f"AND {old('environment')} = {new('environment')} AND NOT ({old('enabled')} = 0 AND {new('enabled')} = 1), "
        f"{old('next_run_at')}, {new('next_run_at')}), "
        f"cron = {new('cron')}, timezone = {new('timezone')}, environment = {new('environment')}, "
        f"enabled = {new('enabled')}, max_attempts = {new('max_attempts')}, updated_at = {new('updated_at')}"
    )


def _attempt_json(status: str, worker: str, run_id: str, error: str, ended_at: str) -> str:
    """A history entry appended in SQL, numbered by the history itself and started at the claim."""
    return (
        f"JSON_OBJECT('attempt', JSON_LENGTH(history) + 1, 'status', {status}, 'started_at', claimed_at, "
        f"'ended_at', {ended_at}, 'worker_id', {worker}, 'run_id', {run_id}, 'error', {error})"
    )


@dataclass(frozen=True)
class Statements:
    clock: str
    session_charset: str
    server_limits: str
    # jobs
    insert_job_values: str
    insert_jobs: str
    existing_job_ids: str
    due_priorities: str
    claim_candidates: str
    claim_pending_candidates: str
    claim_lapsed_candidates: str
    claim_pending: str
    claim_lapsed: str
    took_dead: str
    claimed_jobs: str
    dead_by_loss: str
    renew_leases: str
    cancel_requested_ids: str
    settle: str
    settle_succeeded: str
    get_job: str
    finished_counts: str
    requeue: str
    cancel_pending_job: str
    request_cancel: str
    is_running: str
    job_seq: str
    cancel_keyed: str
    cancel_keyed_before: str
    finished_before: str
    purge_finished: str
    # schedules
    due_schedules: str
    advance_schedule: str
    lock_space_schedules: str
    delete_space_schedules: str
    delete_space_schedules_except: str
    upsert_schedule_values: str
    upsert_schedules: str
    upsert_schedules_aliased: str
    list_schedules: str
    # kv
    kv_get: str
    kv_set: str
    kv_delete: str
    kv_increment: str
    kv_expire: str
    kv_insert: str
    kv_delete_lapsed_key: str
    kv_replace: str
    kv_is_live_value: str
    kv_purge_lapsed: str
    kv_insert_absent_values: str
    kv_insert_absent: str
    kv_holders: str
    kv_delete_unchanged_one: str
    kv_delete_unchanged: str
    # Where the server cannot bound one statement's lock wait to nothing (MySQL: no SET STATEMENT, and
    # innodb_lock_wait_timeout, session or SET_VAR hint, is at least 1 s), the compare-and-set locks its own row
    # NOWAIT first: a row another transaction holds fails the statement at once with 3572, a lost race, instead
    # of waiting out the holder's lock. Derived from the statements above (statements_for); the renewal takes
    # `ids` a second time, last.
    claim_pending_nowait: str = ""
    claim_lapsed_nowait: str = ""
    renew_leases_nowait: str = ""


def statements_for(prefix: str) -> Statements:
    t = table_names(prefix)
    jobs, schedules, kv = f"`{t.jobs}`", f"`{t.schedules}`", f"`{t.kv}`"
    live = f"(expires_at IS NULL OR expires_at > {NOW_MS})"
    lapsed = f"(expires_at IS NOT NULL AND expires_at <= {NOW_MS})"
    # A counter's new value rides back in the OK packet through LAST_INSERT_ID(), offset by 2**63 so a negative
    # value fits the unsigned id and 0 can mean "not counted": one statement, whatever else writes the key.
    counted = "IF(LAST_INSERT_ID(CAST({n} + 9223372036854775808 AS UNSIGNED)) >= 0, CAST({n} AS CHAR), '')"
    current = "CAST(v AS DECIMAL(21, 0))"
    int64 = "-9223372036854775808 AND 9223372036854775807"
    # A value compares as its bytes' length and SHA-256 (utf8mb4_bin is PAD SPACE, so `v = 'x '` would match
    # 'x'), so a swap sends its expected value as a digest and only the new value whole.
    same_value = "LENGTH(v) = %s AND SHA2(v, 256) = %s"
    # Candidates travel as (seq, run_at, lapsed, priority).
    pending_read = (
        f"SELECT seq, run_at, 0, priority FROM {jobs} FORCE INDEX (job_claim) "
        "WHERE status = 'pending' AND held = 0 AND priority = %s AND run_at <= %s ORDER BY run_at, seq LIMIT %s, %s"
    )
    lapsed_read = (
        f"SELECT seq, run_at, 1, priority FROM {jobs} FORCE INDEX (job_claim) "
        "WHERE status = 'running' AND held = 0 AND lease_until < %s ORDER BY priority, run_at, seq LIMIT %s"
    )
    base = Statements(
        clock=f"SELECT {NOW_MS}",
        session_charset="SELECT @@character_set_client, @@character_set_connection, @@character_set_results",
        server_limits="SELECT @@max_allowed_packet, VERSION()",
        # -- jobs -------------------------------------------------------------------------------------------
        insert_job_values="(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'pending', %s, 0, %s, %s, '[]')",
        insert_jobs=(
            f"INSERT INTO {jobs} (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
            "missed, `key`, priority, status, run_at, attempts, created_at, updated_at, history) VALUES "
        ),
        existing_job_ids=f"SELECT id FROM {jobs} WHERE id IN %s",
        # Index-ordered reads through `job_claim` (status, held, priority, run_at), past no paused (held) job: the
        # OR of both statuses under one ORDER BY makes the server read and sort every due job. First the
        # priorities that have due jobs: a loose index scan (one dive per priority, whatever the jobs), so a
        # not-yet-due job of a lower priority is never walked. Then one pending read per such priority (UNION ALL,
        # merged by the claim), each O(limit): the first starts at an offset, so claimers spread over the oldest
        # jobs each take their own block (the server skips index entries cheaply; only the block crosses the
        # wire). The lapsed read steps over every running row (their run_at orders them, not their lease), so a
        # claim sends it only now and then (queue_core.py, LAPSED_READ_EVERY_MS); an index on lease_until would
        # make it O(limit) but every heartbeat move an index entry (measured in bench/README.md). Only (seq,
        # run_at, …) travel: full rows in a UNION ALL derived table once crashed MariaDB 10.11. With the
        # priorities a row (NULL, n): how many pauses there are (pause_calls.py), so a claim learns in the same
        # round trip whether to check them.
        due_priorities=(
            f"(SELECT priority, MIN(run_at) FROM {jobs} FORCE INDEX (job_claim) "
            "WHERE status = 'pending' AND held = 0 AND run_at <= %s GROUP BY status, held, priority) UNION ALL "
            f"(SELECT NULL, COUNT(*) FROM {kv} WHERE {PAUSE_ROWS})"
        ),
        claim_pending_candidates=pending_read,
        claim_lapsed_candidates=lapsed_read,
        claim_candidates=f"({pending_read}) UNION ALL ({lapsed_read})",
        claim_pending=(
            f"UPDATE {jobs} {BY_SEQ} SET status = 'running', attempts = attempts + 1, worker_id = %(worker)s, "
            f"lease_until = %(lease_until)s, claimed_at = {NEXT_CLAIM}, updated_at = %(now)s "
            "WHERE seq = %(seq)s AND status = 'pending' AND held = 0 AND run_at <= %(now)s"
        ),
        # A lapsed lease is a lost attempt; past max_attempts the job is dead rather than run again, so a job
        # that kills its worker every time cannot loop forever.
        claim_lapsed=(
            f"UPDATE {jobs} {BY_SEQ} SET "
            "history = JSON_ARRAY_APPEND(history, '$', "
            + _attempt_json(
                "'lost'",
                "COALESCE(CONVERT(worker_id USING utf8mb4), 'unknown')",
                "NULL",
                "%(lost)s",
                "%(now)s",
            )
            + "), "
            "status = IF(attempts >= max_attempts, 'dead', 'running'), "
            "run_at = IF(status = 'dead', %(now)s, run_at), "
            "error = IF(status = 'dead', %(lost)s, error), "
            "attempts = IF(status = 'dead', attempts, attempts + 1), "
            "worker_id = IF(status = 'dead', worker_id, %(worker)s), "
            "lease_until = IF(status = 'dead', NULL, %(lease_until)s), "
            f"claimed_at = IF(status = 'dead', claimed_at, {NEXT_CLAIM}), "
            # The OK packet's insert id tells a takeover (2) from a death (1) — unless a trigger's INSERT replaced
            # it (then `took_dead` reads the row): a dead job is no claim won, its slot goes to the next candidate.
            f"updated_at = IF(LAST_INSERT_ID(IF(status = 'dead', {TAKE_DIED}, {TAKE_WON})) > 0, %(now)s, %(now)s) "
            "WHERE seq = %(seq)s AND status = 'running' AND held = 0 AND lease_until < %(now)s"
        ),
        took_dead=f"SELECT status = 'dead' FROM {jobs} {BY_SEQ} WHERE seq = %(seq)s",
        claimed_jobs=f"SELECT {JOB_COLUMNS} FROM {jobs} WHERE seq IN %s AND status = 'running' AND worker_id = %s",
        # Read only when a claim won a row it did not get back: no worker holds such a job, so the claim reports it.
        dead_by_loss=(
            f"SELECT id, space_id, action_id, attempts, max_attempts FROM {jobs} WHERE seq IN %s AND status = 'dead'"
        ),
        renew_leases=(
            f"UPDATE {jobs} {BY_ID} SET lease_until = %s WHERE id IN %s AND worker_id = %s AND status = 'running'"
        ),
        cancel_requested_ids=(
            f"SELECT id FROM {jobs} WHERE id IN %s AND worker_id = %s AND status = 'running' AND cancel_requested = 1"
        ),
        settle=(
            f"UPDATE {jobs} {BY_ID} SET "
            "history = IF(%(has_attempt)s, JSON_ARRAY_APPEND(history, '$', "
            + _attempt_json("%(a_status)s", "%(a_worker)s", "%(a_run)s", "%(a_error)s", "%(now)s")
            + "), history), "
            "status = %(status)s, "
            "error = %(error)s, "
            "run_id = COALESCE(%(run_id)s, run_id), "
            "lease_until = NULL, "
            "run_at = IF(status = 'pending', %(retry_at)s, %(now)s), "
            "worker_id = IF(status = 'pending', NULL, worker_id), "
            # A hand-back of a job never started gives its attempt back.
            "attempts = IF(status = 'pending' AND NOT %(has_attempt)s, GREATEST(attempts - 1, 0), attempts), "
            "updated_at = %(now)s "
            "WHERE id = %(id)s AND worker_id = %(worker)s AND status = 'running' "
            "AND (%(claimed_at)s IS NULL OR claimed_at = %(claimed_at)s)"
        ),
        # Many succeeded jobs of one worker in one statement: per row exactly what `settle` writes for
        # status='succeeded' with a 'succeeded' attempt (same history entry, each row its own run_id through
        # `{run}`, a CASE id WHEN ... the caller builds), under the same holder guard (`{claim}`: each row's claim
        # instant, when given), so a row another claim took over, or one already settled, is left alone. One
        # statement per batch rather than per job.
        settle_succeeded=(
            f"UPDATE {jobs} {BY_ID} SET "
            "history = JSON_ARRAY_APPEND(history, '$', "
            + _attempt_json("'succeeded'", "%(worker)s", "{run}", "NULL", "%(now)s")
            + "), "
            "status = 'succeeded', "
            "error = NULL, "
            "run_id = COALESCE({run}, run_id), "
            "lease_until = NULL, "
            "run_at = %(now)s, "
            "updated_at = %(now)s "
            "WHERE id IN %(ids)s AND worker_id = %(worker)s AND status = 'running'{claim}"
        ),
        get_job=f"SELECT {JOB_COLUMNS} FROM {jobs} WHERE id = %s AND space_id IN %s",
        # Through `job_due` (status, run_at): a finished job's run_at is the instant it finished, so the window is one
        # index range per terminal status, whatever the table holds outside it. It costs what the window holds (the
        # dashboard asks for a closed bucket once and recounts only the current one: web/activity.py).
        finished_counts=(
            f"SELECT space_id, action_id, status, run_at DIV %(bucket)s, COUNT(*) FROM {jobs} FORCE INDEX (job_due) "
            f"WHERE status IN {TERMINAL} AND run_at >= %(since)s AND run_at < %(until)s AND {{where}} "
            "GROUP BY run_at DIV %(bucket)s, space_id, action_id, status"
        ),
        requeue=(
            f"UPDATE {jobs} SET status = 'pending', run_at = %(now)s, attempts = 0, worker_id = NULL, "
            "lease_until = NULL, cancel_requested = 0, error = NULL, updated_at = %(now)s "
            f"WHERE id = %(id)s AND space_id IN %(spaces)s AND status IN {TERMINAL}"
        ),
        cancel_pending_job=(
            f"UPDATE {jobs} SET status = 'cancelled', worker_id = NULL, run_at = %(now)s, updated_at = %(now)s "
            "WHERE id = %(id)s AND space_id IN %(spaces)s AND status = 'pending'"
        ),
        request_cancel=(
            f"UPDATE {jobs} SET cancel_requested = 1, updated_at = %(now)s "
            "WHERE id = %(id)s AND space_id IN %(spaces)s AND status = 'running' AND cancel_requested = 0"
        ),
        is_running=f"SELECT 1 FROM {jobs} WHERE id = %s AND space_id IN %s AND status = 'running'",
        job_seq=f"SELECT seq FROM {jobs} WHERE id = %s",
        cancel_keyed=(
            f"UPDATE {jobs} SET status = 'cancelled', worker_id = NULL, run_at = %(now)s, updated_at = %(now)s "
            "WHERE space_id = %(space)s AND `key` = %(key)s AND status = 'pending'"
        ),
        cancel_keyed_before=(
            f"UPDATE {jobs} SET status = 'cancelled', worker_id = NULL, run_at = %(now)s, updated_at = %(now)s "
            "WHERE space_id = %(space)s AND `key` = %(key)s AND status = 'pending' AND seq < %(before)s"
        ),
        # Bounded, and through `job_due`: every change that finishes a job sets its run_at to the instant it
        # finished, whatever it was due at (a job cancelled while it waited for next year is finished now). The
        # rows are picked by a plain read (no locks) and deleted by key: a range DELETE would lock the index entry
        # past the finished ranges, the oldest pending job, and deadlock with the claimers taking it.
        finished_before=(
            f"SELECT seq FROM {jobs} WHERE status IN {TERMINAL} AND run_at < %s AND updated_at < %s LIMIT %s"
        ),
        purge_finished=f"DELETE FROM {jobs} WHERE seq IN %s AND status IN {TERMINAL} AND updated_at < %s",
        # -- schedules --------------------------------------------------------------------------------------
        due_schedules=(
            f"SELECT {SCHEDULE_COLUMNS} FROM {schedules} WHERE enabled = 1 AND next_run_at <= %s "
            "ORDER BY next_run_at, space_id, action_id LIMIT %s"
        ),
        advance_schedule=(
            f"UPDATE {schedules} SET next_run_at = %s, last_fire_at = %s, missed = missed + %s, updated_at = %s "
            "WHERE space_id = %s AND action_id = %s AND next_run_at = %s"
        ),
        # A schedule row with an empty action id, one per space, that `put_schedules` locks first: writers of one
        # space then replace its set one after another, on one server and across Galera nodes (a row both write
        # conflicts). It is never enabled, so never due, and never listed.
        lock_space_schedules=(
            f"INSERT INTO {schedules} (space_id, action_id, cron, timezone, environment, enabled, next_run_at, "
            "max_attempts, missed, updated_at) VALUES (%(space)s, '', '', NULL, '', 0, 0, 1, 0, %(now)s) "
            "ON DUPLICATE KEY UPDATE updated_at = %(now)s"
        ),
        delete_space_schedules=f"DELETE FROM {schedules} WHERE space_id = %s AND action_id <> ''",
        delete_space_schedules_except=(
            f"DELETE FROM {schedules} WHERE space_id = %s AND action_id <> '' AND action_id NOT IN %s"
        ),
        upsert_schedule_values="(%s, %s, %s, %s, %s, %s, %s, %s, 0, %s)",
        # A multi-row upsert names the incoming row: `VALUES(col)` on MariaDB, which has nothing else; the row
        # alias (`AS new`, `new.col`) where the server takes it (MySQL 8.0.19+, which deprecates VALUES(col) with
        # a warning per call). Chosen by the flavour (Flavour.row_alias).
        upsert_schedules=_upsert_schedules(schedules, lambda col: f"VALUES({col})", ""),
        upsert_schedules_aliased=_upsert_schedules(schedules, lambda col: f"new.{col}", " AS new"),
        list_schedules=(
            f"SELECT {SCHEDULE_COLUMNS} FROM {schedules} WHERE {{where}} AND action_id <> '' "
            "ORDER BY space_id, action_id{page}"
        ),
        # -- kv ---------------------------------------------------------------------------------------------
        kv_get=f"SELECT v FROM {kv} WHERE k = %s AND {live}",
        # A key's row is wholly replaced, so REPLACE sends the value once (an upsert would repeat the parameter,
        # sending it twice, or use VALUES(col), which MySQL 8.0.20+ deprecates with a warning per call).
        kv_set=f"REPLACE INTO {kv} (k, v, expires_at) VALUES (%s, %s, {NOW_MS} + %s)",
        kv_delete=f"DELETE FROM {kv} WHERE k = %s",
        # A missing or lapsed key counts from 0 and loses its lifetime; a live one keeps it. A live value that is
        # not a counter, or a sum outside the signed 64-bit range, is left as it was and reported as 0. A counter
        # is '-'? and 1 to 19 digits, whole: `$` matches before a final line break too (PCRE and ICU alike, and
        # ICU before \r, U+2028 and others as well), so a second test refuses any other character in the value.
        # Neither needs a backslash, which sql_mode NO_BACKSLASH_ESCAPES would read differently.
        kv_increment=(
            f"INSERT INTO {kv} (k, v, expires_at) VALUES (%(k)s, "
            + counted.format(n="CAST(%(amount)s AS DECIMAL(21, 0))")
            + ", NULL) ON DUPLICATE KEY UPDATE "
            f"v = IF({lapsed}, "
            + counted.format(n="CAST(%(amount)s AS DECIMAL(21, 0))")
            + ", IF(v REGEXP '^-?[0-9]{1,19}$' AND v NOT REGEXP '[^-0-9]' "
            f"AND {current} BETWEEN {int64} AND {current} + %(amount)s BETWEEN {int64}, "
            + counted.format(n=f"({current} + %(amount)s)")
            + ", IF(LAST_INSERT_ID(0) = 0, v, v))), "
            f"expires_at = IF({lapsed}, NULL, expires_at)"
        ),
        kv_expire=f"UPDATE {kv} SET expires_at = {NOW_MS} + %s WHERE k = %s AND {live}",
        kv_insert=f"INSERT INTO {kv} (k, v, expires_at) VALUES (%s, %s, {NOW_MS} + %s)",
        kv_delete_lapsed_key=f"DELETE FROM {kv} WHERE k = %s AND {lapsed}",
        kv_replace=(f"UPDATE {kv} SET v = %s, expires_at = {NOW_MS} + %s WHERE k = %s AND {same_value} AND {live}"),
        kv_is_live_value=f"SELECT 1 FROM {kv} WHERE k = %s AND {same_value} AND {live}",
        kv_purge_lapsed=f"DELETE FROM {kv} WHERE expires_at <= {NOW_MS} LIMIT %s",
        # Many `swap(k, None, v)` in one statement, all or nothing: a key that exists fails it with 1062 and the
        # caller asks key by key. Not an upsert leaving existing keys alone: its affected rows cannot tell a key
        # this statement wrote from one that already held the same value, which swap() answers False for.
        kv_insert_absent_values=f"(%s, %s, {NOW_MS} + %s)",
        kv_insert_absent=f"INSERT INTO {kv} (k, v, expires_at) VALUES {{values}}",
        kv_holders=f"SELECT k, v FROM {kv} WHERE k IN %s AND {live}",
        # Deletes each key only while it still holds the value given with it (an OR of primary-key lookups).
        # The values here are a worker's short tokens, sent whole and compared as bytes (PAD SPACE would not do).
        kv_delete_unchanged_one="(k = %s AND CAST(v AS BINARY) = CAST(%s AS BINARY))",
        kv_delete_unchanged=f"DELETE FROM {kv} WHERE ",
    )
    return replace(
        base,
        claim_pending_nowait=nowait_guarded(base.claim_pending, jobs, "seq", "= %(seq)s"),
        claim_lapsed_nowait=nowait_guarded(base.claim_lapsed, jobs, "seq", "= %(seq)s"),
        renew_leases_nowait=nowait_guarded(base.renew_leases, jobs, "id", "IN %s"),
    )
