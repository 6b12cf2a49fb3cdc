#!/usr/bin/env python3
"""What the in-place upgrade from the TypeScript original's tables costs, on a large table (run once, by hand).

    .venv/bin/python bench/ts_upgrade.py                    # a million finished jobs (a few minutes)
    .venv/bin/python bench/ts_upgrade.py --finished 100000  # quicker

Fills the original's tables (tests/fixtures/ts-0.37.2-schema.sql) with `--finished` finished jobs shaped as the
original writes them (one attempt of history, a small input) plus a thousand pending ones, a hundred schedules
and a thousand kv keys; then measures, side by side on the same tables:

- a plain copy of the jobs table into a table of the same layout (`CREATE TABLE … LIKE` + `INSERT … SELECT`): the
  floor for anything that rewrites the table, and what MySQL's own table-rebuilding ALTER costs;
- `migrate` (plan + every step, through the package's runner), which copies all three tables.

The figure that matters is the ratio; the seconds are this machine's. The server is PLITZI_MYSQL_URL when set,
else a throwaway one (plitzi_jobs_mysql.testing.server.mysql_server_url).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pymysql
from common import bench_url

from plitzi_jobs_mysql.mysql.schema.migrate import plan_migration, run_migration
from plitzi_jobs_mysql.url import parse_mysql_url

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.harness import ts_original  # noqa: E402  (the original's DDL, as the tests use it)


def fill(cur: pymysql.cursors.Cursor, finished: int) -> None:
    ts_original.create_tables(cur)
    cur.execute("CREATE TABLE n (i INT PRIMARY KEY)")
    cur.execute("INSERT INTO n VALUES " + ",".join(f"({i})" for i in range(1000)))
    history = (
        'CONCAT(\'[{"status":"succeeded","workerId":"replica-\', a.i MOD 7, \'","runId":"run-\', a.i, \'-\', '
        'b.i, \'","attempt":1,"startedAt":\', 1767225600000 + a.i * 1000 + b.i, \',"endedAt":\', '
        "1767225600500 + a.i * 1000 + b.i, '}]')"
    )
    for start in range(0, finished, 100_000):
        rows = min(100_000, finished - start)
        cur.execute(
            "INSERT INTO action_jobs (id, space_id, action_id, environment, trigger_type, input, due_at, "
            "max_attempts, missed, status, run_at, attempts, lease_until, worker_id, run_id, cancel_requested, "
            "created_at, updated_at, error, history, expires_at) "
            f"SELECT CONCAT('job-', {start} + a.i * 1000 + b.i), a.i MOD 50, 'send-report', 'main', 'manual', "
            'CONCAT(\'{"user":\', b.i, \',"report":"monthly"}\'), 1767225600000 + a.i * 1000 + b.i, 3, NULL, '
            "'succeeded', 1767225600000 + a.i * 1000 + b.i, 1, NULL, CONCAT('replica-', a.i MOD 7), "
            f"CONCAT('run-', a.i, '-', b.i), 0, 1767225600000, 1767225600500, NULL, {history}, 1775001600500 "
            f"FROM n a JOIN n b WHERE a.i * 1000 + b.i < {rows}"
        )
        print(f"  {start + rows} finished jobs", file=sys.stderr)
    cur.execute(
        "INSERT INTO action_jobs (id, space_id, action_id, environment, trigger_type, input, due_at, max_attempts, "
        "status, run_at, attempts, created_at, updated_at, history) SELECT CONCAT('pending-', i), 1, 'act', 'main', "
        "'manual', '{}', 1767225600000, 3, 'pending', 1767225600000, 0, 1767225600000, 1767225600000, '[]' FROM n"
    )
    cur.execute(
        "INSERT INTO action_schedules (space_id, action_id, cron, timezone, environment, enabled, next_run_at, "
        "missed, max_attempts, updated_at) SELECT i, 'nightly', '0 3 * * *', 'Europe/Berlin', 'main', 1, "
        "1767225600000, 0, 3, 1767225600000 FROM n WHERE i < 100"
    )
    cur.execute("INSERT INTO action_kv (k, v, expires_at) SELECT CONCAT('key-', i), 'value', NULL FROM n")
    cur.execute("DROP TABLE n")


def seconds(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--finished", type=int, default=1_000_000)
    args = parser.parse_args()
    with bench_url("bench_upgrade") as url:
        conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
        with conn.cursor() as cur:
            print(f"filling the original's tables with {args.finished} finished jobs", file=sys.stderr)
            fill(cur, args.finished)
            cur.execute("SELECT VERSION()")
            version = cur.fetchone()[0]
            cur.execute("SELECT COUNT(*) FROM action_jobs")
            jobs = int(cur.fetchone()[0])
            cur.execute("CREATE TABLE plain_copy LIKE action_jobs")
            copy_s = seconds(lambda: cur.execute("INSERT INTO plain_copy SELECT * FROM action_jobs"))
            cur.execute("DROP TABLE plain_copy")
            plan_s = seconds(lambda: plan_migration(conn, ""))
            migrate_s = seconds(lambda: run_migration(conn, ""))
        conn.close()
    print(f"server {version}; {jobs} jobs (+100 schedules, 1000 kv keys)")
    print(f"plain copy of the jobs table (INSERT … SELECT *): {copy_s:.1f} s")
    print(f"migrate --dry-run (plan, counts rows): {plan_s:.1f} s")
    print(f"migrate (all three tables): {migrate_s:.1f} s = {migrate_s / copy_s:.2f}× the plain copy, "
          f"{jobs / migrate_s:,.0f} jobs/s")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
