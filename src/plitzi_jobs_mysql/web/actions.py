"""What an operator changes (POST only, each with its CSRF token unless a bearer header authenticates it): retry,
requeue or cancel one job; pause and resume; bulk retry or cancel, confirmed with the count shown. Each is the
queue's own method, so the queue's rules (holder guards, bounds) hold; the answer is a redirect to a page saying
what happened."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..contract.clock import to_epoch_ms
from . import params
from .security import CSRF_FIELD, FORM_MAX_BYTES, cross_site, csrf_valid, mount_path

if TYPE_CHECKING:
    from .app import Dashboard


def _dashboard(request: Request) -> Dashboard:
    from .app import dashboard_of

    return dashboard_of(request)


async def form(request: Request) -> dict[str, str]:
    """The posted form, at most `FORM_MAX_BYTES`, url-encoded (no file uploads here)."""
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > FORM_MAX_BYTES:
            raise HTTPException(413, f"a form here is at most {FORM_MAX_BYTES} bytes")
    try:
        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as error:
        raise params.BadRequest(f"the form could not be read: {error}") from None
    return dict(pairs)


async def writable_form(request: Request) -> tuple[Dashboard, dict[str, str]]:
    """The form of a change, once the request may make it: not read-only, same site, CSRF token or bearer."""
    d = _dashboard(request)
    if d.read_only:
        raise HTTPException(403, "this dashboard is read-only")
    fields = await form(request)
    if not d.guard.bearer(request):
        if cross_site(request):
            raise HTTPException(403, "a change must come from the dashboard's own pages")
        if not csrf_valid(request, fields.get(CSRF_FIELD)):
            raise HTTPException(403, "the form's CSRF token is missing or stale: reload the page and try again")
    return d, fields


def redirect(request: Request, path: str, **query: object) -> Response:
    text = urlencode({k: str(v) for k, v in query.items() if v is not None})
    return RedirectResponse(f"{mount_path(request)}{path}" + (f"?{text}" if text else ""), status_code=303)


async def change_job(request: Request) -> Response:
    d, fields = await writable_form(request)
    change = request.path_params["change"]
    if change not in ("retry", "requeue", "cancel"):
        raise HTTPException(404, f"no such change: {change[:40]!r}")
    ref = params.job_ref(fields, d.scope)
    before = await d.queue.get_job([ref.space], ref.id)
    if before is None:
        raise HTTPException(404, f"no job with that id in space {ref.space}")
    if change == "cancel":
        done = await d.queue.cancel([ref.space], ref.id)
        after = await d.queue.get_job([ref.space], ref.id) if done else None
        outcome = "cancel-requested" if after is not None and after.status == "running" else "cancel"
    elif change == "retry" and before.status == "succeeded":
        done, outcome = False, "unchanged"  # it did its work: running it again is a requeue, asked for as such
    else:
        done, outcome = await d.queue.requeue([ref.space], ref.id), change
    return redirect(request, "/job", space=ref.space, id=ref.id, notice=outcome if done else "unchanged")


async def _pause_or_resume(request: Request, pause: bool) -> Response:
    d, fields = await writable_form(request)
    if d.caps.pausing is None:
        raise HTTPException(404, "this queue cannot pause")
    target = params.target(fields, d.scope)
    if pause:
        await d.caps.pausing.pause(space_id=target.space, action_id=target.action)
    else:
        await d.caps.pausing.resume(space_id=target.space, action_id=target.action)
    return redirect(request, "/", notice="pause" if pause else "resume")


async def pause(request: Request) -> Response:
    return await _pause_or_resume(request, True)


async def resume(request: Request) -> Response:
    return await _pause_or_resume(request, False)


async def bulk(request: Request) -> Response:
    d, fields = await writable_form(request)
    if d.caps.bulk is None:
        raise HTTPException(404, "this queue has no bulk operations")
    operation = params.bulk_operation(fields)
    target = params.target(fields, d.scope)
    status = params.status(fields, allowed=params.RETRYABLE) or "dead"
    if "confirm" not in fields:
        raise params.BadRequest("a bulk operation runs only once confirmed: open it from the overview")
    if operation == "cancel":
        count = await d.caps.bulk.cancel_all(space_id=target.space, action_id=target.action)
    else:
        count = await d.caps.bulk.retry_all(space_id=target.space, action_id=target.action, status=status)
    return redirect(request, "/", notice="bulk", count=count)


def _next_path(value: str | None) -> str:
    """Where to go after logging in: a path of this dashboard only (never another site)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    return value


async def login(request: Request) -> Response:
    d = _dashboard(request)
    fields = await form(request)
    if cross_site(request) or not csrf_valid(request, fields.get(CSRF_FIELD)):
        raise HTTPException(403, "the login form's CSRF token is missing or stale: reload the page")
    if not d.guard.required:
        return redirect(request, _next_path(fields.get("next")))
    if not d.guard.token_matches(fields.get("token", "")):
        return d.render(request, "login.html", status_code=401, title="Log in", nav="", now=None, failed=True,
                        next=_next_path(fields.get("next")))  # fmt: skip
    response = RedirectResponse(f"{mount_path(request)}{_next_path(fields.get('next'))}", status_code=303)
    d.guard.set_session(response, request, to_epoch_ms(await d.queue.now()))
    return response


async def logout(request: Request) -> Response:
    _d, _fields = await writable_form_or_login(request)
    response = redirect(request, "/login")
    _d.guard.end_session(response, request)
    return response


async def writable_form_or_login(request: Request) -> tuple[Dashboard, Mapping[str, str]]:
    """Logging out needs the CSRF token but not a writable dashboard."""
    d = _dashboard(request)
    fields = await form(request)
    if not d.guard.bearer(request) and (cross_site(request) or not csrf_valid(request, fields.get(CSRF_FIELD))):
        raise HTTPException(403, "the form's CSRF token is missing or stale: reload the page and try again")
    return d, fields
