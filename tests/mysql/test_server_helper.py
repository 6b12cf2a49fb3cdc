"""The URL parser and the throwaway-server helper, against real servers (no database mocks)."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql
import pytest

from plitzi_jobs_mysql.testing import server as server_mod
from plitzi_jobs_mysql.testing.server import (
    ENV_URL,
    LocalMysqlServer,
    fresh_database,
    load_time_zones,
    mysql_server_url,
)
from plitzi_jobs_mysql.url import MysqlUrl, parse_mysql_url
from tests.harness.servers import CrashableServer

DEFAULT_LOCAL_URL = "mysql://root@127.0.0.1:3306"

# ----------------------------------------------------------------------------------------------------------
# URLs


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("mysql://root@127.0.0.1:3306", MysqlUrl(host="127.0.0.1", port=3306, user="root")),
        ("mysql://127.0.0.1", MysqlUrl(host="127.0.0.1")),
        (
            "mariadb://app:s3cret@db.example.com:3307/jobs",
            MysqlUrl(host="db.example.com", port=3307, user="app", password="s3cret", database="jobs"),
        ),
        (
            "mysql+pymysql://app:p%40ss%3Aw%2Frd@db/jobs",
            MysqlUrl(host="db", user="app", password="p@ss:w/rd", database="jobs"),
        ),
        (
            "mysql+aiomysql://us%20er:pw@[::1]:3310/",
            MysqlUrl(host="::1", port=3310, user="us er", password="pw"),
        ),
        (
            "mysql://root@localhost/db?unix_socket=/run/mysqld/mysqld.sock&connect_timeout=5",
            MysqlUrl(
                host="localhost",
                user="root",
                database="db",
                unix_socket="/run/mysqld/mysqld.sock",
                params={"connect_timeout": "5"},
            ),
        ),
        (
            "mysql://root@/db?unix_socket=/tmp/my.sock",
            MysqlUrl(host="localhost", user="root", database="db", unix_socket="/tmp/my.sock"),
        ),
        ("MySQL://u:@h:1/d", MysqlUrl(host="h", port=1, user="u", password="", database="d")),
        ("mysql://u:p@ss@h/d", MysqlUrl(host="h", user="u", password="p@ss", database="d")),
        ("mysql://u:pa%2Fss@h/d", MysqlUrl(host="h", user="u", password="pa/ss", database="d")),
        (
            "mysql://u@h/d?ssl-mode=verify_identity&ssl-ca=/etc/ca.pem&ssl_cert=/c.pem&ssl_key=/k.pem&charset=UTF8MB4",
            MysqlUrl(
                host="h",
                user="u",
                database="d",
                params={
                    "ssl-mode": "VERIFY_IDENTITY",
                    "ssl-ca": "/etc/ca.pem",
                    "ssl-cert": "/c.pem",
                    "ssl-key": "/k.pem",
                    "charset": "utf8mb4",
                },
            ),
        ),
    ],
)
def test_parse_good_urls(url: str, expected: MysqlUrl) -> None:
    parsed = parse_mysql_url(url)
    assert parsed == expected
    # render(hide_password=False) parses back to the same value
    assert parse_mysql_url(parsed.render(hide_password=False)) == parsed
    again = parse_mysql_url(parsed.sqlalchemy_url())  # SQLAlchemy spells TLS its own way; it means the same
    assert (again.ssl_mode, again.charset) == (parsed.ssl_mode, "utf8mb4")
    assert {k: v for k, v in again.params.items() if k != "ssl-mode"} == {
        "charset": "utf8mb4",
        **{k: v for k, v in parsed.params.items() if k != "ssl-mode"},
    }


SECRET = "Zq9Secr3t"


@pytest.mark.parametrize(
    ("url", "names"),
    [
        (f"postgres://u:{SECRET}@h/db", "scheme"),
        (f"u:{SECRET}@h/db", "expected 'mysql://"),
        (f"mysql://u:{SECRET}@/db", "no host"),
        (f"mysql://u:{SECRET}@:3306/db", "no host"),
        (f"mysql://u:{SECRET}@h:abc/db", "port is not a number"),
        (f"mysql://u:{SECRET}@h:70000/db", "port is out of range"),
        (f"mysql://u:{SECRET}@h:0/db", "port is out of range"),
        (f"mysql://u:{SECRET}@h:/db", "port after ':' is empty"),
        (f"mysql://u:{SECRET}@h:-1/db", "port is not a number"),
        (f"mysql://u:{SECRET}@h/a/b", "single database name"),
        (f"mysql://u:{SECRET}@h/db#frag", "fragments"),
        (f"mysql://u:{SECRET}@h/db?connect_timeout=soon", "connect_timeout"),
        (f"mysql://u:{SECRET}@h/db?password={SECRET}", "query string"),
        (f"mysql://u:{SECRET}@h/db?unix_socket=", "unix_socket is empty"),
        (f"mysql://u:{SECRET}@ho st/db", "spaces"),
        (f"mysql://u:{SECRET}@h!/db", "host name"),
        (f"mysql://u:{SECRET}@[::1/db", "IPv6"),
        (f"mysql://:{SECRET}@h/db", "user name"),
        # An unencoded '?' in the password: "u:Zq9..." reads as host:port, and must not be echoed.
        (f"mysql://u:{SECRET}?x@h/db", "port is not a number"),
        (f"mysql://u:{SECRET}/x@h/db", "percent-encode '/'"),
        (f"mysql://u:{SECRET}@h/db?sslmode=require", "unknown parameter 'sslmode'"),
        (f"mysql://u:{SECRET}@h/db?ssl_mode=REQUIRED&ssl-mode=DISABLED", "given twice"),
        (f"mysql://u:{SECRET}@h/db?charset=latin1", "charset 'latin1' is not supported"),
        (f"mysql://u:{SECRET}@h/db?charset=", "is empty"),
        (f"mysql://u:{SECRET}@h/db?ssl-mode=ON", "ssl-mode must be one of"),
        (f"mysql://u:{SECRET}@h/db?ssl-mode=VERIFY_CA", "needs ssl-ca"),
        (f"mysql://u:{SECRET}@h/db?ssl-mode=REQUIRED&ssl-ca=/ca.pem", "not checked under ssl-mode=REQUIRED"),
        (f"mysql://u:{SECRET}@h/db?ssl-mode=DISABLED&ssl-cert=/c.pem", "DISABLED"),
        (f"mysql://u:{SECRET}@h/db?ssl-key=/k.pem", "without ssl-cert"),
        ("", "empty"),
        ("garbage", "expected 'mysql://"),
        ("mysql://", "no host"),
    ],
)
def test_parse_bad_urls_name_the_problem_and_hide_the_password(url: str, names: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_mysql_url(url)
    message = str(info.value)
    assert names in message
    assert "\n" not in message
    assert SECRET not in message
    assert SECRET[:4] not in message


@pytest.mark.parametrize(
    ("query", "mode", "sqlalchemy_query"),
    [
        ("", "DISABLED", "charset=utf8mb4"),
        ("ssl-mode=PREFERRED", "PREFERRED", "charset=utf8mb4&ssl_check_hostname=false"),
        ("ssl-mode=REQUIRED", "REQUIRED", "charset=utf8mb4&ssl_check_hostname=false"),
        ("ssl-cert=/c.pem", "REQUIRED", "charset=utf8mb4&ssl_cert=/c.pem&ssl_check_hostname=false"),
        ("ssl-ca=/ca.pem", "VERIFY_CA", "charset=utf8mb4&ssl_ca=/ca.pem&ssl_check_hostname=false"),
        (
            "ssl-mode=VERIFY_IDENTITY&ssl-ca=/ca.pem",
            "VERIFY_IDENTITY",
            "charset=utf8mb4&ssl_ca=/ca.pem&ssl_check_hostname=true",
        ),
    ],
)
def test_tls_modes(query: str, mode: str, sqlalchemy_query: str) -> None:
    url = parse_mysql_url("mysql://u@h/d" + (f"?{query}" if query else ""))
    assert url.ssl_mode == mode
    assert url.tls_required == (mode not in ("DISABLED", "PREFERRED"))
    assert url.sqlalchemy_url() == f"mysql+pymysql://u@h:3306/d?{sqlalchemy_query}"
    assert parse_mysql_url(url.sqlalchemy_url()).ssl_mode == ("REQUIRED" if mode == "PREFERRED" else mode)


def test_tls_contexts() -> None:
    import ssl

    assert parse_mysql_url("mysql://h").pymysql_kwargs().get("ssl") is None
    required = parse_mysql_url("mysql://h?ssl-mode=REQUIRED").aiomysql_kwargs()["ssl"]
    assert isinstance(required, ssl.SSLContext)
    assert (required.verify_mode, required.check_hostname) == (ssl.CERT_NONE, False)
    with pytest.raises(ValueError, match=r"ssl-ca=/nonexistent\.pem") as info:
        parse_mysql_url(f"mysql://u:{SECRET}@h?ssl-ca=/nonexistent.pem").pymysql_kwargs()
    assert SECRET not in str(info.value)


def test_url_methods() -> None:
    url = parse_mysql_url(f"mysql+aiomysql://app:{SECRET}@db:3307/jobs?unix_socket=/s.sock&connect_timeout=3")
    assert url.aiomysql_kwargs() == {
        "host": "db",
        "port": 3307,
        "user": "app",
        "password": SECRET,
        "db": "jobs",
        "unix_socket": "/s.sock",
        "charset": "utf8mb4",
        "connect_timeout": 3,
    }
    kwargs = url.pymysql_kwargs()
    assert kwargs["database"] == "jobs" and kwargs["charset"] == "utf8mb4" and kwargs["unix_socket"] == "/s.sock"
    assert "unix_socket" not in parse_mysql_url("mysql://h").pymysql_kwargs()

    other = url.with_database("other")
    assert other.database == "other" and url.database == "jobs"
    assert url.with_database(None).database is None

    assert SECRET not in url.render()
    assert SECRET not in repr(url) and SECRET not in str(url)
    assert url.render() == "mysql://app:***@db:3307/jobs?connect_timeout=3&unix_socket=/s.sock"
    assert SECRET in url.render(hide_password=False)
    assert url.sqlalchemy_url() == (
        f"mysql+pymysql://app:{SECRET}@db:3307/jobs?connect_timeout=3&charset=utf8mb4&unix_socket=/s.sock"
    )
    assert parse_mysql_url("mysql://h").sqlalchemy_url() == "mysql+pymysql://root@h:3306?charset=utf8mb4"
    with pytest.raises(AttributeError):
        url.host = "x"  # type: ignore[misc]


# ----------------------------------------------------------------------------------------------------------
# Servers


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _query(url: str, sql: str) -> tuple[tuple[object, ...], ...]:
    conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return tuple(cur.fetchall())
    finally:
        conn.close()


@pytest.fixture(scope="module")
def existing_server_url() -> Iterator[str]:
    """The server the suite is pointed at (PLITZI_MYSQL_URL, else 127.0.0.1:3306), else a local one."""
    url = os.environ.get(ENV_URL) or DEFAULT_LOCAL_URL
    try:
        _query(url, "SELECT 1")
    except pymysql.err.MySQLError:
        with mysql_server_url() as fallback:
            yield fallback
        return
    yield url


def test_local_server_lifecycle() -> None:
    server = CrashableServer()
    try:
        started = time.monotonic()
        server.start()
        assert time.monotonic() - started < 20
        assert server.running
        port, datadir, base, pid = server.port, server.datadir, server.base_dir, server.pid
        assert pid is not None and datadir.is_dir() and datadir.is_relative_to(base)
        assert server.url == f"mysql://root@127.0.0.1:{port}"

        # root over TCP, no password; the settings we asked for
        ((packet, charset),) = _query(server.url, "SELECT @@max_allowed_packet, @@character_set_server")
        assert packet == 64 * 1024 * 1024 and charset == "utf8mb4"

        # named time zones work
        ((berlin,),) = _query(server.url, "SELECT CONVERT_TZ('2024-10-27 00:30:00','UTC','Europe/Berlin')")
        assert str(berlin) == "2024-10-27 02:30:00"

        # data survives a restart, on the same port and directory
        with fresh_database(server.url) as db_url:
            _query(db_url, "CREATE TABLE t (id INT PRIMARY KEY)")
            _query(db_url, "INSERT INTO t VALUES (1), (2)")
            server.restart()
            assert server.running and server.port == port and server.datadir == datadir
            assert server.pid != pid
            assert _query(db_url, "SELECT COUNT(*) FROM t") == ((2,),)
        # the database is dropped on exit
        name = parse_mysql_url(db_url).database
        assert _query(server.url, f"SHOW DATABASES LIKE '{name}'") == ()

        # stop(keep_data=True) + start(): the same server comes back
        second_pid = server.pid
        server.stop(keep_data=True)
        assert not server.running and not _port_open(port) and datadir.is_dir()
        assert second_pid is not None and _process_gone(second_pid)
        server.start()
        assert server.port == port and _query(server.url, "SELECT 1") == ((1,),)
        last_pid = server.pid
    finally:
        server.stop()
    assert not server.running
    assert not _port_open(port)
    assert last_pid is not None and _process_gone(last_pid)
    assert not Path(base).exists()


def test_stop_kills_a_server_that_ignores_sigterm() -> None:
    server = LocalMysqlServer(stop_timeout=1.0, load_tz=False)
    server.start()
    pid, port, base = server.pid, server.port, server.base_dir
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # a stopped process cannot act on SIGTERM
    started = time.monotonic()
    server.stop()
    assert 0.9 < time.monotonic() - started < 10
    assert _process_gone(pid) and not _port_open(port) and not base.exists()


def test_start_failure_reports_the_error_log_and_leaves_nothing() -> None:
    server = LocalMysqlServer(extra_args=("--no-such-option-plitzi",), load_tz=False)
    with pytest.raises(RuntimeError) as info:
        server.start()
    message = str(info.value)
    assert "error log" in message and "no-such-option-plitzi" in message
    assert not server.running and server.pid is None
    with pytest.raises(RuntimeError):
        _ = server.base_dir  # the directory is gone


def test_a_requested_port_in_use_is_a_clear_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = LocalMysqlServer(port=port, load_tz=False)
        with pytest.raises(RuntimeError, match=f"port {port} .* in use"):
            server.start()
    assert not server.running and server.pid is None


def test_time_zones_and_fresh_database_on_the_existing_server(existing_server_url: str) -> None:
    load_time_zones(existing_server_url)
    started = time.monotonic()
    load_time_zones(existing_server_url)  # already loaded: one query
    assert time.monotonic() - started < 0.5

    conn = pymysql.connect(**parse_mysql_url(existing_server_url).pymysql_kwargs(), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = 'Europe/Berlin'")
            cur.execute("SELECT CONVERT_TZ('2024-10-27 00:30:00','UTC','Europe/Berlin')")
            assert str(cur.fetchone()[0]) == "2024-10-27 02:30:00"
    finally:
        conn.close()

    with (
        fresh_database(existing_server_url, prefix="pjm_helper") as one,
        fresh_database(existing_server_url, prefix="pjm_helper") as two,
    ):
        assert one != two
        name = parse_mysql_url(one).database
        assert name is not None and name.startswith("pjm_helper_")
        ((db, charset, collation),) = _query(
            existing_server_url,
            "SELECT SCHEMA_NAME, DEFAULT_CHARACTER_SET_NAME, DEFAULT_COLLATION_NAME"
            f" FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = '{name}'",
        )
        assert (db, charset, collation) == (name, "utf8mb4", "utf8mb4_bin")
        assert _query(one, "SELECT DATABASE()") == ((name,),)
    assert _query(existing_server_url, f"SHOW DATABASES LIKE '{name}'") == ()


def test_fresh_database_drops_even_when_a_session_holds_locks(existing_server_url: str) -> None:
    with fresh_database(existing_server_url) as url:
        _query(url, "CREATE TABLE t (id INT PRIMARY KEY)")
        # A connection left inside a transaction (the aiomysql pool hazard) holds a metadata lock on t.
        holder = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=False)
        with holder.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
        name = parse_mysql_url(url).database
    try:
        assert _query(existing_server_url, f"SHOW DATABASES LIKE '{name}'") == ()
    finally:
        holder.close()


def test_mysql_server_url_uses_the_environment_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    given = os.environ.get(ENV_URL) or DEFAULT_LOCAL_URL
    monkeypatch.setenv(ENV_URL, given)
    with mysql_server_url() as url:
        assert url == given


def test_mysql_server_url_rejects_a_malformed_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_URL, "postgres://u:pw@h/db")
    with pytest.raises(ValueError, match="scheme"), mysql_server_url():
        pass


def test_mysql_server_url_starts_a_local_server_without_docker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setattr(server_mod, "docker_available", lambda timeout=5.0: False)
    with mysql_server_url() as url:
        parsed = parse_mysql_url(url)
        assert parsed.host == "127.0.0.1" and parsed.database is None
        assert _query(url, "SELECT COUNT(*) > 0 FROM mysql.time_zone_name") == ((1,),)
    assert not _port_open(parsed.port)


def test_mysql_server_url_says_how_to_get_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_URL, raising=False)
    monkeypatch.setattr(server_mod, "docker_available", lambda timeout=5.0: False)
    monkeypatch.setattr(server_mod, "find_server_binary", lambda: None)
    with pytest.raises(RuntimeError) as info, mysql_server_url():
        pass
    message = str(info.value)
    assert f"{ENV_URL}=mysql://" in message and "Docker" in message and "mariadb-server" in message


def test_docker_check_is_cheap_and_never_raises() -> None:
    started = time.monotonic()
    assert server_mod.docker_available(timeout=3.0) in (True, False)
    assert time.monotonic() - started < 5
