"""`python -m plitzi_jobs_mysql`, run as a subprocess against the real server: every command and its errors."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from typing import Any

import aiomysql
import pytest

from plitzi_jobs_mysql import AttemptOutcome, JobInput, ScheduleInput, create_mysql_job_queue
from plitzi_jobs_mysql.mysql.schema.state import mysql_job_schema_statements
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import mariadb_client, sql
from ..support import job

TABLES = ("action_jobs", "action_schedules", "action_kv", "action_totals")
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3})?Z"  # an instant as the commands print it, in UTC


def cli(*args: str, env_url: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PLITZI_MYSQL_URL"}
    if env_url is not None:
        env["PLITZI_MYSQL_URL"] = env_url
    return subprocess.run(
        [sys.executable, "-m", "plitzi_jobs_mysql", *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=60,
    )


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return result


def fails(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    """The one line on stderr of a command that failed with `code`."""
    assert result.returncode == code, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def as_json(result: subprocess.CompletedProcess[str]) -> Any:
    return json.loads(ok(result).stdout)


def tables(url: str) -> set[str]:
    return {str(row[0]) for row in sql(url, "SHOW TABLES")}


def pipe_to_mariadb(url: str, script: str) -> subprocess.CompletedProcess[str]:
    command, env = mariadb_client(url)
    return subprocess.run(command, input=script, capture_output=True, text=True, env=env, timeout=60)


def seed(url: str, prefix: str = "") -> int:
    """Jobs in every state the operator commands care about, and a schedule. Answers the server's now (ms).

    Space 1: `pending-later` (due in an hour), `pending-due` (due 5 s ago, never claimed), `running`, `done`
    and `done-2` (succeeded). Space 2: `other`. One schedule in space 1.
    """

    async def run() -> int:
        pool = await aiomysql.create_pool(
            **parse_mysql_url(url).aiomysql_kwargs(), minsize=1, maxsize=2, autocommit=True
        )
        try:
            queue = create_mysql_job_queue(pool, table_prefix=prefix, create_tables=False)
            now = int((await queue.now()).timestamp() * 1000)

            def made(id_: str, space: int, due_at: int) -> JobInput:
                return job(id_, space_id=space, due_at=due_at, action_id=f"act-{id_}", input={"id": id_})

            for id_ in ("running", "done", "done-2"):
                assert await queue.enqueue(made(id_, 1, now - 60_000))
            claimed = await queue.claim(worker_id="w1", lease_ms=600_000, limit=3)
            assert {j.id for j in claimed} == {"running", "done", "done-2"}
            for id_ in ("done", "done-2"):
                await queue.settle(
                    job_id=id_, worker_id="w1", status="succeeded",
                    attempt=AttemptOutcome(status="succeeded", worker_id="w1", run_id="r1"),
                )  # fmt: skip
            assert await queue.enqueue(made("pending-due", 1, now - 5_000))
            assert await queue.enqueue(made("pending-later", 1, now + 3_600_000))
            assert await queue.enqueue(made("other", 2, now + 3_600_000))
            await queue.put_schedules(
                space_id=1,
                schedules=[
                    ScheduleInput(
                        space_id=1, action_id="nightly", cron="0 3 * * *", environment="main", enabled=True,
                        next_run_at=now + 86_400_000, max_attempts=3, timezone="Europe/Berlin",
                    )
                ],
            )  # fmt: skip
            return now
        finally:
            pool.close()
            await pool.wait_closed()

    return asyncio.run(run())


@pytest.fixture
def migrated(database_url: str) -> str:
    ok(cli("migrate", "--url", database_url))
    return database_url


# -- ddl and migrate -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "app_"])
def test_ddl_piped_into_mariadb_makes_the_tables(database_url: str, prefix: str) -> None:
    ddl = ok(cli("ddl", "--prefix", prefix))
    assert ddl.stdout.count("CREATE TABLE IF NOT EXISTS") == 4  # and the job totals
    assert ddl.stdout.rstrip().endswith(";")
    for statement in mysql_job_schema_statements(prefix):
        assert statement + ";" in ddl.stdout
    piped = pipe_to_mariadb(database_url, ddl.stdout)
    assert piped.returncode == 0, piped.stderr
    assert tables(database_url) == {prefix + t for t in TABLES}
    # Running it again is harmless (IF NOT EXISTS), and so are the upgrades.
    assert pipe_to_mariadb(database_url, ddl.stdout).returncode == 0
    upgrades = ok(cli("ddl", "--upgrades", "--prefix", prefix))
    assert pipe_to_mariadb(database_url, upgrades.stdout).returncode == 0
    totals = ok(cli("ddl", "--totals", "--prefix", prefix))  # the triggers and the backfill
    assert "CREATE TRIGGER" in totals.stdout and pipe_to_mariadb(database_url, totals.stdout).returncode == 0
    assert pipe_to_mariadb(database_url, totals.stdout).returncode == 0  # again: harmless
    # The adapters work on those tables without DDL of their own.
    seed(database_url, prefix)
    page = as_json(cli("jobs", "list", "--url", database_url, "--prefix", prefix, "--space", "1", "--json"))
    assert page["total"] == 5


def test_ddl_rejects_a_bad_prefix() -> None:
    assert "table_prefix" in fails(cli("ddl", "--prefix", "no-dashes"))


def test_migrate_twice_is_harmless(database_url: str) -> None:
    first = ok(cli("migrate", "--url", database_url))
    assert first.stderr.count("created") == 3
    assert tables(database_url) == set(TABLES)
    seed(database_url)
    second = ok(cli("migrate", "--url", database_url))
    assert second.stderr.count("already there") == 3 and "created" not in second.stderr
    assert sql(database_url, "SELECT COUNT(*) FROM action_jobs") == [(6,)]


def test_migrate_with_a_prefix_and_the_url_from_the_environment(database_url: str) -> None:
    ok(cli("migrate", "--prefix", "p_", env_url=database_url))
    assert tables(database_url) == {"p_" + t for t in TABLES}


# -- jobs ----------------------------------------------------------------------------------------------------


def test_jobs_list(migrated: str) -> None:
    seed(migrated)
    url = ["--url", migrated]
    page = as_json(cli("jobs", "list", *url, "--space", "1", "--json"))
    assert page["total"] == 5
    assert {j["id"] for j in page["jobs"]} == {"pending-later", "pending-due", "running", "done", "done-2"}
    assert {j["space_id"] for j in page["jobs"]} == {1}
    both = as_json(cli("jobs", "list", *url, "--space", "1", "--space", "2", "--json"))
    assert both["total"] == 6
    pending = as_json(cli("jobs", "list", *url, "--space", "1", "--status", "pending", "--json"))
    assert {j["id"] for j in pending["jobs"]} == {"pending-later", "pending-due"}
    by_action = as_json(cli("jobs", "list", *url, "--space", "1", "--action", "act-done", "--json"))
    assert [j["id"] for j in by_action["jobs"]] == ["done"]
    paged = as_json(cli("jobs", "list", *url, "--space", "1", "--limit", "2", "--offset", "1", "--json"))
    assert paged["total"] == 5 and len(paged["jobs"]) == 2
    assert [j["id"] for j in paged["jobs"]] == [j["id"] for j in page["jobs"][1:3]]
    # Without --space: every space, a page at a time, newest first.
    everywhere = as_json(cli("jobs", "list", *url, "--json"))
    assert everywhere["total"] == 6 and {j["space_id"] for j in everywhere["jobs"]} == {1, 2}
    first = ok(cli("jobs", "list", *url, "--limit", "4")).stdout
    assert "1-4 of 6 job(s) in all spaces; next page: --after k1." in first
    cursor = first.split("--after ")[1].split()[0]
    last = ok(cli("jobs", "list", *url, "--limit", "4", "--after", cursor)).stdout
    assert "6 job(s) in all spaces" in last and "next page" not in last
    by_offset = ok(cli("jobs", "list", *url, "--limit", "4", "--offset", "4")).stdout
    assert "5-6 of 6 job(s) in all spaces" in by_offset
    # The same rows, by cursor or by offset (their ids: the ages printed beside them move between the calls).
    assert [r.split()[0] for r in by_offset.split("\n\n")[0].splitlines()] == [
        r.split()[0] for r in last.split("\n\n")[0].splitlines()
    ]
    ids = [line.split()[0] for part in (first, last) for line in part.splitlines()[1:] if line.strip()]
    assert sorted(i for i in ids if not i[0].isdigit()) == sorted(j["id"] for j in everywhere["jobs"])

    human = ok(cli("jobs", "list", *url, "--space", "1")).stdout
    header = human.splitlines()[0]
    assert header.split() == ["ID", "SPACE", "ACTION", "STATUS", "ATTEMPTS", "RUN", "AT", "UPDATED", "ERROR"]
    assert "pending-due" in human and "succeeded" in human and "1-5 of 5 job(s) in space(s) 1" in human
    # Instants in ISO UTC with their age by the server's clock: `pending-later` is due in an hour.
    later = next(line for line in human.splitlines() if line.startswith("pending-later"))
    assert re.search(rf"{ISO} \(in (59m \d+(\.\d)?s|1h)\)", later), later
    # Columns are aligned: every row starts its STATUS cell where the header does.
    column = header.index("STATUS")
    for line in human.splitlines()[1:6]:
        assert line[column - 2 : column] == "  " and line[column] != " "


def test_jobs_show(migrated: str) -> None:
    seed(migrated)
    job = as_json(cli("jobs", "show", "--url", migrated, "--space", "1", "done", "--json"))
    assert job["id"] == "done" and job["status"] == "succeeded" and job["input"] == {"id": "done"}
    assert [a["status"] for a in job["history"]] == ["succeeded"]
    human = ok(cli("jobs", "show", "--url", migrated, "--space", "1", "done")).stdout
    assert "succeeded" in human and "history" in human and "r1" in human
    # Instants in ISO UTC with their age (the seed settled it within the last minute), durations in words.
    assert re.search(rf"^updated at +{ISO} \((\d+(\.\d)?s|\d+ms|1m( \d+s)?) ago\)$", human, re.M), human
    assert re.search(r"^1 +succeeded +\S+ \(.* ago\) +\d+(ms|(\.\d)?s) +w1 +r1", human, re.M), human
    # Another space's job is not found in that space: exit 2. Ids are exact.
    assert fails(cli("jobs", "show", "--url", migrated, "--space", "1", "other")) == (
        "plitzi-jobs-mysql: no job 'other' in space(s) 1"
    )
    assert job["priority"] == 0 and re.search(r"^priority +0$", human, re.M), human
    assert "no job 'DONE'" in fails(cli("jobs", "show", "--url", migrated, "--space", "1", "DONE"))
    # Without --space the job is found wherever it is: ids are unique across the table.
    other = as_json(cli("jobs", "show", "--url", migrated, "other", "--json"))
    assert (other["id"], other["space_id"]) == ("other", 2)
    assert "space        2" in ok(cli("jobs", "show", "--url", migrated, "other")).stdout
    assert fails(cli("jobs", "show", "--url", migrated, "nope")) == "plitzi-jobs-mysql: no job 'nope'"


def test_jobs_retry(migrated: str) -> None:
    seed(migrated)
    # A job that succeeded did its work: running it again takes --force.
    line = fails(cli("jobs", "retry", "--url", migrated, "--space", "1", "done"), code=1)
    assert "job 'done' already succeeded; retrying runs it again" in line and "--force" in line
    assert "job 'done' already succeeded" in fails(cli("jobs", "retry", "--url", migrated, "done"), code=1)
    assert as_json(cli("jobs", "show", "--url", migrated, "--space", "1", "done", "--json"))["status"] == "succeeded"
    done = as_json(cli("jobs", "retry", "--url", migrated, "--space", "1", "--force", "done", "--json"))
    assert done == {
        "id": "done", "done": True, "status_before": "succeeded", "status": "pending", "cancel_requested": False,
    }  # fmt: skip
    human = ok(cli("jobs", "retry", "--url", migrated, "done-2", "--force"))  # found without --space
    assert human.stdout.strip() == "job 'done-2' had succeeded; requeued: pending now, attempts reset"
    # A job that is not finished: exit 1 with a clear line.
    line = fails(cli("jobs", "retry", "--url", migrated, "--space", "1", "running"), code=1)
    assert "is running" in line and "only a finished job" in line
    wrong = cli("jobs", "retry", "--url", migrated, "--space", "1", "running", "--json")
    assert wrong.returncode == 1 and json.loads(wrong.stdout)["done"] is False
    assert "no job 'nope'" in fails(cli("jobs", "retry", "--url", migrated, "--space", "1", "nope"))


def test_jobs_cancel(migrated: str) -> None:
    seed(migrated)
    url = ["--url", migrated, "--space", "1"]
    pending = as_json(cli("jobs", "cancel", *url, "pending-later", "--json"))
    assert pending["done"] is True and pending["status"] == "cancelled"
    running = ok(cli("jobs", "cancel", *url, "running"))
    assert "asked to cancel" in running.stdout
    shown = as_json(cli("jobs", "show", *url, "running", "--json"))
    assert shown["status"] == "running" and shown["cancel_requested"] is True
    line = fails(cli("jobs", "cancel", *url, "done"), code=1)
    assert "job 'done' already succeeded; only a pending or running job can be cancelled" in line
    again = fails(cli("jobs", "cancel", "--url", migrated, "pending-later"), code=1)  # found without --space
    assert "job 'pending-later' was already cancelled" in again
    assert ok(cli("jobs", "cancel", "--url", migrated, "other")).stdout.strip() == "job 'other' cancelled"
    assert "no job 'nope'" in fails(cli("jobs", "cancel", *url, "nope"))


def test_jobs_cancel_all_and_retry_all_count_first_and_run_only_with_yes(migrated: str) -> None:
    seed(migrated)
    url = ["--url", migrated, "--space", "1"]
    line = fails(cli("jobs", "cancel-all", *url))  # no --yes: counts, refuses, changes nothing
    assert "cancel 2 pending job(s) and ask 1 running job(s) to stop in space 1" in line and "--yes" in line
    dry = ok(cli("jobs", "cancel-all", *url, "--dry-run"))
    assert "would cancel 2 pending" in dry.stdout and "nothing changed" in dry.stdout
    assert as_json(cli("jobs", "cancel-all", *url, "--dry-run", "--json")) == {
        "space": 1, "action": None, "pending": 2, "running": 1, "changed": None, "dry_run": True, "done": False,
    }  # fmt: skip
    assert as_json(cli("jobs", "show", *url, "pending-due", "--json"))["status"] == "pending"
    assert "3 job(s) changed in space 1" in ok(cli("jobs", "cancel-all", *url, "--yes")).stdout
    statuses = {j["id"]: (j["status"], j["cancel_requested"]) for j in as_json(cli("jobs", "list", "--url", migrated,
                                                                                  "--json"))["jobs"]}  # fmt: skip
    assert statuses == {
        "pending-due": ("cancelled", False), "pending-later": ("cancelled", False), "running": ("running", True),
        "done": ("succeeded", False), "done-2": ("succeeded", False), "other": ("pending", False),
    }  # fmt: skip
    retried = as_json(cli("jobs", "retry-all", *url, "--status", "cancelled", "--yes", "--json"))
    assert (retried["cancelled"], retried["changed"]) == (2, 2)
    assert "would requeue 2 succeeded job(s)" in ok(cli("jobs", "retry-all", *url, "--status", "succeeded",
                                                        "--dry-run")).stdout  # fmt: skip
    assert (
        "1 job(s) changed in space 1, action 'act-done'"
        in ok(cli("jobs", "retry-all", *url, "--action", "act-done", "--status", "succeeded", "--yes")).stdout
    )
    assert "would requeue 0 dead job(s)" in fails(cli("jobs", "retry-all", *url))
    assert "invalid choice" in cli("jobs", "retry-all", *url, "--status", "pending").stderr


def test_pause_resume_and_paused(migrated: str) -> None:
    seed(migrated)
    url = ["--url", migrated]
    assert "nothing is paused in space 1" in ok(cli("paused", *url, "--space", "1")).stdout
    assert "paused space 1, action 'act-pending-due'" in ok(cli("pause", *url, "--space", "1", "--action",
                                                               "act-pending-due")).stdout  # fmt: skip
    again = ok(cli("pause", *url, "--space", "1", "--action", "act-pending-due")).stdout
    assert "already paused: nothing changed" in again
    assert as_json(cli("pause", *url, "--space", "2", "--json")) == {
        "space": 2, "action": None, "paused": True, "changed": True}  # fmt: skip
    listed = as_json(cli("paused", *url, "--space", "1", "--space", "2", "--json"))
    assert [(p["space"], p["action"]) for p in listed] == [(1, "act-pending-due"), (2, None)]
    shown = ok(cli("paused", *url, "--space", "2")).stdout
    assert "(every action)" in shown and "ago" in shown
    assert "resumed space 2 (every action)" in ok(cli("resume", *url, "--space", "2")).stdout
    assert "was not paused: nothing changed" in ok(cli("resume", *url, "--space", "2")).stdout
    assert "action_id" in fails(cli("pause", *url, "--space", "1", "--action", ""))
    assert "required" in cli("pause", *url).stderr
    assert [p["space"] for p in as_json(cli("paused", *url, "--space", "1", "--space", "2", "--json"))] == [1]


# -- schedules and stats -------------------------------------------------------------------------------------


def test_schedules_list(migrated: str) -> None:
    seed(migrated)
    schedules = as_json(cli("schedules", "list", "--url", migrated, "--space", "1", "--json"))
    assert [(s["action_id"], s["cron"], s["timezone"]) for s in schedules] == [
        ("nightly", "0 3 * * *", "Europe/Berlin")
    ]
    assert as_json(cli("schedules", "list", "--url", migrated, "--space", "2", "--json")) == []
    human = ok(cli("schedules", "list", "--url", migrated, "--space", "1")).stdout
    assert "nightly" in human and "0 3 * * *" in human and "schedules 1-1 in space(s) 1" in human
    # Without --space: every space, paged.
    assert [s["action_id"] for s in as_json(cli("schedules", "list", "--url", migrated, "--json"))] == ["nightly"]
    first = ok(cli("schedules", "list", "--url", migrated, "--limit", "1")).stdout
    assert "nightly" in first and "schedules 1-1 in all spaces; next page: --offset 1" in first
    rest = cli("schedules", "list", "--url", migrated, "--limit", "1", "--offset", "1", "--json")
    assert as_json(rest) == []


def test_stats(migrated: str) -> None:
    empty = as_json(cli("stats", "--url", migrated, "--json"))
    assert empty["total"] == 0 and empty["oldest_due_age_seconds"] is None
    seeded_at = seed(migrated)
    stats = as_json(cli("stats", "--url", migrated, "--json"))
    assert stats["counts"] == {
        "pending": 3, "running": 1, "succeeded": 2, "failed": 0, "dead": 0, "cancelled": 0,
    }  # fmt: skip
    assert stats["total"] == 6 and stats["pending_due"] == 1 and stats["running_lease_lapsed"] == 0
    # Measured by the server's clock: `pending-due` was due 5 s before the seed read the clock.
    assert stats["oldest_due_run_at"] == seeded_at - 5_000
    assert 5 <= stats["oldest_due_age_seconds"] < 60
    assert stats["now"] >= seeded_at
    space_2 = as_json(cli("stats", "--url", migrated, "--space", "2", "--json"))
    assert space_2["counts"]["pending"] == 1 and space_2["total"] == 1 and space_2["pending_due"] == 0
    # Per space and action: counts by status, the oldest due job's age, lapsed leases.
    actions = {(a["space_id"], a["action_id"]): a for a in stats["actions"]}
    assert sorted(actions) == [(1, "act-done"), (1, "act-done-2"), (1, "act-pending-due"), (1, "act-pending-later"),
                               (1, "act-running"), (2, "act-other")]  # fmt: skip
    due = actions[(1, "act-pending-due")]
    assert due["counts"]["pending"] == 1 and due["total"] == 1 and due["pending_due"] == 1
    assert due["oldest_due_run_at"] == seeded_at - 5_000 and 5 <= due["oldest_due_age_seconds"] < 60
    assert actions[(1, "act-running")]["counts"]["running"] == 1
    assert actions[(1, "act-running")]["running_lease_lapsed"] == 0
    assert actions[(2, "act-other")]["oldest_due_age_seconds"] is None
    verified = ok(cli("stats", "--url", migrated, "--verify")).stdout
    assert "verified: every kept total matches a recount" in verified
    sql(migrated, "DELETE FROM action_totals WHERE status = 'pending' LIMIT 1")  # a total that drifted
    drifted = cli("stats", "--url", migrated, "--verify", "--json")
    drift = json.loads(drifted.stdout)["drift"]
    assert drifted.returncode == 1 and len(drift) == 1 and drift[0]["kept"] == drift[0]["counted"] - 1
    assert "DRIFT" in cli("stats", "--url", migrated, "--verify").stdout
    sql(migrated, "DELETE FROM action_totals")  # emptied: the next first use backfills them again
    human = ok(cli("stats", "--url", migrated)).stdout
    assert "pending" in human and re.search(rf"oldest due job: \d+(\.\d)?s overdue \(run at {ISO}\)", human), human
    assert "per space and action" in human
    row = next(line.split() for line in human.splitlines() if "act-pending-due" in line)
    assert row[:9] == ["1", "act-pending-due", "1", "0", "0", "0", "0", "0", "1"], row


def test_version() -> None:
    result = ok(cli("--version"))
    assert result.stdout.startswith("plitzi-jobs-mysql 0.1.0 (aiomysql "), result.stdout


# -- errors --------------------------------------------------------------------------------------------------


def test_errors_are_one_line_and_exit_2(mysql_url: str, migrated: str) -> None:
    server = parse_mysql_url(mysql_url)
    unreachable = "mysql://root@127.0.0.1:1/app"
    missing_db = server.with_database("pjm_no_such_database").render(hide_password=False)

    assert "no database URL" in fails(cli("jobs", "list", "--space", "1"))
    assert "invalid MySQL URL" in fails(cli("stats", "--url", "postgres://x@y/z"))
    assert "names no database" in fails(cli("migrate", "--url", mysql_url))
    for command in (["migrate"], ["stats"], ["jobs", "list", "--space", "1"], ["schedules", "list", "--space", "1"]):
        assert "cannot reach the MySQL server" in fails(cli(*command, "--url", unreachable))
        assert "does not exist" in fails(cli(*command, "--url", missing_db))
        assert "table_prefix" in fails(cli(*command, "--url", migrated, "--prefix", "bad prefix"))
    for command in (["stats"], ["jobs", "show", "--space", "1", "x"], ["schedules", "list", "--space", "1"]):
        line = fails(cli(*command, "--url", migrated, "--prefix", "other_"))
        assert "doesn't exist" in line and "migrate" in line
    # Bad arguments: one line too, not argparse's usage block.
    assert "required: id" in fails(cli("jobs", "show", "--url", migrated))
    assert "whole number" in fails(cli("jobs", "list", "--url", migrated, "--space", "one"))
    assert "invalid choice" in fails(cli("jobs", "list", "--url", migrated, "--space", "1", "--status", "done"))
    assert "required" in fails(cli())
    assert "invalid choice" in fails(cli("frobnicate"))
    # A job id past the queue's bounds is the queue's ValueError, reported as one line.
    assert "job_id" in fails(cli("jobs", "show", "--url", migrated, "--space", "1", "x" * 500))
    assert "job_id" in fails(cli("jobs", "retry", "--url", migrated, "x" * 500))  # found by id alone: checked too


def test_help_exits_0() -> None:
    result = ok(cli("--help"))
    assert "ddl" in result.stdout and "migrate" in result.stdout and "stats" in result.stdout
    assert "--space" in ok(cli("jobs", "list", "--help")).stdout
