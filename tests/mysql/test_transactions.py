"""Enqueue and complete inside the caller's own transaction, on real servers (issue 20.1): the job exists exactly
when the caller's transaction commits; two open transactions enqueueing one id never make two; the caller's
session is untouched; `complete_in` after a lost lease raises and the caller's own rows roll back with it; the
worker whose handler completed in its transaction does not settle again."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from plitzi_jobs_mysql import ConnectionCharsetError, LeaseLostError, LocalWakeups, create_mysql_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import create_job_worker
from plitzi_jobs_mysql.testing.support import now_ms

from ..conftest import is_mysql, open_pool, sql
from ..support import Clock, Events, T, job, wait_for, wait_for_job

ORDERS = "CREATE TABLE orders (id INT PRIMARY KEY, job_id VARCHAR(191) NOT NULL) ENGINE=InnoDB"


def job_ids(url: str) -> list[str]:
    return [row[0].decode() if isinstance(row[0], bytes) else row[0] for row in sql(url, "SELECT id FROM action_jobs")]


async def test_a_rollback_leaves_no_job_and_a_commit_exactly_one(database_url: str, database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    sql(database_url, ORDERS)
    async with database_pool.acquire() as conn:
        await conn.begin()
        async with conn.cursor() as cur:
            await cur.execute("INSERT INTO orders VALUES (1, 'order-1')")
        assert await queue.enqueue(job("order-1"), connection=conn)
        assert await queue.enqueue_many([job("order-1b"), job("order-1c")], connection=conn) == [True, True]
        assert job_ids(database_url) == []  # nobody else sees it before the commit
        await conn.rollback()
    assert job_ids(database_url) == [] and sql(database_url, "SELECT * FROM orders") == []
    async with database_pool.acquire() as conn:
        await conn.begin()
        async with conn.cursor() as cur:
            await cur.execute("INSERT INTO orders VALUES (1, 'order-1')")
        assert await queue.enqueue(job("order-1"), connection=conn)
        assert await queue.enqueue_many([job("order-1b"), job("order-1")], connection=conn) == [True, False]
        await conn.commit()
    assert sorted(job_ids(database_url)) == ["order-1", "order-1b"]
    assert not await queue.enqueue(job("order-1"))


@pytest.mark.parametrize("first_ends", ["commit", "rollback"])
@pytest.mark.parametrize("call", ["enqueue", "enqueue_many"])
async def test_two_open_transactions_enqueueing_one_id_make_one_job(
    database_url: str, database_pool: Any, first_ends: str, call: str
) -> None:
    queue = create_mysql_job_queue(database_pool)

    async def enqueue(conn: Any) -> bool:
        if call == "enqueue":
            return await queue.enqueue(job("same"), connection=conn)
        return (await queue.enqueue_many([job(f"own-{id(conn)}"), job("same")], connection=conn))[1]

    await queue.enqueue(job("first-use"))  # the tables exist
    async with database_pool.acquire() as first, database_pool.acquire() as second:
        await first.begin()
        await second.begin()
        async with second.cursor() as cur:  # the second's snapshot is older than the first's commit
            await cur.execute("SELECT COUNT(*) FROM action_jobs")
        assert await enqueue(first)
        blocked = asyncio.create_task(enqueue(second))
        # The second waits on the first's row lock (a server-side lock wait, seen in the processlist).
        await wait_for(
            lambda: sql(database_url, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE LIKE "
                        "'%lock%' OR STATE LIKE '%update%'")[0][0] > 0 or blocked.done(),
            what="the second enqueuer waiting on the first's lock",
        )  # fmt: skip
        assert not blocked.done()
        await (first.commit() if first_ends == "commit" else first.rollback())
        second_answer = await asyncio.wait_for(blocked, 10)
        await second.commit()
    assert second_answer is (first_ends == "rollback")  # exactly one True among those that committed
    assert job_ids(database_url).count("same") == 1


async def test_the_callers_session_is_left_as_it_was(database_url: str, database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue(job("held"))  # first use done; a job to complete
    (held,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    isolation = "transaction_isolation" if is_mysql(database_url) else "tx_isolation"  # MariaDB 10.11's name
    probe = (
        "SELECT @@autocommit, @@session.sql_mode, @@session.time_zone, @@session.character_set_results, "
        f"@@session.{isolation}, @mine"
    )
    async with database_pool.acquire() as conn:
        async with conn.cursor() as cur:
            for statement in (
                "SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES,ANSI_QUOTES,STRICT_ALL_TABLES'",
                "SET SESSION time_zone = '+05:30'",
                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                "SET @mine = 'kept'",
            ):
                await cur.execute(statement)
            await conn.autocommit(False)
            await cur.execute(probe)
            before = await cur.fetchone()
            await conn.begin()
            await queue.enqueue(job("in-tx", input={"path": "C:\\temp\\it's"}), connection=conn)
            await queue.complete_in(conn, job_id=held.id, worker_id="w", run_id="r")
            assert conn.get_transaction_status()  # still the caller's open transaction: nothing committed
            assert job_ids(database_url) == ["held"]
            await cur.execute(probe)
            assert await cur.fetchone() == before
            await conn.commit()
            await conn.autocommit(True)
    stored = await queue.get_job([1], "in-tx")
    assert stored is not None and stored.input == {"path": "C:\\temp\\it's"}  # escaped as that sql_mode asks
    assert abs(stored.created_at - await now_ms(queue)) < 60_000  # the queue's clock, not the session's zone
    completed = await queue.get_job([1], "held")
    assert completed is not None and completed.status == "succeeded" and completed.run_id == "r"


async def test_a_connection_the_queue_cannot_use_is_refused_before_anything_is_written(
    database_url: str, database_pool: Any, mysql_url: str
) -> None:
    queue = create_mysql_job_queue(database_pool)
    with pytest.raises(TypeError, match="aiomysql connection"):
        await queue.enqueue(job("a"), connection=object())
    with pytest.raises(TypeError, match="aiomysql connection"):
        await queue.complete_in(database_pool, job_id="a", worker_id="w")
    latin = await open_pool(database_url, charset="latin1", maxsize=1)
    other = await open_pool(mysql_url.rstrip("/") + "/mysql", maxsize=1)
    try:
        async with latin.acquire() as conn:
            with pytest.raises(ConnectionCharsetError):
                await queue.enqueue(job("a"), connection=conn)
        async with other.acquire() as conn:
            with pytest.raises(ValueError, match="database"):
                await queue.enqueue_many([job("a")], connection=conn)
    finally:
        for opened in (latin, other):
            opened.close()
            await opened.wait_closed()
    assert (await queue.list_jobs(space_ids=[1])).total == 0


async def test_complete_in_after_the_lease_was_lost_raises_and_the_callers_rows_roll_back(
    database_url: str, database_pool: Any
) -> None:
    clock = Clock(T)
    queue = create_mysql_job_queue(database_pool, clock=clock)
    sql(database_url, ORDERS)
    await queue.enqueue(job("j", due_at=T))
    (mine,) = await queue.claim(worker_id="w", lease_ms=1_000, limit=1)
    await clock.advance(1_001)
    (theirs,) = await queue.claim(worker_id="w2", lease_ms=60_000, limit=1)  # took it over
    async with database_pool.acquire() as conn:
        await conn.begin()
        try:
            async with conn.cursor() as cur:
                await cur.execute("INSERT INTO orders VALUES (1, 'j')")
            with pytest.raises(LeaseLostError, match="'w'"):
                await queue.complete_in(conn, job_id=mine.id, worker_id="w", run_id="late")
        finally:
            await conn.rollback()
    assert sql(database_url, "SELECT * FROM orders") == []
    found = await queue.get_job([1], "j")
    assert found is not None and (found.status, found.worker_id, found.claimed_at) == (
        "running", "w2", theirs.claimed_at,
    )  # fmt: skip
    assert [a.status for a in found.history] == ["lost"]


async def test_a_worker_whose_handler_completed_in_its_transaction_does_not_settle_again(
    database_url: str, database_pool: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = create_mysql_job_queue(database_pool)
    sql(database_url, ORDERS)
    for n in range(3):
        await queue.enqueue(job(f"order-{n}", input={"order": n}))
    errors: list[BaseException] = []
    events = Events()

    async def handler(job: Job) -> str:
        assert job.worker_id is not None
        async with database_pool.acquire() as conn:
            await conn.begin()
            async with conn.cursor() as cur:
                await cur.execute("INSERT INTO orders VALUES (%s, %s)", (job.input["order"], job.id))
            await queue.complete_in(conn, job_id=job.id, worker_id=job.worker_id, run_id=f"tx-{job.id}")
            await conn.commit()
        return "the worker's own run id"  # the worker's settle afterwards must not record it

    worker = create_job_worker(queue=queue, handler=handler, workers=3, poll_ms=10, on_error=errors.append,
                               on_event=events)  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="plitzi_jobs_mysql"):
        worker.start()
        try:
            for n in range(3):
                await wait_for_job(queue, f"order-{n}", "succeeded")
            await worker.idle()
        finally:
            await worker.stop()
    assert errors == [] and [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    for n in range(3):
        found = await queue.get_job([1], f"order-{n}")
        assert found is not None and found.run_id == f"tx-order-{n}"
        assert [(a.status, a.run_id) for a in found.history] == [("succeeded", f"tx-order-{n}")]
    assert sorted(row[1] for row in sql(database_url, "SELECT * FROM orders")) == [f"order-{n}" for n in range(3)]


async def test_an_enqueue_wakes_the_workers_only_once_its_job_can_be_seen(database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool, wakeups=LocalWakeups())
    woken: list[str] = []
    queue.wakeups.subscribe(queue.wakeup_topic, lambda: woken.append("woken"))
    async with database_pool.acquire() as conn:
        await conn.begin()
        await queue.enqueue(job("in-tx"), connection=conn)
        await queue.enqueue_many([job("in-tx-2")], connection=conn)
        await asyncio.sleep(0)
        assert woken == []  # nobody could claim it yet: a wake-up now would cost the worker a whole poll
        await conn.commit()
        queue.announce_due()
        assert woken == ["woken"]
        assert conn.get_autocommit()  # the pool's connections: autocommit, and no transaction open now
        await queue.enqueue(job("committed-at-once"), connection=conn)
        assert woken == ["woken", "woken"]


async def test_a_declared_actions_enqueue_writes_in_the_callers_transaction(
    database_url: str, database_pool: Any
) -> None:
    from plitzi_jobs_mysql import Actions

    actions = Actions()

    @actions.action("send-receipt")
    async def send_receipt(job: Job) -> None:
        return None

    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue(job("first-use"))
    async with database_pool.acquire() as conn:
        await conn.begin()
        await actions.enqueue(queue, "send-receipt", {}, space_id=1, id="receipt-1", connection=conn)
        await conn.rollback()
        await conn.begin()
        await actions.enqueue(queue, "send-receipt", {}, space_id=1, id="receipt-2", connection=conn)
        assert sorted(job_ids(database_url)) == ["first-use"]
        await conn.commit()
    assert sorted(job_ids(database_url)) == ["first-use", "receipt-2"]
