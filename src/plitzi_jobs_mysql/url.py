"""MySQL / MariaDB connection URLs.

``parse_mysql_url("mysql://user:secret@db.example:3306/jobs?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ca.pem")``
returns a :class:`MysqlUrl` that hands the right keyword arguments to aiomysql and PyMySQL and renders a
SQLAlchemy URL for Alembic. The standard library splits the URL (``urllib.parse``); what is checked here is only
what is ours: the schemes, the parameters we accept, and messages that never show the password.

Accepted schemes: ``mysql://``, ``mariadb://``, ``mysql+pymysql://`` and ``mysql+aiomysql://``. User name,
password and database are percent-decoded: write ``@`` as ``%40``, ``:`` as ``%3A``, ``/`` as ``%2F``, ``?`` as
``%3F`` and ``#`` as ``%23``. An IPv6 host goes in brackets, a zone id after ``%25`` (RFC 6874:
``[fe80::1%25eth0]``, handed to the drivers as ``fe80::1%eth0``). Parameters (anything else is refused, not
ignored):

- ``unix_socket=/path``: connect through a socket (the host may then be left out);
- ``connect_timeout=N``: seconds;
- ``charset=utf8mb4``: the only character set the package works with (anything else is refused here, rather
  than on first use of a pool);
- TLS, named as the MySQL clients name them: ``ssl-mode`` (``DISABLED``, ``PREFERRED``, ``REQUIRED``,
  ``VERIFY_CA``, ``VERIFY_IDENTITY``), ``ssl-ca``, ``ssl-cert``, ``ssl-key`` (file paths). SQLAlchemy's spellings
  ``ssl_ca``, ``ssl_cert``, ``ssl_key`` and ``ssl_check_hostname`` are read too. Without ``ssl-mode``, an
  ``ssl-ca`` means ``VERIFY_CA``, a client certificate alone ``REQUIRED``, and no TLS parameter at all no TLS.

Under ``REQUIRED`` and the ``VERIFY_*`` modes the drivers would still fall back to a plain connection when the
server offers no TLS at all; :meth:`MysqlUrl.check_tls` refuses such a connection (the command line and the
testing helpers call it).

Errors are ``ValueError`` with one line naming what is wrong; they never contain the password.
"""

from __future__ import annotations

import dataclasses
import re
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, parse_qsl, quote, unquote, urlencode, urlsplit

from pymysql.constants import CLIENT

__all__ = ["DEFAULT_PORT", "SCHEMES", "SSL_MODES", "MysqlUrl", "parse_database_url", "parse_mysql_url"]

DEFAULT_PORT = 3306
SCHEMES = frozenset({"mysql", "mariadb", "mysql+pymysql", "mysql+aiomysql"})
DEFAULT_CHARSET = "utf8mb4"
SSL_MODES = ("DISABLED", "PREFERRED", "REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY")
_TLS_REQUIRED = frozenset({"REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"})
_SSL_FILES = ("ssl-ca", "ssl-cert", "ssl-key")
# The parameter names accepted, mapped to the one each is stored under.
_PARAMS = {
    "connect_timeout": "connect_timeout",
    "charset": "charset",
    "ssl-mode": "ssl-mode",
    "ssl_mode": "ssl-mode",
    **{name: name for name in _SSL_FILES},
    **{name.replace("-", "_"): name for name in _SSL_FILES},
}
_IN_THE_URL_ITSELF = frozenset({"user", "password", "host", "port", "database", "db"})
_SCHEMES_TEXT = "expected mysql://, mariadb://, mysql+pymysql:// or mysql+aiomysql://"
_HOST_RE = re.compile(r"^[A-Za-z0-9_.\-%]+$")


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

    @property
    def ssl_mode(self) -> str:
        """The TLS mode in effect: the ``ssl-mode`` given, or the one the other TLS parameters imply."""
        if "ssl-mode" in self.params:
            return self.params["ssl-mode"]
        if "ssl-ca" in self.params:
            return "VERIFY_CA"
        if "ssl-cert" in self.params:
            return "REQUIRED"
        return "DISABLED"

    @property
    def tls_required(self) -> bool:
        return self.ssl_mode in _TLS_REQUIRED

    def ssl_context(self) -> ssl.SSLContext | None:
        """The ``ssl.SSLContext`` both drivers take as ``ssl=``; None without TLS. ``ValueError`` for a file that
        cannot be read as a certificate or key."""
        mode = self.ssl_mode
        if mode == "DISABLED":
            return None
        ca = self.params.get("ssl-ca")
        try:
            context = ssl.create_default_context(cafile=ca)
            if mode in ("PREFERRED", "REQUIRED"):  # encrypted, but whoever answers is trusted
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            else:
                context.check_hostname = mode == "VERIFY_IDENTITY"
                context.verify_mode = ssl.CERT_REQUIRED
            if "ssl-cert" in self.params:
                context.load_cert_chain(self.params["ssl-cert"], self.params.get("ssl-key"))
        except (OSError, ssl.SSLError) as error:
            files = ", ".join(f"{name}={self.params[name]}" for name in _SSL_FILES if name in self.params)
            raise ValueError(f"cannot use the TLS files of the MySQL URL ({files}): {error}") from None
        return context

    def check_tls(self, connection: Any) -> None:
        """Refuses an unencrypted ``connection`` (PyMySQL or aiomysql) when the URL's ``ssl-mode`` requires TLS.

        The drivers start TLS only when the server offers it and fall back to plain text silently otherwise.
        Raises ``ConnectionError`` (one line)."""
        if self.tls_required and not (int(getattr(connection, "server_capabilities", 0)) & CLIENT.SSL):
            raise ConnectionError(
                f"the MySQL server at {self._where()} offers no TLS, but the URL asks for ssl-mode={self.ssl_mode}"
            )

    def _where(self) -> str:
        return self.unix_socket if self.unix_socket is not None else f"{self.host}:{self.port}"

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
        if "connect_timeout" in self.params:
            kwargs["connect_timeout"] = int(self.params["connect_timeout"])
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl"] = context
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

    def _render(self, scheme: str, hide_password: bool, params: dict[str, str], *, raw_zone: bool = False) -> str:
        userinfo = quote(self.user, safe="")
        if self.password:
            userinfo += ":" + ("***" if hide_password else quote(self.password, safe=""))
        host = self.host
        if ":" in host:  # IPv6, its zone id (if any) after '%25' (RFC 6874), or after a bare '%' for SQLAlchemy
            address, has_zone, zone = host.partition("%")
            host = f"[{address}{'%' + zone if raw_zone else '%25' + quote(zone, safe='')}]" if has_zone else f"[{host}]"
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
        """A SQLAlchemy URL for the PyMySQL dialect (``mysql+pymysql://…?charset=utf8mb4``), TLS in its spelling."""
        params = {k: v for k, v in self.params.items() if not k.startswith("ssl")}
        params.setdefault("charset", DEFAULT_CHARSET)
        mode = self.ssl_mode
        if mode != "DISABLED":
            for name in _SSL_FILES:
                if name in self.params:
                    params[name.replace("-", "_")] = self.params[name]
            # Always explicit: SQLAlchemy checks the host name by default, a MySQL client only under VERIFY_IDENTITY.
            params["ssl_check_hostname"] = "true" if mode == "VERIFY_IDENTITY" else "false"
        # SQLAlchemy reads a zone id as written, so it gets the bare '%' form, which PyMySQL's resolver takes.
        return self._render("mysql+pymysql", False, params, raw_zone=True)

    def __str__(self) -> str:
        return self.render(hide_password=True)


def parse_mysql_url(url: str) -> MysqlUrl:
    """Parse ``mysql://user:password@host:port/database?name=value&…`` (the names the module docstring lists).

    Raises ``ValueError`` (one line, never containing the password) for anything else.
    """
    if not isinstance(url, str):
        raise _fail(f"expected a string, got {type(url).__name__}")
    text = url.strip()
    if not text:
        raise _fail("the URL is empty")
    if any(ord(c) < 32 or c == " " for c in text):
        raise _fail("the URL contains spaces or control characters")
    if "://" not in text:
        raise _fail("expected 'mysql://user:password@host:port/database'")
    if "#" in text:
        raise _fail("fragments ('#…') are not allowed; percent-encode '#' in a password as %23")
    try:
        parts = urlsplit(text)
    except ValueError:  # urllib's message may quote the URL, password included
        raise _fail(
            "the IPv6 host or its zone id is malformed (expected [address], [address%25zone] or with :port)"
        ) from None
    scheme = text.partition("://")[0]
    if parts.scheme not in SCHEMES or scheme.lower() != parts.scheme:
        raise _fail(f"unsupported scheme ({_SCHEMES_TEXT})")

    user, password = _userinfo(parts)
    host, port = _host_and_port(parts)
    database = _database(parts.path)
    params, unix_socket = _query(parts.query)
    if not host:
        if unix_socket is None:
            raise _fail("no host given (expected mysql://user:password@host:port/database)")
        host = "localhost"
    return MysqlUrl(
        host=host, port=port, user=user, password=password, database=database, unix_socket=unix_socket,
        params=params,
    )  # fmt: skip


def _decode(raw: str, what: str) -> str:
    try:
        return unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise _fail(f"the {what} is not valid percent-encoded UTF-8") from None


def _userinfo(parts: SplitResult) -> tuple[str, str]:
    if "@" not in parts.netloc:
        return "root", ""
    # urllib splits the user info at the LAST '@' of the authority, so an '@' in a password may stay unencoded.
    user = _decode(parts.username or "", "user name")
    if not user:
        raise _fail("the user name before '@' is empty")
    return user, _decode(parts.password or "", "password")


def _host_and_port(parts: SplitResult) -> tuple[str, int]:
    hostinfo = parts.netloc.rpartition("@")[2]
    bracketed = hostinfo.startswith("[")
    tail = hostinfo.partition("]")[2] if bracketed else hostinfo
    if bracketed and tail and not tail.startswith(":"):
        raise _fail("unexpected text after the IPv6 host")
    has_port, port_text = tail.partition(":")[1:]
    host = parts.hostname or ""
    if "@" in parts.path or ":" in port_text:
        # An unencoded '/' or '?' in the password ended the authority early: what follows is not host:port.
        raise _fail("the host or port is malformed; percent-encode '/', '?', '@' and ':' in a password or database")
    if host and not bracketed and not _HOST_RE.match(host):
        raise _fail("the host name contains characters that are not allowed")
    port = DEFAULT_PORT
    if has_port:
        if not port_text:
            raise _fail("the port after ':' is empty")
        if not (port_text.isascii() and port_text.isdigit()):
            raise _fail("the port is not a number (expected 1-65535)")
        port = int(port_text)
        if not 1 <= port <= 65535:
            raise _fail("the port is out of range (expected 1-65535)")
    if bracketed:
        return _ipv6_host(hostinfo[1:].partition("]")[0]), port
    return unquote(host), port


def _ipv6_host(literal: str) -> str:
    """The address between the brackets (urllib checked it), lower-cased, and its zone id decoded: after '%25'
    (RFC 6874) percent-encoded, after a bare '%' (as SQLAlchemy and older clients write it) as written. The
    drivers' resolver takes `fe80::1%eth0`."""
    address, has_zone, zone = literal.partition("%")
    address = address.lower()
    if not has_zone:
        return address
    if zone.startswith("25"):
        zone = _decode(zone[2:], "IPv6 zone id")
    elif "%" in zone:
        raise _fail("the IPv6 zone id is malformed (expected [address%25zone], RFC 6874)")
    if not zone or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in zone):
        raise _fail("the IPv6 zone id after '%25' is empty or holds spaces or control characters")
    return f"{address}%{zone}"


def _database(path: str) -> str | None:
    name = path.removeprefix("/")
    if not name:
        return None
    if "/" in name:
        raise _fail("the path must be a single database name ('/database')")
    database = _decode(name, "database name")
    if "\x00" in database:
        raise _fail("the database name contains a NUL character")
    return database


def _query(query: str) -> tuple[dict[str, str], str | None]:
    if not query:
        return {}, None
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise _fail("the query string is malformed (expected ?name=value&…)") from None
    params: dict[str, str] = {}
    unix_socket: str | None = None
    check_hostname: str | None = None
    for key, value in pairs:
        if key == "unix_socket":
            if not value:
                raise _fail("unix_socket is empty")
            unix_socket = value
        elif key == "ssl_check_hostname":  # SQLAlchemy's spelling, as sqlalchemy_url() writes it
            check_hostname = value.lower()
            if check_hostname not in ("true", "false"):
                raise _fail("ssl_check_hostname must be true or false")
        elif key in _IN_THE_URL_ITSELF:
            raise _fail(f"parameter {key!r} belongs in the URL itself, not in the query string")
        elif key in _PARAMS:
            name = _PARAMS[key]
            if name in params:
                raise _fail(f"parameter {name!r} is given twice")
            if not value:
                raise _fail(f"parameter {key!r} is empty")
            params[name] = value
        else:
            accepted = ", ".join(["unix_socket", "connect_timeout", "charset", "ssl-mode", *_SSL_FILES])
            raise _fail(f"unknown parameter {key!r} (accepted: {accepted})")
    _check_params(params, check_hostname)
    return params, unix_socket


def _check_params(params: dict[str, str], check_hostname: str | None) -> None:
    timeout = params.get("connect_timeout")
    if timeout is not None and not (timeout.isascii() and timeout.isdigit()):
        raise _fail("parameter 'connect_timeout' must be a whole number of seconds")
    charset = params.get("charset")
    if charset is not None:
        if charset.lower() != DEFAULT_CHARSET:
            raise _fail(
                f"charset {charset!r} is not supported: plitzi_jobs_mysql stores text in utf8mb4 "
                "(leave charset out, or write charset=utf8mb4)"
            )
        params["charset"] = DEFAULT_CHARSET
    if "ssl-mode" in params:
        given = params["ssl-mode"].upper()
        if given not in SSL_MODES:
            raise _fail(f"ssl-mode must be one of {', '.join(SSL_MODES)}")
        params["ssl-mode"] = given
    if check_hostname is not None and "ssl-mode" not in params:
        verify = "ssl-ca" in params
        checked = "VERIFY_IDENTITY" if check_hostname == "true" else "VERIFY_CA"
        params["ssl-mode"] = checked if verify else "REQUIRED"
    mode = params.get("ssl-mode")
    files = [name for name in _SSL_FILES if name in params]
    if mode == "DISABLED" and files:
        raise _fail(f"{files[0]} is given but ssl-mode is DISABLED")
    if mode in ("PREFERRED", "REQUIRED") and "ssl-ca" in params:
        raise _fail(f"ssl-ca is not checked under ssl-mode={mode}: use VERIFY_CA or VERIFY_IDENTITY")
    if mode in ("VERIFY_CA", "VERIFY_IDENTITY") and "ssl-ca" not in params:
        raise _fail(f"ssl-mode={mode} needs ssl-ca (the authority the server's certificate is checked against)")
    if "ssl-key" in params and "ssl-cert" not in params:
        raise _fail("ssl-key is given without ssl-cert")


def parse_database_url(url: str) -> MysqlUrl:
    """`parse_mysql_url` for the tools that work in one database (the CLI, the Alembic environment): a URL that
    names none is a ``ValueError`` too."""
    parsed = parse_mysql_url(url)
    if parsed.database is None:
        raise ValueError(f"the URL {parsed.render()} names no database (expected mysql://…/database)")
    return parsed
