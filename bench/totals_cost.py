"""What the job totals' triggers cost the write path (issue 24.1): the same queue on the same tables, with the
triggers and without them, alternating rep by rep in one run so both share the machine's noise.

    python bench/totals_cost.py [--jobs 4000] [--reps 5] [--floor] [--mysql97]

Per rep and side: `enqueue` from one producer, `enqueue_many` in batches of 500, a drain by 4 claim loops (claim
10, settle succeeded), and the runtime's drain (the issue's measure): one `create_job_worker(workers=16)`, no-op
handler, draining as many jobs again. "without" drops the triggers (the previous release's write path exactly: its
statements are unchanged); "with" recreates them. The tables are emptied between reps (jobs and totals).

`--floor` adds two sides that keep no totals and only show what a trigger design can cost at least: "called,
writes nothing" (the same three triggers, each body one SET of a session variable: the price of the trigger call
itself), and "one row per move" (the UPDATE trigger writes one delta row instead of two). Their totals are wrong;
they are measures, not designs.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import aiomysql
from common import server

from plitzi_jobs_mysql import AttemptOutcome, Job, JobInput, create_job_worker, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema import totals
from plitzi_jobs_mysql.testing import fresh_database
from plitzi_jobs_mysql.url import parse_mysql_url


def sides(floor: bool) -> dict[str, list[str]]:
    """The triggers each side runs with, by name (the first is the yardstick)."""
    names = {"without": [], "with": totals.totals_triggers()}
    if floor:
        ins, upd, dele = totals.trigger_names()
        current = totals.totals_triggers()
        moved = current[1].split(" BEGIN IF ", 1)[1].split(" THEN ", 1)[0]
        on = "ON action_jobs FOR EACH ROW"
        names["called, writes nothing"] = [
            f"CREATE TRIGGER `{ins}` AFTER INSERT {on} SET @pjm_floor = NEW.space_id",
            f"CREATE TRIGGER `{upd}` AFTER UPDATE {on} BEGIN IF {moved} THEN SET @pjm_floor = 1; END IF; END",
            f"CREATE TRIGGER `{dele}` AFTER DELETE {on} SET @pjm_floor = OLD.space_id",
        ]
        one_row = current[1].replace(
            f", ({totals.DELTA_ID}, NEW.space_id, NEW.action_id, NEW.status, 1); END IF", "; END IF"
        )
        assert one_row != current[1]
        names["one row per move"] = [current[0], one_row, current[2]]
    return names


def job(n: int, tag: str) -> JobInput:
    return JobInput(id=f"{tag}-{n}", space_id=1, action_id=f"a{n % 10}", environment="main", trigger="bench",
                    input={"n": n}, due_at=0, max_attempts=3)  # fmt: skip


async def run(url: str, jobs: int, reps: int, triggers: dict[str, list[str]]) -> dict[str, dict[str, list[float]]]:
    pool = await aiomysql.create_pool(**parse_mysql_url(url).aiomysql_kwargs(), minsize=1, maxsize=12, autocommit=True)
    queue = create_mysql_job_queue(pool)
    await queue.get_job([1], "-")

    async def admin(*statements: str) -> None:
        async with pool.acquire() as conn, conn.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)

    async def drain() -> None:
        async def loop(worker: str) -> None:
            while claimed := await queue.claim(worker_id=worker, lease_ms=60_000, limit=10):
                ok = AttemptOutcome(status="succeeded", worker_id=worker)
                await asyncio.gather(*(queue.settle(job_id=j.id, worker_id=worker, status="succeeded", attempt=ok)
                                       for j in claimed))  # fmt: skip

        await asyncio.gather(*(loop(f"w{i}") for i in range(4)))

    async def runtime_drain(n: int) -> None:
        handled: set[str] = set()
        done = asyncio.Event()

        async def handler(claimed: Job) -> None:
            handled.add(claimed.id)
            if len(handled) >= n:
                done.set()

        worker = create_job_worker(queue=queue, handler=handler, workers=16)
        worker.start()
        try:
            await asyncio.wait_for(done.wait(), 300)
        finally:
            await worker.stop()  # returns once every handled job is settled

    results: dict[str, dict[str, list[float]]] = {side: {} for side in triggers}
    for rep in range(reps):
        for side in list(triggers)[:: -1 if rep % 2 else 1]:  # the order turns each rep: both ends share the noise
            await admin("TRUNCATE TABLE action_jobs", f"TRUNCATE TABLE `{totals.totals_name()}`",
                        *(f"DROP TRIGGER IF EXISTS `{name}`" for name in totals.trigger_names()))  # fmt: skip
            await admin(*triggers[side])
            figures = results[side]
            started = time.perf_counter()
            for n in range(jobs // 4):
                await queue.enqueue(job(n, f"e{rep}"))
            figures.setdefault("enqueue, one producer", []).append(jobs // 4 / (time.perf_counter() - started))
            started = time.perf_counter()
            for base in range(0, jobs, 500):
                await queue.enqueue_many([job(n, f"m{rep}") for n in range(base, min(jobs, base + 500))])
            figures.setdefault("enqueue_many x500", []).append(jobs / (time.perf_counter() - started))
            started = time.perf_counter()
            await drain()
            figures.setdefault("drain, 4 claim loops (claim 10 + settle)", []).append(
                (jobs + jobs // 4) / (time.perf_counter() - started)
            )
            for base in range(0, jobs, 500):  # untimed: the runtime's drain needs jobs again
                await queue.enqueue_many([job(n, f"r{rep}") for n in range(base, min(jobs, base + 500))])
            started = time.perf_counter()
            await runtime_drain(jobs)
            figures.setdefault("runtime drain, create_job_worker(workers=16)", []).append(
                jobs / (time.perf_counter() - started)
            )
            print(f"rep {rep + 1} {side}: " + ", ".join(f"{k} {v[-1]:,.0f}/s" for k, v in figures.items()),
                  file=sys.stderr, flush=True)  # fmt: skip
    pool.close()
    await pool.wait_closed()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--floor", action="store_true", help="add the two measuring sides (see above)")
    parser.add_argument("--mysql97", action="store_true", help="on MySQL 9.7 from the Debian root")
    args = parser.parse_args()
    triggers = sides(args.floor)
    with server(args.mysql97) as root, fresh_database(root, "bench_cost") as url:
        results = asyncio.run(run(url, args.jobs, args.reps, triggers))
    others = list(triggers)[1:]
    print(f"\njobs/s, median of {args.reps} reps in turn; each side / without\n")
    print("| path | without | " + " | ".join(others) + " |\n|---|---|" + "---|" * len(others))
    for name, figures in results["without"].items():
        without = statistics.median(figures)
        medians = [statistics.median(results[side][name]) for side in others]
        cells = [f"{median:,.0f} ({median / without:.2f})" for median in medians]
        print(f"| {name} | {without:,.0f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
