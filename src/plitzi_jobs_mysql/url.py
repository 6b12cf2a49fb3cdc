"""MySQL / MariaDB connection URLs.

``parse_mysql_url("mysql://user:secret@db.example:3306/jobs?unix_socket=/run/mysqld/mysqld.sock")``
returns a :class:`MysqlUrl` that hands the right keyword arguments to aiomysql and PyMySQL and renders a
SQLAlchemy URL for Alembic.

Accepted schemes: ``mysql://``, ``mariadb://``, ``mysql+pymysql://`` and ``mysql+aiomysql://``. User name
and password are percent-decoded (write ``@`` as ``%40``, ``:`` as ``%3A``, ``/`` as ``%2F``). Errors are
``ValueError`` with one line naming what is wrong; they never contain the password.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode

__all__ = ["DEFAULT_PORT", "SCHEMES", "MysqlUrl", "parse_mysql_url"]

DEFAULT_PORT = 3306
SCHEMES = frozenset({"mysql", "mariadb", "mysql+pymysql", "mysql+aiomysql"})
DEFAULT_CHARSET = "utf8mb4"

_SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*$")
_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-%]+$")
_IPV6_RE = re.compile(r"^[0-9A-Fa-f:.]+(%[A-Za-z0-9_.\-]+)?$")
# Query parameters given a typed meaning in the driver keyword arguments.
_INT_PARAMS = ("connect_timeout",)


def _fail(what: str) -> ValueError:
    return ValueError(f"invalid MySQL URL: {what}")


@dataclass(frozen=True)
class MysqlUrl:
    """A parsed MySQL URL. ``database`` is ``None`` when the URL names none."""

    host: str
    port: int = DEFAULT_PORT
    user: str = "root"
    password: str = ""
    database: str | None = None
    unix_socket: str | None = None
    params: dict[str, str] = field(default_factory=dict, hash=False)

    def __repr__(self) -> str:  # never show the password, e.g. in pytest or logging output
        return f"MysqlUrl({self.render(hide_password=True)!r})"

    @property
    def charset(self) -> str:
        return self.params.get("charset", DEFAULT_CHARSET)

    def _common_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "charset": self.charset,
        }
        if self.unix_socket is not None:
            kwargs["unix_socket"] = self.unix_socket
        for name in _INT_PARAMS:
            if name in self.params:
                kwargs[name] = int(self.params[name])
        return kwargs

    def aiomysql_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``aiomysql.connect`` / ``aiomysql.create_pool``."""
        kwargs = self._common_kwargs()
        kwargs["db"] = self.database
        return kwargs

    def pymysql_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect``."""
        kwargs = self._common_kwargs()
        kwargs["database"] = self.database
        return kwargs

    def with_database(self, name: str | None) -> MysqlUrl:
        """The same server and credentials, another database (``None``: no database)."""
        if name is not None and (not name or "\x00" in name):
            raise ValueError("database name must be a non-empty string")
        return dataclasses.replace(self, database=name, params=dict(self.params))

    def _render(self, scheme: str, hide_password: bool, params: dict[str, str]) -> str:
        userinfo = quote(self.user, safe="")
        if self.password:
            userinfo += ":" + ("***" if hide_password else quote(self.password, safe=""))
        host = f"[{self.host}]" if ":" in self.host else self.host
        text = f"{scheme}://{userinfo}@{host}:{self.port}"
        if self.database is not None:
            text += "/" + quote(self.database, safe="")
        query = dict(params)
        if self.unix_socket is not None:
            query["unix_socket"] = self.unix_socket
        if query:
            text += "?" + urlencode(query, safe="/")
        return text

    def render(self, hide_password: bool = True) -> str:
        """A ``mysql://`` URL; ``hide_password=False`` gives one that parses back to an equal value."""
        return self._render("mysql", hide_password, self.params)

    def sqlalchemy_url(self) -> str:
        """A SQLAlchemy URL for the PyMySQL dialect (``mysql+pymysql://…?charset=utf8mb4``)."""
        params = dict(self.params)
        params.setdefault("charset", DEFAULT_CHARSET)
        return self._render("mysql+pymysql", False, params)

    def __str__(self) -> str:
        return self.render(hide_password=True)


def parse_mysql_url(url: str) -> MysqlUrl:
    """Parse ``mysql://user:password@host:port/database?unix_socket=/path``.

    Raises ``ValueError`` (one line, never containing the password) for anything else.
    """
    if not isinstance(url, str):
        raise _fail(f"expected a string, got {type(url).__name__}")
    text = url.strip()
    if not text:
        raise _fail("the URL is empty")
    if any(ord(c) < 32 or c == " " for c in text):
        raise _fail("the URL contains spaces or control characters")
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise _fail("expected 'mysql://user:password@host:port/database'")
    if not _SCHEME_RE.match(scheme):
        raise _fail(
            "the scheme is malformed (expected mysql://, mariadb://, mysql+pymysql:// or mysql+aiomysql://)"
        )
    if scheme.lower() not in SCHEMES:
        raise _fail(
            f"unsupported scheme {scheme!r} "
            "(expected mysql://, mariadb://, mysql+pymysql:// or mysql+aiomysql://)"
        )

    # The query may hold anything (a socket path); the user info ends at the last '@' before it.
    before_query, qmark, query = rest.partition("?")
    if "#" in query or "#" in before_query:
        raise _fail("fragments ('#…') are not allowed; percent-encode '#' in a password as %23")
    at = before_query.rfind("@")
    if at >= 0:
        userinfo, hostpart = before_query[:at], before_query[at + 1 :]
    else:
        userinfo, hostpart = None, before_query
    authority, slash, path = hostpart.partition("/")

    user = "root"
    password = ""
    if userinfo is not None:
        raw_user, colon, raw_password = userinfo.partition(":")
        user = unquote(raw_user, errors="strict") if raw_user else ""
        if not user:
            raise _fail("the user name before '@' is empty")
        if colon:
            try:
                password = unquote(raw_password, errors="strict")
            except UnicodeDecodeError:
                raise _fail("the password is not valid percent-encoded UTF-8") from None

    host, port = _parse_authority(authority)

    database: str | None = None
    if slash and path:
        if "/" in path:
            raise _fail("the path must be a single database name ('/database')")
        try:
            database = unquote(path, errors="strict")
        except UnicodeDecodeError:
            raise _fail("the database name is not valid percent-encoded UTF-8") from None
        if "\x00" in database:
            raise _fail("the database name contains a NUL character")

    params: dict[str, str] = {}
    unix_socket: str | None = None
    if qmark and query:
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
        except ValueError:
            raise _fail("the query string is malformed (expected ?name=value&…)") from None
        for key, value in pairs:
            if key == "unix_socket":
                if not value:
                    raise _fail("unix_socket is empty")
                unix_socket = value
            elif key in ("user", "password", "host", "port", "database", "db"):
                raise _fail(f"parameter {key!r} belongs in the URL itself, not in the query string")
            else:
                params[key] = value
    for name in _INT_PARAMS:
        if name in params and not (params[name].isascii() and params[name].isdigit()):
            raise _fail(f"parameter {name!r} must be a whole number of seconds")
    if "charset" in params and not params["charset"]:
        raise _fail("parameter 'charset' is empty")

    if not host:
        if unix_socket is None:
            raise _fail("no host given (expected mysql://user:password@host:port/database)")
        host = "localhost"
    return MysqlUrl(
        host=host,
        port=port,
        user=user,
        password=password,
        database=database,
        unix_socket=unix_socket,
        params=params,
    )


def _parse_authority(authority: str) -> tuple[str, int]:
    """Split ``host``, ``host:port``, ``[v6]`` or ``[v6]:port``. The host may be empty."""
    port_text: str | None = None
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            raise _fail("an IPv6 host is missing its closing ']'")
        host = authority[1:end]
        tail = authority[end + 1 :]
        if tail:
            if not tail.startswith(":"):
                raise _fail("unexpected text after the IPv6 host")
            port_text = tail[1:]
        if not host or not _IPV6_RE.match(host):
            raise _fail("the IPv6 host is malformed")
    else:
        host, colon, after = authority.partition(":")
        if colon:
            port_text = after
        if host:
            if not _HOST_RE.match(host):
                raise _fail("the host name contains characters that are not allowed")
            host = unquote(host)
    port = DEFAULT_PORT
    if port_text is not None:
        if not port_text:
            raise _fail("the port after ':' is empty")
        if not (port_text.isascii() and port_text.isdigit()):
            raise _fail("the port is not a number (expected 1-65535)")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise _fail("the port is out of range (expected 1-65535)")
    return host, port
