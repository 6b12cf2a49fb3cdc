"""Who may use the dashboard, and what every response carries.

- A token, when one is set, is demanded on every request but the login form and the stylesheet: a browser logs
  in once through the form, which sets an HttpOnly, SameSite=Strict session cookie (an HMAC of its issue instant
  keyed by the token, so every replica serving the dashboard accepts it and changing the token ends every session);
  a script sends `Authorization: Bearer <token>`. Every comparison is constant-time.
- Writes are POSTs only, each carrying the CSRF token of a SameSite=Strict cookie (double submit), so a page on
  another site can neither read the token nor send the cookie; a POST whose Origin is another site's is refused
  outright. A script authenticated by its bearer header needs no CSRF token (a browser never adds that header).
- Every response: a Content-Security-Policy with no script at all (nothing inline, nothing loaded), no framing,
  forms posting only here; no caching, no referrer sent to another site, no MIME sniffing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Final
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response

SESSION_COOKIE: Final = "pjm_session"
CSRF_COOKIE: Final = "pjm_csrf"
CSRF_FIELD: Final = "csrf"
SESSION_MAX_AGE_S: Final = 12 * 3600
FORM_MAX_BYTES: Final = 16 * 1024  # a form here holds a few short fields

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # never to another site; `no-referrer` would make a form's Origin "null"
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
#: Reachable without the token: the form that takes it, and the stylesheet it is drawn with (public files).
OPEN_PATHS: Final = ("/login", "/static/")


def check_token(token: object) -> str | None:
    if token is None:
        return None
    if not isinstance(token, str):
        raise TypeError(f"token must be a str or None, not {type(token).__name__}")
    if len(token) < 16:
        raise ValueError(f"token is {len(token)} characters long; use at least 16 (e.g. `openssl rand -hex 32`)")
    return token


def mount_path(request: Request) -> str:
    """Where the dashboard is mounted ('' at the root): cookies and links stay under it."""
    return str(request.scope.get("root_path", "")).rstrip("/")


class Guard:
    """The token check, the session cookie and the CSRF token of one dashboard."""

    def __init__(self, token: str | None) -> None:
        self._token = token
        self._key = None if token is None else hashlib.sha256(b"plitzi-dashboard-session\0" + token.encode()).digest()

    @property
    def required(self) -> bool:
        return self._token is not None

    def token_matches(self, presented: str) -> bool:
        if self._token is None:
            return True
        return hmac.compare_digest(presented.encode(), self._token.encode())

    def _mac(self, issued: str) -> str:
        assert self._key is not None
        return hmac.new(self._key, issued.encode(), hashlib.sha256).hexdigest()

    def new_session(self, now_ms: int) -> str:
        issued = str(now_ms // 1000)
        return f"{issued}.{self._mac(issued)}"

    def _session_valid(self, value: str | None, now_ms: int) -> bool:
        if self._key is None or not value or value.count(".") != 1:
            return False
        issued, mac = value.split(".")
        if not issued.isdigit() or not hmac.compare_digest(mac.encode(), self._mac(issued).encode()):
            return False
        return 0 <= now_ms // 1000 - int(issued) <= SESSION_MAX_AGE_S

    def bearer(self, request: Request) -> bool:
        """The request carries the token in an `Authorization: Bearer` header."""
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        return self._token is not None and scheme.lower() == "bearer" and self.token_matches(presented.strip())

    def authenticated(self, request: Request, now_ms: int) -> bool:
        """The token is not required, or comes as a bearer header or a live session cookie (aged by `now_ms`, the
        store's clock, which every replica serving the dashboard shares)."""
        if self._token is None:
            return True
        return self.bearer(request) or self._session_valid(request.cookies.get(SESSION_COOKIE), now_ms)

    def set_session(self, response: Response, request: Request, now_ms: int) -> None:
        response.set_cookie(
            SESSION_COOKIE, self.new_session(now_ms), max_age=SESSION_MAX_AGE_S, path=mount_path(request) or "/",
            httponly=True, samesite="strict", secure=request.url.scheme == "https",
        )  # fmt: skip

    def end_session(self, response: Response, request: Request) -> None:
        response.delete_cookie(SESSION_COOKIE, path=mount_path(request) or "/", httponly=True, samesite="strict")


def csrf_token(request: Request) -> str:
    """The request's CSRF token (its cookie's), or a new one that `with_csrf_cookie` will set."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and 20 <= len(existing) <= 100 and existing.isascii():
        return existing
    new = getattr(request.state, "new_csrf", None)
    if new is None:
        new = secrets.token_urlsafe(32)
        request.state.new_csrf = new
    return str(new)


def with_csrf_cookie(response: Response, request: Request) -> None:
    new = getattr(request.state, "new_csrf", None)
    if new is not None:
        response.set_cookie(
            CSRF_COOKIE, new, path=mount_path(request) or "/", httponly=True, samesite="strict",
            secure=request.url.scheme == "https",
        )  # fmt: skip


def csrf_valid(request: Request, presented: str | None) -> bool:
    cookie = request.cookies.get(CSRF_COOKIE)
    return bool(cookie and presented) and hmac.compare_digest(str(cookie).encode(), str(presented).encode())


def cross_site(request: Request) -> bool:
    """A write sent by a page of another site (the browser says so in Sec-Fetch-Site or Origin)."""
    if request.headers.get("sec-fetch-site") == "cross-site":
        return True
    origin = request.headers.get("origin")
    if origin is None or origin == "null":  # "null": a privacy-minded browser; the CSRF token still decides
        return False
    # By host only: behind a proxy that ends TLS the page is https while the app sees http.
    return urlsplit(origin).netloc != request.headers.get("host", "")


def with_headers(response: Response) -> Response:
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


Handler = Callable[[Request], Awaitable[Response]]
