"""What a throwaway server needs from this machine: its binaries, free loopback ports, the end of a log."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import signal
import socket
import subprocess

__all__ = [
    "SEARCH_DIRS",
    "find_binary",
    "find_server_binary",
    "free_port",
    "free_ports",
    "is_mariadb_binary",
    "log_tail",
    "port_open",
    "sibling_binary",
    "stop_process",
]

logger = logging.getLogger(__name__)

SEARCH_DIRS = ("/usr/sbin", "/usr/libexec", "/usr/local/mysql/bin", "/usr/local/sbin", "/usr/bin")
SERVER_NAMES = ("mariadbd", "mysqld")


def find_binary(names: tuple[str, ...], extra_dirs: tuple[str, ...] = SEARCH_DIRS) -> str | None:
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
    return find_binary(SERVER_NAMES)


def sibling_binary(server_binary: str, names: tuple[str, ...]) -> str | None:
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
    return find_binary(names)


def log_tail(path: str | os.PathLike[str], lines: int = 25) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 16384))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    return "\n".join(data.splitlines()[-lines:])


def log_errors(path: str | os.PathLike[str], lines: int = 10) -> str:
    """The log's last lines that say ERROR: mariadb-install-db ends a failure with advice that hides them."""
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(could not read {path}: {exc})"
    found = [line for line in text.splitlines() if "ERROR" in line or "error" in line.split(":")[0].lower()]
    return "\n".join(found[-lines:])


def free_port() -> int:
    """A free loopback port for a server this process is about to start (see :func:`free_ports`)."""
    return free_ports(1)[0]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def _ephemeral_range() -> tuple[int, int]:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(part) for part in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (held open together so none is picked twice).

    Picked below the kernel's ephemeral range where there is room: a port the kernel hands out for outgoing
    connections (a client's, a Galera node's own links to its peers) could otherwise be taken between the pick
    and the server's bind, which fails the start with "Address already in use". Only another explicit bind can
    take a port outside that range.
    """
    low, _high = _ephemeral_range()
    socks: list[socket.socket] = []
    try:
        candidates = list(range(10000, low)) if low - 10000 >= 1000 else []
        random.shuffle(candidates)
        for port in candidates:
            if len(socks) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                sock.close()
                continue
            socks.append(sock)
        while len(socks) < count:  # no room below the range: let the kernel pick
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            socks.append(sock)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for sock in socks:
            sock.close()


def is_mariadb_binary(binary: str) -> bool:
    """Whether ``binary --version`` names MariaDB (or the binary is called ``mariadbd``)."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        out = b""
    return b"mariadb" in out.lower() or "mariadbd" in os.path.basename(binary)


def stop_process(proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """SIGTERM ``proc``, wait ``timeout`` seconds, then SIGKILL it (logging that it ignored SIGTERM)."""
    if proc.poll() is not None:
        return
    logger.info("stopping %s (pid %d)", what, proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        logger.warning("%s (pid %d) ignored SIGTERM for %.0f s; killing it", what, proc.pid, timeout)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait()
