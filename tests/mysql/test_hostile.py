"""Hostile input through every public entry point, beyond what the contract suites already prove.

The contract (`plitzi_jobs_mysql.testing.contract`) round-trips one hostile string through a job's id, action id,
key and input, and refuses over-long ids, keys and inputs. Here: every OTHER text field (environment, trigger,
worker and run ids, errors, attempts written into the history in SQL, schedules, the kv's counters and swaps, the
list filters and the CLI), the character-versus-byte bounds of each of them, invalid cron and zones, inputs JSON
cannot hold, and a snapshot of the tables before and after every refused call — on the memory stores, on MySQL,
and on MySQL under `sql_mode=''` (where the server truncates with only a warning).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pymysql
import pytest

from plitzi_jobs_mysql import (
    ActionEntry,
    AttemptOutcome,
    JobQueue,
    KvStore,
    ScheduleInput,
    ScheduleTrigger,
    create_memory_job_queue,
    create_memory_kv,
    create_mysql_job_queue,
    create_mysql_kv,
    create_scheduler,
    schedule_for,
    schedule_job_id,
)
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import flavour_database, open_pool, session_flavours
from ..support import eventually, job

HOSTILE = [
    "it's",
    '"double" \\"escaped\\"',
    "back\\slash\\",
    "\\'; DROP TABLE action_jobs; --",
    "' OR '1'='1",
    "%s %(x)s {} {0} %%",
    "NUL\x00inside\x00",
    "😀🇩🇪👨‍👩‍👧 𝔘𝔫𝔦",
    "\u202eevil-rtl",
    "a ",
    " ",
    "\t\n\r\x1b[31m",
    '$.history[0] ", "attempt": 99, "x": "',
    "\\u0000 \\n",
    "`backtick` */ /*",
    "LIKE %_ \\%",
    "e\u0301",
]
EMOJI = "😀"  # four bytes of UTF-8


def sched(action_id: str, *, space_id: int = 1, cron: str = "*/5 * * * *", **fields: Any) -> ScheduleInput:
    values: dict[str, Any] = {"environment": "main", "enabled": True, "next_run_at": 1_000, "max_attempts": 3}
    values.update(fields)
    return ScheduleInput(space_id=space_id, action_id=action_id, cron=cron, **values)


@dataclass
class Stores:
    kind: str
    queue: Any
    kv: Any
    url: str | None = None
    kv_keys: tuple[str, ...] = ()

    async def snapshot(self) -> Any:
        """Everything the stores hold, to compare before and after a refused call."""
        if self.url is not None:
            conn = pymysql.connect(**parse_mysql_url(self.url).pymysql_kwargs(), autocommit=True)
            try:
                with conn.cursor() as cur:
                    out = []
                    for table in ("action_jobs", "action_schedules", "action_kv"):
                        cur.execute(f"SELECT * FROM {table} ORDER BY 1, 2")
                        out.append(cur.fetchall())
                    return out
            finally:
                conn.close()
        page = await self.queue.list_jobs(space_ids=[1, 2], limit=10_000)
        return (
            page.total,
            sorted(map(repr, page.jobs)),
            await self.queue.list_schedules([1, 2]),
            [await self.kv.get(k) for k in self.kv_keys],
        )


#: The memory stores, and the MySQL ones on each server flavour, as pools open them and with `sql_mode=''`.
STORE_KINDS = ["memory", *(f"{flavour}{mode}" for flavour in session_flavours() for mode in ("", "-sql-mode-empty"))]


@pytest.fixture(params=STORE_KINDS)
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[Stores]:
    if request.param == "memory":
        yield Stores("memory", create_memory_job_queue(), create_memory_kv(), kv_keys=("k", *HOSTILE))
        return
    options = {"init_command": "SET SESSION sql_mode = ''"} if request.param.endswith("empty") else {}
    with flavour_database(request, request.param.removesuffix("-sql-mode-empty")) as url:
        pool = await open_pool(url, **options)
        try:
            queue, kv = create_mysql_job_queue(pool), create_mysql_kv(pool)
            await kv.get("first use")  # the tables exist before the first snapshot
            yield Stores(request.param, queue, kv, url=url)
        finally:
            pool.close()
            await pool.wait_closed()


# -- text round trips as data, through every field -----------------------------------------------------------


async def test_hostile_text_round_trips_through_the_whole_life_of_a_job(stores: Stores) -> None:
    queue: JobQueue = stores.queue
    for n, h in enumerate(HOSTILE):
        job_id, worker, other = f"{h}#{n}", f"{h}|w1", f"{h}|w2"
        data = {h: [h, {"nested": h}], "n": n}
        assert await queue.enqueue(job(job_id, action_id=h, environment=h, trigger=h, key=h, input=data))
        assert await queue.enqueue(job(job_id, action_id="other")) is False
        # A claim by a hostile worker whose lease lapses: the takeover writes its `lost` attempt, naming the old
        # holder, into the history in SQL.
        [claimed] = await queue.claim(worker_id=worker, lease_ms=1, limit=1)
        assert (claimed.id, claimed.worker_id, claimed.input) == (job_id, worker, data)
        [taken] = await eventually(
            lambda other=other: queue.claim(worker_id=other, lease_ms=60_000, limit=1), bool, "the takeover"
        )
        assert taken.id == job_id and taken.history[-1].worker_id == worker
        assert await queue.heartbeat(job_ids=[job_id], worker_id=other, lease_ms=60_000) == []
        assert await queue.cancel([1], job_id) is True
        assert await queue.heartbeat(job_ids=[job_id], worker_id=other, lease_ms=60_000) == [job_id]
        await queue.settle(
            job_id=job_id,
            worker_id=other,
            status="failed",
            run_id=h,
            error=h,
            attempt=AttemptOutcome(status="cancelled", worker_id=other, run_id=h, error=h),
        )
        found = await queue.get_job([1], job_id)
        assert found is not None
        assert (found.id, found.action_id, found.environment, found.trigger, found.key, found.input) == (
            job_id,
            h,
            h,
            h,
            h,
            data,
        )
        assert (found.status, found.run_id, found.error, found.worker_id) == ("failed", h, h, other)
        assert [(a.attempt, a.status, a.worker_id, a.run_id, a.error) for a in found.history] == [
            (1, "lost", worker, None, found.history[0].error),
            (2, "cancelled", other, h, h),
        ]
        # The filters match the text exactly and nothing else.
        page = await queue.list_jobs(space_ids=[1], action_id=h)
        assert [j.id for j in page.jobs] == [job_id] and page.total == 1
        assert await queue.requeue([1], job_id) is True
        assert await queue.cancel_pending(space_id=1, key=h, older_than=job_id) == 0
        assert await queue.cancel_pending(space_id=1, key=h) == 1
    page = await queue.list_jobs(space_ids=[1], limit=100)
    assert page.total == len(HOSTILE) and {j.status for j in page.jobs} == {"cancelled"}
    # SQL fragments and wildcards as filters select nothing.
    for fragment in ["' OR 'x'='x", "%", "_", "*", "action' --"]:
        assert (await queue.list_jobs(space_ids=[1], action_id=fragment)).total == 0
        assert await queue.get_job([1], fragment) is None
        assert await queue.cancel([1], fragment) is False
        assert await queue.requeue([1], fragment) is False
        assert await queue.cancel_pending(space_id=1, key=fragment) == 0


async def test_hostile_schedules_round_trip_and_fire_under_their_own_ids(stores: Stores) -> None:
    queue: JobQueue = stores.queue
    wanted = [sched(h, environment=h, timezone="Europe/Berlin" if n % 2 else None) for n, h in enumerate(HOSTILE)]
    await queue.put_schedules(space_id=1, schedules=wanted)
    listed = await queue.list_schedules([1])
    assert sorted((s.action_id, s.environment, s.timezone) for s in listed) == sorted(
        (s.action_id, s.environment, s.timezone) for s in wanted
    )
    due = await queue.due_schedules(100)
    assert sorted(s.action_id for s in due) == sorted(HOSTILE)

    class NoLookups:
        async def list_actions(self, space_id: int) -> list[ActionEntry]:
            return []

    result = await create_scheduler(queue=queue, lookups=NoLookups()).sweep()
    assert sorted(result.enqueued) == sorted(schedule_job_id(1, h, 1_000) for h in HOSTILE)
    for h in HOSTILE:
        fired = await queue.get_job([1], schedule_job_id(1, h, 1_000))
        assert fired is not None and fired.action_id == h and fired.environment == h and fired.trigger == "schedule"
        assert not await queue.advance_schedule(space_id=1, action_id=h, from_at=1_000, to_at=2_000, missed=0)
    for s in await queue.list_schedules([1]):
        assert s.last_fire_at == 1_000 and s.next_run_at > 1_000  # each moved on once, past its fire
    # One space's hostile set never touches another's, and SQL fragments as ids replace nothing else.
    await queue.put_schedules(space_id=2, schedules=[sched("' OR '1'='1", space_id=2)])
    await queue.put_schedules(space_id=2, schedules=[sched("%", space_id=2)])
    assert [s.action_id for s in await queue.list_schedules([2])] == ["%"]
    assert len(await queue.list_schedules([1])) == len(HOSTILE)


async def test_hostile_kv_keys_and_values_are_data(stores: Stores) -> None:
    kv: KvStore = stores.kv
    await kv.set("k", "untouched")
    for n, h in enumerate(HOSTILE):
        await kv.set(h, h + h)
        assert await kv.get(h) == h + h
        assert await kv.swap(h, h, h + "!") is False
        assert await kv.swap(h, h + h, h, ttl_seconds=60) is True
        assert await kv.get(h) == h
        await kv.expire(h, 60)
        counter = h + "#n"
        assert await kv.increment(counter, n + 1) == n + 1
        assert await kv.get(counter) == str(n + 1)
        with pytest.raises(ValueError):
            await kv.increment(h)
        assert await kv.get(h) == h
    for fragment in ["' OR 'x'='x", "%", "_", "*", "k' --", "k%"]:
        await kv.delete(fragment)
        assert await kv.swap(fragment, "untouched", "stolen") is False
    assert await kv.get("k") == "untouched"
    for h in HOSTILE:
        await kv.delete(h)
        assert await kv.get(h) is None
        assert await kv.get(h + "#n") is not None
    assert await kv.get("k") == "untouched"


# -- the bounds, in characters and in bytes ---------------------------------------------------------------------


async def test_every_bounded_field_holds_its_limit_in_four_byte_characters(stores: Stores) -> None:
    queue: JobQueue = stores.queue
    longest, name = EMOJI * 191, EMOJI * 64
    error = EMOJI * 65_535
    assert await queue.enqueue(job("j", environment=name, trigger=name))
    [claimed] = await queue.claim(worker_id=longest, lease_ms=60_000, limit=1)
    assert claimed.worker_id == longest
    assert await queue.heartbeat(job_ids=["j"], worker_id=longest, lease_ms=60_000) == []
    await queue.settle(
        job_id="j",
        worker_id=longest,
        status="dead",
        run_id=longest,
        error=error,
        attempt=AttemptOutcome(status="failed", worker_id=longest, run_id=longest, error=error),
    )
    found = await queue.get_job([1], "j")
    assert found is not None
    assert (found.environment, found.trigger, found.worker_id, found.run_id, found.error) == (
        name,
        name,
        longest,
        longest,
        error,
    )
    assert found.history[0].worker_id == longest and found.history[0].error == error
    assert found.history[0].run_id == longest
    if stores.url is not None:
        rows = pymysql.connect(**parse_mysql_url(stores.url).pymysql_kwargs(), autocommit=True)
        try:
            with rows.cursor() as cur:
                cur.execute(
                    "SELECT LENGTH(environment), LENGTH(`trigger`), LENGTH(worker_id), LENGTH(run_id), "
                    "CHAR_LENGTH(error), LENGTH(error) FROM action_jobs WHERE id = 'j'"
                )
                assert cur.fetchone() == (256, 256, 764, 764, 65_535, 262_140)
        finally:
            rows.close()


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda q: q.claim(worker_id=EMOJI * 192, lease_ms=1_000, limit=1), id="claim-worker"),
        pytest.param(lambda q: q.heartbeat(job_ids=["j"], worker_id=EMOJI * 192, lease_ms=1), id="beat-worker"),
        pytest.param(lambda q: q.heartbeat(job_ids=[EMOJI * 192], worker_id="w", lease_ms=1), id="beat-id"),
        pytest.param(
            lambda q: q.settle(job_id="j", worker_id="w", status="failed", error="x" * 65_536), id="settle-error"
        ),
        pytest.param(
            lambda q: q.settle(job_id="j", worker_id="w", status="failed", run_id=EMOJI * 192), id="settle-run"
        ),
        pytest.param(
            lambda q: q.settle(job_id="j", worker_id="w", status="failed", error="\ud800"), id="settle-surrogate"
        ),
        pytest.param(
            lambda q: q.settle(
                job_id="j",
                worker_id="w",
                status="failed",
                attempt=AttemptOutcome(status="failed", worker_id="w", error=EMOJI * 65_536),
            ),
            id="settle-attempt-error",
        ),
        pytest.param(
            lambda q: q.settle(
                job_id="j",
                worker_id="w",
                status="failed",
                attempt=AttemptOutcome(status="failed", worker_id=EMOJI * 192),
            ),
            id="settle-attempt-worker",
        ),
        pytest.param(lambda q: q.settle(job_id="j", worker_id="w", status="succeeded'; --"), id="settle-status"),
        pytest.param(
            lambda q: q.advance_schedule(space_id=1, action_id=EMOJI * 192, from_at=1_000, to_at=2_000, missed=0),
            id="advance-action",
        ),
        pytest.param(lambda q: q.cancel_pending(space_id=1, key=EMOJI * 192), id="cancel-key"),
        pytest.param(lambda q: q.cancel_pending(space_id=1, key="k", older_than=EMOJI * 192), id="cancel-older"),
        pytest.param(lambda q: q.list_jobs(space_ids=[1], action_id=EMOJI * 192), id="list-action"),
        pytest.param(lambda q: q.list_jobs(space_ids=[1], status="pending' OR 1=1 --"), id="list-status"),
        pytest.param(lambda q: q.get_job([1], EMOJI * 192), id="get-id"),
        pytest.param(lambda q: q.requeue([1], "\ud800"), id="requeue-surrogate"),
        pytest.param(lambda q: q.cancel([1], EMOJI * 192), id="cancel-id"),
        pytest.param(lambda q: q.enqueue(job("x", environment=EMOJI * 65)), id="enqueue-environment"),
        pytest.param(lambda q: q.enqueue(job("x", trigger=EMOJI * 65)), id="enqueue-trigger"),
        pytest.param(
            lambda q: q.enqueue(job("x", input={"s": EMOJI * (4 * 1024 * 1024)})), id="enqueue-input-bytes-not-chars"
        ),
        pytest.param(
            lambda q: q.enqueue_many([job("x"), job("y", input={"s": EMOJI * (4 * 1024 * 1024)})]),
            id="enqueue-many-input-bytes",
        ),
        pytest.param(
            lambda q: q.put_schedules(space_id=1, schedules=[sched("ok"), sched(EMOJI * 192)]), id="schedule-action"
        ),
        pytest.param(
            lambda q: q.put_schedules(space_id=1, schedules=[sched("ok"), sched("x", environment="e" * 65)]),
            id="schedule-environment",
        ),
    ],
)
async def test_past_a_bound_is_a_clear_error_and_writes_nothing(
    stores: Stores, call: Callable[[JobQueue], Awaitable[Any]]
) -> None:
    queue: JobQueue = stores.queue
    await queue.enqueue(job("j"))
    await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    await queue.put_schedules(space_id=1, schedules=[sched("kept")])
    before = await stores.snapshot()
    with pytest.raises(ValueError) as raised:
        await call(queue)
    assert str(raised.value) and "\n" not in str(raised.value)
    assert await stores.snapshot() == before


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda kv: kv.set("k", EMOJI * (4 * 1024 * 1024) + "x"), id="value-bytes-not-chars"),
        pytest.param(lambda kv: kv.swap("k", None, EMOJI * (4 * 1024 * 1024) + "x"), id="swap-value-bytes"),
        pytest.param(lambda kv: kv.swap("k", "untouched", "v", ttl_seconds=float("nan")), id="swap-nan-ttl"),
        pytest.param(lambda kv: kv.swap(EMOJI * 191 + "x", None, "v"), id="swap-key-765-bytes"),
        pytest.param(lambda kv: kv.increment(EMOJI * 192), id="increment-key"),
        pytest.param(lambda kv: kv.increment("k", 2**63), id="increment-amount"),
        pytest.param(lambda kv: kv.expire("k", float("nan")), id="expire-nan"),
        pytest.param(lambda kv: kv.expire("k", 11 * 366 * 86_400), id="expire-eleven-years"),
        pytest.param(lambda kv: kv.delete("\udfff"), id="delete-surrogate"),
    ],
)
async def test_kv_past_a_bound_is_a_clear_error_and_writes_nothing(
    stores: Stores, call: Callable[[KvStore], Awaitable[Any]]
) -> None:
    await stores.kv.set("k", "untouched")
    before = await stores.snapshot()
    with pytest.raises(ValueError):
        await call(stores.kv)
    assert await stores.snapshot() == before
    assert await stores.kv.get("k") == "untouched"


async def test_an_input_near_the_limit_round_trips_whole_across_batches(stores: Stores) -> None:
    # Three inputs of ~6 MiB of four-byte characters: the batch is split to stay under the server's packet, and
    # each comes back whole, in strict mode and under sql_mode=''.
    big = [{"s": EMOJI * (1_500_000 + n), "n": n} for n in range(3)]
    assert await stores.queue.enqueue_many([job(f"big-{n}", input=big[n]) for n in range(3)]) == [True] * 3
    for n in range(3):
        found = await stores.queue.get_job([1], f"big-{n}")
        assert found is not None and found.input == big[n]
    value = EMOJI * (4 * 1024 * 1024)  # exactly 16 MiB of UTF-8: the largest value allowed
    await stores.kv.set("big", value)
    assert await stores.kv.get("big") == value


# -- inputs JSON cannot hold -------------------------------------------------------------------------------------


def cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    return loop


def nested(depth: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    here = top
    for _ in range(depth):
        here["d"] = {}
        here = here["d"]
    return top


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"x": b"bytes"}, id="bytes"),
        pytest.param({"x": {1, 2}}, id="set"),
        pytest.param({"x": float("inf")}, id="inf"),
        pytest.param({"x": object()}, id="object"),
        pytest.param({"x": "\udc80"}, id="lone-surrogate"),
        pytest.param({"\ud800": "x"}, id="surrogate-key"),
        pytest.param({("a", "b"): 1}, id="tuple-key"),
    ],
)
async def test_an_input_json_cannot_hold_is_refused_with_a_clear_error(stores: Stores, data: Any) -> None:
    before = await stores.snapshot()
    for call in (
        lambda: stores.queue.enqueue(job("x", input=data)),
        lambda: stores.queue.enqueue_many([job("ok"), job("x", input=data)]),
    ):
        with pytest.raises((TypeError, ValueError)) as raised:
            await call()
        assert "input" in str(raised.value), raised.value
    assert await stores.snapshot() == before


@pytest.mark.parametrize("data", [pytest.param(cyclic(), id="cycle"), pytest.param(nested(5_000), id="nested-5000")])
async def test_a_cyclic_or_too_deep_input_is_a_clear_error_not_a_recursion_error(stores: Stores, data: Any) -> None:
    """validation._plain_json recurses without a bound: a cycle or a deep nest escapes as RecursionError."""
    before = await stores.snapshot()
    with pytest.raises((TypeError, ValueError)):
        await stores.queue.enqueue(job("x", input=data))
    assert await stores.snapshot() == before


async def test_a_deep_but_finite_input_round_trips(stores: Stores) -> None:
    data = nested(400)
    assert await stores.queue.enqueue(job("deep", input=data))
    found = await stores.queue.get_job([1], "deep")
    assert found is not None and found.input == data


# -- invalid cron and zones ------------------------------------------------------------------------------------

BAD_CRON = [
    "",
    " ",
    "* * * *",
    "* * * * * *",
    "@daily",
    "@reboot",
    "*/0 * * * *",
    "60 * * * *",
    "* 24 * * *",
    "* * 32 * *",
    "* * * 13 *",
    "* * * * 8",
    "* * * * MON#2",
    "0 0 L * *",
    "H * * * *",
    "? * * * *",
    "* * * * *; DROP TABLE action_schedules",
    "\x00 * * * *",
    "* * * * *\x00",
    "５ * * * *",
    "1-70 * * * *",
    "0 0 * * * 2024",
]
BAD_ZONES = [
    "",
    "Mars/Olympus",
    "../../../etc/passwd",
    "Europe/Berlin\x00",
    "UTC'; DROP TABLE x; --",
    "+25:00",
    "/etc/localtime",
    "Europe/",
    "E" * 64,
]


@pytest.mark.parametrize(("cron", "zone"), [(c, None) for c in BAD_CRON] + [("0 9 * * *", z) for z in BAD_ZONES])
async def test_an_invalid_cron_or_zone_is_refused_and_the_old_set_stays(
    stores: Stores, cron: str, zone: str | None
) -> None:
    queue: JobQueue = stores.queue
    await queue.put_schedules(space_id=1, schedules=[sched("kept"), sched("replaced")])
    before = await stores.snapshot()
    with pytest.raises(ValueError) as raised:
        await queue.put_schedules(space_id=1, schedules=[sched("new"), sched("bad", cron=cron, timezone=zone)])
    message = str(raised.value)
    assert "cron" in message or "zone" in message, message
    if cron.strip() and zone != "":
        assert "'bad'" in message, message  # which schedule it was
    assert await stores.snapshot() == before
    # And the scheduler's own reading of an action's trigger never turns it into a schedule (an empty zone is
    # "no zone" there, by design).
    if zone == "":
        return
    entry = ActionEntry(id="bad", schedule=ScheduleTrigger(cron=cron, timezone=zone))
    assert schedule_for(entry, 1, "main", await queue.now()) is None


# -- prefixes and URLs -----------------------------------------------------------------------------------------


class NoSqlPool:
    """A pool that fails the test if anything borrows a connection."""

    def acquire(self) -> Any:
        raise AssertionError("SQL was about to be sent")


@pytest.mark.parametrize(
    "prefix",
    ["x`; DROP TABLE t; --", "a\x00", "ａ", "٣", "p.q", "p$", "😀", " ", "\n", "a" * 49, "a'b", "%s"],
)
def test_a_hostile_prefix_is_refused_before_any_sql(prefix: str) -> None:
    from plitzi_jobs_mysql import mysql_job_schema_statements, mysql_job_schema_upgrades

    for call in (
        lambda: create_mysql_job_queue(NoSqlPool(), table_prefix=prefix),
        lambda: create_mysql_kv(NoSqlPool(), table_prefix=prefix),
        lambda: mysql_job_schema_statements(prefix),
        lambda: mysql_job_schema_upgrades(prefix),
    ):
        with pytest.raises(ValueError, match="table_prefix"):
            call()


def test_the_longest_prefix_makes_names_the_server_accepts(database_url: str) -> None:
    from plitzi_jobs_mysql import mysql_job_schema_statements
    from plitzi_jobs_mysql.mysql.schema.totals import totals_statements

    prefix = "p" * 48
    conn = pymysql.connect(**parse_mysql_url(database_url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            for statement in [*mysql_job_schema_statements(prefix), *totals_statements(prefix)]:
                cur.execute(statement)
            cur.execute("SHOW TABLES")
            assert len([r for r in cur.fetchall() if r[0].startswith(prefix)]) == 4  # jobs, schedules, kv, totals
            cur.execute("SHOW TRIGGERS")
            assert len([r for r in cur.fetchall() if r[0].startswith(prefix)]) == 3
    finally:
        conn.close()


def cli(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PLITZI_MYSQL_URL"}
    if url is not None:
        env["PLITZI_MYSQL_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "plitzi_jobs_mysql", *args], capture_output=True, text=True, env=env, timeout=60
    )


@pytest.mark.parametrize(
    "url",
    [
        "mysql://root:s3cr%ZZet@127.0.0.1:1/db",
        "mysql://root:s3cret@127.0.0.1:99999/db",
        "mysql://root:s3cret@127.0.0.1:1/db#frag",
        "mysql://root:s3cret@127.0.0.1:1/a/b",
        "mysql://root:s3cret@ho st/db",
        "mysql://root:s3cret@127.0.0.1:1/db?port=2",
        "mysql://root:s3cret@[::1/db",
        "mysql://root:s3cret@127.0.0.1:1/db?connect_timeout=1s",
        "postgres://root:s3cret@127.0.0.1/db",
        "mysql://root:s3cret@127.0.0.1:1/db'; DROP DATABASE x; --",
        "mysql://root:s3cret@127.0.0.1:1/%00db",
    ],
)
def test_a_bad_url_on_the_command_line_is_one_clear_line_without_the_password(url: str) -> None:
    for result in (cli("stats", "--url", url), cli("jobs", "list", "--space", "1", url=url)):
        assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
        assert "s3cret" not in result.stderr and "s3cret" not in result.stdout


async def test_the_command_line_treats_hostile_ids_as_data(database_url: str) -> None:
    ids = ["' OR '1'='1", "😀 id", "back\\slash", "%s", "-dash", "a "]
    pool = await open_pool(database_url)
    try:
        queue = create_mysql_job_queue(pool)
        for job_id in [*ids, "a", "bystander"]:
            await queue.enqueue(job(job_id, action_id=job_id))
    finally:
        pool.close()
        await pool.wait_closed()
    for job_id in ids:
        shown = cli("jobs", "show", "--space", "1", "--json", "--url", database_url, "--", job_id)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["id"] == job_id
        listed = cli("jobs", "list", "--space", "1", "--json", f"--action={job_id}", "--url", database_url)
        assert listed.returncode == 0, listed.stderr
        body = json.loads(listed.stdout)
        found = body["jobs"] if isinstance(body, dict) else body
        assert [j["id"] for j in found] == [job_id]
    cancelled = cli("jobs", "cancel", "--space", "1", "--url", database_url, "--", "' OR '1'='1")
    assert cancelled.returncode == 0, cancelled.stderr
    pool = await open_pool(database_url)
    try:
        page = await create_mysql_job_queue(pool).list_jobs(space_ids=[1], status="cancelled")
        assert [j.id for j in page.jobs] == ["' OR '1'='1"]
    finally:
        pool.close()
        await pool.wait_closed()
