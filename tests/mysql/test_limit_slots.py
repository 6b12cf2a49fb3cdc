"""The MySQL store's concurrency slots (mysql/limits.py, limit_pool.py): a settle to a final status frees its slot
with no write, a queue takes back slots it is done with without reading them, and that shortcut never lets two
claimers hold one slot."""

from __future__ import annotations

from typing import Any

from plitzi_jobs_mysql import ActionLimit, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.state import table_names

from ..support import job

ONE = {"export": ActionLimit(concurrency=1)}
T = table_names("")


async def _slot_values(pool: Any) -> list[str]:
    async with pool.acquire() as conn, conn.cursor() as cur:
        # Slot rows: 0xFF, 16 bytes of digest, then 'c' at byte 18 (mysql/limits.py).
        await cur.execute(f"SELECT v FROM `{T.kv}` WHERE k >= UNHEX('ff') AND SUBSTRING(k, 18, 1) = 'c' ORDER BY k")
        return [v.decode() if isinstance(v, bytes) else v for (v,) in await cur.fetchall()]


async def _claim(queue: Any, worker: str) -> list[str]:
    return [j.id for j in await queue.claim(worker_id=worker, lease_ms=60_000, limit=5, limits=ONE)]


async def test_a_finished_job_frees_its_slot_with_no_write_and_the_queue_reuses_it(database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(3)])
    assert await _claim(queue, "w") == ["e0"]
    [held] = await _slot_values(database_pool)
    async with database_pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"SELECT seq FROM `{T.jobs}` WHERE id = 'e0'")
        [(seq,)] = await cur.fetchall()
    assert held.startswith(f"{seq} ") and held.endswith(b"w".hex())
    await queue.settle(job_id="e0", worker_id="w", status="succeeded")
    assert await _slot_values(database_pool) == [held], "the settle wrote nothing to the slot: the job's state frees it"
    other = create_mysql_job_queue(database_pool)  # another replica, with nothing pooled: it reads the slot
    assert await _claim(other, "w2") == ["e1"]
    [taken] = await _slot_values(database_pool)
    assert taken != held and taken.endswith(b"w2".hex())


async def test_a_pooled_slot_taken_meanwhile_by_another_replica_is_not_taken_twice(database_pool: Any) -> None:
    first, second = create_mysql_job_queue(database_pool), create_mysql_job_queue(database_pool)
    await first.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(3)])
    assert await _claim(first, "a") == ["e0"]
    await first.settle(job_id="e0", worker_id="a", status="succeeded")  # `first` pools the slot it is done with
    assert await _claim(second, "b") == ["e1"], "a finished job's slot is free to every replica"
    # `first` tries its pooled slot by a compare-and-set on the value it wrote, which `second` replaced: it loses,
    # and with concurrency 1 it must take nothing.
    assert await _claim(first, "a") == []
    running = [j.id for j in (await first.list_jobs(space_ids=[1], status="running")).jobs]
    assert running == ["e1"]
    await second.settle(job_id="e1", worker_id="b", status="succeeded")
    assert await _claim(first, "a") == ["e2"], "once free, the slot is read again and taken"
