"""Running a differential sequence (tests/harness/differential.py) on both stacks, comparing, and shrinking.

`explore(seed, count, stacks)` draws and runs a fresh sequence and answers the first difference (None when the
stores agreed throughout); `shrink` cuts a failing sequence down to fewer operations that still disagree, each try
on freshly emptied tables. `Stacks` builds the two sides: the memory stores, and the MySQL stores over pools the
caller opened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from plitzi_jobs_mysql import create_memory_job_queue, create_memory_kv, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.records import Job, JobPage

from .differential import BURST_WORKER, KV_KEYS, START_MS, Generator, Op, claimable


class SharedClock:
    """The one clock both sides read (epoch ms); only `clock.advance` operations move it, now and then back.

    The kv stores read `kv_now`, which never steps back: a key that lapsed may be removed at any moment after
    (the contract leaves when), so one brought back to life by a clock stepping back is there or not by chance."""

    def __init__(self) -> None:
        self.now = self.kv_now = START_MS

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms
        self.kv_now = max(self.kv_now, self.now)

    def kv_clock(self) -> int:
        return self.kv_now


@dataclass
class Side:
    name: str
    queue: Any
    kv: Any
    burst: list[Any]  # the queues a burst's concurrent claims run on, one each
    before_kv: Callable[[], Awaitable[None]]


@dataclass
class Difference:
    index: int  # of the operation after which the stores disagreed
    what: str


async def _nothing() -> None:
    return None


class Stacks:
    """Both sides on a shared clock, built afresh (empty tables, new stores) for every run."""

    def __init__(self, queue_pool: Any, kv_pool: Any, prefix: str) -> None:
        self.queue_pool, self.kv_pool, self.prefix = queue_pool, kv_pool, prefix

    async def fresh(self) -> tuple[SharedClock, Side, Side]:
        clock = SharedClock()
        await self._empty_tables()
        memory_queue = create_memory_job_queue(retain_finished=1_000_000, clock=clock)
        memory = Side("memory", memory_queue, create_memory_kv(clock=clock.kv_clock), [memory_queue] * 3, _nothing)
        queues = [create_mysql_job_queue(self.queue_pool, table_prefix=self.prefix, clock=clock) for _ in range(4)]
        for queue in queues:
            queue._lapsed_read_every_ms = 0  # looks for lapsed leases on every claim, as the memory queue does
        kv = create_mysql_kv(self.kv_pool, table_prefix=self.prefix)

        async def server_time() -> None:
            # The kv pool holds ONE connection: its session's clock is the server's clock for every kv statement.
            async with self.kv_pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute(f"SET SESSION timestamp = {clock.kv_now // 1000}.{clock.kv_now % 1000:03d}")

        return clock, memory, Side("mysql", queues[0], kv, queues[1:], server_time)

    async def _empty_tables(self) -> None:
        async with self.queue_pool.acquire() as conn, conn.cursor() as cur:
            # TRUNCATE fires no trigger: the job totals are emptied with their jobs.
            for table in ("action_jobs", "action_schedules", "action_kv", "action_totals"):
                await cur.execute(
                    "SELECT COUNT(*) FROM information_schema.tables "
                    "WHERE table_schema = DATABASE() AND table_name = %s",
                    (self.prefix + table,),
                )
                if (await cur.fetchone())[0]:
                    await cur.execute(f"TRUNCATE TABLE `{self.prefix}{table}`")
            await conn.commit()


async def call(side: Side, op: Op, limit: int = 1) -> tuple[str, Any]:
    """What one side answers: ("ok", value) or ("raised", the exception's class name). `limit`: each claim's of
    a burst."""
    try:
        if op.target == "burst":
            args = op.arguments()
            claims = args.pop("claims")
            args["limit"] = limit
            answers = await asyncio.gather(*(q.claim(worker_id=BURST_WORKER, **args) for q in side.burst[:claims]))
            # Concurrent claims may lose races and come back short: a lone claim then takes what they left, as a
            # worker's next poll would (the memory queue's claims never race, so its top-up takes nothing).
            answers.append(await side.queue.claim(worker_id=BURST_WORKER, **args))
            # Which claim got which job is left open: the union is what both must agree on.
            return "ok", sorted((job for answer in answers for job in answer), key=lambda j: j.id)
        if op.target == "kv":
            await side.before_kv()
        target = side.queue if op.target == "queue" else side.kv
        answer = await getattr(target, op.method)(**op.arguments())
        if isinstance(answer, JobPage) and answer.next_after is not None:
            # The cursor is opaque and names a store's own order of enqueue (MySQL's seq skips values a failed
            # insert took): both must offer a next page, not the same token.
            answer = replace(answer, next_after="(a next page)")
        return "ok", answer
    except Exception as error:
        return "raised", type(error).__name__


async def state(side: Side, of: str = "all") -> dict[str, Any]:
    """What a side holds: its jobs and schedules (`of` "queue"), its keys ("kv"), or all of it."""
    held: dict[str, Any] = {}
    if of in ("all", "queue"):
        held["jobs"] = (await side.queue.list_jobs(space_ids=None, limit=10_000)).jobs
        held["schedules"] = await side.queue.list_schedules(None)
    if of in ("all", "kv"):
        await side.before_kv()
        held["kv"] = {key: await side.kv.get(key) for key in KV_KEYS}
    return held


def describe(memory: Any, mysql: Any) -> str:
    """The difference, narrowed to the first job (and its fields) that differs when both are lists of jobs."""
    if isinstance(memory, tuple) and isinstance(mysql, tuple) and memory[0] == mysql[0] == "ok":
        memory, mysql = memory[1], mysql[1]
    if isinstance(memory, dict) and isinstance(mysql, dict):
        for name in memory:
            if memory[name] != mysql.get(name):
                return f"{name}: " + describe(memory[name], mysql.get(name))
    jobs = isinstance(memory, list) and isinstance(mysql, list) and all(isinstance(j, Job) for j in memory + mysql)
    if jobs:
        memory_ids, mysql_ids = [j.id for j in memory], [j.id for j in mysql]
        if sorted(memory_ids) != sorted(mysql_ids):
            return f"job ids: memory {memory_ids} != mysql {mysql_ids}"
        order = "" if memory_ids == mysql_ids else f"in another order (memory {memory_ids}, mysql {mysql_ids}); "
        by_id = {j.id: j for j in mysql}
        for one in memory:
            other = by_id[one.id]
            if one != other:
                fields = [
                    f"{f.name}: memory {getattr(one, f.name)!r} != mysql {getattr(other, f.name)!r}"
                    for f in dataclasses.fields(Job)
                    if getattr(one, f.name) != getattr(other, f.name)
                ]
                return f"{order}job {one.id!r}: " + "; ".join(fields)
        return f"the same jobs {order}"
    return f"memory {memory!r}\n      mysql  {mysql!r}"


async def step(index: int, op: Op, clock: SharedClock, memory: Side, mysql: Side) -> Difference | None:
    """One operation on both sides: the answers compared, then what it may have changed (a job's `updated_at`
    moved by one side only would otherwise show only in a later listing's order, if at all)."""
    if op.target == "clock":
        clock.advance(dict(op.kwargs)["ms"])
        return None
    limit = 1
    if op.target == "burst":  # every claim of it may take every job claimable now (the memory queue counts them)
        limit = max(1, claimable((await memory.queue.list_jobs(space_ids=None, limit=10_000)).jobs, clock.now))
    expected, got = await call(memory, op, limit), await call(mysql, op, limit)
    if expected != got:
        return Difference(index, f"answers differ: {describe(expected, got)}")
    return await compare_state(index, memory, mysql, "kv" if op.target == "kv" else "queue")


async def compare_state(index: int, memory: Side, mysql: Side, of: str = "all") -> Difference | None:
    expected, got = await state(memory, of), await state(mysql, of)
    return None if expected == got else Difference(index, f"state differs: {describe(expected, got)}")


async def explore(
    seed: int, count: int, stacks: Stacks, *, known_open: bool = True
) -> tuple[list[Op], Difference | None]:
    """A fresh sequence of `count` operations from `seed`, run on both sides; the operations drawn and the first
    difference (None: none)."""
    generator = Generator(random.Random(seed), known_open=known_open)
    clock, memory, mysql = await stacks.fresh()
    ops: list[Op] = []
    for index in range(count):
        jobs = (await memory.queue.list_jobs(space_ids=None, limit=10_000)).jobs
        schedules = [(s.space_id, s.action_id, s.next_run_at) for s in await memory.queue.list_schedules(None)]
        op = generator.next(jobs, schedules)
        ops.append(op)
        difference = await step(index, op, clock, memory, mysql)
        if difference is not None:
            return ops, difference
    return ops, await compare_state(len(ops) - 1, memory, mysql)


async def replay(ops: list[Op], stacks: Stacks) -> Difference | None:
    """The given operations on fresh stores, compared as `explore` compares them."""
    clock, memory, mysql = await stacks.fresh()
    for index, op in enumerate(ops):
        difference = await step(index, op, clock, memory, mysql)
        if difference is not None:
            return difference
    return await compare_state(len(ops) - 1, memory, mysql) if ops else None


async def shrink(ops: list[Op], stacks: Stacks, budget_s: float = 60.0) -> tuple[list[Op], Difference | None]:
    """Fewer operations that still make the stores disagree (ddmin over complements), within `budget_s`."""
    deadline = time.monotonic() + budget_s
    current = list(ops)
    found = await replay(current, stacks)
    if found is None:
        return current, None  # did not disagree again (a timing difference?): nothing to shrink
    current = current[: found.index + 1]
    parts = 2
    while len(current) > 1 and time.monotonic() < deadline:
        size = math.ceil(len(current) / parts)
        for start in range(0, len(current), size):
            candidate = current[:start] + current[start + size :]
            difference = await replay(candidate, stacks)
            if difference is not None:
                current, found = candidate[: difference.index + 1], difference
                parts = max(parts - 1, 2)
                break
            if time.monotonic() >= deadline:
                break
        else:
            if parts >= len(current):
                break
            parts = min(len(current), parts * 2)
    return current, found


def report(
    seed: int,
    setup: str,
    ops: list[Op],
    difference: Difference,
    shrunk: list[Op] | None = None,
    shrunk_difference: Difference | None = None,
) -> str:
    lines = [
        f"the memory and MySQL stores disagree (seed {seed}, pool {setup}): after operation {difference.index}, "
        f"{difference.what}",
        f"replay: PLITZI_DIFFERENTIAL_SEED={seed} .venv/bin/python -m pytest tests/mysql/test_differential.py",
        f"the {min(len(ops), 40)} operations up to it (of {len(ops)}):",
        *(f"  {n:4d} {op}" for n, op in list(enumerate(ops))[-40:]),
    ]
    if shrunk is not None and shrunk_difference is not None:
        lines += [
            f"shrunk to {len(shrunk)} operations after which {shrunk_difference.what}:",
            *(f"  {op}" for op in shrunk),
        ]
    return "\n".join(lines)
