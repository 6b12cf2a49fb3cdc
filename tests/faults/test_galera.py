"""Multi-primary: a 3-node MariaDB Galera cluster on loopback, every node written at once.

On Galera a conflicting write loses at COMMIT (1213, a certification failure) or on insert (1062); locks are not
replicated, and a node may answer from a state a little behind the others. The package must treat every such
conflict as a lost race (or retry an idempotent write), never as a success and never as an error for the caller.

What the runs here saw is printed (run with -s) and kept in the module-level `FINDINGS` for the note.
"""

from __future__ import annotations

import asyncio
import collections
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import (
    ActionEntry,
    AttemptOutcome,
    MysqlJobQueue,
    ScheduleInput,
    create_mysql_job_queue,
    create_mysql_kv,
    create_scheduler,
    schedule_job_id,
)
from plitzi_jobs_mysql.mysql import claim as claim_module
from plitzi_jobs_mysql.mysql import queue as queue_module
from plitzi_jobs_mysql.mysql import session as session_module
from plitzi_jobs_mysql.testing import assert_totals_exact, fresh_database
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import open_pool
from ..harness.galera import GaleraCluster, galera_missing_reason
from ..support import Clock, job, wait_until

pytestmark = [pytest.mark.xdist_group("clusters"), pytest.mark.slow, pytest.mark.timeout(240)]

FINDINGS: dict[str, Any] = {}
JOBS = 5_000


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    reason = galera_missing_reason()
    if reason is not None:
        warnings.warn(reason, stacklevel=1)
        print("\n" + "!" * 100 + "\n" + reason + "\n" + "!" * 100)
        pytest.skip(reason)
    with GaleraCluster() as started:
        FINDINGS["cluster_start_s"] = round(started.start_seconds or 0, 1)
        print(f"\ngalera: 3 nodes synced in {started.start_seconds:.1f} s")
        yield started


def node_sql(url: str, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")  # a causal read: sees every write committed before
            cur.execute(statement, args)
            return list(cur.fetchall())
    finally:
        conn.close()


@pytest.fixture
def database(cluster: GaleraCluster) -> Iterator[list[str]]:
    """A fresh database made on node 1 (DDL replicates), as one URL per node."""
    with fresh_database(cluster.urls[0], "pjm_galera") as url:
        name = parse_mysql_url(url).database
        urls = [parse_mysql_url(node).with_database(name).render(hide_password=False) for node in cluster.urls]
        for node in cluster.urls:
            wait_until(lambda node=node: bool(node_sql(node, "SHOW DATABASES LIKE %s", (name,))), f"{name} on {node}")
        yield urls


async def open_node_pools(database: list[str], **options: Any) -> list[Any]:
    """One pool per node. Node 2's pool runs with autocommit off, so its conflicts arrive at COMMIT."""
    opened = [
        await open_pool(database[0], maxsize=12, **options),
        await open_pool(database[1], maxsize=12, autocommit=False, **options),
        await open_pool(database[2], maxsize=12, **options),
    ]
    # The tables made once, from node 1, and seen on every node before anyone writes.
    await create_mysql_job_queue(opened[0]).now()
    await create_mysql_kv(opened[0]).get("warm")
    for url in database:
        wait_until(lambda url=url: len(node_sql(url, "SHOW TABLES")) == 4, f"the tables on {url}")
    return opened


#: What a Galera pool needs so a node never answers a write from a state behind a write committed on another:
#: causality checks for reads (1), UPDATE/DELETE (2) and INSERT/REPLACE (4).
CAUSAL = "SET SESSION wsrep_sync_wait = 7"


@pytest.fixture(params=["default", "causal"])
async def pools(request: pytest.FixtureRequest, database: list[str]) -> AsyncIterator[list[Any]]:
    """Pools as users open them ("default"), and with `init_command` making every statement causal."""
    options = {"init_command": CAUSAL} if request.param == "causal" else {}
    opened = await open_node_pools(database, **options)
    yield opened
    for pool in opened:
        pool.close()
        await pool.wait_closed()


def pools_kind(pools: list[Any]) -> str:
    return "causal" if CAUSAL in str(getattr(pools[0], "_conn_kwargs", {}).get("init_command")) else "default"


class ConflictCounter:
    """Counts the conflicts the package met and what it made of them, by wrapping its `is_conflict`."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.codes: collections.Counter[str] = collections.Counter()
        for module, where in ((queue_module, "queue"), (claim_module, "queue"), (session_module, "retried")):
            original = module.is_conflict

            def counted(error: BaseException, original: Any = original, where: str = where) -> bool:
                answer = bool(original(error))
                if answer:
                    self.codes[f"{where}:{session_module.error_code(error)}"] += 1
                return answer

            monkeypatch.setattr(module, "is_conflict", counted)


async def test_claimers_and_settlers_on_different_nodes_drain_every_job_once(
    pools: list[Any], database: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conflicts = ConflictCounter(monkeypatch)
    queues: list[MysqlJobQueue] = [create_mysql_job_queue(pool, create_tables=False) for pool in pools]
    ids = [f"job-{n:05d}" for n in range(JOBS)]

    # Producers on every node; 300 ids are enqueued from all three at once, and each is still created once.
    started = time.monotonic()
    shared = ids[:300]
    own = [ids[300 + i :: 3] for i in range(3)]
    answers = await asyncio.gather(
        *(queues[i].enqueue_many([job(x, input={"n": x}) for x in shared + own[i]]) for i in range(3))
    )
    created = sum(a.count(True) for a in answers)
    enqueue_s = time.monotonic() - started
    assert created == JOBS, f"{created} creations answered True for {JOBS} distinct ids"
    wait_until(lambda: all(node_sql(u, "SELECT COUNT(*) FROM action_jobs")[0][0] == JOBS for u in database), "jobs")

    # Claimers on node i hand their jobs to a settler on node i+1: the claim and the settle meet on different
    # primaries.
    handed: list[asyncio.Queue[tuple[str, str] | None]] = [asyncio.Queue() for _ in range(3)]
    won: dict[str, list[str]] = collections.defaultdict(list)
    claimers_per_node = 3
    remaining = {"claimers": 3 * claimers_per_node}

    async def claimer(node: int, n: int) -> None:
        worker = f"node{node}-claimer{n}"
        idle = 0
        while idle < 5:
            jobs = await queues[node].claim(worker_id=worker, lease_ms=600_000, limit=8)
            if not jobs:
                idle += 1
                await asyncio.sleep(0.05 * idle)
                continue
            idle = 0
            for claimed in jobs:
                assert claimed.status == "running" and claimed.worker_id == worker and claimed.attempts == 1
                won[worker].append(claimed.id)
                await handed[(node + 1) % 3].put((claimed.id, worker))
        remaining["claimers"] -= 1
        if remaining["claimers"] == 0:
            for q in handed:
                for _ in range(4):
                    await q.put(None)

    async def settler(node: int) -> None:
        while (item := await handed[node].get()) is not None:
            job_id, worker = item
            await queues[node].settle(
                job_id=job_id,
                worker_id=worker,
                status="succeeded",
                run_id=f"run-{job_id}",
                attempt=AttemptOutcome(status="succeeded", worker_id=worker, run_id=f"run-{job_id}"),
            )

    started = time.monotonic()
    await asyncio.gather(
        *(claimer(node, n) for node in range(3) for n in range(claimers_per_node)),
        *(settler(node) for node in range(3) for _ in range(4)),
    )
    drain_s = time.monotonic() - started

    # Exactly once: every job claimed by one claimer, and the winners disjoint.
    claimed_ids = [x for ids_ in won.values() for x in ids_]
    assert len(claimed_ids) == len(set(claimed_ids)), "a job was handed to two claimers"
    assert sorted(claimed_ids) == ids

    def states(url: str) -> list[tuple[Any, ...]]:
        return node_sql(
            url,
            "SELECT status, attempts, JSON_LENGTH(history), COUNT(*) FROM action_jobs "
            "GROUP BY status, attempts, JSON_LENGTH(history)",
        )

    seen = {url: states(url) for url in database}
    FINDINGS[f"drain[{pools_kind(pools)}]"] = found = {
        "jobs": JOBS,
        "enqueue_s": round(enqueue_s, 2),
        "drain_s": round(drain_s, 2),
        "jobs_per_s": round(JOBS / drain_s),
        "conflicts": dict(conflicts.codes),
        "claimers": len(won),
        "states": seen[database[0]],
    }
    print(f"\ngalera drain ({pools_kind(pools)} pools): {found}")
    # A settle sent to a node that has not yet applied the claim finds no row held by that worker and does
    # nothing, silently: the job then stays running until its lease lapses and runs a second time.
    for url in database:
        assert seen[url] == [("succeeded", 1, 1, JOBS)], (
            f"on {url}: {seen[url]} (status, attempts, attempts in history, jobs): settles sent to another node "
            "than the claim were ignored"
        )
    rows = node_sql(database[0], "SELECT id, worker_id, history FROM action_jobs")
    owner = {x: w for w, ids_ in won.items() for x in ids_}
    for id_, worker, history in rows:
        assert worker.decode() == owner[id_.decode()]
        assert f'"worker_id": "{owner[id_.decode()]}"' in history.replace('":"', '": "')
    # The job totals each member keeps by its triggers (deltas replicated like any row) agree with a recount there.
    for queue in queues:
        await assert_totals_exact(queue)


class Lookups:
    def __init__(self, entries: dict[int, list[ActionEntry]]) -> None:
        self.entries = entries

    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        return self.entries.get(space_id, [])


async def test_schedules_swept_from_every_node_fire_once(
    pools: list[Any], database: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conflicts = ConflictCounter(monkeypatch)
    now = int((await create_mysql_job_queue(pools[0], create_tables=False).now()).timestamp() * 1000)
    # The replicas share one clock that stands still: the next minute's fire never comes due in the middle of the
    # rounds (on a loaded machine they can straddle a minute boundary, and that fire would be a second job).
    clock = Clock(now)
    queues = [create_mysql_job_queue(pool, create_tables=False, clock=clock) for pool in pools]
    spaces, per_space = 10, 10
    minute = 60_000
    # Every schedule is overdue: its fire was 5 minutes ago, so each fire carries 5 missed minutes.
    first_fire = (now // minute) * minute - 5 * minute
    for space in range(1, spaces + 1):
        await queues[space % 3].put_schedules(
            space_id=space,
            schedules=[
                ScheduleInput(
                    space_id=space,
                    action_id=f"act-{a}",
                    cron="* * * * *",
                    environment="main",
                    enabled=True,
                    next_run_at=first_fire,
                    max_attempts=3,
                )
                for a in range(per_space)
            ],
        )
    wait_until(
        lambda: all(
            node_sql(u, "SELECT COUNT(*) FROM action_schedules WHERE action_id <> ''")[0][0] == spaces * per_space
            for u in database
        ),
        "schedules on every node",
    )
    lookups = Lookups({})
    schedulers = [create_scheduler(queue=q, lookups=lookups, batch=1000) for q in queues]

    started = time.monotonic()
    results = []
    # Several rounds of three sweeps at once, so they meet on the same due rows; later rounds find nothing
    # due (each schedule jumped past now) unless a node's stale read shows it due again.
    for _ in range(4):
        results.extend(await asyncio.gather(*(s.sweep() for s in schedulers)))
    sweep_s = time.monotonic() - started

    enqueued = [x for r in results for x in r.enqueued]
    duplicates = [x for r in results for x in r.duplicates]
    missed = [m for r in results for m in r.missed]
    assert len(enqueued) == len(set(enqueued)) == spaces * per_space, "a fire produced two jobs, or none"
    expected = {schedule_job_id(s, f"act-{a}", first_fire) for s in range(1, spaces + 1) for a in range(per_space)}
    assert set(enqueued) == expected
    # Each overdue schedule's misses are reported once, by the replica that moved it.
    assert sorted((m.space_id, m.action_id) for m in missed) == sorted(
        (s, f"act-{a}") for s in range(1, spaces + 1) for a in range(per_space)
    )
    for url in database:
        jobs = node_sql(url, "SELECT id, missed FROM action_jobs")
        assert len(jobs) == spaces * per_space
        assert {j[0].decode() for j in jobs} == expected
        assert {j[1] for j in jobs} == {m.count for m in missed}
        schedules = node_sql(
            url,
            "SELECT next_run_at, last_fire_at, missed, COUNT(*) FROM action_schedules WHERE action_id <> '' "
            "GROUP BY next_run_at, last_fire_at, missed",
        )
        assert len(schedules) == 1 and schedules[0][1] == first_fire and schedules[0][3] == spaces * per_space
        assert schedules[0][0] > now and schedules[0][2] == missed[0].count
    FINDINGS[f"schedules[{pools_kind(pools)}]"] = {
        "schedules": spaces * per_space,
        "sweep_rounds": 4,
        "sweep_s": round(sweep_s, 2),
        "duplicates": len(duplicates),
        "missed_each": missed[0].count,
        "conflicts": dict(conflicts.codes),
    }
    print(f"\ngalera schedules ({pools_kind(pools)}): {FINDINGS[f'schedules[{pools_kind(pools)}]']}")


async def test_kv_swaps_racing_across_nodes_have_exactly_one_winner(
    pools: list[Any], database: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    conflicts = ConflictCounter(monkeypatch)
    kvs = [create_mysql_kv(pool, create_tables=False) for pool in pools]
    rounds, per_node = 60, 4
    raised: collections.Counter[str] = collections.Counter()
    started = time.monotonic()

    async def attempt(node: int, key: str, expected: str | None, value: str) -> bool:
        try:
            return await kvs[node].swap(key, expected, value, 60)
        except pymysql.err.MySQLError as error:
            raised[f"swap:{session_module.error_code(error)}"] += 1
            return False

    winners_absent, winners_value = [], []
    for r in range(rounds):
        key = f"race-{r}"
        contenders = [(node, f"n{node}-{i}") for node in range(3) for i in range(per_node)]
        # Only if absent: one of twelve writers on three primaries takes the key.
        got = await asyncio.gather(*(attempt(node, key, None, value) for node, value in contenders))
        winners = [c for c, ok in zip(contenders, got, strict=True) if ok]
        winners_absent.append(len(winners))
        if len(winners) != 1:
            continue
        holder = winners[0][1]
        wait_until(
            lambda key=key, holder=holder: all(
                node_sql(u, "SELECT v FROM action_kv WHERE k = %s", (key,)) == [(holder,)] for u in database
            ),
            f"{key} on every node",
        )
        # Compare-and-set from the winner's value: again exactly one.
        got = await asyncio.gather(*(attempt(node, key, holder, value + "-next") for node, value in contenders))
        winners2 = [c for c, ok in zip(contenders, got, strict=True) if ok]
        winners_value.append(len(winners2))
        stored = node_sql(database[0], "SELECT v FROM action_kv WHERE k = %s", (key,))
        if len(winners2) == 1:
            assert stored == [(winners2[0][1] + "-next",)]
    FINDINGS[f"kv[{pools_kind(pools)}]"] = {
        "rounds": rounds,
        "writers": 3 * per_node,
        "swap_s": round(time.monotonic() - started, 2),
        "conflicts_handled": dict(conflicts.codes),
        "conflicts_raised_to_caller": dict(raised),
        "winners_if_absent": dict(collections.Counter(winners_absent)),
        "winners_compare": dict(collections.Counter(winners_value)),
    }
    print(f"\ngalera kv ({pools_kind(pools)}): {FINDINGS[f'kv[{pools_kind(pools)}]']}")
    assert winners_absent == [1] * rounds, "a swap-if-absent race across nodes did not have exactly one winner"
    assert winners_value == [1] * rounds, "a compare-and-set race across nodes did not have exactly one winner"
    assert not raised, f"a Galera conflict reached the caller of swap(): {dict(raised)}"


async def test_every_statement_waits_for_the_node_to_be_causally_up_to_date(pools: list[Any]) -> None:
    """The deterministic half of the lagging-node guard: the adapter recognised each node as Galera."""
    for pool in pools:
        queue = create_mysql_job_queue(pool, create_tables=False)
        assert await queue.get_job([1], "nothing") is None
        assert queue._store.statement_prefix == session_module.GALERA_CAUSAL
        # A claim's compare-and-set bounds its lock wait in the same per-statement form (MariaDB only).
        assert queue._store.flavour.claim_prefix == (
            "SET STATEMENT innodb_lock_wait_timeout = 0, wsrep_sync_wait = 7 FOR "
        )
