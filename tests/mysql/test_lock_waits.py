"""A user's transaction holding job rows or a kv row past `innodb_lock_wait_timeout` (issue 14 item 4, issue 9
item 9): claims, settles and swaps degrade to skips, retries or a clear error, never to a wrong state.

The pools here set `innodb_lock_wait_timeout` for their own sessions (no global setting is touched); the
holder is a second connection that locks rows with `SELECT … FOR UPDATE` and lets go when the test says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from plitzi_jobs_mysql import ActionLimit, AttemptOutcome, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.errors import KvRowLockedError
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.mysql.flavour import Flavour
from plitzi_jobs_mysql.mysql.schema.state import table_names

from ..conftest import open_pool
from ..support import Clock, job

pytestmark = pytest.mark.timeout(120)

LOCK_WAIT_S = 1
T = table_names("")


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[Any]:
    """A pool whose sessions wait at most LOCK_WAIT_S for a row lock."""
    opened = await open_pool(database_url, init_command=f"SET SESSION innodb_lock_wait_timeout = {LOCK_WAIT_S}")
    try:
        yield opened
    finally:
        opened.close()
        await opened.wait_closed()


class Holder:
    """A user's transaction on its own connection, holding rows until `release()`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pool: Any = None
        self.conn: Any = None

    async def hold(self, statement: str, args: Sequence[Any]) -> None:
        self.pool = await open_pool(self.url, maxsize=1, autocommit=False)
        self.conn = await self.pool.acquire()
        await self.conn.begin()
        async with self.conn.cursor() as cur:
            await cur.execute(statement, args)

    async def release(self, after_s: float = 0.0) -> None:
        await asyncio.sleep(after_s)
        if self.conn is not None:
            await self.conn.rollback()
            self.pool.release(self.conn)
            self.pool.close()
            await self.pool.wait_closed()
            self.conn = None


@pytest.fixture
async def holder(database_url: str) -> AsyncIterator[Holder]:
    held = Holder(database_url)
    try:
        yield held
    finally:
        await held.release()


async def hold_jobs(holder: Holder, ids: list[str]) -> None:
    marks = ", ".join(["%s"] * len(ids))
    await holder.hold(f"SELECT seq FROM action_jobs WHERE id IN ({marks}) FOR UPDATE", ids)


# -- claims -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("way", ["statement-bound", "nowait-guard"])
async def test_a_locked_candidate_costs_a_claim_no_wait(pool: Any, holder: Holder, way: str) -> None:
    queue = create_mysql_job_queue(pool)
    await queue.enqueue_many([job(f"j{n:02}", due_at=n) for n in range(30)])
    if way == "statement-bound" and not queue._store.flavour.mariadb:
        pytest.skip("MySQL has no SET STATEMENT: its claims take the NOWAIT guard (the other parameter)")
    if way == "nowait-guard":  # what MySQL gets, which cannot bound one statement's lock wait; MariaDB takes it too
        queue._store.flavour = Flavour(mariadb=False, galera=False)
    locked = [f"j{n:02}" for n in range(5)]  # the five oldest: every claim's first candidates
    await hold_jobs(holder, locked)
    started = time.monotonic()
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=10)
    elapsed = time.monotonic() - started
    # Today each locked candidate costs the claim the whole lock wait in turn (5 s here).
    assert elapsed < LOCK_WAIT_S, f"the claim waited {elapsed:.1f} s on rows another transaction holds"
    assert [j.id for j in taken] == [f"j{n:02}" for n in range(5, 15)]
    await holder.release()
    # Let go, they are claimed like any other, once each.
    rest: list[str] = []
    while batch := await queue.claim(worker_id="w2", lease_ms=60_000, limit=10):
        rest += [j.id for j in batch]
    assert sorted(rest) == locked + [f"j{n:02}" for n in range(15, 30)]
    page = await queue.list_jobs(space_ids=[1], status="running", limit=100)
    assert page.total == 30 and all(j.attempts == 1 for j in page.jobs)


async def test_a_locked_lapsed_lease_costs_a_claim_no_wait(pool: Any, holder: Holder) -> None:
    clock = Clock(wall_clock_ms())
    queue = create_mysql_job_queue(pool, clock=clock)
    await queue.enqueue_many([job("lapsed", due_at=0), job("next", due_at=1)])
    await queue.claim(worker_id="gone", lease_ms=1, limit=1)
    await clock.advance(2)  # the 1 ms lease lapses
    await hold_jobs(holder, ["lapsed"])
    started = time.monotonic()
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=2)
    assert time.monotonic() - started < LOCK_WAIT_S
    assert [j.id for j in taken] == ["next"]
    await holder.release()
    (again,) = await queue.claim(worker_id="w", lease_ms=60_000, limit=2)
    assert again.id == "lapsed" and [a.status for a in again.history] == ["lost"] and again.attempts == 2


class SlowClaims:
    """A pool whose claim compare-and-sets each reach the server `delay_s` late (a slow network, a busy
    server): the claim takes a while, and the jobs it won first have held their lease the longest."""

    def __init__(self, pool: Any, delay_s: float) -> None:
        self.pool, self.delay_s = pool, delay_s

    def acquire(self) -> Any:
        outer = self

        class Borrow:
            async def __aenter__(self) -> Any:
                self.raw = await outer.pool.acquire()
                return SlowConnection(self.raw, outer.delay_s)

            async def __aexit__(self, *exc: object) -> None:
                outer.pool.release(self.raw)

        return Borrow()


class SlowConnection:
    def __init__(self, raw: Any, delay_s: float) -> None:
        self._raw, self._delay_s = raw, delay_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)

    def cursor(self) -> Any:
        raw, delay_s = self._raw, self._delay_s

        class Cursor:
            async def __aenter__(self) -> Any:
                self.cur = await raw.cursor()
                return self

            async def __aexit__(self, *exc: object) -> None:
                await self.cur.close()

            async def execute(self, sql: str, args: Any = None) -> Any:
                if "SET status = 'running'" in sql:
                    await asyncio.sleep(delay_s)
                return await self.cur.execute(sql, args)

            def __getattr__(self, name: str) -> Any:
                return getattr(self.cur, name)

        return Cursor()


async def test_a_lease_counts_from_the_moment_its_row_was_won(pool: Any) -> None:
    await create_mysql_job_queue(pool).enqueue_many([job(f"j{n}", due_at=n) for n in range(3)])
    queue = create_mysql_job_queue(SlowClaims(pool, 0.4))
    before = int((await queue.now()).timestamp() * 1000)
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=3)
    assert [j.id for j in taken] == ["j0", "j1", "j2"]
    leases = [j.lease_until or 0 for j in taken]
    # The claim's compare-and-sets run side by side (issue 12), so the three rows are won at about the same
    # moment: no lease counts from before the claim began, and none has lost the time of another's slow write
    # (one after another, the last would be 0.8 s behind the first).
    assert min(leases) >= before + 60_000, (before, leases)
    assert max(leases) - min(leases) < 300, leases


# -- settles ------------------------------------------------------------------------------------------------


async def test_a_settle_on_a_held_row_is_retried_until_it_lands(pool: Any, holder: Holder) -> None:
    queue = create_mysql_job_queue(pool)
    await queue.enqueue(job("j"))
    await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    await hold_jobs(holder, ["j"])
    release = asyncio.create_task(holder.release(after_s=LOCK_WAIT_S * 1.5))
    await queue.settle(
        job_id="j", worker_id="w", status="succeeded", attempt=AttemptOutcome(status="succeeded", worker_id="w")
    )
    await release
    done = await queue.get_job([1], "j")
    assert done is not None and done.status == "succeeded" and len(done.history) == 1


# -- kv swaps -----------------------------------------------------------------------------------------------


async def hold_key(holder: Holder, key: str) -> None:
    await holder.hold("SELECT v FROM action_kv WHERE k = %s FOR UPDATE", [key])


async def test_a_swap_on_a_row_held_briefly_is_retried_not_lost(pool: Any, holder: Holder) -> None:
    kv = create_mysql_kv(pool)
    await kv.set("k", "a")
    await hold_key(holder, "k")
    release = asyncio.create_task(holder.release(after_s=LOCK_WAIT_S * 1.5))
    # Today the lock wait (1205) is reported as a lost race although "a" is still in place.
    assert await kv.swap("k", "a", "b") is True
    await release
    assert await kv.get("k") == "b"


async def test_a_swap_that_cannot_get_the_row_in_time_says_so(pool: Any, holder: Holder) -> None:
    kv = create_mysql_kv(pool)
    await kv.set("k", "a")
    await hold_key(holder, "k")
    started = time.monotonic()
    with pytest.raises(KvRowLockedError) as raised:
        await kv.swap("k", "a", "b")
    assert isinstance(raised.value, TimeoutError)
    assert "innodb_lock_wait_timeout" in str(raised.value)
    assert time.monotonic() - started < 10 * LOCK_WAIT_S
    # Another value in place is still a plain lost race, held row or not.
    assert await kv.swap("k", "other", "b") is False
    assert await kv.swap("k", None, "b") is False
    await holder.release()
    assert await kv.get("k") == "a"
    assert await kv.swap("k", "a", "b") is True


# -- heartbeats ---------------------------------------------------------------------------------------------


async def test_a_held_row_costs_the_other_leases_of_a_heartbeat_nothing(pool: Any, holder: Holder) -> None:
    queue = create_mysql_job_queue(pool)
    await queue.enqueue_many([job("held", due_at=0), job("free", due_at=1)])
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=2)
    before = {j.id: j.lease_until or 0 for j in taken}
    await hold_jobs(holder, ["held"])
    started = time.monotonic()
    # Today the one statement renewing both waits on the held row, fails, and is retried five times: the free
    # job's lease is not renewed at all, and the heartbeat raises after five lock waits.
    assert await queue.heartbeat(job_ids=["held", "free"], worker_id="w", lease_ms=120_000) == []
    assert time.monotonic() - started < LOCK_WAIT_S
    await holder.release()
    after = {j: (await queue.get_job([1], j)) for j in ("held", "free")}
    assert after["free"] is not None and (after["free"].lease_until or 0) >= before["free"] + 50_000
    assert after["held"] is not None and after["held"].lease_until == before["held"]  # the next beat renews it
    assert await queue.heartbeat(job_ids=["held", "free"], worker_id="w", lease_ms=120_000) == []
    renewed = await queue.get_job([1], "held")
    assert renewed is not None and (renewed.lease_until or 0) >= before["held"] + 50_000


# -- limit slots --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("way", ["statement-bound", "nowait-guard"])
async def test_held_limit_slots_cost_a_claim_no_wait(pool: Any, holder: Holder, way: str) -> None:
    """A concurrency limit's slot rows held by a user's transaction: the claim's compare-and-set on them fails at
    once (a lost race: the claim takes nothing of that action) instead of waiting out the lock."""
    limits = {"export": ActionLimit(concurrency=2)}
    queue = create_mysql_job_queue(pool)
    await queue.enqueue_many([job(f"e{n}", action_id="export", due_at=n) for n in range(6)])
    if way == "statement-bound" and not queue._store.flavour.mariadb:
        pytest.skip("MySQL has no SET STATEMENT: its slot writes take the NOWAIT guard (the other parameter)")
    taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=5, limits=limits)  # makes both slot rows
    for j in taken:
        await queue.settle(job_id=j.id, worker_id="w", status="succeeded")
    for replica in ("fresh", "pooled"):  # a replica that reads the slots (one statement takes both), or not
        other = create_mysql_job_queue(pool) if replica == "fresh" else queue
        if way == "nowait-guard":
            await other.now()  # first use learns the flavour; then MySQL's is put in its place
            other._store.flavour = Flavour(mariadb=False, galera=False)
        await holder.hold(f"SELECT k FROM `{T.kv}` WHERE k >= UNHEX('ff') FOR UPDATE", ())
        started = time.monotonic()
        assert await other.claim(worker_id="w2", lease_ms=60_000, limit=5, limits=limits) == []
        elapsed = time.monotonic() - started
        assert elapsed < LOCK_WAIT_S, f"{replica}: the claim waited {elapsed:.1f} s on slots another transaction holds"
        await holder.release()
    again = await queue.claim(worker_id="w3", lease_ms=60_000, limit=5, limits=limits)
    assert [j.id for j in again] == ["e2", "e3"], "let go, the slots are taken like any other"
