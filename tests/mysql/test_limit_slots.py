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


async def _reads_of_slots(queue: Any) -> list[int]:
    """Counts the queue's reads of slot rows from now on (the list's one item)."""
    reads = [0]
    read_free = queue._read_free

    async def counted(*args: Any) -> Any:
        reads[0] += 1
        return await read_free(*args)

    queue._read_free = counted
    return reads


async def test_a_group_with_room_to_spare_pools_the_free_slots_a_read_met(database_pool: Any) -> None:
    """A read of a limit far from binding keeps the free slot rows it did not choose, so the next claims take
    them with no read; a limit near its bound leaves them to every replica (its claims read again)."""
    reads_for = {}
    for concurrency in (1_000, 8):
        limits = {"export": ActionLimit(concurrency=concurrency)}
        first = create_mysql_job_queue(database_pool)
        await first.enqueue_many([job(f"e{concurrency}-{n}", action_id="export", due_at=n) for n in range(10)])
        # Five slot rows, made free by their settles: made under a limit close to binding, so not reservations
        # (limit_reserved.py), which the first queue would keep.
        near = {"export": ActionLimit(concurrency=8)}
        made = await first.claim(worker_id="a", lease_ms=60_000, limit=5, limits=near)
        assert len(made) == 5
        for j in made:
            await first.settle(job_id=j.id, worker_id="a", status="succeeded")
        second = create_mysql_job_queue(database_pool)  # nothing pooled: its first claim reads the slots
        reads = await _reads_of_slots(second)
        for _ in range(5):  # the five free rows, one claim each
            assert len(await second.claim(worker_id="b", lease_ms=60_000, limit=1, limits=limits)) == 1
        reads_for[concurrency] = reads[0]
        async with database_pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute(f"DELETE FROM `{T.jobs}`")
            await cur.execute(f"DELETE FROM `{T.kv}`")
    assert reads_for[1_000] == 1, reads_for
    assert reads_for[8] >= 2, reads_for
