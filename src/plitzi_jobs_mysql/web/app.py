"""`create_dashboard`: the Starlette application, its routes, its guard and its error pages."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
import pymysql
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..contract import validation as check
from ..contract.clock import to_epoch_ms
from ..contract.protocols import JobQueue
from ..errors import StoreUnavailableError
from . import actions, pages
from .activity import Activity
from .capabilities import Capabilities, capabilities_of
from .params import BadRequest
from .security import (
    OPEN_PATHS,
    SESSION_COOKIE,
    Guard,
    check_token,
    csrf_token,
    mount_path,
    with_csrf_cookie,
    with_headers,
)

log = logging.getLogger("plitzi_jobs_mysql.web")
HERE = Path(__file__).parent


@dataclass
class Dashboard:
    """One dashboard's settings and collaborators, reached by the routes as `request.app.state.dashboard`."""

    queue: JobQueue
    scope: list[int] | None  # the spaces shown; None: every space
    read_only: bool
    guard: Guard
    caps: Capabilities
    activity: Activity | None
    templates: jinja2.Environment = field(repr=False)

    def spaces(self, space: int | None) -> list[int] | None:
        """The spaces a request covers: the one it names, else the dashboard's."""
        return [space] if space is not None else self.scope

    def render(self, request: Request, name: str, *, status_code: int = 200, **context: Any) -> HTMLResponse:
        root = mount_path(request)

        def href(path: str, **params: object) -> str:
            query = urlencode({k: str(v) for k, v in params.items() if v is not None and v != ""})
            return f"{root}{path}" + (f"?{query}" if query else "")

        values: dict[str, Any] = {"nav": "", "now": None, "notice": None}
        values.update(context)
        page = self.templates.get_template(name).render(
            request=request, href=href, csrf=csrf_token(request), read_only=self.read_only, caps=self.caps,
            login_required=self.guard.required, scope=self.scope, **values,
        )  # fmt: skip
        response = HTMLResponse(page, status_code=status_code)
        with_csrf_cookie(response, request)
        return response


def dashboard_of(request: Request) -> Dashboard:
    found: Dashboard = request.app.state.dashboard
    return found


def check_settings(
    spaces: Sequence[int] | None, read_only: object, token: object
) -> tuple[list[int] | None, bool, str | None]:
    """`create_dashboard`'s settings, checked (the command checks them before it connects)."""
    scope = None if spaces is None else check.space_ids(list(spaces))
    if scope == []:
        raise ValueError("spaces must name at least one space, or be None for every space")
    if not isinstance(read_only, bool):
        raise TypeError(f"read_only must be a bool, not {type(read_only).__name__}")
    return scope, read_only, check_token(token)


def create_dashboard(
    queue: JobQueue, *, spaces: Sequence[int] | None = None, read_only: bool = False, token: str | None = None
) -> Starlette:
    """The operators' dashboard over `queue`, an ASGI application: run it alone (`plitzi-jobs-mysql dashboard`)
    or mount it in your own, e.g. `Mount("/jobs", app=create_dashboard(queue, token=...))` in Starlette or
    `app.mount("/jobs", create_dashboard(queue, token=...))` in FastAPI.

    `spaces`: the only spaces it shows and changes (None: every space). `read_only`: no retry, cancel, pause or
    bulk operation (the forms are not shown and their POSTs are refused). `token`: demanded on every request (at
    least 16 characters): a browser logs in through a form, a script sends `Authorization: Bearer <token>`.
    """
    if not isinstance(queue, JobQueue):
        raise TypeError(f"queue must be a JobQueue, not {type(queue).__name__}")
    scope, read_only, token = check_settings(spaces, read_only, token)
    guard = Guard(token)
    caps = capabilities_of(queue)
    templates = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )  # fmt: skip
    dashboard = Dashboard(queue=queue, scope=scope, read_only=read_only, guard=guard, caps=caps,
                          activity=Activity(caps.reads) if caps.reads else None, templates=templates)  # fmt: skip
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        Route("/job", pages.job, name="job"),
        Route("/job.json", pages.job_json, name="job_json"),
        Route("/schedules", pages.schedules, name="schedules"),
        Route("/bulk", pages.bulk_confirm, name="bulk_confirm"),
        Route("/login", pages.login_form, methods=["GET"], name="login_form"),
        Route("/login", actions.login, methods=["POST"], name="login"),
        Route("/logout", actions.logout, methods=["POST"], name="logout"),
        Route("/job/{change:str}", actions.change_job, methods=["POST"], name="change_job"),
        Route("/pause", actions.pause, methods=["POST"], name="pause"),
        Route("/resume", actions.resume, methods=["POST"], name="resume"),
        Route("/bulk", actions.bulk, methods=["POST"], name="bulk"),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(BaseHTTPMiddleware, dispatch=_guarded)],
        exception_handlers={
            BadRequest: _bad_request,
            ValueError: _bad_request,
            TypeError: _bad_request,
            HTTPException: _http_error,
            StoreUnavailableError: _unavailable,
            pymysql.err.OperationalError: _unavailable,
            Exception: _failed,
        },
    )
    app.state.dashboard = dashboard
    return app


async def _guarded(request: Request, call_next: RequestResponseEndpoint) -> Response:
    """The token on every request but the login form and the stylesheet; the headers on every response."""
    dashboard = dashboard_of(request)
    path = request.url.path.removeprefix(mount_path(request)) or "/"
    now_ms = to_epoch_ms(await dashboard.queue.now()) if SESSION_COOKIE in request.cookies else 0
    if not path.startswith(OPEN_PATHS) and not dashboard.guard.authenticated(request, now_ms):
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            target = path + (f"?{request.url.query}" if request.url.query else "")
            response: Response = RedirectResponse(
                f"{mount_path(request)}/login?{urlencode({'next': target})}", status_code=303
            )
        else:
            response = PlainTextResponse(
                "a token is required: Authorization: Bearer <token>", status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="plitzi-jobs-mysql dashboard"'},
            )  # fmt: skip
        return with_headers(response)
    return with_headers(await call_next(request))


def _error_page(request: Request, status_code: int, title: str, message: str) -> Response:
    dashboard = dashboard_of(request)
    if "text/html" not in request.headers.get("accept", "text/html"):
        return with_headers(PlainTextResponse(f"{title}: {message}", status_code=status_code))
    response = dashboard.render(request, "error.html", status_code=status_code, title=title, message=message)
    return with_headers(response)


async def _bad_request(request: Request, error: Exception) -> Response:
    return _error_page(request, 400, "Bad request", str(error))


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    titles = {404: "Not found", 405: "Method not allowed", 403: "Forbidden", 413: "Too large"}
    return _error_page(request, error.status_code, titles.get(error.status_code, "Error"), str(error.detail))


async def _unavailable(request: Request, error: Exception) -> Response:
    # The driver's message names the host and user, never the password (the password is never in a message).
    log.error("dashboard: the store could not answer %s %s: %s", request.method, request.url.path, error)
    return _error_page(request, 503, "The store is unavailable", f"the database did not answer: {error}")


async def _failed(request: Request, error: Exception) -> Response:
    log.exception("dashboard: %s %s failed", request.method, request.url.path)
    return _error_page(request, 500, "Internal error", "the dashboard failed; its log says why")
