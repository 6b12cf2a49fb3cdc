"""Multi-primary on MySQL: a 3-node MySQL 9.7 Group Replication cluster on loopback, every node written at once.

What Group Replication needs that Galera did not (DESIGN-NOTES, and the runs here): a write that loses
certification fails at COMMIT with 3101 ("Plugin instructed the server to rollback the current transaction") or
1180 ("Got error 149 … during COMMIT"), not 1213; and a node answers from a state behind the others unless the
session asks for `group_replication_consistency = 'BEFORE'` (the analogue of Galera's `wsrep_sync_wait`). The
adapter must treat every such loss as a lost race (or retry an idempotent write), and make its reads causal.

What the runs saw is printed (run with -s) and kept in `FINDINGS` for the note.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
import warnings
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import (
    ActionEntry,
    AttemptOutcome,
    JobInput,
    MysqlJobQueue,
    ScheduleInput,
    create_job_worker,
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
from ..harness.fires import assert_fires_reported
from ..harness.group_replication import GroupReplicationCluster, group_replication_missing_reason
from ..harness.haproxy import HaProxy, haproxy_binary
from ..support import Clock

pytestmark = [pytest.mark.xdist_group("clusters"), pytest.mark.slow, pytest.mark.timeout(300)]

FINDINGS: dict[str, Any] = {}
JOBS = 5_000
CONSISTENT = "SET SESSION group_replication_consistency = 'BEFORE'"


@pytest.fixture(scope="module")
def cluster() -> Iterator[GroupReplicationCluster]:
    reason = group_replication_missing_reason()
    if reason is not None:
        warnings.warn(reason, stacklevel=1)
        print("\n" + "!" * 100 + "\n" + reason + "\n" + "!" * 100)
        pytest.skip(reason)
    with GroupReplicationCluster() as started:
        FINDINGS["cluster_start_s"] = round(started.start_seconds or 0, 1)
        print(f"\ngroup replication: 3 members ONLINE in {started.start_seconds:.1f} s")
        yield started


def node_sql(url: str, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
    """One statement, read causally (it sees every transaction the group committed before it)."""
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True, connect_timeout=3)
    try:
        with conn.cursor() as cur:
            cur.execute(CONSISTENT)
            cur.execute(statement, args)
            return list(cur.fetchall())
    finally:
        conn.close()


def wait_for(condition: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def database(cluster: GroupReplicationCluster) -> Iterator[list[str]]:
    """A fresh database made on node 1 (DDL replicates), as one URL per node."""
    with fresh_database(cluster.urls[0], "pjm_gr") as url:
        name = parse_mysql_url(url).database
        urls = [parse_mysql_url(node).with_database(name).render(hide_password=False) for node in cluster.urls]
        for node in cluster.urls:
            wait_for(lambda node=node: bool(node_sql(node, "SHOW DATABASES LIKE %s", (name,))), f"{name} on {node}")
        yield urls


@pytest.fixture
async def pools(database: list[str]) -> AsyncIterator[list[Any]]:
    """One pool per node, opened as users do (no session settings). Node 2's runs with autocommit off, so its
    certification failures arrive at COMMIT."""
    opened = [
        await open_pool(database[0], maxsize=12),
        await open_pool(database[1], maxsize=12, autocommit=False),
        await open_pool(database[2], maxsize=12),
    ]
    await create_mysql_job_queue(opened[0]).now()
    await create_mysql_kv(opened[0]).get("warm")
    for url in database:
        wait_for(lambda url=url: len(node_sql(url, "SHOW TABLES")) == 4, f"the tables on {url}")
    yield opened
    for pool in opened:
        pool.close()
        await pool.wait_closed()


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


def job(id: str, **fields: Any) -> JobInput:
    values: dict[str, Any] = {
        "space_id": 1,
        "action_id": "a",
        "environment": "main",
        "trigger": "t",
        "input": {"n": id},
        "due_at": 0,
        "max_attempts": 3,
    }
    values.update(fields)
    return JobInput(id=id, **values)


async def test_every_node_is_recognised_and_reads_causally(pools: list[Any]) -> None:
    for pool in pools:
        queue = create_mysql_job_queue(pool, create_tables=False)
        assert await queue.get_job([1], "nothing") is None
        flavour = queue._store.flavour
        assert flavour.group_replication and not flavour.mariadb and not flavour.galera
        assert flavour.session_setup == CONSISTENT
        async with pool.acquire() as conn, conn.cursor() as cur:
            await cur.execute("SELECT @@SESSION.group_replication_consistency")
            assert (await cur.fetchone())[0] == "BEFORE"
            if not conn.get_autocommit():
                await conn.rollback()


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
    answers = await asyncio.gather(*(queues[i].enqueue_many([job(x) for x in shared + own[i]]) for i in range(3)))
    created = sum(a.count(True) for a in answers)
    enqueue_s = time.monotonic() - started
    assert created == JOBS, f"{created} creations answered True for {JOBS} distinct ids"
    wait_for(lambda: all(node_sql(u, "SELECT COUNT(*) FROM action_jobs")[0][0] == JOBS for u in database), "jobs")

    # Claimers on node i hand their jobs to a settler on node i+1: the claim and the settle meet on different
    # primaries, the settle right after the claim committed elsewhere.
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
    FINDINGS["drain"] = found = {
        "jobs": JOBS,
        "enqueue_s": round(enqueue_s, 2),
        "drain_s": round(drain_s, 2),
        "jobs_per_s": round(JOBS / drain_s),
        "conflicts": dict(conflicts.codes),
        "claimers": len(won),
    }
    print(f"\ngroup replication drain: {found}")
    for url in database:
        assert seen[url] == [("succeeded", 1, 1, JOBS)], (
            f"on {url}: {seen[url]} (status, attempts, attempts in history, jobs): settles sent to another node "
            "than the claim were ignored"
        )
    rows = node_sql(database[0], "SELECT id, worker_id FROM action_jobs")
    owner = {x: w for w, ids_ in won.items() for x in ids_}
    assert all(worker.decode() == owner[id_.decode()] for id_, worker in rows)
    # The job totals each member keeps by its triggers (deltas replicated like any row) agree with a recount there.
    for queue in queues:
        await assert_totals_exact(queue)


class Lookups:
    async def list_actions(self, space_id: int) -> list[ActionEntry]:
        return []


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
    first_fire = (now // minute) * minute - 5 * minute  # each fire carries 5 missed minutes
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
    wait_for(
        lambda: all(
            node_sql(u, "SELECT COUNT(*) FROM action_schedules WHERE action_id <> ''")[0][0] == spaces * per_space
            for u in database
        ),
        "schedules on every node",
    )
    schedulers = [create_scheduler(queue=q, lookups=Lookups(), batch=1000) for q in queues]
    started = time.monotonic()
    results = []
    for _ in range(4):  # rounds of three sweeps at once, meeting on the same due rows
        results.extend(await asyncio.gather(*(s.sweep() for s in schedulers)))
    sweep_s = time.monotonic() - started

    enqueued = [x for r in results for x in r.enqueued]
    missed = [m for r in results for m in r.missed]
    assert len(enqueued) == len(set(enqueued)) == spaces * per_space, "a fire produced two jobs, or none"
    expected = {schedule_job_id(s, f"act-{a}", first_fire) for s in range(1, spaces + 1) for a in range(per_space)}
    assert set(enqueued) == expected
    assert sorted((m.space_id, m.action_id) for m in missed) == sorted(
        (s, f"act-{a}") for s in range(1, spaces + 1) for a in range(per_space)
    )
    for url in database:
        jobs = node_sql(url, "SELECT id, missed FROM action_jobs")
        assert {j[0].decode() for j in jobs} == expected and len(jobs) == spaces * per_space
        schedules = node_sql(
            url,
            "SELECT next_run_at, last_fire_at, missed, COUNT(*) FROM action_schedules WHERE action_id <> '' "
            "GROUP BY next_run_at, last_fire_at, missed",
        )
        assert len(schedules) == 1 and schedules[0][1] == first_fire and schedules[0][3] == spaces * per_space
        assert schedules[0][0] > now and schedules[0][2] == missed[0].count
    FINDINGS["schedules"] = {
        "schedules": spaces * per_space,
        "sweep_rounds": 4,
        "sweep_s": round(sweep_s, 2),
        "duplicates": sum(len(r.duplicates) for r in results),
        "conflicts": dict(conflicts.codes),
    }
    print(f"\ngroup replication schedules: {FINDINGS['schedules']}")


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
        got = await asyncio.gather(*(attempt(node, key, None, value) for node, value in contenders))
        winners = [c for c, ok in zip(contenders, got, strict=True) if ok]
        winners_absent.append(len(winners))
        if len(winners) != 1:
            continue
        holder = winners[0][1]
        got = await asyncio.gather(*(attempt(node, key, holder, value + "-next") for node, value in contenders))
        winners2 = [c for c, ok in zip(contenders, got, strict=True) if ok]
        winners_value.append(len(winners2))
        if len(winners2) == 1:
            stored = node_sql(database[2], "SELECT v FROM action_kv WHERE k = %s", (key,))
            assert stored == [(winners2[0][1] + "-next",)]
    FINDINGS["kv"] = {
        "rounds": rounds,
        "writers": 3 * per_node,
        "swap_s": round(time.monotonic() - started, 2),
        "conflicts_handled": dict(conflicts.codes),
        "conflicts_raised_to_caller": dict(raised),
    }
    print(f"\ngroup replication kv: {FINDINGS['kv']}")
    assert winners_absent == [1] * rounds, "a swap-if-absent race across nodes did not have exactly one winner"
    assert winners_value == [1] * rounds, "a compare-and-set race across nodes did not have exactly one winner"
    assert not raised, f"a certification failure reached the caller of swap(): {dict(raised)}"


# -- a member SIGKILLed mid-drain, behind HAProxy ------------------------------------------------------------

KILL_AFTER = 1_500
#: Longer than the group's stall when a member is lost (it is suspected after ~5 s and, with
#: group_replication_member_expel_timeout = 0 as here, expelled about a second later; the default expel timeout
#: of 5 s makes it ~21 s): a settle queued behind the stall must still find its lease.
LEASE_MS = 15_000
MINUTE = 60_000
#: What the runtime may meet while a member dies and rejoins: lost or refused connections (2003, 2006, 2013), a
#: member leaving or joining (3100 "Error on observer while running replication hook", 3101/1180 certification,
#: 1290 super_read_only while it recovers, 3098 a member not ONLINE), a deadlock 1213; also a dropped connection.
SURVIVABLE = {1180, 1213, 1290, 3098, 3100, 3101, 2003, 2006, 2013, 2014, 2055}


def survivable(error: BaseException) -> bool:
    code = error.args[0] if isinstance(error, pymysql.err.MySQLError) and error.args else None
    if code in SURVIVABLE or isinstance(error, pymysql.err.InterfaceError):
        return True
    return isinstance(error, (ConnectionError, OSError)) and not isinstance(error, TimeoutError)


async def wait_until(condition: Any, what: str, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s} s")
        await asyncio.sleep(0.05)


async def test_a_member_sigkilled_mid_drain_loses_and_repeats_nothing_and_rejoins(
    cluster: GroupReplicationCluster,
) -> None:
    if haproxy_binary() is None:
        pytest.skip("GROUP REPLICATION BEHIND HAPROXY NOT RUN: haproxy is missing (apt-get install haproxy)")
    await drill_behind_haproxy(cluster)


async def drill_behind_haproxy(cluster: GroupReplicationCluster, jobs: int = JOBS, rounds: int = 1) -> None:
    """The drill on a database of its own behind a proxy of its own (`make soak FAULT=group-replication`)."""
    with fresh_database(cluster.urls[0], "pjm_gr_kill") as root_url, HaProxy([n.port for n in cluster.nodes]) as proxy:
        name = parse_mysql_url(root_url).database or ""
        for node in cluster.nodes:
            wait_for(lambda node=node: bool(node_sql(node.url, "SHOW DATABASES LIKE %s", (name,))), "the database")
        url = replace(parse_mysql_url(root_url), port=proxy.port).render(hide_password=False)
        await drill(cluster, url, name, jobs, rounds)


async def drill(cluster: GroupReplicationCluster, url: str, database: str, jobs: int = JOBS, rounds: int = 1) -> None:
    """`jobs` jobs drained through `url` (the proxy) by two workers and three sweeping schedulers while the member
    most connections use is SIGKILLed and rejoins, `rounds` times; then the checks."""
    pools = [await open_pool(url, maxsize=10, connect_timeout=3) for _ in range(5)]
    queues = [create_mysql_job_queue(pool) for pool in pools]
    await queues[0].now()
    runs: collections.Counter[str] = collections.Counter()
    ran_at: dict[str, list[float]] = collections.defaultdict(list)
    errors: collections.Counter[str] = collections.Counter()
    fatal: list[BaseException] = []
    stop = asyncio.Event()

    def on_error(error: BaseException) -> None:
        code = error.args[0] if isinstance(error, pymysql.err.MySQLError) and error.args else None
        errors[f"{type(error).__name__}:{code}"] += 1
        cause = error.__cause__ if error.__cause__ is not None else error
        if not (survivable(error) or survivable(cause)):
            fatal.append(error)

    await queues[0].enqueue_many(
        [
            JobInput(
                id=f"job-{n:05d}",
                space_id=1,
                action_id="a",
                environment="main",
                trigger="t",
                input={},
                due_at=0,
                max_attempts=5,
            )
            for n in range(jobs)
        ]
    )
    now = int((await queues[0].now()).timestamp() * 1000)
    first_fire = (now // MINUTE) * MINUTE - 5 * MINUTE
    await queues[0].put_schedules(
        space_id=2,
        schedules=[
            ScheduleInput(
                space_id=2,
                action_id=f"act-{a}",
                cron="* * * * *",
                environment="main",
                enabled=True,
                next_run_at=first_fire,
                max_attempts=3,
            )
            for a in range(10)
        ],
    )

    def handler_for(worker: str) -> Any:
        async def handler(job: Any) -> str:
            runs[job.id] += 1
            ran_at[worker].append(time.monotonic())
            return "done"

        return handler

    workers = [
        create_job_worker(
            queue=queues[i],
            handler=handler_for(f"w{i}"),
            workers=8,
            poll_ms=100,
            lease_ms=LEASE_MS,
            backoff_base_ms=100,
            backoff_max_ms=500,
            kv=create_mysql_kv(pools[i]),
            worker_id=f"w{i}",
            on_error=on_error,
        )
        for i in range(2)
    ]
    fires: list[str] = []
    duplicates: list[str] = []

    async def sweeper(queue: Any) -> None:
        scheduler = create_scheduler(queue=queue, lookups=Lookups())
        while not stop.is_set():
            try:
                swept = await scheduler.sweep()
                fires.extend(swept.enqueued)
                duplicates.extend(swept.duplicates)
            except Exception as error:
                on_error(error)
            await asyncio.sleep(0.2)

    sweepers = [asyncio.create_task(sweeper(queues[i])) for i in range(2, 5)]
    for worker in workers:
        worker.start()
    kills: list[dict[str, Any]] = []
    try:
        started = time.monotonic()
        for round_ in range(rounds):
            at = KILL_AFTER if rounds == 1 else (round_ + 1) * jobs // (rounds + 1)
            await wait_until(lambda at=at: len(runs) >= at, f"{at} runs", 120)
            counts = [
                (
                    await asyncio.to_thread(
                        node_sql,
                        n.url,
                        "SELECT COUNT(*) FROM information_schema.processlist WHERE db = %s",
                        (database,),
                    )
                )[0][0]
                for n in cluster.nodes
            ]
            victim = max(range(len(cluster.nodes)), key=lambda i: counts[i])
            await asyncio.to_thread(cluster.kill, victim + 1)
            killed_at, runs_at_kill = time.monotonic(), len(runs)
            moved = min(runs_at_kill + 500, jobs)
            await wait_until(lambda moved=moved: len(runs) >= moved, "the drain moving on through the survivors", 90)
            moved_on_s = time.monotonic() - killed_at
            survivor = cluster.nodes[(victim + 1) % len(cluster.nodes)]
            expelled_s = await asyncio.to_thread(cluster.wait_members, survivor, len(cluster.nodes) - 1)
            rejoin_s = await asyncio.to_thread(cluster.rejoin, victim + 1)
            next_run_s = min((t for v in ran_at.values() for t in v if t > killed_at), default=killed_at) - killed_at
            kills.append(
                {
                    "node": victim + 1,
                    "connections_per_node": counts,
                    "after_runs": runs_at_kill,
                    "next_run_s": round(next_run_s, 1),
                    "moved_on_s": round(moved_on_s, 1),
                    "expelled_s_after_moved_on": round(expelled_s, 1),
                    "rejoin_s": round(rejoin_s, 1),
                    "killed_at": killed_at,
                }
            )
        await wait_until(lambda: len(runs) >= jobs, "every job running", 120)
        db_url = survivor.url.rstrip("/") + f"/{database}"
        deadline = time.monotonic() + 60
        while (
            await asyncio.to_thread(node_sql, db_url, "SELECT COUNT(*) FROM action_jobs WHERE status <> 'succeeded'")
        )[0][0]:
            assert time.monotonic() < deadline, "jobs still unsettled 60 s after every job ran"
            await asyncio.sleep(0.2)
        drain_s = time.monotonic() - started
    finally:
        stop.set()
        await asyncio.gather(*sweepers, return_exceptions=True)
        for worker in workers:
            await worker.stop()
        for pool in pools:
            pool.close()
            await pool.wait_closed()

    rows = node_sql(db_url, "SELECT id, status, `trigger`, due_at, space_id, action_id, history FROM action_jobs")
    rows_by_id = {r[0].decode(): r for r in rows}
    fired = [r for r in rows if r[2] == b"schedule"]
    lost = sum(r[6].count('"lost"') for r in rows_by_id.values())
    FINDINGS["sigkill"] = found = {
        "jobs": jobs,
        "drain_s": round(drain_s, 1),
        "lost_attempts": lost,
        "fires": len(fired),
        "errors": dict(errors),
        "kills": [{k: v for k, v in kill.items() if k != "killed_at"} for kill in kills],
    }
    print(f"\ngroup replication, member SIGKILLed behind haproxy: {found}")
    assert len(rows_by_id) == jobs + len(fired) and {r[1] for r in rows_by_id.values()} == {"succeeded"}
    assert set(runs) == set(rows_by_id) and set(runs.values()) == {1}, collections.Counter(runs.values())
    found["fires_landed_unseen"] = assert_fires_reported(fires, duplicates, {r[0].decode() for r in fired})
    per_schedule: dict[str, list[int]] = collections.defaultdict(list)
    for r in fired:
        per_schedule[r[5].decode()].append(int(r[3]))
    assert sorted(per_schedule) == sorted(f"act-{a}" for a in range(10))
    for instants in per_schedule.values():
        ordered = sorted(instants)
        assert ordered[0] == first_fire and all(b - a == MINUTE for a, b in itertools.pairwise(ordered[1:])), ordered
    assert {schedule_job_id(2, f"act-{a}", first_fire) for a in range(10)} <= set(fires) | set(duplicates)
    for kill in kills:
        assert all(any(t > kill["killed_at"] for t in ran_at[w]) for w in ("w0", "w1")), ("a worker stopped", kill)
    assert not fatal, fatal[:3]
    assert all(len(n.member_states()) == len(cluster.nodes) for n in cluster.nodes), "the member did not rejoin"
