"""The job totals (mysql/schema/totals.py): exact through every transition, folded without changing an answer,
recounted by the drift check, and backfilled by the upgrade step while an older release keeps writing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import AttemptOutcome, create_mysql_job_queue
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.mysql.schema.migrate import run_migration
from plitzi_jobs_mysql.mysql.schema.tables import SCHEMA_VERSION, jobs_v1, kv_v1, marker, schedules_v1
from plitzi_jobs_mysql.mysql.schema.totals import drop_statements, totals_name
from plitzi_jobs_mysql.testing import assert_totals_exact
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import numbers, open_pool, sql
from ..support import Clock, job

DAY = 86_400_000


async def counts_agree(queue: Any) -> None:
    """The drift check finds nothing, and stats() and every list total say what a recount says."""
    await assert_totals_exact(queue)
    stats = await queue.stats(space_ids=None)
    for status, count in stats.counts.items():
        page = await queue.list_jobs(space_ids=None, status=status, limit=1)
        assert page.total == count, status
    assert (await queue.list_jobs(space_ids=None, limit=1)).total == stats.total


# The UPDATE trigger of the release before pending and running shared a bucket: a row for each claim and retry
# too. Tables made then keep it, and the reads must come out exact over its rows as over this release's.
EARLIER_UPDATE_TRIGGER = (
    "CREATE TRIGGER `action_jobs_tupd` AFTER UPDATE ON `action_jobs` FOR EACH ROW "
    "INSERT INTO `action_totals` (delta_id, space_id, action_id, status, n) "
    "SELECT UNHEX(REPLACE(UUID(), '-', '')), OLD.space_id, OLD.action_id, OLD.status, -1 FROM DUAL WHERE {moved} "
    "UNION ALL SELECT UNHEX(REPLACE(UUID(), '-', '')), NEW.space_id, NEW.action_id, NEW.status, 1 FROM DUAL "
    "WHERE {moved}"
).format(moved="NOT (OLD.status <=> NEW.status AND OLD.space_id <=> NEW.space_id AND OLD.action_id <=> NEW.action_id)")


@pytest.mark.parametrize("update_trigger", ["this release's", "an earlier release's"])
async def test_totals_stay_exact_through_every_transition_and_the_fold(database_url: str, update_trigger: str) -> None:
    clock = Clock(wall_clock_ms())
    pool = await open_pool(database_url)
    try:
        queue = create_mysql_job_queue(pool, clock=clock, retention_days=1)
        assert await queue.get_job([1], "none") is None  # first use: the tables and the triggers
        if update_trigger == "an earlier release's":
            sql(database_url, "DROP TRIGGER `action_jobs_tupd`")
            sql(database_url, EARLIER_UPDATE_TRIGGER)
        for n in range(6):
            assert await queue.enqueue(job(f"j{n}", action_id="a" if n % 2 else "b", key="k" if n > 3 else None))
        assert await queue.enqueue(job("j0")) is False  # a duplicate changes nothing
        assert await queue.enqueue_many([job("m0", space_id=2), job("m1", space_id=2), job("j1")]) == [
            True, True, False,
        ]  # fmt: skip
        await counts_agree(queue)
        claimed = await queue.claim(worker_id="w", lease_ms=60_000, limit=4)
        assert len(claimed) == 4
        await queue.heartbeat(job_ids=[j.id for j in claimed], worker_id="w", lease_ms=60_000)
        done, retried, dead, running = claimed
        outcome = AttemptOutcome(status="succeeded", worker_id="w")
        await queue.settle(job_id=done.id, worker_id="w", status="succeeded", attempt=outcome)
        await queue.settle(job_id=done.id, worker_id="w", status="succeeded", attempt=outcome)  # again: no-op
        await queue.settle(job_id=retried.id, worker_id="w", status="pending", delay_ms=1_000, error="boom")
        await queue.settle(job_id=dead.id, worker_id="w", status="dead", error="boom")
        await counts_agree(queue)
        assert await queue.requeue([done.space_id], done.id)
        assert await queue.cancel([running.space_id], running.id)  # a request: the status stays running
        pending = [j for j in (await queue.list_jobs(space_ids=None, status="pending")).jobs]
        assert await queue.cancel([pending[0].space_id], pending[0].id)
        await queue.cancel_pending(space_id=1, key="k")
        await counts_agree(queue)
        # Past retention the finished jobs are purged (the next call runs the purge), and the fold runs with it.
        finished = await queue.stats(space_ids=None)
        assert finished.counts["cancelled"] + finished.counts["dead"] > 0
        await clock.advance(2 * DAY)
        await queue.enqueue(job("after"))
        after = await queue.stats(space_ids=None)
        assert after.counts["cancelled"] == after.counts["dead"] == 0
        await counts_agree(queue)
        # The fold left one row per group (and the backfill's): no answer changed.
        groups = sql(database_url, f"SELECT COUNT(DISTINCT space_id, action_id, status) FROM `{totals_name()}`")
        rows = sql(database_url, f"SELECT COUNT(*) FROM `{totals_name()}`")
        assert rows[0][0] <= groups[0][0]
        assert (await queue.stats(space_ids=None)).counts == after.counts
    finally:
        pool.close()
        await pool.wait_closed()


async def test_the_drift_check_reports_a_total_that_disagrees(database_url: str) -> None:
    pool = await open_pool(database_url)
    try:
        queue = create_mysql_job_queue(pool)
        await queue.enqueue(job("j", action_id="act"))
        await assert_totals_exact(queue)
        sql(database_url, f"DELETE FROM `{totals_name()}` WHERE status = 'pending' LIMIT 1")
        drift = await queue.totals_drift()
        assert drift.differences == {(1, "act", "pending"): (0, 1)}
        with pytest.raises(AssertionError, match="act"):
            await assert_totals_exact(queue)
    finally:
        pool.close()
        await pool.wait_closed()


def migrate(url: str) -> None:
    """What `plitzi-jobs-mysql migrate` runs: the upgrade statements, then the triggers and the backfill."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    try:
        run_migration(conn, "")
    finally:
        conn.close()


def wait_until(condition: Callable[[], bool], timeout_s: float = 30) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def old_release_writes(url: str, stop: threading.Event, done: list[int]) -> None:
    """What a version-1 release keeps doing during the upgrade: enqueue, claim, settle, each on autocommit."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    n = 0
    try:
        with conn.cursor() as cur:
            while not stop.is_set():
                cur.execute(
                    "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, "
                    "max_attempts, status, run_at, attempts, created_at, updated_at, history) VALUES "
                    "(%s, 1, 'w', 'main', 'manual', '{}', 0, 3, 'pending', 0, 0, 0, 0, '[]')",
                    (f"writer-{n}",),
                )
                cur.execute("UPDATE action_jobs SET status = 'running' WHERE id = %s", (f"writer-{n}",))
                if n % 2:
                    cur.execute("UPDATE action_jobs SET status = 'succeeded' WHERE id = %s", (f"writer-{n}",))
                n += 1
                done.append(n)
    finally:
        conn.close()


async def test_the_upgrade_backfills_a_populated_table_while_an_older_release_writes(database_url: str) -> None:
    for ddl, name in ((jobs_v1, "action_jobs"), (schedules_v1, "action_schedules"), (kv_v1, "action_kv")):
        sql(database_url, ddl(name))
    sql(
        database_url,
        "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
        "status, run_at, attempts, created_at, updated_at, history) "
        "SELECT CONCAT('old-', seq), 1 + seq % 3, CONCAT('a', seq % 4), 'main', 'manual', '{}', 0, 3, "
        "ELT(1 + seq % 4, 'pending', 'succeeded', 'dead', 'cancelled'), seq, 0, seq, seq, '[]' FROM " + numbers(20_000),
    )
    stop, done = threading.Event(), []  # type: list[int]
    writer = threading.Thread(target=old_release_writes, args=(database_url, stop, done))
    writer.start()
    try:
        assert await asyncio.to_thread(lambda: wait_until(lambda: bool(done)))
        before = len(done)
        await asyncio.to_thread(migrate, database_url)
        during = len(done) - before
    finally:
        stop.set()
        writer.join()
    assert during > 0, "the writer made no progress while the upgrade ran"
    comment = sql(
        database_url,
        "SELECT TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
        ("action_jobs",),
    )
    assert comment[0][0] == marker(SCHEMA_VERSION)
    pool = await open_pool(database_url)
    try:
        queue = create_mysql_job_queue(pool, create_tables=False)
        await assert_totals_exact(queue)
        stats = await queue.stats(space_ids=None)
        assert stats.total == 20_000 + len(done)
        migrate(database_url)  # again: nothing is counted twice
        await assert_totals_exact(queue)
    finally:
        pool.close()
        await pool.wait_closed()


async def test_first_uses_at_once_backfill_once_and_none_of_them_fails(database_url: str) -> None:
    """Replicas starting together on tables without totals (sql/schema.sql alone, or a purge of them) all run
    the backfill; one counts, the others must find it done and go on (CI saw the loser's duplicate key fail a
    replica's first call)."""
    pool = await open_pool(database_url)
    try:
        await create_mysql_job_queue(pool).enqueue_many([job(f"j{n}", action_id=f"a{n % 5}") for n in range(3_000)])
    finally:
        pool.close()
        await pool.wait_closed()
    pools = [await open_pool(database_url, maxsize=1) for _ in range(6)]
    try:
        for n in range(20):  # the window is a statement wide: give it rounds to open
            # Dropped (the DDL then orders the first uses), or emptied as a test's cleanup does (nothing orders them).
            for statement in drop_statements() if n % 4 == 0 else [f"TRUNCATE `{totals_name()}`"]:
                sql(database_url, statement)
            queues = [create_mysql_job_queue(p) for p in pools]
            migrating = [asyncio.to_thread(migrate, database_url)] if n % 2 else []  # an operator's, meanwhile
            results = await asyncio.gather(*(q.stats(space_ids=None) for q in queues), *migrating,
                                           return_exceptions=True)  # fmt: skip
            assert [r for r in results if isinstance(r, BaseException)] == []
            assert {r.total for r in results if r is not None and not isinstance(r, BaseException)} == {3_000}
            await assert_totals_exact(queues[0])
    finally:
        for p in pools:
            p.close()
            await p.wait_closed()
