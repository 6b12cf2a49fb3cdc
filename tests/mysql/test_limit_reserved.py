"""Reservations under a limit far from binding (mysql/limit_reserved.py): a queue's claims run their jobs on the
slots it reserved with no statement; another replica sees them held until they lapse (a killed replica's come
back by themselves); a heartbeat moves one on before a job's lease outlasts it; and a limit that starts to bind has
the idle ones given back to every replica."""

from __future__ import annotations

from typing import Any

from plitzi_jobs_mysql import ActionLimit, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.limit_reserved import RESERVE_LEASES, is_reservation, until_of
from plitzi_jobs_mysql.mysql.limit_statements import FREE
from plitzi_jobs_mysql.mysql.schema.state import table_names

from ..support import Clock, job
from .test_limit_slots import _reads_of_slots

T = table_names("")
ROOMY = {"export": ActionLimit(concurrency=1_000)}
ONE = {"export": ActionLimit(concurrency=1)}
FORTY = {"export": ActionLimit(concurrency=40)}
LEASE_MS = 10_000


async def _slots(pool: Any) -> dict[str, str]:
    """The concurrency slot rows (mysql/limits.py): key -> value."""
    async with pool.acquire() as conn, conn.cursor() as cur:
        await cur.execute(f"SELECT HEX(k), v FROM `{T.kv}` WHERE k >= UNHEX('ff') AND SUBSTRING(k, 18, 1) = 'c'")
        return {k: v.decode() if isinstance(v, bytes) else v for k, v in await cur.fetchall()}


async def _claim(queue: Any, worker: str, limits: dict[str, ActionLimit], limit: int = 1) -> list[str]:
    return [j.id for j in await queue.claim(worker_id=worker, lease_ms=LEASE_MS, limit=limit, limits=limits)]


async def _two_replicas(pool: Any, jobs: int) -> tuple[Clock, Any, Any]:
    """Two queues on one injected clock (from the server's now), and `jobs` export jobs."""
    clock = Clock(await create_mysql_job_queue(pool)._now_ms())
    one, other = create_mysql_job_queue(pool, clock=clock), create_mysql_job_queue(pool, clock=clock)
    await one.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(jobs)])
    return clock, one, other


async def _settle(queue: Any, worker: str, job_ids: list[str]) -> None:
    for job_id in job_ids:
        await queue.settle(job_id=job_id, worker_id=worker, status="succeeded")


async def test_a_roomy_limit_runs_its_jobs_on_its_reservations_with_no_statement(database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"e{n:02}", action_id="export", due_at=n) for n in range(12)])
    first = await _claim(queue, "w", ROOMY, limit=2)
    assert first == ["e00", "e01"]
    reserved = await _slots(database_pool)
    assert len(reserved) == 2 and all(is_reservation(v) for v in reserved.values()), reserved
    usage = await queue.limit_usage()
    assert [(u.action_id, u.running) for u in usage] == [("export", 2)]
    await _settle(queue, "w", first)
    assert [u.running for u in await queue.limit_usage()] == [0], "an idle reservation runs nothing"
    reads = await _reads_of_slots(queue)
    for n in range(1, 6):
        taken = await _claim(queue, "w", ROOMY, limit=2)
        assert taken == [f"e{2 * n:02}", f"e{2 * n + 1:02}"]
        await _settle(queue, "w", taken)
    assert reads == [0], "no read of the slots"
    assert await _slots(database_pool) == reserved, "no write to them either: every value is the one first written"


async def test_another_replica_sees_a_reservation_held_until_it_lapses(database_pool: Any) -> None:
    """What a killed replica leaves: a reservation nobody will hand back, free for the others once it lapses."""
    clock, left, other = await _two_replicas(database_pool, 3)
    assert await _claim(left, "gone", ROOMY) == ["e0"]
    await _settle(left, "gone", ["e0"])  # its reservation idle, held on the server
    assert await _claim(other, "w", ONE) == [], "the slot is reserved"
    await clock.advance(RESERVE_LEASES * LEASE_MS - 1_000)
    assert await _claim(other, "w", ONE) == []
    await clock.advance(2_000)
    assert await _claim(other, "w", ONE) == ["e1"], "lapsed: the slot is free"


async def test_a_heartbeat_moves_a_reservation_on_before_the_lease_outlasts_it(database_pool: Any) -> None:
    clock, runner, other = await _two_replicas(database_pool, 2)
    assert await _claim(runner, "w", ROOMY) == ["e0"]
    [before] = (await _slots(database_pool)).values()
    for _ in range(4):  # the job runs on, well past its first reservation, its lease renewed as it goes
        await clock.advance(LEASE_MS // 2)
        assert await runner.heartbeat(job_ids=["e0"], worker_id="w", lease_ms=LEASE_MS) == []
        [value] = (await _slots(database_pool)).values()
        lease_until = (await runner.get_job([1], "e0")).lease_until
        assert until_of(value) >= lease_until, (value, lease_until)
    assert until_of(value) > until_of(before)
    await clock.advance(RESERVE_LEASES * LEASE_MS - 2 * LEASE_MS)  # past the first reservation, within the lease
    assert await _claim(other, "w2", ONE) == [], "the job still runs on its slot"


async def test_a_limit_that_starts_to_bind_has_the_idle_reservations_given_back(database_pool: Any) -> None:
    queue = create_mysql_job_queue(database_pool)
    busy = create_mysql_job_queue(database_pool)
    await queue.enqueue_many([job(f"e{n:02}", action_id="export", due_at=n) for n in range(20)])
    assert await _claim(queue, "w", FORTY) == ["e00"]  # 40 free of 40: room to spare, so reserved
    await _settle(queue, "w", ["e00"])
    assert len(await _claim(busy, "b", FORTY, limit=10)) == 10  # too many for room to spare: slots of their own
    # 29 free: the next read finds the limit close to binding, and this queue's idle reservation goes back.
    assert len(await _claim(queue, "w", FORTY, limit=2)) == 2
    values = (await _slots(database_pool)).values()
    assert not [v for v in values if is_reservation(v)], list(values)
    assert FREE in values, "the reservation given back"


async def test_a_claim_meeting_a_rate_still_runs_a_roomy_group_on_its_reservations(database_pool: Any) -> None:
    """A rate's entries are read by each claim that meets its jobs; the roomy group's slots in the same claim still
    come from the queue's reservations, neither read nor written."""
    queue = create_mysql_job_queue(database_pool)
    limits = {**ROOMY, "rated": ActionLimit(rate=1_000, per_ms=60_000)}
    await queue.enqueue_many([job(f"e{n:02}", action_id="export", due_at=2 * n) for n in range(6)])
    await queue.enqueue_many([job(f"r{n:02}", action_id="rated", due_at=2 * n + 1) for n in range(6)])
    first = await _claim(queue, "w", limits, limit=4)
    assert first == ["e00", "r00", "e01", "r01"]  # two reservations: as many as a claim of two meets jobs of
    reserved = await _slots(database_pool)
    assert reserved and all(is_reservation(v) for v in reserved.values()), reserved
    await _settle(queue, "w", first)
    read_groups: list[set[str]] = []
    read_free = queue._read_free

    async def recorded(groups: Any, *args: Any) -> Any:
        read_groups.append({action_id for _space, action_id, _key in groups})
        return await read_free(groups, *args)

    queue._read_free = recorded
    for n in range(2, 6):
        taken = await _claim(queue, "w", limits, limit=2)
        assert taken == [f"e{n:02}", f"r{n:02}"]
        await _settle(queue, "w", taken)
    assert read_groups == [{"rated"}] * 4, "the roomy group's slots were read"
    assert await _slots(database_pool) == reserved, "and not written: every value is the one first written"
