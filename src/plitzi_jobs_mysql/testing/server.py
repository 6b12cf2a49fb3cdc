"""A throwaway MySQL / MariaDB server for tests.

``mysql_server_url()`` yields the root URL of a server, taken from the first of:

1. ``PLITZI_MYSQL_URL`` (used as given);
2. a ``mysql:8.4`` container through testcontainers, when a Docker daemon answers and has or can pull the image
   (``PLITZI_MYSQL_IMAGE`` names another image; ``PLITZI_MYSQL_DOCKER_NETWORK=host`` runs it on the host's
   network, loopback only: see ``docker.py``);
3. a private ``mariadbd`` / ``mysqld`` found on this machine, started in a temporary directory on a free
   loopback port (:class:`LocalMysqlServer`).

With none of them it raises ``RuntimeError`` saying how to get one; it never skips silently.

``fresh_database(url)`` creates a uniquely named ``utf8mb4_bin`` database for one test and drops it after;
``load_time_zones(url)`` fills the server's zone tables so ``SET time_zone='Europe/Berlin'`` works.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pymysql

from ..url import parse_mysql_url
from .databases import fresh_database
from .docker import DOCKER_IMAGE, docker_available, docker_image, docker_image_ready, docker_mysql_url
from .host import (
    SEARCH_DIRS,
    find_server_binary,
    free_port,
    is_mariadb_binary,
    log_errors,
    log_tail,
    port_open,
    sibling_binary,
    stop_process,
)
from .timezones import load_time_zones

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
_HOW_TO_GET_ONE = (
    "no MySQL server available for the tests. Do one of: "
    f"(1) set {ENV_URL}=mysql://root:password@127.0.0.1:3306 to use a running server; "
    f"(2) start a Docker daemon (the tests then run {DOCKER_IMAGE} through testcontainers); "
    "(3) install a local server (Debian/Ubuntu: apt-get install mariadb-server; "
    "Fedora: dnf install mariadb-server; macOS: brew install mariadb) so that mariadbd or mysqld is on PATH "
    "or in /usr/sbin."
)


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
    server, waits until it accepts connections and loads the time-zone tables. ``stop()`` ends the process
    (SIGTERM, then SIGKILL after ``stop_timeout``) and removes the temporary directory; ``stop(keep_data=True)``
    keeps both, so a later ``start()`` brings the same server back on the same port.

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
            self._is_mariadb = is_mariadb_binary(self.binary)
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
            if self._port is not None and self._port_fixed and port_open(self._port):
                raise RuntimeError(f"port {self._port} on 127.0.0.1 is already in use; cannot start the server")
            if self._base is None:
                self._base = Path(tempfile.mkdtemp(prefix="plitzi-mysql-"))
                self._initialised = False
                self._tz_loaded = False
                _live_servers.add(self)
            fresh = not self._initialised
            try:
                if self._port is None:
                    self._port = free_port()
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
                        self._port = free_port()
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

    # -- internals ---------------------------------------------------------------------------------------

    def _user_args(self) -> list[str]:
        return ["--user=root"] if os.geteuid() == 0 else []

    def _initialise(self) -> None:
        datadir = self.datadir
        log_path = self.base_dir / "initialise.log"
        started = time.monotonic()
        if self.is_mariadb:
            install_db = sibling_binary(self.binary, ("mariadb-install-db", "mysql_install_db"))
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
        for attempt in (1, 2):
            with open(log_path, "wb") as log:
                try:
                    result = subprocess.run(
                        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=300
                    )
                except subprocess.TimeoutExpired:
                    raise RuntimeError(
                        f"initialising the data directory timed out: {' '.join(cmd)}\n{log_tail(log_path)}"
                    ) from None
            if result.returncode == 0:
                break
            failure = (
                f"initialising the data directory failed (exit code {result.returncode}): {' '.join(cmd)}\n"
                + "\n".join(filter(None, [log_errors(log_path), "...", log_tail(log_path)]))
            )
            if attempt == 2:
                raise RuntimeError(failure)
            # Seen once in a while beside other servers starting (the cause in the log): once more, from scratch.
            logger.warning("%s\ntrying once more", failure)
            shutil.rmtree(datadir, ignore_errors=True)
            if not self.is_mariadb:
                datadir.mkdir(parents=True, exist_ok=True)
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
        if port_open(self.port):
            if self._requested_port is None and not self._port_fixed:
                self._port = free_port()
            else:
                raise RuntimeError(f"port {self.port} on 127.0.0.1 is already in use; cannot start the server")
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
                if "Bind on TCP/IP port" in log_tail(self.error_log, 10):
                    raise _PortTaken(f"port {self.port} on 127.0.0.1 is already in use; {self._logs_tail()}")
                raise RuntimeError(f"the local server exited with code {code} while starting; {self._logs_tail()}")
            try:
                conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", connect_timeout=2)
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
        text = f"its error log ({self.error_log}) ends with:\n{log_tail(self.error_log)}"
        console = self.base_dir / "stdout.log"
        with contextlib.suppress(OSError):
            if console.stat().st_size > 0:
                text += f"\nand its console output ({console}) with:\n{log_tail(console, 10)}"
        return text

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None:
            return
        try:
            stop_process(proc, self.stop_timeout, "the local server")
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
    if docker_available() and docker_image_ready(docker_image()):
        with docker_mysql_url(_HOW_TO_GET_ONE) as url:
            yield url
        return
    if find_server_binary() is not None:
        with LocalMysqlServer() as server:
            yield server.url
        return
    raise RuntimeError(_HOW_TO_GET_ONE)
