"""The schema's lifecycle: the version record, first use refusing tables it does not know, and upgrades.

Every path (`migrate`, sql/upgrades.sql through the `mariadb` client, the Alembic revision, the migration helpers)
turns the TypeScript original's tables, with rows exactly as the original writes them, into tables identical
(information_schema) to a fresh install, carrying every row over; a run that dies half-way resumes; two `migrate`
processes at once take turns; the contract suites pass on the upgraded tables.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import (
    AttemptOutcome,
    JobQueue,
    KvStore,
    ScheduleInput,
    SchemaMismatchError,
    create_mysql_job_queue,
    create_mysql_kv,
)
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.migrations import (
    ALEMBIC_SCRIPT_LOCATION,
    create_job_tables,
    include_object,
    include_object_for,
)
from plitzi_jobs_mysql.mysql.schema.migrate import run_migration
from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements, mysql_job_schema_upgrades
from plitzi_jobs_mysql.mysql.schema.tables import SCHEMA_VERSION, jobs_v1, kv_v1, marker, schedules_v1
from plitzi_jobs_mysql.mysql.schema.upgrades import STEPS
from plitzi_jobs_mysql.testing import JobQueueContract, KvContract, fresh_database
from plitzi_jobs_mysql.testing.support import Advance
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import empty_tables, mariadb_client, numbers, open_pool, sql, sql_session
from ..harness import ts_original
from ..support import Clock, job
from .test_alembic import alembic, ok, schema_snapshot

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("action_jobs", "action_schedules", "action_kv")
KEPT = {"action_jobs": "action_jobs_old", "action_schedules": "action_sched_old", "action_kv": "action_kv_old"}
HISTORY_KEYS = {"startedAt": "started_at", "endedAt": "ended_at", "workerId": "worker_id", "runId": "run_id"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PLITZI_MYSQL_URL"}
    return subprocess.run([sys.executable, "-m", "plitzi_jobs_mysql", *args], capture_output=True, text=True,
                          env=env, timeout=120)  # fmt: skip


def server_now(url: str) -> int:
    return int(sql(url, "SELECT CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)")[0][0])


def populate(url: str, prefix: str = "") -> int:
    """The original's tables with jobs in every state, schedules and kv keys, written as it writes them."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    with conn.cursor() as cur:
        ts_original.create_tables(cur, prefix)
    conn.close()
    t = server_now(url)
    ts = ts_original.Original(url, prefix)
    try:
        ts.enqueue(t - 20_000, "pending-due", input={"user": 42, "name": "Zoë"}, due_at=t - 5_000)
        ts.enqueue(t - 19_000, "pending-later", due_at=t + 3_600_000)
        ts.enqueue(t - 18_000, "Job-1")
        with pytest.raises(pymysql.err.IntegrityError):  # its key is case- and pad-insensitive
            ts.enqueue(t - 18_000, "job-1 ")
        ts.enqueue(t - 17_000, "trail ", due_at=t + 3_600_000)
        ts.enqueue(t - 16_000, "ünïcode-✓", due_at=t + 3_600_000)
        ts.enqueue(t - 15_000, "schedule:1:nightly:123", trigger="schedule", missed=2, due_at=t + 3_600_000)
        # Running: a live lease, and a lapsed one that already lost a worker once.
        ts.enqueue(t - 14_000, "running-live", due_at=t - 14_000)
        ts.claim(t - 1_000, "running-live", "ts-worker-a", 600_000)
        ts.enqueue(t - 100_000, "running-lapsed", due_at=t - 100_000)
        ts.claim(t - 95_000, "running-lapsed", "ts-worker-z", 1_000)
        ts.claim(t - 90_000, "running-lapsed", "ts-worker-b", 30_000)
        ts.enqueue(t - 13_000, "cancel-requested", due_at=t - 13_000)
        ts.claim(t - 12_000, "cancel-requested", "ts-worker-a", 600_000)
        ts.cancel(t - 11_000, "cancel-requested")
        # Finished: succeeded with a run id; dead after a retry; cancelled while pending; handed back.
        ts.enqueue(t - 60_000, "succeeded", due_at=t - 60_000)
        ts.claim(t - 59_000, "succeeded", "w1", 30_000)
        ts.settle(t - 58_000, "succeeded", "w1", "succeeded", run_id="run-1",
                  attempt={"status": "succeeded", "workerId": "w1", "runId": "run-1"})  # fmt: skip
        ts.enqueue(t - 50_000, "dead", due_at=t - 50_000, max_attempts=2)
        ts.claim(t - 49_000, "dead", "w1", 30_000)
        ts.settle(t - 48_000, "dead", "w1", "pending", error="boom 1", delay_ms=1_000,
                  attempt={"status": "failed", "workerId": "w1", "error": "boom 1"})  # fmt: skip
        ts.claim(t - 46_000, "dead", "w2", 30_000)
        error = 'step "fetch": {"startedAt":1} said \\ no'
        ts.settle(t - 45_000, "dead", "w2", "dead", error=error,
                  attempt={"status": "failed", "workerId": "w2", "error": error})  # fmt: skip
        ts.enqueue(t - 40_000, "cancelled", due_at=t + 3_600_000)
        ts.cancel(t - 39_000, "cancelled")
        ts.enqueue(t - 30_000, "handed-back", due_at=t - 30_000)
        ts.claim(t - 29_000, "handed-back", "w1", 30_000)
        ts.settle(t - 28_000, "handed-back", "w1", "pending", delay_ms=500_000)
        # Schedules: a promised fire kept across an advance, a zone-less one, a disabled one.
        ts.put_schedule(t - 9_000, 1, "nightly", "0 3 * * *", "Europe/Berlin", True, t + 1_000)
        ts.advance_schedule(t - 8_000, 1, "nightly", t + 1_000, t + 86_400_000, 2)
        ts.put_schedule(t - 7_000, 1, "hourly", "0 * * * *", None, True, t + 3_600_000)
        ts.put_schedule(t - 7_000, 2, "off", "*/5 * * * *", None, False, t + 300_000)
        # kv: byte-exact keys, lifetimes, a lapsed key, a counter.
        ts.kv_set("plain", "v1")
        ts.kv_set("ttl", "lives", 3600)
        ts.kv_set("lapsed", "gone", 0.001)
        for key in ("Board", "board", "board "):
            ts.kv_set(key, f"value of {key!r}")
        for _ in range(3):
            ts.kv_increment("counter", 1)
    finally:
        ts.close()
    return t


def rows(url: str, table: str, order: str) -> list[dict[str, Any]]:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), cursorclass=pymysql.cursors.DictCursor)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM `{table}` ORDER BY {order}")
            return list(cur.fetchall())
    finally:
        conn.close()


def text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def assert_carried_over(url: str, prefix: str = "") -> None:
    """Every row of the kept originals is in the new tables, field for field; unfinished jobs keep their enqueue
    order in `seq`."""
    old_jobs = {j["id"].encode(): j for j in rows(url, prefix + KEPT["action_jobs"], "created_at, id")}
    new_jobs = rows(url, prefix + "action_jobs", "seq")
    assert sorted(j["id"] for j in new_jobs) == sorted(old_jobs)
    unfinished = [j["id"] for j in new_jobs if j["status"] in ("pending", "running")]
    assert unfinished == [i for i, j in old_jobs.items() if j["status"] in ("pending", "running")]
    for new in new_jobs:
        old = old_jobs[new["id"]]
        same = ("space_id", "action_id", "environment", "input", "due_at", "max_attempts", "missed", "status",
                "attempts", "created_at", "updated_at", "lease_until", "worker_id", "run_id", "cancel_requested",
                "error")  # fmt: skip
        assert {k: text(new[k]) for k in same} == {k: old[k] for k in same}, old["id"]
        finished = old["status"] in ("succeeded", "failed", "dead", "cancelled")
        assert new["run_at"] == (old["updated_at"] if finished else old["run_at"])
        assert text(new["trigger"]) == old["trigger_type"] and new["key"] is None
        assert new["claimed_at"] == (old["updated_at"] if old["status"] == "running" else None)
        history = [{HISTORY_KEYS.get(k, k): v for k, v in entry.items()} for entry in json.loads(old["history"])]
        assert json.loads(new["history"]) == history
    old_schedules = rows(url, prefix + KEPT["action_schedules"], "space_id, action_id")
    new_schedules = rows(url, prefix + "action_schedules", "space_id, action_id")
    assert [{k: text(v) for k, v in s.items()} for s in new_schedules] == old_schedules
    old_kv = rows(url, prefix + KEPT["action_kv"], "k")
    assert rows(url, prefix + "action_kv", "k") == old_kv and len(old_kv) == 7


@pytest.fixture(scope="module")
def fresh_snapshot(mysql_url: str) -> Iterator[dict[str, Any]]:
    """information_schema's view of a fresh install: what every upgrade path must end with."""
    with fresh_database(mysql_url, "pjm_fresh") as url:
        sql_session(url, mysql_job_schema_statements())
        yield schema_snapshot(url)


def assert_fresh(url: str, fresh: dict[str, Any], prefix: str = "") -> None:
    assert schema_snapshot(url, prefix) == fresh


# -- the version record, and first use ------------------------------------------------------------------------


async def test_every_table_carries_its_version_record(database_url: str) -> None:
    pool = await open_pool(database_url)
    try:
        await create_mysql_job_queue(pool).now()
    finally:
        pool.close()
        await pool.wait_closed()
    comments = sql(database_url, "SELECT TABLE_NAME, TABLE_COMMENT FROM information_schema.TABLES "
                                 "WHERE TABLE_SCHEMA = DATABASE() ORDER BY TABLE_NAME")  # fmt: skip
    assert comments == [(t, marker(SCHEMA_VERSION)) for t in sorted(TABLES)]


async def test_first_use_refuses_the_originals_tables_before_any_write(database_url: str) -> None:
    populate(database_url)
    before = sql(database_url, "CHECKSUM TABLE action_jobs, action_schedules, action_kv")
    pool = await open_pool(database_url)
    try:
        for create_tables in (True, False):
            queue = create_mysql_job_queue(pool, create_tables=create_tables)
            with pytest.raises(SchemaMismatchError) as refused:
                await queue.enqueue(job("new", due_at=0))
            message = str(refused.value)
            assert "`action_jobs` is the TypeScript original's table" in message
            assert "`action_kv` is the TypeScript original's table" in message
            assert "plitzi-jobs-mysql migrate" in message
            with pytest.raises(SchemaMismatchError):
                await create_mysql_kv(pool, create_tables=create_tables).set("k", "v")
    finally:
        pool.close()
        await pool.wait_closed()
    assert sql(database_url, "CHECKSUM TABLE action_jobs, action_schedules, action_kv") == before


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (f"ALTER TABLE action_schedules COMMENT = '{marker(SCHEMA_VERSION + 1)}'", "made by a newer release"),
        ("ALTER TABLE action_jobs COMMENT = 'plitzi_jobs_mysql schema 0'", "older than this release"),
        ("ALTER TABLE action_jobs DROP COLUMN claimed_at", "without column(s) claimed_at"),
        ("DROP TABLE action_kv", "not a table this package made"),
    ],
)
async def test_first_use_refuses_tables_it_does_not_know(database_url: str, change: str, expected: str) -> None:
    sql_session(database_url, mysql_job_schema_statements())
    sql(database_url, change)
    if change.startswith("DROP TABLE"):  # somebody else's table by that name
        sql(database_url, "CREATE TABLE action_kv (k VARCHAR(10) PRIMARY KEY, payload TEXT)")
    pool = await open_pool(database_url)
    try:
        with pytest.raises(SchemaMismatchError, match=re.escape(expected)):
            await create_mysql_job_queue(pool).enqueue(job("new", due_at=0))
    finally:
        pool.close()
        await pool.wait_closed()
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs") == [(0,)]
    assert expected in cli("migrate", "--url", database_url).stderr  # and migrate changes nothing either


async def test_tables_without_a_record_are_used_and_migrate_records_it(
    database_url: str, fresh_snapshot: dict[str, Any]
) -> None:
    """Tables this package made before they carried a version record."""
    sql_session(database_url, [*mysql_job_schema_statements(), *(f"ALTER TABLE {t} COMMENT = ''" for t in TABLES)])
    pool = await open_pool(database_url)
    try:
        assert await create_mysql_job_queue(pool).enqueue(job("j", due_at=0)) is True
    finally:
        pool.close()
        await pool.wait_closed()
    result = ok(cli("migrate", "--url", database_url))
    assert result.stderr.count("its schema version recorded") == 3
    assert_fresh(database_url, fresh_snapshot)


# -- upgrading the TypeScript original's tables ---------------------------------------------------------------


def test_dry_run_prints_the_plan_and_changes_nothing(database_url: str) -> None:
    populate(database_url)
    before = sql(database_url, "CHECKSUM TABLE action_jobs, action_schedules, action_kv")
    result = ok(cli("migrate", "--url", database_url, "--dry-run"))
    assert "`action_jobs`: the TypeScript original's table" in result.stdout
    assert f"its 13 row(s) will be copied into a new schema-{SCHEMA_VERSION} table" in result.stdout
    assert "kept as `action_kv_old`" in result.stdout and "dry run: nothing changed" in result.stdout
    assert sql(database_url, "CHECKSUM TABLE action_jobs, action_schedules, action_kv") == before
    assert len(sql(database_url, "SHOW TABLES")) == 3
    # The operator commands refuse those tables too, in one line that names the fix.
    listing = cli("jobs", "list", "--url", database_url, "--space", "1")
    assert listing.returncode == 2 and len(listing.stderr.strip().splitlines()) == 1
    assert "TypeScript original" in listing.stderr and "plitzi-jobs-mysql migrate" in listing.stderr


def test_migrate_says_which_finished_jobs_retention_will_remove(database_url: str) -> None:
    """Finished jobs the conversion brings over that finished past the default retention: the first claim would
    start removing them, so migrate says so, and how to keep them (issue 23.3)."""
    conn = pymysql.connect(**parse_mysql_url(database_url).pymysql_kwargs(), autocommit=True)
    with conn.cursor() as cur:
        ts_original.create_tables(cur)
    conn.close()
    t, day = server_now(database_url), 86_400_000
    ts = ts_original.Original(database_url)
    try:
        for id_, finished in (("old-1", t - 120 * day), ("old-2", t - 91 * day), ("recent", t - 89 * day)):
            ts.enqueue(finished - 2_000, id_, due_at=finished - 2_000)
            ts.claim(finished - 1_000, id_, "w1", 30_000)
            ts.settle(finished, id_, "w1", "succeeded", attempt={"status": "succeeded", "workerId": "w1"})
        ts.enqueue(t - 120 * day, "pending-old", due_at=t + 3_600_000)  # not finished: never purged
    finally:
        ts.close()
    dry = ok(cli("migrate", "--url", database_url, "--dry-run"))
    assert "note: 2 finished job(s) it would bring over finished more than 90 days ago" in dry.stdout, dry.stdout
    result = ok(cli("migrate", "--url", database_url))
    (notice,) = [line for line in result.stderr.splitlines() if "note:" in line]
    oldest = datetime.fromtimestamp((t - 120 * day) // 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert "2 finished job(s) brought over finished more than 90 days ago" in notice
    assert f"(the oldest finished {oldest}" in notice and "retention_days=3650" in notice
    assert "note:" not in ok(cli("migrate", "--url", database_url)).stderr  # nothing converted the second time


async def test_migrate_turns_the_originals_tables_into_this_schema_without_losing_a_row(
    database_url: str, fresh_snapshot: dict[str, Any]
) -> None:
    t = populate(database_url)
    result = ok(cli("migrate", "--url", database_url))
    assert "converted from the TypeScript original's layout: 13 row(s) copied" in result.stderr
    assert_fresh(database_url, fresh_snapshot)
    assert_carried_over(database_url)
    assert "already there" in ok(cli("migrate", "--url", database_url)).stderr  # again: nothing to do

    pool = await open_pool(database_url)
    try:
        queue, kv = create_mysql_job_queue(pool, create_tables=False), create_mysql_kv(pool, create_tables=False)
        # Ids are exact now: the original's one `Job-1` stays, and `job-1 ` is another job.
        assert await queue.enqueue(job("Job-1", due_at=0)) is False
        assert await queue.enqueue(job("job-1 ", due_at=t + 3_600_000)) is True
        assert (await queue.get_job([1], "trail ")) is not None and await queue.get_job([1], "trail") is None
        assert (await queue.get_job([1], "ünïcode-✓")) is not None
        fired = await queue.get_job([1], "schedule:1:nightly:123")
        assert fired is not None and fired.missed == 2 and fired.trigger == "schedule"
        # Pending jobs stay claimable, oldest first, with their id, input, due time and attempts; a live lease is
        # left to its holder; a lapsed one is taken over with a `lost` attempt naming the original's worker.
        claimed = {j.id: j for j in await queue.claim(worker_id="py", lease_ms=60_000, limit=10)}
        assert set(claimed) == {"running-lapsed", "pending-due", "Job-1"}
        due = claimed["pending-due"]
        assert (due.input, due.due_at, due.attempts) == ({"user": 42, "name": "Zoë"}, t - 5_000, 1)
        lapsed = claimed["running-lapsed"]
        assert [(a.status, a.worker_id, a.started_at) for a in lapsed.history] == [
            ("lost", "ts-worker-z", t - 95_000),
            ("lost", "ts-worker-b", t - 90_000),
        ]
        live = await queue.get_job([1], "running-live")
        assert live is not None and (live.status, live.worker_id, live.lease_until) == (
            "running", "ts-worker-a", t - 1_000 + 600_000)  # fmt: skip
        assert await queue.heartbeat(job_ids=["cancel-requested"], worker_id="ts-worker-a", lease_ms=1_000) == [
            "cancel-requested"
        ]
        await queue.settle(job_id="pending-due", worker_id="py", status="succeeded",
                           attempt=AttemptOutcome(status="succeeded", worker_id="py", run_id="r"))  # fmt: skip
        settled = await queue.get_job([1], "pending-due")
        assert settled is not None and [(a.attempt, a.status) for a in settled.history] == [(1, "succeeded")]
        # Finished jobs keep their history, run id and error.
        dead = await queue.get_job([1], "dead")
        assert dead is not None and dead.status == "dead" and dead.error == 'step "fetch": {"startedAt":1} said \\ no'
        assert [(a.attempt, a.status, a.worker_id, a.error) for a in dead.history] == [
            (1, "failed", "w1", "boom 1"),
            (2, "failed", "w2", dead.error),
        ]
        ok_job = await queue.get_job([1], "succeeded")
        assert ok_job is not None and ok_job.run_id == "run-1" and ok_job.history[0].run_id == "run-1"
        assert ok_job.history[0].started_at == t - 59_000 and ok_job.history[0].ended_at == t - 58_000
        assert await queue.requeue([1], "cancelled") is True
        # Schedules keep their promised fire, also when saved again unchanged.
        nightly = {s.action_id: s for s in await queue.list_schedules([1, 2])}
        assert nightly["nightly"].next_run_at == t + 86_400_000 and nightly["nightly"].missed == 2
        assert nightly["nightly"].last_fire_at == t + 1_000 and nightly["off"].enabled is False
        await queue.put_schedules(space_id=1, schedules=[
            ScheduleInput(space_id=1, action_id="nightly", cron="0 3 * * *", timezone="Europe/Berlin",
                          environment="main", enabled=True, next_run_at=t + 5, max_attempts=3),
        ])  # fmt: skip
        assert [s.next_run_at for s in await queue.list_schedules([1])] == [t + 86_400_000]
        # kv values keep their lifetimes; keys stay byte-exact.
        assert await kv.get("plain") == "v1" and await kv.get("ttl") == "lives" and await kv.get("lapsed") is None
        assert [await kv.get(k) for k in ("Board", "board", "board ")] == [
            "value of 'Board'", "value of 'board'", "value of 'board '"]  # fmt: skip
        assert await kv.increment("counter") == 4
        assert sql(database_url, "SELECT expires_at FROM action_kv WHERE k = 'ttl'") == sql(
            database_url, "SELECT expires_at FROM action_kv_old WHERE k = 'ttl'"
        )
    finally:
        pool.close()
        await pool.wait_closed()


class RecordingSession:
    """Alembic's `op` for the helpers: statements in order on one connection."""

    def __init__(self, url: str) -> None:
        self.conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)

    def execute(self, sqltext: Any, /) -> None:
        with self.conn.cursor() as cur:
            cur.execute(sqltext)


def upgrade_by(path: str, url: str, prefix: str) -> None:
    if path == "sql-files":
        assert prefix == ""
        command, env = mariadb_client(url)
        for name in ("schema.sql", "upgrades.sql"):
            script = (ROOT / "sql" / name).read_text(encoding="utf-8")
            done = subprocess.run(command, input=script, capture_output=True, text=True, env=env, timeout=120)
            assert done.returncode == 0, done.stderr
    elif path == "alembic":
        ok(alembic(url, "upgrade", "head", prefix=prefix))
    else:
        op = RecordingSession(url)
        create_job_tables(op, prefix=prefix)
        op.conn.close()


@pytest.mark.parametrize(("path", "prefix"), [("sql-files", ""), ("alembic", "app_"), ("helpers", "")])
def test_every_upgrade_path_ends_like_a_fresh_install(
    database_url: str, fresh_snapshot: dict[str, Any], path: str, prefix: str
) -> None:
    populate(database_url, prefix)
    upgrade_by(path, database_url, prefix)
    assert_fresh(database_url, fresh_snapshot, prefix)
    assert_carried_over(database_url, prefix)
    upgrade_by(path, database_url, prefix)  # a second run changes nothing
    assert_fresh(database_url, fresh_snapshot, prefix)
    assert_carried_over(database_url, prefix)


def test_a_run_that_died_half_way_resumes(mysql_url: str, fresh_snapshot: dict[str, Any]) -> None:
    """Cut at each kind of state a crash can leave (every statement is atomic), then let `migrate` finish."""
    statements = mysql_job_schema_statements() + mysql_job_schema_upgrades()
    executes = [i + 1 for i, s in enumerate(statements) if s == "EXECUTE pjm_step"]
    # Per table: its stamp (a no-op on the original's tables; the jobs table has two, its first layout and its
    # current one), then drop, create, fingerprint, copy (finished jobs, then the others), fingerprint, swap. Cut
    # with the jobs copy created empty, half and fully filled; with jobs swapped in and the others not; with two
    # swapped; with the last one copied but not swapped.
    later = sum(s == "EXECUTE pjm_step" for step in STEPS[1:] for s in step.statements(""))
    assert len(executes) == 23 + later
    cuts = [executes[3], executes[5], executes[6], executes[8], executes[15], executes[20]]
    for cut in cuts:
        with fresh_database(mysql_url, "pjm_cut") as url:
            populate(url)
            sql_session(url, statements[:cut])  # the connection closes: the lock and the variables are gone
            conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
            try:
                run_migration(conn, "")
            finally:
                conn.close()
            assert_fresh(url, fresh_snapshot)
            assert_carried_over(url)


def test_writes_during_the_copy_keep_the_original_in_place(database_url: str) -> None:
    """A table still written to while it is copied is not swapped out: migrate says so, and nothing is lost."""
    populate(database_url)
    statements = mysql_job_schema_upgrades()
    copy = next(i for i, s in enumerate(statements) if "INSERT INTO `action_jobs_new`" in s)
    conn = pymysql.connect(**parse_mysql_url(database_url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in statements[: copy + 3]:  # up to the copy's EXECUTE
                cur.execute(statement)
            ts = ts_original.Original(database_url)
            ts.enqueue(server_now(database_url), "late")  # the TypeScript service is still running
            ts.close()
            for statement in statements[copy + 3 :]:
                cur.execute(statement)
    finally:
        conn.close()
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE id = 'late'") == [(1,)]
    assert "trigger_type" in {str(r[0]) for r in sql(database_url, "SHOW COLUMNS FROM action_jobs")}
    result = cli("migrate", "--url", database_url)  # the service stopped now: it goes through
    assert result.returncode == 0, result.stderr
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE id = 'late'") == [(1,)]


def test_two_migrate_processes_at_once_take_turns(database_url: str, fresh_snapshot: dict[str, Any]) -> None:
    populate(database_url)
    # Enough rows that the copies would overlap without the lock.
    sql(database_url, "CREATE TABLE digits (d INT)")
    sql(database_url, "INSERT INTO digits VALUES (0),(1),(2),(3),(4),(5),(6),(7),(8),(9)")
    sql(database_url,
        "INSERT INTO action_jobs (id, space_id, action_id, environment, trigger_type, input, due_at, max_attempts, "
        "status, run_at, attempts, created_at, updated_at, history, expires_at) "
        "SELECT CONCAT('bulk-', a.d, b.d, c.d, e.d), 1, 'act', 'main', 'manual', '{}', 1, 3, 'succeeded', 1, "
        "1, 1, 2, '[]', 3 FROM digits a, digits b, digits c, digits e")  # fmt: skip
    sql(database_url, "DROP TABLE digits")
    env = {k: v for k, v in os.environ.items() if k != "PLITZI_MYSQL_URL"}
    command = [sys.executable, "-m", "plitzi_jobs_mysql", "migrate", "--url", database_url]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(2)]  # fmt: skip
    outputs = [run.communicate(timeout=300) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    converted = [err.count("converted from the TypeScript original") for _, err in outputs]
    assert sorted(converted) == [0, 3], outputs  # one did the work, the other found nothing left to do
    assert_fresh(database_url, fresh_snapshot)
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs") == [(10_013,)]
    assert_carried_over(database_url)


# -- Alembic ------------------------------------------------------------------------------------------------


def test_alembic_runs_from_the_installed_package(database_url: str, tmp_path: Path) -> None:
    """A user's own alembic.ini, outside this repository, reaches the revisions inside the package."""
    assert ALEMBIC_SCRIPT_LOCATION == "plitzi_jobs_mysql:alembic"  # what docs/migrations.md tells users to write
    (tmp_path / "alembic.ini").write_text(f"[alembic]\nscript_location = {ALEMBIC_SCRIPT_LOCATION}\n")
    env = {k: v for k, v in os.environ.items() if k != "PLITZI_MYSQL_URL"}
    command = [sys.executable, "-m", "alembic", "-c", str(tmp_path / "alembic.ini"), "-x", f"url={database_url}"]
    done = subprocess.run([*command, "upgrade", "head"], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {str(r[0]) for r in sql(database_url, "SHOW TABLES")} == {*TABLES, "plitzi_jobs_alembic_version"}


def test_autogenerate_with_include_object_leaves_the_job_tables_alone(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import Column, Integer, MetaData, Table, create_engine

    ok(alembic(database_url, "upgrade", "head"))
    ok(alembic(database_url, "upgrade", "head", prefix="p_"))
    sql(database_url, "CREATE TABLE action_jobs_old (id INT PRIMARY KEY)")  # a kept original
    users_metadata = MetaData()
    Table("users", users_metadata, Column("id", Integer, primary_key=True))
    engine = create_engine(parse_mysql_url(database_url).sqlalchemy_url())
    try:
        with engine.connect() as connection:

            def diff(**options: Any) -> set[tuple[str, str]]:
                context = MigrationContext.configure(connection, opts=options)
                return {(change[0], change[1].name) for change in compare_metadata(context, users_metadata)}

            assert diff() >= {("remove_table", "action_jobs"), ("add_table", "users")}  # what it would do
            assert diff(include_object=include_object) >= {("remove_table", "p_action_jobs")}
            assert diff(include_object=include_object_for("", "p_")) == {("add_table", "users")}
    finally:
        engine.dispose()


# -- upgrading schema-1 tables (this package's first release) in place -----------------------------------------


def populate_schema_1(url: str, prefix: str = "") -> int:
    """Tables as this package's first release made them, holding jobs in every status, a schedule and a key."""
    t = server_now(url)
    jobs = f"{prefix}action_jobs"
    sql_session(url, [jobs_v1(jobs), schedules_v1(f"{prefix}action_schedules"), kv_v1(f"{prefix}action_kv")])
    statuses = "ELT(1 + seq % 6, 'pending', 'pending', 'running', 'succeeded', 'dead', 'cancelled')"
    sql(
        url,
        f"INSERT INTO `{jobs}` (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
        "missed, `key`, status, run_at, attempts, created_at, updated_at, claimed_at, lease_until, worker_id, "
        "history) "
        f"SELECT CONCAT('v1-', seq), 1 + seq % 3, CONCAT('a', seq % 4), 'main', 'api', '{{\"n\": 1}}', "
        f"{t} - 3000000 + seq * 7 % 1000, 3, NULL, IF(seq % 5 = 0, 'k', NULL), {statuses}, "
        f"{t} - 3000000 + seq * 7 % 1000, IF({statuses} = 'pending', 0, 1), {t} - 3600000, {t} - 3600000 + seq, "
        f"IF({statuses} = 'running', {t} - 1000, NULL), IF({statuses} = 'running', {t} + 600000, NULL), "
        f"IF({statuses} = 'running', 'w-old', NULL), '[]' FROM " + numbers(3_000),
    )
    sql(url, f"INSERT INTO `{prefix}action_schedules` VALUES (1, 'nightly', '0 3 * * *', 'UTC', 'main', 1, "
             f"{t} + 60000, 3, 0, {t}, NULL)")  # fmt: skip
    sql(url, f"INSERT INTO `{prefix}action_kv` VALUES ('kept', 'value', NULL)")
    return t


def upgrade_schema_1(path: str, url: str, prefix: str) -> None:
    if path == "migrate":
        ok(cli("migrate", "--url", url, *(("--prefix", prefix) if prefix else ())))
    elif path == "sql-files":
        command, env = mariadb_client(url)
        script = (ROOT / "sql" / "upgrades.sql").read_text(encoding="utf-8")
        done = subprocess.run(command, input=script, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
    else:  # an Alembic history at the first revision, made by the first release
        ok(alembic(url, "stamp", "0001", prefix=prefix))
        ok(alembic(url, "upgrade", "head", prefix=prefix))


V1_JOB_COLUMNS = "seq, id, space_id, action_id, status, run_at, attempts, updated_at, lease_until, worker_id, `key`"


@pytest.mark.parametrize(("path", "prefix"), [("migrate", ""), ("sql-files", ""), ("alembic", "app_")])
async def test_schema_1_tables_are_upgraded_in_place_keeping_every_row(
    database_url: str, fresh_snapshot: dict[str, Any], path: str, prefix: str
) -> None:
    t = populate_schema_1(database_url, prefix)
    jobs = f"{prefix}action_jobs"
    before = sql(database_url, f"SELECT {V1_JOB_COLUMNS} FROM `{jobs}` ORDER BY seq")
    others = [sql(database_url, f"SELECT * FROM `{prefix}{name}`") for name in ("action_schedules", "action_kv")]
    pool = await open_pool(database_url)
    try:
        with pytest.raises(SchemaMismatchError, match="older than this release"):
            await create_mysql_job_queue(pool, table_prefix=prefix).now()
    finally:
        pool.close()
        await pool.wait_closed()
    upgrade_schema_1(path, database_url, prefix)
    assert_fresh(database_url, fresh_snapshot, prefix)
    assert sql(database_url, f"SELECT {V1_JOB_COLUMNS} FROM `{jobs}` ORDER BY seq") == before
    assert [sql(database_url, f"SELECT * FROM `{prefix}{name}`") for name in ("action_schedules", "action_kv")] == (
        others
    )
    assert sql(database_url, f"SELECT DISTINCT priority FROM `{jobs}`") == [(0,)]
    upgrade_schema_1("migrate", database_url, prefix)  # a second run changes nothing
    assert sql(database_url, f"SELECT {V1_JOB_COLUMNS} FROM `{jobs}` ORDER BY seq") == before
    # The upgraded table claims as a fresh one does: an urgent job first, then the old jobs oldest first.
    pool = await open_pool(database_url)
    try:
        queue = create_mysql_job_queue(pool, table_prefix=prefix)
        oldest = sql(database_url, f"SELECT id FROM `{jobs}` WHERE status = 'pending' ORDER BY run_at, seq LIMIT 3")
        assert await queue.enqueue(job("urgent", due_at=t, priority=-5))
        taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=4)
        assert [j.id for j in taken] == ["urgent"] + [text(row[0]) for row in oldest]
    finally:
        pool.close()
        await pool.wait_closed()


# -- the contract suites on upgraded tables -----------------------------------------------------------------


@pytest.fixture(scope="module")
def upgraded_db(mysql_url: str) -> Iterator[str]:
    with fresh_database(mysql_url, "pjm_upgraded") as url:
        populate(url)
        ok(cli("migrate", "--url", url))
        yield url


@pytest.fixture
async def upgraded_pool(upgraded_db: str) -> AsyncIterator[Any]:
    empty_tables(upgraded_db)
    pool = await open_pool(upgraded_db, autocommit=False)
    try:
        yield pool
    finally:
        pool.close()
        await pool.wait_closed()


class TestQueueOnUpgradedTables(JobQueueContract):
    @pytest.fixture
    def clock(self) -> Clock:
        return Clock(wall_clock_ms())

    @pytest.fixture
    async def queue(self, upgraded_pool: Any, clock: Clock) -> AsyncIterator[JobQueue]:
        yield create_mysql_job_queue(upgraded_pool, create_tables=False, clock=clock)

    @pytest.fixture
    def advance(self, clock: Clock) -> Advance:
        return clock.advance


class TestKvOnUpgradedTables(KvContract):
    @pytest.fixture
    async def kv(self, upgraded_pool: Any) -> AsyncIterator[KvStore]:
        yield create_mysql_kv(upgraded_pool, create_tables=False)
