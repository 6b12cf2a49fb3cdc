"""Claims beside running jobs, and what a heartbeat costs (issue 12 item 3): the lapsed-lease read's designs side
by side, on the latency scenario's table (1,000,000 finished, the largest backlog, 10,000 running under lease).

- before: every claim reads pending jobs and lapsed leases together (`claim_candidates`), and the lapsed half
  steps over every running row in `job_due`;
- shipped: the lapsed half is sent only when a claim's pending read comes back short, and otherwise at most every
  `LAPSED_READ_EVERY_MS` per queue (mysql/queue_core.py); no schema change;
- design (a), measured, not shipped: `KEY job_lease (status, lease_until)` on a copy of the table and the lapsed
  half read through it with every claim. Every heartbeat then moves an entry of that index too.

Claims alternate claim by claim between the designs, and block by block between the running rows held and set
aside (the same rows, none running: the "none running" figure); heartbeat passes alternate rep by rep (ABBA).
So every ratio is taken between figures that share the same noise.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from plitzi_jobs_mysql.mysql import create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements, table_names
from plitzi_jobs_mysql.mysql.session import bind

LEASE_PREFIX = "lease_"
HOLDER = "bench-holder"  # the worker the latency scenario's running rows are held by
HOLD_MS = 86_400_000  # heartbeats keep the leases a day out: no claim ever finds them lapsed
HEARTBEAT_TASKS = 16
HEARTBEAT_JOBS = 16  # the jobs one heartbeat renews: a 16-slot worker's
HEARTBEAT_PASSES = 3  # passes over every running job per rep: one pass is only a few tenths of a second


def copy_with_lease_index(admin: Any, source: str) -> str:
    """The jobs table copied, rows and all, into `lease_action_jobs` with `KEY job_lease (status, lease_until)`."""
    for statement in mysql_job_schema_statements(LEASE_PREFIX):
        admin.run(statement)
    target = table_names(LEASE_PREFIX).jobs
    admin.run(f"ALTER TABLE `{target}` ADD KEY job_lease (status, lease_until)")
    admin.run(f"INSERT INTO `{target}` SELECT * FROM `{source}`")
    admin.run(f"ANALYZE TABLE `{target}`")
    return target


def drop_lease_tables(admin: Any) -> None:
    for table in table_names(LEASE_PREFIX).all():
        admin.run(f"DROP TABLE IF EXISTS `{table}`")


def lapsed_read_through_lease_index(table: str) -> str:
    # In lease order, which the index keeps (seq rides in every secondary entry): O(limit), no filesort.
    return (
        f"SELECT seq, run_at, 1, priority FROM `{table}` FORCE INDEX (job_lease) "
        "WHERE status = 'running' AND lease_until < %s ORDER BY lease_until, seq LIMIT %s"
    )


def queues(pool: Any) -> dict[str, tuple[Any, str]]:
    """The three designs' queues, each with the table its claims are put back on."""
    jobs, lease_jobs = table_names("").jobs, table_names(LEASE_PREFIX).jobs
    before = create_mysql_job_queue(pool)
    before._lapsed_read_every_ms = 0  # the lapsed half with every claim
    shipped = create_mysql_job_queue(pool)
    indexed = create_mysql_job_queue(pool, table_prefix=LEASE_PREFIX)
    lapsed = lapsed_read_through_lease_index(lease_jobs)
    indexed._sql = dataclasses.replace(
        indexed._sql,
        claim_candidates=f"({indexed._sql.claim_pending_candidates}) UNION ALL ({lapsed})",
        claim_lapsed_candidates=lapsed,
    )
    indexed._lapsed_read_every_ms = 0
    return {"before": (before, jobs), "shipped": (shipped, jobs), "index": (indexed, lease_jobs)}


PARKED = "parked"  # not a status: the running rows set aside, outside every read a claim sends
STATES = ("running", "none")  # the latency table's running rows held under lease, or set aside


def set_running_aside(admin: Any, tables: list[str], aside: bool) -> None:
    old, new = ("running", PARKED) if aside else (PARKED, "running")
    for table in tables:
        admin.run(f"UPDATE `{table}` SET status = %s WHERE status = %s AND worker_id = %s", (new, old, HOLDER))


async def claims_side_by_side(
    admin: Any, designs: dict[str, tuple[Any, str]], samples: int, lease_ms: int, limit: int, blocks: int = 20
) -> dict[tuple[str, str], list[float]]:
    """ms of each claim(limit) by one claimer per design, alternating claim by claim, with the running rows held
    (`running`) and set aside (`none`: same table, same rows, none of them running), block by block in ABBA
    order. The claimed jobs are put back pending between claims (untimed)."""
    tables = sorted({table for _, table in designs.values()})
    for queue, _ in designs.values():
        await queue.now()
    times: dict[tuple[str, str], list[float]] = {(state, name): [] for state in STATES for name in designs}
    per_block = -(-samples // (blocks // 2))
    try:
        for block in range(blocks):
            state = STATES[0] if block % 4 in (0, 3) else STATES[1]
            set_running_aside(admin, tables, aside=state == "none")
            for i in range(per_block + 5):
                for name, (queue, table) in designs.items():
                    started = time.perf_counter()
                    jobs = await queue.claim(worker_id="lat", lease_ms=lease_ms, limit=limit)
                    took = (time.perf_counter() - started) * 1000
                    if i >= 5:  # warm-up after the flip
                        times[(state, name)].append(took)
                    if jobs:
                        admin.run(
                            *bind(
                                f"UPDATE `{table}` SET status = 'pending', attempts = 0, worker_id = NULL, "
                                "lease_until = NULL, claimed_at = NULL WHERE id IN %s",
                                ([job.id for job in jobs],),
                            )
                        )
    finally:
        set_running_aside(admin, tables, aside=False)
    return times


def running_ids(admin: Any, table: str) -> list[str]:
    rows = admin.rows(f"SELECT id FROM `{table}` WHERE status = 'running' AND worker_id = %s ORDER BY seq", (HOLDER,))
    return [bytes(r[0]).decode() if isinstance(r[0], (bytes, bytearray)) else str(r[0]) for r in rows]


async def heartbeat_pass(queue: Any, ids: list[str], passes: int = HEARTBEAT_PASSES) -> float:
    """Every job's lease renewed `passes` times, `HEARTBEAT_JOBS` per heartbeat, by `HEARTBEAT_TASKS` tasks over
    the pool: wall ms per heartbeat call (the inverse of heartbeats/s)."""
    batches = iter([ids[i : i + HEARTBEAT_JOBS] for i in range(0, len(ids), HEARTBEAT_JOBS)] * passes)
    calls = 0

    async def task() -> None:
        nonlocal calls
        for batch in batches:  # shared: each task takes the next batch
            await queue.heartbeat(job_ids=batch, worker_id=HOLDER, lease_ms=HOLD_MS)
            calls += 1

    started = time.perf_counter()
    await asyncio.gather(*(task() for _ in range(HEARTBEAT_TASKS)))
    return (time.perf_counter() - started) * 1000 / calls


async def heartbeats_side_by_side(pool: Any, admin: Any, reps: int) -> dict[str, list[float]]:
    """ms per heartbeat on the table as shipped (the same as before: the shipped design changes no heartbeat)
    and on the copy with `job_lease`, rep by rep in ABBA order."""
    tables = {"shipped": ("", table_names("").jobs), "index": (LEASE_PREFIX, table_names(LEASE_PREFIX).jobs)}
    runs = {
        name: (create_mysql_job_queue(pool, table_prefix=prefix), running_ids(admin, table))
        for name, (prefix, table) in tables.items()
    }
    for queue, ids in runs.values():
        await heartbeat_pass(queue, ids, passes=1)  # warm-up: first use, the clock, the pages
    figures: dict[str, list[float]] = {name: [] for name in runs}
    for rep in range(reps):
        for name in list(runs) if rep % 2 == 0 else list(reversed(runs)):
            queue, ids = runs[name]
            figures[name].append(await heartbeat_pass(queue, ids))
    return figures
