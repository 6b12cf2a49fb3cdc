"""What an operator reads (GET): the overview, the jobs, one job, the schedules, a bulk operation's count."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from ..contract.clock import to_epoch_ms
from ..records import Job, JobPage
from . import params
from .chart import SERIES, hourly_chart
from .times import instant
from .views import action_rows, job_detail, job_row, paused_rows, schedule_row, status_order

if TYPE_CHECKING:
    from .app import Dashboard

NOTICES = {
    "retry": "The job is back in the queue (pending, attempts reset).",
    "requeue": "The job is back in the queue and will run again.",
    "cancel": "The job was cancelled (a running one stops at its worker's next heartbeat).",
    "cancel-requested": "The job is running: its worker was asked to cancel it (on its next heartbeat).",
    "unchanged": "Nothing changed: the job is no longer in a state that allows it (it moved on meanwhile).",
    "pause": "Paused: claims skip its jobs; running ones finish.",
    "resume": "Resumed: its jobs are claimed again.",
    "bulk": "Done: {count} job(s) changed.",
    "login": "Logged in.",
}


def _dashboard(request: Request) -> Dashboard:
    from .app import dashboard_of

    return dashboard_of(request)


async def _now(d: Dashboard) -> int:
    return to_epoch_ms(await d.queue.now())


def notice(request: Request) -> str | None:
    """A fixed message chosen by the redirect that follows a change: never text taken from the request."""
    key = request.query_params.get("notice")
    if key not in NOTICES:
        return None
    count = params.integer(request.query_params, "count", default=0, low=0, high=2**63 - 1)
    return NOTICES[key].format(count=count)


async def overview(request: Request) -> Response:
    d = _dashboard(request)
    space = params.space(request.query_params, d.scope)
    spaces = d.spaces(space)
    now = await _now(d)
    stats = await d.caps.reads.stats(space_ids=spaces) if d.caps.reads else None
    window = await d.activity.window(spaces, now) if d.activity else {}
    known = spaces if spaces is not None else sorted({a.space_id for a in stats.actions}) if stats else []
    paused = paused_rows(await d.caps.pausing.list_paused(known), now) if d.caps.pausing and known else []
    bucket_ms = d.activity.bucket_ms if d.activity else 3_600_000
    return d.render(
        request, "overview.html", title="Overview", nav="overview", now=instant(now, now), space=space,
        stats=stats, statuses=status_order(), chart=hourly_chart(window, bucket_ms) if window else None,
        series=SERIES, actions=action_rows(stats.actions, window, paused, now) if stats else [],
        oldest_due_age=None if not stats or stats.oldest_due_run_at is None else instant(stats.oldest_due_run_at, now),
        paused=paused, hours=d.activity.hours if d.activity else 0, notice=notice(request),
        uncounted=d.activity.uncounted(spaces, now) if d.activity else 0,
    )  # fmt: skip


async def _find(d: Dashboard, filters: params.JobFilters) -> JobPage:
    """One job by its exact id (in the named space, or in any shown), or a filtered page newest first."""
    spaces = d.spaces(filters.space)
    if filters.id is not None:
        if spaces is None:  # every space: the ones that hold jobs
            if d.caps.reads is None:
                raise params.BadRequest("choose a space to look a job up by its id")
            spaces = sorted({a.space_id for a in (await d.caps.reads.stats()).actions})
        found = await d.queue.get_job(spaces, filters.id) if spaces else None
        matches = (
            found is not None
            and (filters.action in (None, found.action_id))
            and (filters.status in (None, found.status))
        )
        return JobPage(jobs=[found] if found is not None and matches else [], total=int(matches))
    return await d.queue.list_jobs(
        space_ids=spaces,  # type: ignore[arg-type]  # None: every space (both stores take it)
        action_id=filters.action, status=filters.status, limit=filters.limit, offset=filters.offset,
        after=filters.after,
    )  # fmt: skip


async def jobs(request: Request) -> Response:
    d = _dashboard(request)
    filters = params.job_filters(request.query_params, d.scope)
    now = await _now(d)
    page = await _find(d, filters)
    shown_to = filters.offset + len(page.jobs)
    # Older pages by the keyset cursor (page 1,000 costs what page 1 does); newer ones from the newest again.
    previous = filters.query(offset=max(filters.offset - filters.limit, 0) or None) if filters.offset else None
    if filters.after is not None:
        previous = filters.query(after=None)
    more = page.next_after is not None and (filters.after is not None or shown_to < page.total)
    following = filters.query(offset=None, after=page.next_after) if more else None
    return d.render(
        request, "jobs.html", title="Jobs", nav="jobs", now=instant(now, now), filters=filters, page=page,
        rows=[job_row(j, now) for j in page.jobs], statuses=status_order(), previous=previous, following=following,
        shown_from=filters.offset + 1 if page.jobs else 0, shown_to=shown_to, page_max=params.PAGE_MAX,
        after=filters.after,
    )  # fmt: skip


async def _job_or_404(d: Dashboard, ref: params.JobRef) -> Job:
    found = await d.queue.get_job([ref.space], ref.id)
    if found is None:
        raise HTTPException(404, f"no job with that id in space {ref.space}")
    return found


async def job(request: Request) -> Response:
    d = _dashboard(request)
    ref = params.job_ref(request.query_params, d.scope)
    now = await _now(d)
    found = await _job_or_404(d, ref)
    return d.render(request, "job.html", title="Job", nav="jobs", now=instant(now, now), detail=job_detail(found, now),
                    notice=notice(request))  # fmt: skip


async def job_json(request: Request) -> Response:
    """The whole job as JSON (its whole input and errors, which the page clips), as a download."""
    d = _dashboard(request)
    found = await _job_or_404(d, params.job_ref(request.query_params, d.scope))
    body = json.dumps(dataclasses.asdict(found), ensure_ascii=False, indent=2)
    return Response(body, media_type="application/json",
                    headers={"Content-Disposition": 'attachment; filename="job.json"'})  # fmt: skip


async def schedules(request: Request) -> Response:
    d = _dashboard(request)
    space = params.space(request.query_params, d.scope)
    limit = params.integer(request.query_params, "limit", default=params.PAGE_DEFAULT, low=1, high=params.PAGE_MAX)
    offset = params.integer(request.query_params, "offset", default=0, low=0, high=params.OFFSET_MAX)
    now = await _now(d)
    listed: Any = d.queue.list_schedules
    found = await listed(d.spaces(space), limit=limit + 1, offset=offset)  # one more: is there a next page?
    more = len(found) > limit
    return d.render(
        request, "schedules.html", title="Schedules", nav="schedules", now=instant(now, now), space=space,
        rows=[schedule_row(s, now) for s in found[:limit]], offset=offset, limit=limit,
        following=offset + limit if more else None, previous=max(offset - limit, 0) if offset else None,
    )  # fmt: skip


async def bulk_count(d: Dashboard, operation: str, target: params.Target, status: str) -> int:
    """How many jobs a bulk operation would change now: what the confirmation shows."""
    statuses = ["pending", "running"] if operation == "cancel" else [status]
    total = 0
    for each in statuses:
        page = await d.queue.list_jobs(space_ids=[target.space], action_id=target.action, status=each, limit=1)
        total += page.total
    return total


async def bulk_confirm(request: Request) -> Response:
    d = _dashboard(request)
    if d.caps.bulk is None:
        raise HTTPException(404, "this queue has no bulk operations")
    operation = params.bulk_operation(request.query_params)
    target = params.target(request.query_params, d.scope)
    status = params.status(request.query_params, allowed=params.RETRYABLE) or "dead"
    now = await _now(d)
    count = await bulk_count(d, operation, target, status)
    return d.render(request, "bulk.html", title="Confirm", nav="overview", now=instant(now, now), operation=operation,
                    target=target, status=status, count=count)  # fmt: skip


async def login_form(request: Request) -> Response:
    d = _dashboard(request)
    return d.render(request, "login.html", title="Log in", nav="", now=None, failed=False,
                    next=request.query_params.get("next", "/")[:2000])  # fmt: skip
