"""A throwaway MySQL / MariaDB server for tests.

``mysql_server_url()`` yields the root URL of a server, taken from the first of:

1. ``PLITZI_MYSQL_URL`` (used as given);
2. a ``mysql:8.4`` container through testcontainers, when a Docker daemon answers;
3. a private ``mariadbd`` / ``mysqld`` found on this machine, started in a temporary directory on a free
   loopback port (:class:`LocalMysqlServer`).

With none of them it raises ``RuntimeError`` saying how to get one; it never skips silently.

``fresh_database(url)`` creates a uniquely named ``utf8mb4_bin`` database for one test and drops it after;
``load_time_zones(url)`` fills the server's zone tables so ``SET time_zone='Europe/Berlin'`` works.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql

from plitzi_jobs_mysql.url import MysqlUrl, parse_mysql_url

__all__ = [
    "ENV_URL",
    "LocalMysqlServer",
    "docker_available",
    "find_server_binary",
    "fresh_database",
    "load_time_zones",
    "mysql_server_url",
]

logger = logging.getLogger(__name__)

ENV_URL = "PLITZI_MYSQL_URL"
DOCKER_IMAGE = "mysql:8.4"
SEARCH_DIRS = ("/usr/sbin", "/usr/libexec", "/usr/local/mysql/bin", "/usr/local/sbin", "/usr/bin")
SERVER_NAMES = ("mariadbd", "mysqld")
_TZ_LOCK = "plitzi_jobs_mysql.load_time_zones"
_HOW_TO_GET_ONE = (
    "no MySQL server available for the tests. Do one of: "
    f"(1) set {ENV_URL}=mysql://root:password@127.0.0.1:3306 to use a running server; "
    f"(2) start a Docker daemon (the tests then run {DOCKER_IMAGE} through testcontainers); "
    "(3) install a local server (Debian/Ubuntu: apt-get install mariadb-server; "
    "Fedora: dnf install mariadb-server; macOS: brew install mariadb) so that mariadbd or mysqld is on PATH "
    "or in /usr/sbin."
)


# --------------------------------------------------------------------------------------------------------
# Finding binaries


def _find_binary(names: tuple[str, ...], extra_dirs: tuple[str, ...] = SEARCH_DIRS) -> str | None:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
        for directory in extra_dirs:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return None


def find_server_binary() -> str | None:
    """The path of a local ``mariadbd`` or ``mysqld``, or ``None``."""
    return _find_binary(SERVER_NAMES)


def _sibling_or_path(server_binary: str, names: tuple[str, ...]) -> str | None:
    """A helper tool next to the server binary, in its ``../bin``, or on PATH."""
    server_dir = os.path.dirname(os.path.realpath(server_binary))
    dirs = (
        os.path.dirname(server_binary),
        server_dir,
        os.path.join(os.path.dirname(server_dir), "bin"),
        os.path.join(os.path.dirname(server_dir), "scripts"),
    )
    for name in names:
        for directory in dirs:
            candidate = os.path.join(directory, name)
            if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
                return candidate
    return _find_binary(names)


def _tail(path: str | os.PathLike[str], lines: int = 25) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    return "\n".join(data.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


# --------------------------------------------------------------------------------------------------------
# Time zones


def _zoneinfo_dir() -> str | None:
    for candidate in (os.environ.get("TZDIR"), "/usr/share/zoneinfo", "/usr/lib/zoneinfo"):
        if candidate and os.path.isfile(os.path.join(candidate, "Europe", "Berlin")):
            return candidate
    # The tzdata wheel (a dependency of the package) ships a compiled zoneinfo tree.
    spec = importlib.util.find_spec("tzdata")
    for location in (spec.submodule_search_locations or []) if spec is not None else []:
        candidate = os.path.join(location, "zoneinfo")
        if os.path.isfile(os.path.join(candidate, "Europe", "Berlin")):
            return candidate
    return None


def _tzinfo_sql(is_mariadb: bool) -> str:
    names = ("mariadb-tzinfo-to-sql", "mysql_tzinfo_to_sql")
    if not is_mariadb:
        names = ("mysql_tzinfo_to_sql", "mariadb-tzinfo-to-sql")
    tool = _find_binary(names)
    if tool is None:
        raise RuntimeError(
            "cannot load the time-zone tables: neither mariadb-tzinfo-to-sql nor mysql_tzinfo_to_sql is "
            "installed (install mariadb-server or mysql-server, or load them yourself with "
            "'mariadb-tzinfo-to-sql /usr/share/zoneinfo | mariadb mysql')"
        )
    zoneinfo = _zoneinfo_dir()
    if zoneinfo is None:
        raise RuntimeError(
            "cannot load the time-zone tables: no zoneinfo directory (install the tzdata package)"
        )
    result = subprocess.run(
        [tool, zoneinfo], capture_output=True, check=False, timeout=120, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{tool} {zoneinfo} failed with exit code {result.returncode}: "
            + result.stderr.decode("utf-8", errors="replace")[-2000:]
        )
    return result.stdout.decode("utf-8", errors="replace")


def _sql_batches(script: str, max_bytes: int = 1 << 20) -> Iterator[str]:
    """Split a tzinfo script at statement ends (';' at the end of a line) into batches below max_bytes."""
    batch: list[str] = []
    size = 0
    for statement in re.split(r";[ \t]*\n", script):
        statement = statement.strip()
        if not statement:
            continue
        if batch and size + len(statement) > max_bytes:
            yield ";\n".join(batch)
            batch, size = [], 0
        batch.append(statement)
        size += len(statement) + 2
    if batch:
        yield ";\n".join(batch)


def _connect(url: MysqlUrl | str, **extra: Any) -> pymysql.connections.Connection[Any]:
    parsed = parse_mysql_url(url) if isinstance(url, str) else url
    kwargs = parsed.pymysql_kwargs()
    kwargs.setdefault("connect_timeout", 10)
    kwargs["autocommit"] = True
    kwargs.update(extra)
    return pymysql.connect(**kwargs)


def _zone_count(cursor: Any) -> int:
    cursor.execute("SELECT COUNT(*) FROM mysql.time_zone_name")
    row = cursor.fetchone()
    return int(row[0]) if row else 0


def load_time_zones(url: str) -> None:
    """Fill the zone tables of the server ``url`` names when ``mysql.time_zone_name`` is empty.

    Quick (one query) when they are already loaded; concurrent callers on one server are serialised with
    ``GET_LOCK``, so the tables are loaded once.
    """
    parsed = parse_mysql_url(url)
    conn = _connect(parsed, database="mysql", client_flag=pymysql.constants.CLIENT.MULTI_STATEMENTS)
    try:
        with conn.cursor() as cur:
            if _zone_count(cur) > 0:
                return
            cur.execute("SELECT GET_LOCK(%s, 300)", (_TZ_LOCK,))
            row = cur.fetchone()
            if not row or row[0] != 1:
                raise RuntimeError("timed out waiting for another process loading the time-zone tables")
            try:
                if _zone_count(cur) > 0:
                    return
                cur.execute("SELECT VERSION()")
                version_row = cur.fetchone()
                version = str(version_row[0]) if version_row else ""
                started = time.monotonic()
                script = _tzinfo_sql(is_mariadb="mariadb" in version.lower())
                logger.info("loading time-zone tables into %s", parsed.render(hide_password=True))
                for batch in _sql_batches(script):
                    cur.execute(batch)
                    while cur.nextset():
                        pass
                count = _zone_count(cur)
                logger.info("loaded %d time-zone names in %.1f s", count, time.monotonic() - started)
                if count == 0:
                    raise RuntimeError("loading the time-zone tables left mysql.time_zone_name empty")
            finally:
                cur.execute("SELECT RELEASE_LOCK(%s)", (_TZ_LOCK,))
                cur.fetchall()
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------------------
# Fresh databases

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_]{1,40}$")


@contextlib.contextmanager
def fresh_database(url: str, prefix: str = "pjm_test") -> Iterator[str]:
    """Create a uniquely named ``utf8mb4_bin`` database on the server ``url`` names, yield its URL, drop it.

    The yielded URL is ``url`` with its database part replaced (rendered as ``mysql://…``).
    """
    if not _PREFIX_RE.match(prefix):
        raise ValueError("prefix must be 1-40 letters, digits or underscores")
    parsed = parse_mysql_url(url)
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    conn = _connect(parsed.with_database(None))
    try:
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
    finally:
        conn.close()
    logger.debug("created database %s", name)
    try:
        yield parsed.with_database(name).render(hide_password=False)
    finally:
        _drop_database(parsed.with_database(None), name)


def _drop_database(server: MysqlUrl, name: str) -> None:
    try:
        conn = _connect(server)
    except pymysql.err.OperationalError as exc:
        logger.warning("could not connect to drop database %s (server gone?): %s", name, exc)
        return
    try:
        with conn.cursor() as cur:
            # A connection left inside a transaction holds metadata locks that would make DROP wait for
            # a year; wait briefly, then end the sessions still using the database and try again.
            cur.execute("SET SESSION lock_wait_timeout = 2")
            for attempt in range(3):
                try:
                    cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
                    logger.debug("dropped database %s", name)
                    return
                except pymysql.err.OperationalError as exc:
                    if attempt == 2:
                        raise
                    logger.warning("DROP DATABASE %s waited too long (%s); ending its sessions", name, exc)
                    cur.execute(
                        "SELECT ID FROM information_schema.PROCESSLIST"
                        " WHERE DB = %s AND ID <> CONNECTION_ID()",
                        (name,),
                    )
                    for (thread_id,) in cur.fetchall():
                        with contextlib.suppress(pymysql.err.MySQLError):
                            cur.execute(f"KILL {int(thread_id)}")
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------------------
# A local server

# Servers with a process or a directory, stopped at interpreter exit should a test forget.
_live_servers: set[LocalMysqlServer] = set()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_live_servers):
        with contextlib.suppress(Exception):
            server.stop()


class _PortTaken(RuntimeError):
    pass


class LocalMysqlServer:
    """A private ``mariadbd`` / ``mysqld`` in a temporary directory, on a free loopback port.

    ``start()`` initialises the data directory the first time (root with no password over TCP), starts the
    server, waits until it accepts connections and loads the time-zone tables. ``restart()`` stops it and
    starts it again on the same port and data. ``stop()`` ends the process (SIGTERM, then SIGKILL after
    ``stop_timeout``) and removes the temporary directory; ``stop(keep_data=True)`` keeps both, so a later
    ``start()`` brings the same server back. ``kill()`` simulates a crash (SIGKILL, data kept).

    Usable as a context manager (``with LocalMysqlServer() as server: server.url``).
    """

    def __init__(
        self,
        binary: str | None = None,
        *,
        port: int | None = None,
        startup_timeout: float = 60.0,
        stop_timeout: float = 30.0,
        load_tz: bool = True,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        found = binary or find_server_binary()
        if found is None:
            raise RuntimeError(
                "no mariadbd or mysqld found on PATH or in " + ", ".join(SEARCH_DIRS) + "; " + _HOW_TO_GET_ONE
            )
        self.binary: str = found
        self._requested_port = port
        self._port: int | None = port
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.load_tz = load_tz
        self.extra_args = tuple(extra_args)
        self._base: Path | None = None
        self._initialised = False
        self._tz_loaded = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.RLock()
        self._is_mariadb: bool | None = None
        self._port_fixed = port is not None  # once the server has run on a port, it keeps it
        self.last_start_seconds: float | None = None

    # -- properties --------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the server has no port yet: call start() first")
        return self._port

    @property
    def url(self) -> str:
        """The root URL (no database part): ``mysql://root@127.0.0.1:<port>``."""
        return f"mysql://root@127.0.0.1:{self.port}"

    @property
    def base_dir(self) -> Path:
        if self._base is None:
            raise RuntimeError("the server has no directory yet: call start() first")
        return self._base

    @property
    def datadir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_path(self) -> Path:
        return self.base_dir / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self.base_dir / "error.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def is_mariadb(self) -> bool:
        if self._is_mariadb is None:
            try:
                out = subprocess.run(
                    [self.binary, "--version"], capture_output=True, timeout=30, check=False
                ).stdout.decode("utf-8", errors="replace")
            except (OSError, subprocess.SubprocessError):
                out = ""
            self._is_mariadb = "mariadb" in out.lower() or "mariadbd" in os.path.basename(self.binary)
        return self._is_mariadb

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LocalMysqlServer {self.binary} port={self._port} {state} dir={self._base}>"

    def __enter__(self) -> LocalMysqlServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server (initialising a new data directory the first time) and wait until it answers."""
        with self._lock:
            if self.running:
                return
            started = time.monotonic()
            if self._port is not None and self._port_fixed and _port_open(self._port):
                raise RuntimeError(
                    f"port {self._port} on 127.0.0.1 is already in use; cannot start the server"
                )
            if self._base is None:
                self._base = Path(tempfile.mkdtemp(prefix="plitzi-mysql-"))
                self._initialised = False
                self._tz_loaded = False
                _live_servers.add(self)
            fresh = not self._initialised
            try:
                if self._port is None:
                    self._port = _free_port()
                if not self._initialised:
                    self._initialise()
                    self._initialised = True
                for attempt in range(3):
                    self._spawn()
                    try:
                        self._wait_ready(started)
                        break
                    except _PortTaken:
                        # Another process took the free port we picked: pick another (first start only).
                        self._terminate()
                        if self._requested_port is not None or self._port_fixed or attempt == 2:
                            raise
                        logger.info("port %d was taken meanwhile; trying another", self.port)
                        self._port = _free_port()
                self._port_fixed = True
                if self.load_tz and not self._tz_loaded:
                    load_time_zones(self.url)
                    self._tz_loaded = True
            except BaseException:
                # Leave nothing behind: no process, and no directory for a server that never came up.
                self._terminate()
                if fresh:
                    self._remove_dir()
                raise
            self.last_start_seconds = time.monotonic() - started
            logger.info(
                "local %s ready on 127.0.0.1:%d in %.1f s (pid %s, dir %s)",
                "MariaDB" if self.is_mariadb else "MySQL",
                self.port,
                self.last_start_seconds,
                self.pid,
                self._base,
            )

    def stop(self, *, keep_data: bool = False) -> None:
        """Stop the server: SIGTERM, wait ``stop_timeout``, then SIGKILL.

        Removes the temporary directory unless ``keep_data`` (then ``start()`` brings the same data back on
        the same port).
        """
        with self._lock:
            self._terminate()
            if not keep_data:
                self._remove_dir()

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; the data directory is kept for ``start()``."""
        with self._lock:
            proc = self._proc
            if proc is None:
                return
            if proc.poll() is None:
                logger.info("killing the local server (pid %d)", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGKILL)
                proc.wait()
            self._proc = None

    def restart(self) -> None:
        """Stop the server and start it again on the same port and data directory."""
        with self._lock:
            self.stop(keep_data=True)
            self.start()

    # -- internals ---------------------------------------------------------------------------------------

    def _user_args(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def _initialise(self) -> None:
        datadir = self.datadir
        log_path = self.base_dir / "initialise.log"
        started = time.monotonic()
        if self.is_mariadb:
            install_db = _sibling_or_path(self.binary, ("mariadb-install-db", "mysql_install_db"))
            if install_db is None:
                raise RuntimeError("mariadb-install-db not found next to " + self.binary + " or on PATH")
            cmd = [
                install_db,
                "--no-defaults",
                f"--datadir={datadir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
                *self._user_args(),
            ]
            # Point it at the server binary in use (mariadb-install-db otherwise looks for its own).
            server_dir = os.path.dirname(os.path.realpath(self.binary))
            basedir = os.path.dirname(server_dir)
            if basedir not in ("/", "/usr"):
                cmd.append(f"--basedir={basedir}")
        else:
            datadir.mkdir(parents=True, exist_ok=True)
            cmd = [
                self.binary,
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={datadir}",
                *self._user_args(),
            ]
        logger.info("initialising a data directory in %s", datadir)
        with open(log_path, "wb") as log:
            try:
                result = subprocess.run(
                    cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=300
                )
            except subprocess.TimeoutExpired:
                raise RuntimeError(
                    f"initialising the data directory timed out: {' '.join(cmd)}\n{_tail(log_path)}"
                ) from None
        if result.returncode != 0:
            raise RuntimeError(
                f"initialising the data directory failed (exit code {result.returncode}): {' '.join(cmd)}\n"
                + _tail(log_path)
            )
        logger.debug("initialised in %.1f s", time.monotonic() - started)

    def _server_args(self) -> list[str]:
        base = self.base_dir
        args = [
            self.binary,
            "--no-defaults",
            f"--datadir={self.datadir}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.socket_path}",
            f"--pid-file={base / 'mysqld.pid'}",
            f"--log-error={self.error_log}",
            f"--tmpdir={base / 'tmp'}",
            "--max-allowed-packet=64M",
            "--innodb-buffer-pool-size=256M",
            "--character-set-server=utf8mb4",
            *self._user_args(),
        ]
        if self.is_mariadb:
            args.append("--collation-server=utf8mb4_general_ci")
        else:
            args += ["--collation-server=utf8mb4_0900_ai_ci", "--skip-log-bin", "--mysqlx=OFF"]
        args += list(self.extra_args)
        return args

    def _spawn(self) -> None:
        (self.base_dir / "tmp").mkdir(exist_ok=True)
        if _port_open(self.port):
            if self._requested_port is None and not self._port_fixed:
                self._port = _free_port()
            else:
                raise RuntimeError(
                    f"port {self.port} on 127.0.0.1 is already in use; cannot start the server"
                )
        args = self._server_args()
        logger.debug("starting %s", " ".join(args))
        with open(self.base_dir / "stdout.log", "ab") as out:
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Its own session: a Ctrl-C in the terminal reaches the test run, which then stops the server.
                start_new_session=True,
            )

    def _wait_ready(self, started: float) -> None:
        proc = self._proc
        assert proc is not None
        deadline = started + self.startup_timeout
        delay = 0.02
        last_error: Exception | None = None
        while True:
            code = proc.poll()
            if code is not None:
                if "Bind on TCP/IP port" in _tail(self.error_log, 10):
                    raise _PortTaken(f"port {self.port} on 127.0.0.1 is already in use; {self._logs_tail()}")
                raise RuntimeError(
                    f"the local server exited with code {code} while starting; {self._logs_tail()}"
                )
            try:
                conn = pymysql.connect(
                    host="127.0.0.1", port=self.port, user="root", password="", connect_timeout=2
                )
            except pymysql.err.MySQLError as exc:
                last_error = exc
            else:
                conn.close()
                return
            if time.monotonic() >= deadline:
                raise RuntimeError(
                    f"the local server did not accept connections on 127.0.0.1:{self.port} within "
                    f"{self.startup_timeout:.0f} s (last error: {last_error}); {self._logs_tail()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)

    def _logs_tail(self) -> str:
        text = f"its error log ({self.error_log}) ends with:\n{_tail(self.error_log)}"
        console = self.base_dir / "stdout.log"
        with contextlib.suppress(OSError):
            if console.stat().st_size > 0:
                text += f"\nand its console output ({console}) with:\n{_tail(console, 10)}"
        return text

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                logger.info("stopping the local server (pid %d)", proc.pid)
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    logger.warning(
                        "the local server (pid %d) ignored SIGTERM for %.0f s; killing it",
                        proc.pid,
                        self.stop_timeout,
                    )
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGKILL)
                    proc.wait()
        finally:
            self._proc = None

    def _remove_dir(self) -> None:
        base = self._base
        if base is None:
            return
        shutil.rmtree(base, ignore_errors=True)
        self._base = None
        self._initialised = False
        self._tz_loaded = False
        self._port_fixed = self._requested_port is not None
        _live_servers.discard(self)
        logger.debug("removed %s", base)


# --------------------------------------------------------------------------------------------------------
# Docker


def docker_available(timeout: float = 5.0) -> bool:
    """Whether a Docker daemon answers (``docker info``, else the docker SDK's ping). Never raises."""
    cli = shutil.which("docker")
    if cli is not None:
        try:
            result = subprocess.run(
                [cli, "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return result.returncode == 0 and bool(result.stdout.strip())
    try:
        import docker  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=int(max(1, timeout)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


@contextlib.contextmanager
def _docker_mysql_url() -> Iterator[str]:
    try:
        from testcontainers.community.mysql import MySqlContainer
    except ImportError:
        try:
            from testcontainers.mysql import MySqlContainer
        except ImportError as exc:
            raise RuntimeError(
                "a Docker daemon answers but testcontainers[mysql] is not installed "
                "(pip install 'plitzi_jobs_mysql[testing]'); " + _HOW_TO_GET_ONE
            ) from exc
    password = secrets.token_hex(12)
    container = MySqlContainer(
        DOCKER_IMAGE, username="root", password=password, root_password=password, dbname="test"
    )
    container.with_command(
        "--character-set-server=utf8mb4 --collation-server=utf8mb4_0900_ai_ci --max-allowed-packet=64M"
    )
    logger.info("starting a %s container", DOCKER_IMAGE)
    started = time.monotonic()
    with container:
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(3306))
        url = MysqlUrl(host=host, port=port, user="root", password=password).render(hide_password=False)
        logger.info("%s ready at %s:%d in %.1f s", DOCKER_IMAGE, host, port, time.monotonic() - started)
        yield url


# --------------------------------------------------------------------------------------------------------
# The entry point


@contextlib.contextmanager
def mysql_server_url() -> Iterator[str]:
    """Yield the root URL of a MySQL server for tests (see the module docstring for where it comes from)."""
    env_url = os.environ.get(ENV_URL, "").strip()
    if env_url:
        parse_mysql_url(env_url)  # fail early and clearly on a malformed value
        logger.info("using the server in %s", ENV_URL)
        yield env_url
        return
    if docker_available():
        with _docker_mysql_url() as url:
            yield url
        return
    if find_server_binary() is not None:
        with LocalMysqlServer() as server:
            yield server.url
        return
    raise RuntimeError(_HOW_TO_GET_ONE)
