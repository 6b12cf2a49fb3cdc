"""The dashboard over the memory queue, at the HTTP level: pages, parameters, the token, CSRF, headers, escaping.
(The same app against MySQL, in Chromium, with a worker running: tests/mysql/test_dashboard_browser.py.)"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest

from plitzi_jobs_mysql import AttemptOutcome, JobInput, ScheduleInput, create_memory_job_queue
from plitzi_jobs_mysql.memory import MemoryJobQueue, wall_clock_ms
from plitzi_jobs_mysql.web import create_dashboard
from plitzi_jobs_mysql.web.activity import HOUR_MS, Activity
from plitzi_jobs_mysql.web.chart import hourly_chart
from plitzi_jobs_mysql.web.params import BadRequest, identifier
from plitzi_jobs_mysql.web.security import CONTENT_SECURITY_POLICY, CSRF_COOKIE, SESSION_COOKIE
from plitzi_jobs_mysql.web.times import age, duration
from tests.support import Clock

TOKEN = "a-token-of-twenty-chars"
HTML = {"accept": "text/html"}


def job(id: str, **fields: Any) -> JobInput:
    values: dict[str, Any] = dict(space_id=1, action_id="emails", environment="main", trigger="t", input={"n": 1},
                                  due_at=0, max_attempts=2)  # fmt: skip
    values.update(fields)
    return JobInput(id=id, **values)


async def settle(queue: Any, status: str, error: str | None = None) -> str:
    (claimed,) = await queue.claim(worker_id="w1", lease_ms=60_000, limit=1)
    attempt = AttemptOutcome(status="succeeded" if status == "succeeded" else "failed", worker_id="w1", error=error)
    await queue.settle(job_id=claimed.id, worker_id="w1", status=status, error=error, attempt=attempt)
    return str(claimed.id)


@pytest.fixture
async def queue() -> MemoryJobQueue:
    q = create_memory_job_queue()
    await q.enqueue_many([job("ok", due_at=1), job("dead", due_at=2), job("waits", due_at=3)])
    await settle(q, "succeeded")
    await settle(q, "dead", "boom: it broke")
    now = wall_clock_ms()
    await q.put_schedules(space_id=1, schedules=[
        ScheduleInput(space_id=1, action_id="digest", cron="0 7 * * *", environment="main", enabled=True,
                      next_run_at=now + HOUR_MS, max_attempts=3, timezone="Europe/Berlin")])  # fmt: skip
    return q


def client(app: Any, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787", **kwargs)


@pytest.fixture
async def web(queue: MemoryJobQueue) -> AsyncIterator[httpx.AsyncClient]:
    async with client(create_dashboard(queue)) as c:
        yield c


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


async def test_every_page_renders_with_the_strict_headers(web: httpx.AsyncClient) -> None:
    for path in ("/", "/jobs", "/jobs?status=dead", "/job?space=1&id=dead", "/schedules", "/static/dashboard.css",
                 "/job.json?space=1&id=dead", "/jobs?id=dead"):  # fmt: skip
        response = await web.get(path, headers=HTML)
        assert response.status_code == 200, (path, response.text[-500:])
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
        assert "<script" not in response.text, path
    overview = (await web.get("/")).text
    assert "Jobs finished per hour" in overview and "<svg" in overview and "emails" in overview
    job_page = (await web.get("/job?space=1&id=dead")).text
    assert "boom: it broke" in job_page and "w1" in job_page and "Retry" in job_page
    schedules = (await web.get("/schedules")).text
    assert "0 7 * * *" in schedules and "Europe/Berlin" in schedules and re.search(r"07:00 CES?T", schedules)


async def test_bad_parameters_are_a_400_saying_why(web: httpx.AsyncClient) -> None:
    cases = {
        "/jobs?limit=201": "limit must be between 1 and 200",
        "/jobs?limit=abc": "limit must be a whole number",
        "/jobs?status=pending%27%20OR%201%3D1": "status must be one of",
        "/jobs?space=x": "space must be a whole number",
        "/jobs?offset=-1": "offset must be between",
        "/jobs?after=k1.%3Cscript%3E": "after is not a cursor",
        "/jobs?after=k1.MS4x&offset=5": "either after",
        f"/jobs?action={'a' * 192}": "at most 191",
        "/job?space=1": "a job is named by its space and id",
        "/schedules?limit=0": "limit must be between",
        "/?space=99999999999999999999": "space must be between",
    }
    for path, message in cases.items():
        response = await web.get(path, headers=HTML)
        assert response.status_code == 400, (path, response.status_code)
        assert message in response.text, (path, response.text[-400:])
    missing = await web.get("/job?space=1&id=nope", headers=HTML)
    assert missing.status_code == 404 and "no job with that id" in missing.text


async def test_the_jobs_pager_goes_older_by_the_keyset_cursor() -> None:
    queue = create_memory_job_queue()
    await queue.enqueue_many([job(f"j{n:03}", due_at=n) for n in range(120)])
    expected = [j.id for j in (await queue.list_jobs(space_ids=None, limit=200)).jobs]
    seen: list[str] = []
    async with client(create_dashboard(queue)) as web:
        path: str | None = "/jobs?limit=50"
        while path is not None:
            page = await web.get(path, headers=HTML)
            assert page.status_code == 200, page.text[-300:]
            seen += re.findall(r'href="/job\?space=1&amp;id=(j\d+)"', page.text)
            older = re.search(r'<a href="([^"]+)" rel="next">', page.text)
            path = older.group(1).replace("&amp;", "&") if older else None
            assert path is None or ("after=k1." in path and "offset" not in path)
        assert "older job(s) of 120" in page.text and "← newest" in page.text
    assert seen == expected


async def test_a_limited_dashboard_refuses_other_spaces(queue: MemoryJobQueue) -> None:
    await queue.enqueue(job("elsewhere", space_id=2))
    async with client(create_dashboard(queue, spaces=[2])) as web:
        assert "elsewhere" in (await web.get("/jobs")).text
        assert "dead" not in (await web.get("/jobs?status=pending")).text.split("<table")[-1]
        refused = await web.get("/job?space=1&id=dead", headers=HTML)
        assert refused.status_code == 400 and "space 1 is not one this dashboard shows" in refused.text


async def test_changes_go_through_the_queue_with_a_csrf_token(web: httpx.AsyncClient, queue: MemoryJobQueue) -> None:
    page = (await web.get("/job?space=1&id=dead")).text
    token = csrf_of(page)
    assert web.cookies.get(CSRF_COOKIE) == token
    refused = await web.post("/job/retry", data={"space": "1", "id": "dead"})
    assert refused.status_code == 403 and "CSRF" in refused.text
    forged = await web.post("/job/retry", data={"space": "1", "id": "dead", "csrf": "x" * 43})
    assert forged.status_code == 403
    cross = await web.post("/job/retry", data={"space": "1", "id": "dead", "csrf": token},
                           headers={"origin": "http://evil.example"})  # fmt: skip
    assert cross.status_code == 403
    assert (await queue.get_job([1], "dead")).status == "dead"  # type: ignore[union-attr]

    done = await web.post("/job/retry", data={"space": "1", "id": "dead", "csrf": token})
    assert done.status_code == 303 and "notice=retry" in done.headers["location"]
    assert (await queue.get_job([1], "dead")).status == "pending"  # type: ignore[union-attr]
    assert "back in the queue" in (await web.get(done.headers["location"])).text
    # A succeeded job is not "retried": running it again is a requeue, asked for as such.
    kept = await web.post("/job/retry", data={"space": "1", "id": "ok", "csrf": token})
    assert "notice=unchanged" in kept.headers["location"]
    assert (await queue.get_job([1], "ok")).status == "succeeded"  # type: ignore[union-attr]
    await web.post("/job/requeue", data={"space": "1", "id": "ok", "csrf": token})
    assert (await queue.get_job([1], "ok")).status == "pending"  # type: ignore[union-attr]
    await web.post("/job/cancel", data={"space": "1", "id": "waits", "csrf": token})
    assert (await queue.get_job([1], "waits")).status == "cancelled"  # type: ignore[union-attr]
    assert (await web.get("/job/retry")).status_code == 405  # writes are POSTs only


async def test_read_only_shows_no_forms_and_refuses_writes(queue: MemoryJobQueue) -> None:
    async with client(create_dashboard(queue, read_only=True)) as web:
        page = (await web.get("/job?space=1&id=dead")).text
        assert "Retry" not in page and 'method="post"' not in page and "read-only" in page
        refused = await web.post("/job/retry", data={"space": "1", "id": "dead", "csrf": "whatever"})
        assert refused.status_code == 403 and "read-only" in refused.text
    assert (await queue.get_job([1], "dead")).status == "dead"  # type: ignore[union-attr]


async def test_the_token_is_demanded_on_every_request(queue: MemoryJobQueue) -> None:
    async with client(create_dashboard(queue, token=TOKEN)) as web:
        for path in ("/", "/jobs", "/job?space=1&id=dead", "/job.json?space=1&id=dead", "/schedules"):
            assert (await web.get(path)).status_code == 401, path
            bounced = await web.get(path, headers=HTML)
            assert bounced.status_code == 303 and bounced.headers["location"].startswith("/login?next=")
        assert (await web.post("/job/retry", data={"space": "1", "id": "dead"})).status_code == 401
        assert (await web.get("/static/dashboard.css")).status_code == 200  # public files only

        scripted = await web.get("/jobs", headers={"authorization": f"Bearer {TOKEN}"})
        assert scripted.status_code == 200 and "dead" in scripted.text
        assert (await web.get("/jobs", headers={"authorization": f"Bearer {TOKEN}x"})).status_code == 401
        by_script = await web.post("/job/retry", data={"space": "1", "id": "dead"},
                                   headers={"authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert by_script.status_code == 303  # a bearer header needs no CSRF token: no browser sends one by itself

        form = await web.get("/login?next=/jobs%3Fstatus%3Ddead")
        wrong = await web.post("/login", data={"token": "nope", "csrf": csrf_of(form.text), "next": "/jobs"})
        assert (
            wrong.status_code == 401 and "not the dashboard" in wrong.text and web.cookies.get(SESSION_COOKIE) is None
        )
        ok = await web.post("/login", data={"token": TOKEN, "csrf": csrf_of(form.text), "next": "/jobs?status=dead"})
        assert ok.status_code == 303 and ok.headers["location"] == "/jobs?status=dead"
        cookie = ok.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert (await web.get("/jobs")).status_code == 200

        evil = await web.post("/login", data={"token": TOKEN, "csrf": csrf_of(form.text), "next": "//evil.example/"})
        assert evil.headers["location"] == "/"  # never a redirect to another site
    async with client(create_dashboard(queue, token=TOKEN + "-changed")) as other:
        other.cookies.set(SESSION_COOKIE, web.cookies[SESSION_COOKIE])
        assert (await other.get("/jobs")).status_code == 401  # a new token ends the old sessions
    with pytest.raises(ValueError, match="at least 16"):
        create_dashboard(queue, token="short")


async def test_hostile_fields_are_escaped_and_clipped(queue: MemoryJobQueue) -> None:
    hostile = '<script>window.__pwned=1</script>"><img src=x onerror=alert(1)>\u202egnp.exe'
    await queue.enqueue(
        job(hostile, action_id=hostile[:150], key=hostile[:150], input={"x": hostile, "big": "A" * 1_048_576})
    )
    await queue.enqueue(job("big-error", due_at=4))
    assert "big-error" in [j.id for j in await queue.claim(worker_id="w1", lease_ms=60_000, limit=5)]
    huge = hostile + "E" * 1_048_576
    await queue.settle(job_id="big-error", worker_id="w1", status="dead", error=huge[:65_535],
                       attempt=AttemptOutcome(status="failed", worker_id="w1", error=huge[:65_535]))  # fmt: skip
    async with client(create_dashboard(queue)) as web:
        listing = (await web.get("/jobs")).text
        detail = (await web.get("/job", params={"space": "1", "id": hostile})).text
        errors = (await web.get("/job", params={"space": "1", "id": "big-error"})).text
    assert len(listing) < 100_000  # each error clipped to a line in the table
    for page in (listing, detail, errors):
        assert "<script>window" not in page and "<img src=x" not in page
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in page
        assert "<bdi>" in page  # an RTL override cannot turn the text around it
    assert len(detail) < 200_000 and "more characters" in detail  # 1 MiB of input is clipped on the page


async def test_the_chart_counts_closed_hours_once() -> None:
    clock = Clock(1_000 * HOUR_MS + 30 * 60_000)  # half past an hour
    queue = create_memory_job_queue(clock=clock)
    calls: list[tuple[int, int]] = []
    original = queue.finished_counts

    async def counted(**kwargs: Any) -> Any:
        calls.append((kwargs["since"], kwargs["until"]))
        return await original(**kwargs)

    queue.finished_counts = counted  # type: ignore[method-assign]
    await queue.enqueue_many([job("a"), job("b")])
    await settle(queue, "succeeded")
    activity = Activity(queue, hours=4)
    window = await activity.window(None, clock.now)
    assert [sum(c.count for c in counts) for counts in window.values()] == [0, 0, 0, 1]
    assert len(calls) == 2  # the closed hours at once, then the current one
    clock.now += HOUR_MS  # the job's hour closes (a minute after its end)
    await settle(queue, "dead", "x")
    window = await activity.window(None, clock.now)
    assert [sum(c.count for c in counts) for counts in window.values()] == [0, 0, 1, 1]
    calls.clear()
    await activity.window(None, clock.now + 1)
    assert len(calls) == 1 and calls[0][0] == clock.now // HOUR_MS * HOUR_MS  # only the current hour again
    chart = hourly_chart(window, HOUR_MS)
    assert chart.totals == {"succeeded": 1, "failed or dead": 1, "cancelled": 0}
    assert {bar.css for bar in chart.bars} == {"ok", "bad"}


async def test_a_page_does_not_wait_for_the_first_count_of_the_closed_hours() -> None:
    clock = Clock(1_000 * HOUR_MS + 30 * 60_000)
    queue = create_memory_job_queue(clock=clock)
    await queue.enqueue_many([job("a")])
    await settle(queue, "succeeded")  # in the current hour
    current = clock.now // HOUR_MS * HOUR_MS
    gate, closed_reads = asyncio.Event(), []
    original = queue.finished_counts

    async def slow(**kwargs: Any) -> Any:
        if kwargs["until"] <= current:  # a count of closed hours: as slow as a big table makes it
            closed_reads.append((kwargs["since"], kwargs["until"]))
            await gate.wait()
        return await original(**kwargs)

    queue.finished_counts = slow  # type: ignore[method-assign]
    activity = Activity(queue, hours=8, budget_s=0.05)
    window = await asyncio.wait_for(activity.window(None, clock.now), 10)  # not held up by the closed hours
    assert [sum(c.count for c in counts) for counts in window.values()] == [0] * 7 + [1]
    assert activity.uncounted(None, clock.now) == 7
    assert closed_reads == [(current - 3 * HOUR_MS, current)], "the newest closed hours first, a few at a time"
    gate.set()
    await activity.finish_counting(None)
    assert activity.uncounted(None, clock.now) == 0
    assert [until - since for since, until in closed_reads] == [3 * HOUR_MS, 3 * HOUR_MS, HOUR_MS]
    closed_reads.clear()
    await activity.window(None, clock.now)
    assert closed_reads == [], "counted once"


def test_durations_and_ages_read_as_people_say_them() -> None:
    assert [duration(ms) for ms in (850, 12_340, 303_000, 7_800_000, 276_000_000)] == [
        "850ms", "12.3s", "5m 3s", "2h 10m", "3d 4h"]  # fmt: skip
    assert (age(0, 5_000), age(10_000, 5_000), age(5_000, 5_300)) == ("5s ago", "in 5s", "now")


class PausingQueue(MemoryJobQueue):
    """The memory queue with the Extensions' pause and bulk calls recorded rather than run."""

    calls: list[tuple[str, Any]]

    async def pause(self, *, space_id: int, action_id: str | None = None) -> None:
        self.calls.append(("pause", (space_id, action_id)))

    async def resume(self, *, space_id: int, action_id: str | None = None) -> None:
        self.calls.append(("resume", (space_id, action_id)))

    async def list_paused(self, space_ids: Sequence[int]) -> list[Any]:
        return []

    async def cancel_all(self, *, space_id: int, action_id: str | None = None) -> int:
        self.calls.append(("cancel_all", (space_id, action_id)))
        return 1

    async def retry_all(self, *, space_id: int, action_id: str | None = None, status: str = "dead") -> int:
        self.calls.append(("retry_all", (space_id, action_id, status)))
        return 1


async def test_pause_and_bulk_forms_appear_for_a_queue_that_has_them(queue: MemoryJobQueue) -> None:
    plain = (await client(create_dashboard(queue)).get("/")).text
    assert "Pause" in plain and "Retry dead" in plain  # the memory queue pauses and has the bulk operations
    able = PausingQueue(retain_finished=500, clock=wall_clock_ms)
    able.calls = []
    await able.enqueue_many([job("ok", due_at=1), job("dead", due_at=2), job("waits", due_at=3)])
    await settle(able, "succeeded")
    await settle(able, "dead", "boom")
    async with client(create_dashboard(able)) as web:
        page = (await web.get("/")).text
        assert "Pause" in page and "Retry dead" in page and "Cancel all" in page
        token = csrf_of(page)
        await web.post("/pause", data={"space": "1", "action": "emails", "csrf": token})
        confirm = await web.get("/bulk?operation=retry&space=1&action=emails&status=dead")
        assert "<strong>1</strong> dead job(s)" in confirm.text  # the count before confirming
        unconfirmed = await web.post("/bulk", data={"operation": "retry", "space": "1", "action": "emails",
                                                    "csrf": token})  # fmt: skip
        assert unconfirmed.status_code == 400
        done = await web.post("/bulk", data={"operation": "retry", "space": "1", "action": "emails", "status": "dead",
                                             "confirm": "1", "csrf": token})  # fmt: skip
        assert done.status_code == 303 and "count=1" in done.headers["location"]
    assert able.calls == [("pause", (1, "emails")), ("retry_all", (1, "emails", "dead"))]


async def test_the_bulk_forms_run_the_stores_own_bulk_operations(queue: MemoryJobQueue) -> None:
    dead = await queue.get_job([1], "dead")
    assert dead is not None
    action = dead.action_id
    async with client(create_dashboard(queue)) as web:
        page = (await web.get("/")).text
        assert "Retry dead" in page and "Cancel all" in page
        confirm = await web.get(f"/bulk?operation=retry&space=1&action={action}&status=dead")
        assert "<strong>1</strong> dead job(s)" in confirm.text
        token = csrf_of(confirm.text)
        done = await web.post("/bulk", data={"operation": "retry", "space": "1", "action": action, "status": "dead",
                                             "confirm": "1", "csrf": token})  # fmt: skip
        assert done.status_code == 303 and "count=1" in done.headers["location"]
        retried = await queue.get_job([1], "dead")
        assert retried is not None and retried.status == "pending"
        done = await web.post("/bulk", data={"operation": "cancel", "space": "1", "action": action, "confirm": "1",
                                             "csrf": token})  # fmt: skip
        assert done.status_code == 303 and "count=2" in done.headers["location"]  # "dead" again, and "waits"
    assert [(await queue.get_job([1], i)).status for i in ("dead", "waits", "ok")] == [  # type: ignore[union-attr]
        "cancelled", "cancelled", "succeeded",
    ]  # fmt: skip


@pytest.mark.parametrize("text", ["x" * 192, "lone-\ud800", "😀" * 192])
def test_an_identifier_the_store_would_refuse_is_a_bad_request(text: str) -> None:
    # The store's own rule (validation.text), not a copy of part of it: what passes here, the queue takes.
    with pytest.raises(BadRequest):
        identifier({"action": text}, "action")
    assert identifier({"action": "😀" * 191}, "action") == "😀" * 191
    assert identifier({"action": ""}, "action") is None
