"""The dashboard in a real Chromium (Debian's, driven by Playwright), served by `plitzi-jobs-mysql dashboard` against
the session's MySQL server while a worker runs: the overview, filtering, one job, a retry the worker then runs, a
pause the worker obeys, hostile job fields, the login. Screenshots of each page go to tests/harness/dashboard.py's
ARTIFACTS (printed at the end of the run)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from plitzi_jobs_mysql import (
    Job,
    PermanentFailure,
    ScheduleInput,
    create_job_worker,
    create_mysql_job_queue,
)
from plitzi_jobs_mysql.testing.support import eventually
from plitzi_jobs_mysql.web.capabilities import Pausing
from tests.conftest import pooled
from tests.harness.dashboard import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, chromium_missing, dashboard
from tests.support import job

pytestmark = [
    pytest.mark.xdist_group("browser"),
    pytest.mark.skipif(chromium_missing() is not None, reason=str(chromium_missing())),
    pytest.mark.timeout(300),
]
TOKEN = "browser-test-token-0123456789"


@pytest.fixture(scope="module", autouse=True)
def artifacts() -> Iterator[None]:
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    yield


class Handler:
    """emails succeed; reports fail for good until `fixed`."""

    def __init__(self) -> None:
        self.fixed = False
        self.ran: list[str] = []

    async def __call__(self, job: Job) -> str | None:
        self.ran.append(job.id)
        if job.action_id == "reports" and not self.fixed:
            raise PermanentFailure("the report template is missing")
        return f"run-{job.id}"


@pytest.fixture
async def setup(database_url: str) -> AsyncIterator[tuple[Any, Handler, Any]]:
    async with pooled(database_url) as pool:
        queue = create_mysql_job_queue(pool)
        handler = Handler()
        worker = create_job_worker(queue=queue, handler=handler, poll_ms=100, lease_ms=10_000, worker_id="worker-a")
        worker.start()
        try:
            yield queue, handler, worker
        finally:
            await worker.stop()


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def new_page(browser: Any) -> tuple[Any, list[str]]:
    """A page that records every dialog a script would open and every console error (a CSP refusal included)."""
    page = await (await browser.new_context(viewport={"width": 1400, "height": 900})).new_page()
    seen: list[str] = []
    page.on(
        "dialog", lambda dialog: (seen.append(f"dialog: {dialog.message}"), asyncio.ensure_future(dialog.dismiss()))
    )
    page.on("console", lambda message: message.type in ("error", "warning") and seen.append(
        f"console {message.type}: {message.text}"))  # fmt: skip
    page.on("pageerror", lambda error: seen.append(f"error: {error}"))
    return page, seen


async def statuses(queue: Any, ids: list[str]) -> dict[str, str]:
    found = {i: await queue.get_job([1], i) for i in ids}
    return {i: (j.status if j else "missing") for i, j in found.items()}


async def shot(page: Any, name: str) -> None:
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


async def test_an_operator_reads_filters_opens_and_retries(database_url: str, setup: Any, browser: Any) -> None:
    queue, handler, _worker = setup
    now = int((await queue.now()).timestamp() * 1000)
    await queue.enqueue_many([job(f"email-{n}", action_id="emails", input={"to": f"user-{n}@example.com"})
                              for n in range(6)] + [job("report-1", action_id="reports", max_attempts=1,
                                                        input={"month": "2026-11"})])  # fmt: skip
    await queue.put_schedules(space_id=1, schedules=[
        ScheduleInput(space_id=1, action_id="nightly-digest", cron="0 7 * * *", environment="main", enabled=True,
                      next_run_at=now + 3_600_000, max_attempts=3, timezone="Europe/Berlin")])  # fmt: skip
    ids = [f"email-{n}" for n in range(6)] + ["report-1"]
    await eventually(lambda: statuses(queue, ids), lambda s: s["report-1"] == "dead" and
                     list(s.values()).count("succeeded") == 6, "the worker running every job")  # fmt: skip

    with dashboard(database_url) as served:
        page, seen = await new_page(browser)
        await page.goto(served.url + "/")
        assert await page.locator(".card.s-succeeded .n").inner_text() == "6"
        assert await page.locator(".card.s-dead .n").inner_text() == "1"
        assert await page.locator("svg.hourly rect.ok").count() >= 1  # the chart has this hour's bar
        await shot(page, "01-overview")

        await page.click("header nav >> text=Jobs")
        await page.select_option("select[name=status]", "dead")
        await page.click("form.filters button[type=submit]")
        assert "status=dead" in page.url
        rows = page.locator("table.jobs tbody tr")
        assert await rows.count() == 1 and "report-1" in await rows.inner_text()
        await shot(page, "02-jobs-filtered")

        await page.click("table.jobs >> text=report-1")
        assert await page.locator("h1").inner_text() == "Job report-1"
        attempts = await page.locator("table.grid-table").last.inner_text()
        assert "worker-a" in attempts and "the report template is missing" in attempts and "failed" in attempts
        assert "2026-11" in await page.locator("pre.input").inner_text()
        await shot(page, "03-job")

        handler.fixed = True
        await page.click("button:has-text('Retry')")
        assert "back in the queue" in await page.locator(".notice").inner_text()
        await eventually(lambda: statuses(queue, ["report-1"]), lambda s: s["report-1"] == "succeeded",
                         "the worker running the retried job")  # fmt: skip
        await page.reload()
        assert await page.locator(".headline .status").inner_text() == "succeeded"
        assert await page.locator("table.grid-table").last.locator("tbody tr").count() == 2  # failed, then succeeded
        await shot(page, "04-job-retried")

        await page.click("header nav >> text=Schedules")
        row = await page.locator("table.grid-table tbody tr").inner_text()
        assert "nightly-digest" in row and "Europe/Berlin" in row and ("07:00 CET" in row or "07:00 CEST" in row)
        await shot(page, "05-schedules")
        assert seen == [], seen  # no script, no CSP refusal, no dialog on any page
    assert handler.ran.count("report-1") == 2


async def test_a_paused_action_stops_the_worker_taking_its_jobs(database_url: str, setup: Any, browser: Any) -> None:
    queue, _handler, _worker = setup
    assert isinstance(queue, Pausing)
    await queue.enqueue(job("email-0", action_id="emails"))
    await eventually(lambda: statuses(queue, ["email-0"]), lambda s: s["email-0"] == "succeeded", "email-0 running")
    with dashboard(database_url) as served:
        page, seen = await new_page(browser)
        await page.goto(served.url + "/")
        await page.click("tr:has-text('emails') >> button:has-text('Pause')")
        assert "Paused" in await page.locator(".notice").inner_text()
        await queue.enqueue_many([job(f"later-{n}", action_id="emails") for n in range(3)])
        await queue.enqueue(job("other", action_id="reports"))  # reports fail for good: it ends dead
        await eventually(lambda: statuses(queue, ["other"]), lambda s: s["other"] == "dead", "other runs")
        # The worker polled after the pause (it ran "other", enqueued after the emails): none of them was taken.
        assert set((await statuses(queue, [f"later-{n}" for n in range(3)])).values()) == {"pending"}
        await page.reload()
        await shot(page, "06-paused")
        await page.click("tr:has-text('emails') >> button:has-text('Resume')")
        later = [f"later-{n}" for n in range(3)]
        await eventually(lambda: statuses(queue, later), lambda s: set(s.values()) == {"succeeded"}, "resumed")
        assert seen == [], seen


HOSTILE = [
    "<script>window.__pwned = 1</script>",
    '"><img src=x onerror="window.__pwned = 2">',
    "\u202eexe.gnp-tnemhcatta",  # a right-to-left override
    "'><svg onload=alert(3)>",
]


async def test_hostile_job_fields_run_no_script_and_the_page_stays_usable(
    database_url: str, setup: Any, browser: Any
) -> None:
    queue, _handler, worker = setup
    await worker.stop()  # the jobs stay pending, so the cancel button is there
    big = "A" * 1_048_576
    await queue.enqueue_many([job(f"hostile-{n}{text}", action_id=text, key=text, trigger=text[:64],
                                  input={"text": text, "big": big}) for n, text in enumerate(HOSTILE)])  # fmt: skip
    with dashboard(database_url) as served:
        page, seen = await new_page(browser)
        await page.goto(served.url + "/jobs")
        assert await page.locator("table.jobs tbody tr").count() == len(HOSTILE)
        for text in HOSTILE:
            assert text in await page.locator("table.jobs").inner_text()  # shown as text, whole
        await shot(page, "07-hostile-jobs")
        await page.click("table.jobs tbody tr >> nth=0 >> td.id a")
        # is_visible() does not wait: the click returns once the job's page commits, before it has all arrived
        await page.wait_for_load_state("load")
        cancel = page.locator("button:has-text('Cancel')")
        await cancel.wait_for(state="visible", timeout=10_000)  # there, and not pushed away by 1 MiB of input
        box = await cancel.bounding_box()
        assert box is not None and box["y"] < 400
        assert "more characters" in await page.locator("main").inner_text()
        await shot(page, "08-hostile-job")
        assert await page.evaluate("() => [window.__pwned, document.scripts.length, document.images.length]") == [
            None, 0, 0]  # fmt: skip
        await page.click("button:has-text('Cancel')")
        assert "cancelled" in await page.locator(".notice").inner_text()
        assert seen == [], seen


async def test_the_browser_logs_in_with_the_token(database_url: str, setup: Any, browser: Any) -> None:
    queue, _handler, _worker = setup
    await queue.enqueue(job("one"))  # the tables exist from here on
    with dashboard(database_url, "--token-env", "PJM_DASHBOARD_TOKEN", env={"PJM_DASHBOARD_TOKEN": TOKEN}) as served:
        page, seen = await new_page(browser)
        await page.goto(served.url + "/jobs?status=dead")
        assert "/login" in page.url
        await shot(page, "09-login")
        await page.fill("input[name=token]", "not-the-token")
        await page.click("button:has-text('Log in')")
        assert "not the dashboard's" in await page.locator(".notice").inner_text()
        assert seen == [
            "console error: Failed to load resource: the server responded with a status of 401 (Unauthorized)"
        ]
        seen.clear()  # the refused login's own status
        await page.fill("input[name=token]", TOKEN)
        await page.click("button:has-text('Log in')")
        assert page.url.endswith("/jobs?status=dead") and await page.locator("h1").inner_text() == "Jobs"
        (session,) = [c for c in await page.context.cookies() if c["name"] == "pjm_session"]
        assert session["httpOnly"] and session["sameSite"] == "Strict" and TOKEN not in session["value"]
        await page.click("button:has-text('Log out')")
        assert "/login" in page.url
        assert seen == [], seen
