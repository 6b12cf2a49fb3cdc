"""The README's examples run as written (only the connection is pointed at the test server)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from plitzi_jobs_mysql.url import parse_mysql_url

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def readme_block(*needles: str) -> str:
    """The one example of the README holding every one of `needles`."""
    (block,) = [b for b in python_blocks() if all(needle in b for needle in needles)]
    return block


def point_at(code: str, url: str) -> str:
    target = parse_mysql_url(url)
    connection = (
        f'host="{target.host}", port={target.port}, user="{target.user}", password="{target.password}", '
        f'db="{target.database}",'
    )
    pointed = code.replace('host="127.0.0.1", port=3306, user="root", password="", db="test",', connection)
    assert pointed != code, "the quickstart no longer opens its pool the way this test expects"
    return pointed


def test_the_first_example_is_declared_actions_and_runs(database_url: str) -> None:
    first = python_blocks()[0]
    assert first == readme_block("actions = Actions()", "actions.enqueue(")
    result = subprocess.run(
        [sys.executable, "-c", point_at(first, database_url)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["welcoming user 42", "welcome:42 succeeded mail-1"]


def test_the_quickstart_runs(database_url: str) -> None:
    quickstart = readme_block("AttemptOutcome", "queue.claim(")
    result = subprocess.run(
        [sys.executable, "-c", point_at(quickstart, database_url)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "created",
        "running welcome:42 {'user': 42}",
        "welcomes sent: 1",
    ]


def test_the_service_example_defines_what_it_says() -> None:
    namespace: dict[str, Any] = {}
    exec(compile(readme_block("class Lookups"), "README.md", "exec"), namespace)
    lookups = namespace["Lookups"]()
    (entry,) = asyncio.run(lookups.list_actions(1))
    assert entry.schedule.cron == "0 7 * * *"
    assert (
        asyncio.run(
            namespace["handle"](
                namespace["Job"](
                    id="j",
                    space_id=1,
                    action_id="nightly-digest",
                    environment="main",
                    trigger="schedule",
                    input={},
                    due_at=0,
                    max_attempts=3,
                    status="running",
                    run_at=0,
                    attempts=1,
                    created_at=0,
                    updated_at=0,
                )
            )
        )
        == "digest-run-1"
    )


def test_the_observability_example_wires_the_hook_and_telemetry() -> None:
    from plitzi_jobs_mysql import EventKind, JobEvent, create_memory_job_queue, create_memory_kv

    service: dict[str, Any] = {}
    exec(compile(readme_block("class Lookups"), "README.md", "exec"), service)
    paged: list[str] = []
    namespace: dict[str, Any] = {
        "Lookups": service["Lookups"],
        "handle": service["handle"],
        "page_someone": paged.append,
        "queue": create_memory_job_queue(),
        "kv": create_memory_kv(),
    }

    async def run() -> None:
        exec(compile(readme_block("JobsTelemetry()"), "README.md", "exec"), namespace)
        namespace["depth_sampler"].cancel()

    asyncio.run(run())
    jobs = namespace["jobs"]
    assert jobs.worker.settings.on_event is namespace["on_event"] is jobs.scheduler.settings.on_event
    namespace["on_event"](JobEvent(kind=EventKind.DEAD, job_id="j", space_id=1, action_id="a", message="boom"))
    assert paged == ["a gave up on j: boom"]


async def test_the_dashboard_mounts_in_a_starlette_app(database_url: str, monkeypatch: Any) -> None:
    import httpx

    from tests.conftest import pooled

    (block,) = [b for b in python_blocks() if "create_dashboard" in b]
    token = "a-token-for-the-readme-example"
    monkeypatch.setenv("JOBS_DASHBOARD_TOKEN", token)
    namespace: dict[str, Any] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    async with pooled(database_url) as pool:
        from plitzi_jobs_mysql import create_mysql_job_queue

        await create_mysql_job_queue(pool).get_job([1], "x")  # the tables, as the application's replicas make them
        app = namespace["build_app"](pool)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            assert (await client.get("/")).text == "your application"
            assert (await client.get("/ops/jobs/jobs")).status_code == 401
            login = await client.get("/ops/jobs/", headers={"accept": "text/html"})
            assert login.status_code == 303 and login.headers["location"] == "/ops/jobs/login?next=%2F"
            page = await client.get("/ops/jobs/jobs", headers={"authorization": f"Bearer {token}"})
            assert page.status_code == 200 and 'href="/ops/jobs/static/dashboard.css"' in page.text
            assert (await client.get("/ops/jobs/static/dashboard.css")).status_code == 200
            refused = await client.get("/ops/jobs/jobs?space=2", headers={"authorization": f"Bearer {token}"})
            assert refused.status_code == 400  # spaces=[1]


async def test_the_priorities_example_claims_the_urgent_job_first(database_url: str) -> None:
    from plitzi_jobs_mysql import create_memory_job_queue, create_mysql_job_queue
    from plitzi_jobs_mysql.testing.support import now_ms
    from tests.conftest import pooled

    (block,) = [b for b in python_blocks() if "urgent_first" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    memory = create_memory_job_queue()
    assert await namespace["urgent_first"](memory, await now_ms(memory)) == ["password-reset:42", "newsletter:7"]
    async with pooled(database_url) as pool:
        queue = create_mysql_job_queue(pool)
        assert await namespace["urgent_first"](queue, await now_ms(queue)) == ["password-reset:42", "newsletter:7"]


async def test_the_pause_example_holds_the_newsletter_until_resumed(database_url: str) -> None:
    from plitzi_jobs_mysql import create_memory_job_queue, create_mysql_job_queue
    from plitzi_jobs_mysql.testing.support import now_ms
    from tests.conftest import pooled
    from tests.support import job

    (block,) = [b for b in python_blocks() if "hold_the_newsletter" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    expected = ["send-newsletter", "password-reset:42", "newsletter:7"]
    async with pooled(database_url) as pool:
        for queue in (create_memory_job_queue(), create_mysql_job_queue(pool)):
            now = await now_ms(queue)
            await queue.enqueue_many([job("newsletter:7", action_id="send-newsletter", due_at=now - 1),
                                      job("password-reset:42", action_id="send-email", due_at=now)])  # fmt: skip
            assert await namespace["hold_the_newsletter"](queue) == expected


async def test_the_outbox_example_commits_the_order_and_its_job_together(database_url: str) -> None:
    import pymysql

    from plitzi_jobs_mysql import create_job_worker, create_mysql_job_queue
    from tests.conftest import pooled, sql
    from tests.support import wait_for_job

    (block,) = [b for b in python_blocks() if "complete_in" in b]
    namespace: dict[str, Any] = {}
    exec(compile(block, "README.md", "exec"), namespace)
    sql(database_url, "CREATE TABLE orders (id INT PRIMARY KEY, email VARCHAR(191), confirmed BOOL NOT NULL)")
    async with pooled(database_url, charset="utf8mb4") as pool:
        queue = create_mysql_job_queue(pool)
        await namespace["place_order"](pool, queue, 7, "ada@example.com")
        try:  # the same order again: the INSERT fails, the transaction rolls back, and no second job exists
            await namespace["place_order"](pool, queue, 7, "ada@example.com")
        except pymysql.err.IntegrityError:
            pass
        else:
            raise AssertionError("a second order 7 was accepted")
        worker = create_job_worker(queue=queue, handler=namespace["confirm_order"](pool, queue), poll_ms=60_000)
        worker.start()
        try:
            await worker.poll()
            found = await wait_for_job(queue, "confirm:7", "succeeded")
            await worker.idle()
        finally:
            await worker.stop()
    assert found.run_id == "confirmed" and [a.status for a in found.history] == ["succeeded"]
    assert sql(database_url, "SELECT id, confirmed FROM orders") == [(7, 1)]
    assert [row[0] for row in sql(database_url, "SELECT id FROM action_jobs")] in (["confirm:7"], [b"confirm:7"])


def test_the_limits_example_holds_its_limit() -> None:
    (block,) = [b for b in python_blocks() if "LIMITS = {" in b]
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["most exports at once: 3"]
