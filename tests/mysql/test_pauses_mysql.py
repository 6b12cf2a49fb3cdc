"""What the MySQL queue's pauses do to the rows (the rules themselves are in testing/pause_contract.py)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.mysql.pause_calls import HOLD_BATCH
from plitzi_jobs_mysql.testing.support import now_ms
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import numbers, open_pool, sql
from ..support import job


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[Any]:
    opened = await open_pool(database_url)
    yield opened
    opened.close()
    await opened.wait_closed()


def held(url: str, action: str) -> dict[int, int]:
    rows = sql(url, "SELECT held, COUNT(*) FROM action_jobs WHERE action_id = %s GROUP BY held", (action,))
    return {int(h): int(n) for h, n in rows}


def backlog(url: str, action: str, count: int, now: int) -> None:
    """`count` due jobs of `action`, older than any other, written straight in SQL (as if enqueued)."""
    sql(
        url,
        "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, max_attempts, "
        f"status, run_at, attempts, created_at, updated_at, history) SELECT CONCAT('{action}', seq), 1, '{action}', "
        f"'main', 't', '{{}}', 0, 3, 'pending', {now} - 3600000 + seq, 0, 0, 0, '[]' FROM " + numbers(count),
    )


async def test_pause_marks_the_scope_and_resume_clears_it_in_batches(database_url: str, pool: Any) -> None:
    queue = create_mysql_job_queue(pool)
    now = await now_ms(queue)
    backlog(database_url, "stopped", 2 * HOLD_BATCH + 7, now)
    await queue.enqueue(job("free", action_id="free"))
    await queue.pause(space_id=1, action_id="stopped")
    assert held(database_url, "stopped") == {1: 2 * HOLD_BATCH + 7} and held(database_url, "free") == {0: 1}
    assert [j.id for j in await queue.claim(worker_id="w", lease_ms=60_000, limit=5)] == ["free"]
    await queue.resume(space_id=1, action_id="stopped")
    assert held(database_url, "stopped") == {0: 2 * HOLD_BATCH + 7}


async def test_jobs_that_became_due_under_a_pause_are_marked_a_batch_per_claim(database_url: str, pool: Any) -> None:
    queue = create_mysql_job_queue(pool)
    now = await now_ms(queue)
    await queue.pause(space_id=1, action_id="stopped")
    backlog(database_url, "stopped", 3 * HOLD_BATCH, now)  # after the pause: unmarked, in front of the claim order
    await queue.enqueue(job("free", action_id="free"))
    taken = []
    for _ in range(3):  # a claim marks up to MAX_HOLD_REREADS batches; a claim's own candidates alone took 75
        taken += await queue.claim(worker_id="w", lease_ms=60_000, limit=5)
    assert held(database_url, "stopped") == {1: 3 * HOLD_BATCH}
    assert [j.id for j in taken] == ["free"]


async def test_pause_rows_are_out_of_reach_of_the_kv(database_url: str, pool: Any) -> None:
    queue = create_mysql_job_queue(pool)
    kv = create_mysql_kv(pool)
    await queue.pause(space_id=1)
    await kv.set("pause:1:", "mine")
    assert await kv.get("pause:1:") == "mine"
    [paused] = await queue.list_paused([1])
    assert paused.action_id is None
    await kv.delete("pause:1:")
    assert len(await queue.list_paused([1])) == 1


async def test_an_operator_can_read_the_processlist_while_claims_pause_and_resume(pool: Any, database_url: str) -> None:
    """Every statement's text stays what information_schema.processlist can show: on MySQL 9 one 0xFF byte in a
    statement in flight (a pause row's key sent as bytes) fails every read of it with 3854."""
    queue = create_mysql_job_queue(pool)
    await queue.enqueue_many([job(f"j{n}", action_id="a" if n % 2 else "b") for n in range(200)])
    await queue.pause(space_id=1, action_id="b")
    stop, errors, reads = threading.Event(), [], [0]  # type: threading.Event, list[Exception], list[int]

    def watch() -> None:
        conn = pymysql.connect(**parse_mysql_url(database_url).pymysql_kwargs(), autocommit=True)
        try:
            with conn.cursor() as cur:
                while not stop.is_set():
                    try:
                        cur.execute("SELECT COUNT(*), MAX(LENGTH(INFO)) FROM information_schema.processlist")
                        cur.fetchall()
                        reads[0] += 1
                    except pymysql.err.MySQLError as error:
                        errors.append(error)
        finally:
            conn.close()

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for n in range(60):
            await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
            await queue.list_paused([1])
            if n % 10 == 0:
                await queue.resume(space_id=1, action_id="b")
                await queue.pause(space_id=1, action_id="b")
    finally:
        stop.set()
        await asyncio.to_thread(watcher.join)
    assert reads[0] > 0
    assert errors == [], f"{len(errors)} of {len(errors) + reads[0]} processlist reads failed: {errors[0]}"
