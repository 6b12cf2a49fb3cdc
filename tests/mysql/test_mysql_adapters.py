"""What only the MySQL adapters have to prove: the server's clock, first use, the schema, and the claim's plan."""

from __future__ import annotations

import asyncio
import logging
import time
import warnings
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pymysql
import pytest
from pymysql.constants import ER

from plitzi_jobs_mysql import (
    AttemptOutcome,
    ScheduleInput,
    create_memory_job_queue,
    create_mysql_job_queue,
    create_mysql_kv,
    mysql_job_schema_statements,
    mysql_job_schema_upgrades,
)
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.mysql import claim as claim_module
from plitzi_jobs_mysql.mysql import queue as queue_module
from plitzi_jobs_mysql.mysql import queue_core, schedule_calls
from plitzi_jobs_mysql.mysql import session as session_module
from plitzi_jobs_mysql.mysql.statements import statements_for
from plitzi_jobs_mysql.testing.support import now_ms, real_time_advance
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import empty_tables, numbers, open_pool, sql, sql_session
from ..support import Clock, T, job


def tables(url: str) -> list[str]:
    return sorted(row[0] for row in sql(url, "SHOW TABLES"))


@pytest.fixture
async def pools(database_url: str) -> AsyncIterator[list[Any]]:
    """Opens pools on a fresh database, and closes them after the test."""
    opened: list[Any] = []
    yield opened
    for pool in opened:
        pool.close()
        await pool.wait_closed()


async def pool_on(pools: list[Any], url: str, **options: Any) -> Any:
    pool = await open_pool(url, **options)
    pools.append(pool)
    return pool


# -- the server's clock -------------------------------------------------------------------------------------


async def test_instants_are_the_servers_even_when_it_is_told_another_time(database_url: str, pools: list[Any]) -> None:
    faked = 1_700_000_000  # 2023-11-14T22:13:20Z: far from this machine's clock
    pool = await pool_on(pools, database_url, init_command=f"SET SESSION timestamp = {faked}")
    queue = create_mysql_job_queue(pool)
    now = await queue.now()
    assert abs(now.timestamp() - faked) < 5
    await queue.enqueue(job("due", due_at=faked * 1000 - 1))
    await queue.enqueue(job("later", due_at=faked * 1000 + 3_600_000))
    found = await queue.get_job([1], "due")
    assert found is not None and abs(found.created_at - faked * 1000) < 5_000
    taken = await queue.claim(worker_id="w", lease_ms=1_000, limit=10)
    assert [j.id for j in taken] == ["due"]  # due by the server's clock, not by this machine's


async def test_the_clock_is_exact_inside_a_fall_back_hour(database_url: str, pools: list[Any]) -> None:
    # 2024-10-27 00:30 UTC is 02:30 CEST in Berlin, the first pass through the repeated hour: UNIX_TIMESTAMP(NOW())
    # reads it back an hour wrong. The session zone must not matter.
    for instant in (1_729_989_000, 1_729_992_600):  # 00:30 and 01:30 UTC: 02:30 local, twice
        pool = await pool_on(
            pools,
            database_url,
            init_command=f"SET SESSION time_zone = 'Europe/Berlin', SESSION timestamp = {instant}",
        )
        queue = create_mysql_job_queue(pool)
        now = await queue.now()
        assert abs(now.timestamp() - instant) < 5, (datetime.fromtimestamp(instant, UTC), now)
        kv = create_mysql_kv(pool)
        await kv.set("k", "v", ttl_seconds=60)
        assert await kv.get("k") == "v"


async def test_resync_clock_takes_the_servers_time_again(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool)
    first = await queue.now()
    async with pool.acquire() as conn:  # every pooled connection now reports an hour later
        async with conn.cursor() as cur:
            await cur.execute("SET SESSION timestamp = UNIX_TIMESTAMP() + 3600")
    assert (await queue.now() - first).total_seconds() < 60  # still trusting the last reading
    queue.resync_clock()
    assert (await queue.now() - first).total_seconds() > 3000


async def test_a_hot_call_reads_the_clock_without_an_await_only_while_the_reading_holds(
    database_url: str, pools: list[Any]
) -> None:
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool)
    assert queue._clock.fresh() is None  # no reading yet: enqueue, claim and settle await one
    first = int((await queue.now()).timestamp() * 1000)
    fresh = queue._clock.fresh()
    assert fresh is not None and first <= fresh < first + 60_000
    queue.resync_clock()
    assert queue._clock.fresh() is None
    stale = queue_module.MysqlJobQueue(pool, resync_ms=0)  # every call is due to refresh the reading
    await stale.now()
    assert stale._clock.fresh() is None


async def test_an_injected_clock_replaces_the_servers_for_every_instant(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    clock = Clock(T)
    queue = create_mysql_job_queue(pool, clock=clock)
    assert queue._clock.fresh() == T and int((await queue.now()).timestamp() * 1000) == T
    queue.resync_clock()  # nothing to read again
    assert await queue.enqueue(job("j", due_at=T))
    await clock.advance(5)
    (taken,) = await queue.claim(worker_id="w", lease_ms=1_000, limit=1)
    assert (taken.updated_at, taken.claimed_at, taken.lease_until) == (T + 5, T + 5, T + 1_005)
    await clock.advance(5)
    await queue.settle(job_id="j", worker_id="w", status="pending", delay_ms=7, claimed_at=taken.claimed_at)
    found = await queue.get_job([1], "j")
    assert found is not None and (found.updated_at, found.run_at) == (T + 10, T + 17)


async def test_a_skewed_application_clock_changes_nothing(
    database_url: str, pools: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 6 * 3600)
    monkeypatch.setattr(time, "time_ns", lambda: int((real() + 6 * 3600) * 1e9))
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool)
    server_now = sql(database_url, "SELECT UNIX_TIMESTAMP(NOW(3))")[0][0]
    assert abs((await queue.now()).timestamp() - float(server_now)) < 5
    await queue.enqueue(job("j"))
    (taken,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    assert taken.lease_until is not None and abs(taken.lease_until / 1000 - float(server_now) - 60) < 5


# -- first use ----------------------------------------------------------------------------------------------


async def test_first_use_creates_the_three_tables(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool, table_prefix="app_")
    assert tables(database_url) == []  # nothing is sent before the first call
    await queue.enqueue(job("j"))
    assert tables(database_url) == ["app_action_jobs", "app_action_kv", "app_action_schedules", "app_action_totals"]
    kv = create_mysql_kv(pool, table_prefix="other_")
    await kv.set("k", "v")
    assert "other_action_jobs" in tables(database_url)


async def test_create_tables_false_never_sends_ddl(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool, create_tables=False)
    kv = create_mysql_kv(pool, create_tables=False)
    with pytest.raises(pymysql.err.ProgrammingError):
        await queue.enqueue(job("j"))
    with pytest.raises(pymysql.err.ProgrammingError):
        await kv.set("k", "v")
    assert tables(database_url) == []
    sql_session(database_url, mysql_job_schema_statements() + mysql_job_schema_upgrades())
    assert await queue.enqueue(job("j")) is True
    await kv.set("k", "v")
    assert await kv.get("k") == "v"


async def test_a_failed_creation_is_tried_again_by_the_next_call(
    database_url: str, mysql_url: str, pools: list[Any]
) -> None:
    db = parse_mysql_url(database_url).database
    user = f"pjm_{db[-8:]}"
    sql(mysql_url, f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'")
    try:
        # TRIGGER for the job totals' triggers (mysql/schema/totals.py).
        sql(mysql_url, f"GRANT SELECT, INSERT, UPDATE, DELETE, TRIGGER ON `{db}`.* TO '{user}'@'%'")
        url = parse_mysql_url(database_url)
        limited = f"mysql://{user}:pw@{url.host}:{url.port}/{db}"
        pool = await pool_on(pools, limited)
        queue = create_mysql_job_queue(pool)
        with pytest.raises(pymysql.err.OperationalError):  # no CREATE privilege yet
            await queue.enqueue(job("j"))
        for table in ("action_jobs", "action_schedules", "action_kv", "action_totals"):  # reach open sessions
            sql(mysql_url, f"GRANT CREATE ON `{db}`.`{table}` TO '{user}'@'%'")
        assert await queue.enqueue(job("j")) is True
    finally:
        sql(mysql_url, f"DROP USER IF EXISTS '{user}'@'%'")


async def test_a_connection_in_another_character_set_is_refused_on_first_use(
    database_url: str, pools: list[Any]
) -> None:
    pool = await pool_on(pools, database_url, charset="latin1")
    with pytest.raises(RuntimeError, match="utf8mb4"):
        await create_mysql_job_queue(pool).enqueue(job("j"))
    with pytest.raises(RuntimeError, match="utf8mb4"):
        await create_mysql_kv(pool).set("k", "v")
    sneaky = await pool_on(pools, database_url, init_command="SET NAMES latin1")
    with pytest.raises(RuntimeError, match="character_set_client"):
        await create_mysql_job_queue(sneaky).enqueue(job("j"))
    assert tables(database_url) == []


@pytest.mark.parametrize("prefix", ["bad-prefix", "a b", "x;DROP", "ü", "p" * 49, "`"])
async def test_a_bad_prefix_is_refused_before_any_sql(prefix: str, database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    with pytest.raises(ValueError, match="table_prefix"):
        create_mysql_job_queue(pool, table_prefix=prefix)
    with pytest.raises(ValueError, match="table_prefix"):
        create_mysql_kv(pool, table_prefix=prefix)
    with pytest.raises(ValueError, match="table_prefix"):
        mysql_job_schema_statements(prefix)
    with pytest.raises(ValueError, match="table_prefix"):
        mysql_job_schema_upgrades(prefix)
    assert tables(database_url) == []


async def test_an_autocommit_off_pool_hands_on_no_stale_read_view(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url, autocommit=False, minsize=1, maxsize=1)
    queue = create_mysql_job_queue(pool)
    await queue.enqueue(job("j"))
    assert await queue.get_job([1], "j") is not None  # a plain read on the only connection
    sql(database_url, "UPDATE action_jobs SET status = 'cancelled'")  # another client writes
    found = await queue.get_job([1], "j")
    assert found is not None and found.status == "cancelled"
    sql(database_url, "ALTER TABLE action_jobs COMMENT = 'DDL must not wait on a read view left open'")


# -- the schema ---------------------------------------------------------------------------------------------


def test_schema_statements_are_plain_and_prefixed() -> None:
    statements = mysql_job_schema_statements("app_")
    assert len(statements) == 4  # the three tables and the job totals
    assert all(s.startswith("CREATE TABLE IF NOT EXISTS `app_action_") for s in statements)
    assert all("app_action_" in s for s in mysql_job_schema_upgrades("app_") if "ALTER" in s or "RENAME" in s)


async def test_identifier_columns_compare_bytes(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    await create_mysql_job_queue(pool).enqueue(job("j"))
    rows = sql(
        database_url,
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = DATABASE() "
        "AND column_name IN ('id', 'action_id', 'key', 'worker_id', 'k')",
    )
    assert {t for _, t in rows} == {"varbinary"}


# -- the claim's cost ---------------------------------------------------------------------------------------


async def test_the_claim_reads_through_the_index_without_sorting_the_backlog(
    database_url: str, pools: list[Any]
) -> None:
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool)
    await queue.enqueue(job("seed"))
    # a backlog and a finished history, written straight in SQL
    sql(
        database_url,
        """
        INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts,
            status, run_at, attempts, created_at, updated_at, history)
        SELECT CONCAT('b', seq), 1, 'a', 'main', 't', '{}', seq, 3,
            IF(seq % 2 = 0, 'succeeded', 'pending'), seq, 0, 0, 0, '[]' FROM """
        + numbers(20_000),
    )
    sql(database_url, "ANALYZE TABLE action_jobs")
    statement = statements_for("").claim_candidates
    plan = sql(database_url, "EXPLAIN " + statement, (0, 10**12, 40, 20, 10**12, 10))
    text = repr(plan)
    assert "filesort" not in text.lower() and "job_claim" in text, plan
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=10)
    assert [j.id for j in taken] == ["seed"] + [f"b{n}" for n in range(1, 19, 2)]


async def test_the_due_priorities_are_found_without_walking_the_jobs(database_url: str, pools: list[Any]) -> None:
    """A loose index scan, one dive per priority: a backlog of not-yet-due jobs of an urgent priority is not
    walked to find the due jobs of a lower one."""
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool)
    now = await now_ms(queue)
    sql(
        database_url,
        "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
        "priority, status, run_at, attempts, created_at, updated_at, history) "
        f"SELECT CONCAT('b', seq), 1, 'a', 'main', 't', '{{}}', 0, 3, IF(seq % 5 = 0, 7, -50), 'pending', "
        f"IF(seq % 5 = 0, {now} - seq, {now} + 3600000 + seq), 0, 0, 0, '[]' FROM " + numbers(20_000),
    )
    sql(database_url, "ANALYZE TABLE action_jobs")
    plan = repr(sql(database_url, "EXPLAIN " + statements_for("").due_priorities, (now,)))
    # MariaDB's table plan says "Using index for group-by"; MySQL 9's tree "Covering index skip scan for grouping".
    assert ("for group-by" in plan or "skip scan for grouping" in plan) and "job_claim" in plan, plan
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=3)
    assert [(j.id, j.priority) for j in taken] == [("b20000", 7), ("b19995", 7), ("b19990", 7)]


async def test_claims_facing_a_full_backlog_look_for_lapsed_leases_only_now_and_then(
    database_url: str, pools: list[Any]
) -> None:
    """The lapsed-lease read steps over every running row, so a claim that keeps finding full blocks of pending
    jobs sends it at most every LAPSED_READ_EVERY_MS; a claim that finds the backlog short sends it at once."""
    pool = await pool_on(pools, database_url)
    clock = Clock(wall_clock_ms())
    queue = create_mysql_job_queue(pool, clock=clock)
    crashed = create_mysql_job_queue(pool, clock=clock)  # another replica, whose worker then dies
    await queue.enqueue_many([job(f"p{n}", due_at=n + 1) for n in range(5)])

    async def orphan(job_id: str) -> None:
        await crashed.enqueue(job(job_id))  # due at 0: older than every pending job
        assert [j.id for j in await crashed.claim(worker_id="crashed", lease_ms=50, limit=1)] == [job_id]

    async def claim_one() -> tuple[str, int]:
        (taken,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
        return taken.id, taken.attempts

    await orphan("o1")
    assert await claim_one() == ("p0", 1)  # a queue's first claim reads both; o1's lease still holds
    await clock.advance(51)
    assert await claim_one() == ("p1", 1)  # o1 lapsed, but the backlog is full and the last look is 51 ms old
    await clock.advance(queue_core.LAPSED_READ_EVERY_MS)
    assert await claim_one() == ("o1", 2)

    await orphan("o2")
    await clock.advance(51)
    assert await claim_one() == ("p2", 1)  # p2, p3: a full block
    assert await claim_one() == ("p3", 1)  # p3, p4: a full block
    assert await claim_one() == ("o2", 2)  # p4 alone: the backlog ran out, so this claim looked for lapsed leases


# -- retention ----------------------------------------------------------------------------------------------


async def test_finished_jobs_are_removed_after_the_retention_period(database_url: str, pools: list[Any]) -> None:
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool, retention_days=1)
    await queue.enqueue_many([job("done"), job("waiting", due_at=10**13)])
    (taken,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    await queue.settle(
        job_id=taken.id, worker_id="w", status="succeeded", attempt=AttemptOutcome(status="succeeded", worker_id="w")
    )
    assert await queue.get_job([1], "done") is not None
    # Two days later by the server's clock (a queue whose pool is told so):
    later = await pool_on(pools, database_url, init_command="SET SESSION timestamp = UNIX_TIMESTAMP() + 172800")
    future = create_mysql_job_queue(later, retention_days=1)
    await future.claim(worker_id="w", lease_ms=1_000, limit=1)
    assert await queue.get_job([1], "done") is None
    assert await queue.get_job([1], "waiting") is not None  # never anything anybody waits on


TWO_DAYS_LATER = "SET SESSION timestamp = UNIX_TIMESTAMP() + 172800"


async def finish_every_way(queue: Any) -> list[str]:
    """Finished jobs of every terminal status, two of them due only next year; answers their ids."""
    next_year = int((await queue.now()).timestamp() * 1000) + 365 * 86_400_000
    await queue.enqueue_many(
        [
            job("succeeded", due_at=0),
            job("failed", due_at=1),
            job("dead", due_at=2, max_attempts=1),
            job("cancelled-future", due_at=next_year),
            job("keyed-future", due_at=next_year, key="k"),
        ]
    )
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=2)
    assert [j.id for j in taken] == ["succeeded", "failed"]
    for j, status in zip(taken, ("succeeded", "failed"), strict=True):
        await queue.settle(
            job_id=j.id, worker_id="w", status=status, attempt=AttemptOutcome(status=status, worker_id="w")
        )
    await queue.claim(worker_id="gone", lease_ms=1, limit=1)  # "dead": its worker vanishes on its only attempt
    await real_time_advance(queue)(2)  # the store's clock passes its lease
    assert await queue.claim(worker_id="w", lease_ms=60_000, limit=1) == []
    assert await queue.cancel([1], "cancelled-future")
    assert await queue.cancel_pending(space_id=1, key="k") == 1
    finished = {
        "succeeded": "succeeded",
        "failed": "failed",
        "dead": "dead",
        "cancelled-future": "cancelled",
        "keyed-future": "cancelled",
    }
    for job_id, status in finished.items():
        found = await queue.get_job([1], job_id)
        assert found is not None and found.status == status
    return list(finished)


@pytest.mark.parametrize("store", ["memory", "mysql"])
async def test_a_finished_jobs_run_at_is_the_instant_it_finished(
    database_url: str, pools: list[Any], store: str
) -> None:
    # What lets the purge find every finished job through the (status, run_at) index, and the memory queue agree.
    if store == "memory":
        queue: Any = create_memory_job_queue()
    else:
        queue = create_mysql_job_queue(await pool_on(pools, database_url))
    for job_id in await finish_every_way(queue):
        found = await queue.get_job([1], job_id)
        assert found is not None and found.run_at == found.updated_at, found


@pytest.mark.parametrize("later_call", ["enqueue", "enqueue_many", "settle", "claim"])
async def test_every_finished_job_is_removed_after_the_retention_period_by_any_replica(
    database_url: str, pools: list[Any], later_call: str
) -> None:
    # Whatever it was due at (cancelled while it waited for next year), and by a replica that only enqueues or
    # only settles: today the purge needs run_at before the cutoff and runs only when something claims.
    pool = await pool_on(pools, database_url)
    queue = create_mysql_job_queue(pool, retention_days=1)
    finished = await finish_every_way(queue)
    await queue.enqueue_many([job("waiting", due_at=10**13), job("running", due_at=3)])
    (running,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    assert running.id == "running"
    later = create_mysql_job_queue(await pool_on(pools, database_url, init_command=TWO_DAYS_LATER), retention_days=1)
    if later_call == "enqueue":
        await later.enqueue(job("new"))
    elif later_call == "enqueue_many":
        await later.enqueue_many([job("new")])
    elif later_call == "settle":  # the holder settles its job two days on (its lapsed lease nobody took)
        await later.settle(job_id="running", worker_id="w", status="succeeded")
    else:
        await later.claim(worker_id="w2", lease_ms=60_000, limit=1)
    for job_id in finished:
        assert await queue.get_job([1], job_id) is None, f"{job_id} outlived the retention period"
    assert await queue.get_job([1], "waiting") is not None  # never anything anybody waits on
    assert await queue.get_job([1], "running") is not None  # nor anything running, nor just finished


async def test_the_purge_is_bounded_per_pass(
    database_url: str, pools: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_core, "PURGE_BATCH", 2)
    queue = create_mysql_job_queue(await pool_on(pools, database_url), retention_days=1)
    finished = await finish_every_way(queue)
    later = create_mysql_job_queue(await pool_on(pools, database_url, init_command=TWO_DAYS_LATER), retention_days=1)
    left = []
    for n in range(4):
        await later.enqueue(job(f"new-{n}", due_at=10**13))  # each call takes one bounded pass
        left.append(int(sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE status <> 'pending'")[0][0]))
    assert left == [3, 1, 0, 0]
    assert len(finished) == 5


async def test_purges_never_deadlock_with_claimers_and_settlers(
    database_url: str, pools: list[Any], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Old finished jobs interleaved (by seq and run_at) with due ones: every call purges a batch while four
    # claimers take the due jobs and settle them. A purge that locked beyond its rows would deadlock (1213) with
    # the claimers or make them wait; the package hides a deadlock as a lost race or a retry, so it is counted
    # here, and a purge that met a conflict says so in its log. (A claimer skipping a row another claimer is
    # writing at that instant is a 1205 by design, and not counted.)
    deadlocks: list[int | None] = []
    for module in (queue_module, claim_module, queue_core, schedule_calls, session_module):
        original = module.is_conflict

        def counted(error: BaseException, original: Any = original) -> bool:
            answer = bool(original(error))
            if answer and session_module.error_code(error) == ER.LOCK_DEADLOCK:
                deadlocks.append(session_module.error_code(error))
            return answer

        monkeypatch.setattr(module, "is_conflict", counted)
    caplog.set_level(logging.DEBUG, logger="plitzi_jobs_mysql.mysql.queue")
    monkeypatch.setattr(queue_core, "PURGE_BATCH", 50)
    monkeypatch.setattr(queue_core, "PURGE_EVERY_MS", 0)
    queues = [
        create_mysql_job_queue(await pool_on(pools, database_url, init_command=TWO_DAYS_LATER), retention_days=1)
        for _ in range(4)
    ]
    await queues[0].enqueue(job("first"))  # creates the tables
    sql(
        database_url,
        """
        INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts,
            status, run_at, attempts, created_at, updated_at, history)
        SELECT CONCAT('j', seq), 1, 'a', 'main', 't', '{}', seq, 3,
            IF(seq % 2 = 0, 'succeeded', 'pending'), seq, 0, 0, 0, '[]' FROM """
        + numbers(1_200),
    )

    async def drain(queue: Any, name: str) -> int:
        done = 0
        while batch := await queue.claim(worker_id=name, lease_ms=60_000, limit=5):
            for taken in batch:
                await queue.settle(job_id=taken.id, worker_id=name, status="succeeded")
                done += 1
        return done

    drained = await asyncio.gather(*(drain(q, f"w{n}") for n, q in enumerate(queues)))
    assert sum(drained) == 601  # "first" and the 600 pending ones, each once
    left = sql(database_url, "SELECT COUNT(*) FROM action_jobs WHERE run_at < 1000000")[0][0]
    assert left == 0, f"{left} old finished jobs were not purged"
    assert not deadlocks, f"{len(deadlocks)} deadlocks"
    assert not [r.message for r in caplog.records if r.getMessage().startswith("purging finished jobs")]
    assert any(r.getMessage().startswith("removed 50 finished jobs") for r in caplog.records)


async def test_claims_from_many_pools_at_once_never_share_a_job(database_url: str, pools: list[Any]) -> None:
    queues = [create_mysql_job_queue(await pool_on(pools, database_url, maxsize=4)) for _ in range(4)]
    await queues[0].enqueue_many([job(f"j{n}") for n in range(400)])

    async def drain(queue: Any, name: str) -> list[str]:
        got: list[str] = []
        while batch := await queue.claim(worker_id=name, lease_ms=60_000, limit=10):
            got += [j.id for j in batch]
        return got

    results = await asyncio.gather(*(drain(q, f"w{i}-{n}") for i, q in enumerate(queues) for n in range(4)))
    everything = [i for r in results for i in r]
    assert len(everything) == 400 and len(set(everything)) == 400


async def test_a_standalone_server_gets_plain_statements(database_url: str, pools: list[Any]) -> None:
    queue = create_mysql_job_queue(await pool_on(pools, database_url))
    assert await queue.get_job([1], "nothing") is None
    assert queue._store.statement_prefix == ""  # the Galera causal wait is for wsrep nodes only


# -- a job that dies with its last worker ----------------------------------------------------------------------


async def test_a_job_that_dies_with_its_last_worker_is_logged_at_error(
    pool: Any, session_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    empty_tables(session_db)
    clock = Clock(T)
    queue = create_mysql_job_queue(pool, clock=clock)
    await queue.enqueue(job("doomed", max_attempts=1))
    assert len(await queue.claim(worker_id="crashed", lease_ms=50, limit=1)) == 1
    await clock.advance(51)  # its lease lapses
    with caplog.at_level(logging.ERROR, logger="plitzi_jobs_mysql"):
        # The claim that finds the lease lapsed makes it dead instead of handing it out.
        assert await queue.claim(worker_id="w2", lease_ms=50, limit=1) == []
    found = await queue.get_job([1], "doomed")
    assert found is not None and found.status == "dead"
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "'doomed'" in record.getMessage() and "dead" in record.getMessage() and "1/1" in record.getMessage()


async def test_the_schedule_upsert_names_the_incoming_row_as_the_server_prefers(
    database_url: str, database_pool: Any
) -> None:
    """MySQL 8.0.19+ deprecates `VALUES(col)` in an upsert with a warning on every call ("'VALUES function' is
    deprecated"); it takes a row alias instead, which MariaDB does not. A replacing save goes through the upsert."""
    queue = create_mysql_job_queue(database_pool)

    def schedule(cron: str) -> ScheduleInput:
        return ScheduleInput(
            space_id=1,
            action_id="nightly",
            cron=cron,
            environment="main",
            enabled=True,
            next_run_at=1_000,
            max_attempts=3,
        )

    await queue.put_schedules(space_id=1, schedules=[schedule("0 7 * * *")])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        await queue.put_schedules(space_id=1, schedules=[schedule("0 8 * * *")])
    assert [str(w.message) for w in seen if "VALUES" in str(w.message)] == []
    (saved,) = await queue.list_schedules([1])
    assert saved.cron == "0 8 * * *" and saved.next_run_at == 1_000
    mariadb = "mariadb" in str(sql(database_url, "SELECT VERSION()")[0][0]).lower()
    assert queue._store.flavour.row_alias is not mariadb
