"""One HAProxy TCP frontend on loopback in front of the Galera nodes, the way users deploy a cluster.

    with HaProxy([node.port for node in cluster.nodes]) as proxy:
        proxy.port   # the frontend: connections go to the node with the fewest, and away from a dead one

It runs Debian's ``haproxy`` in the foreground (``-db``) from a temporary directory; health checks are plain TCP
connects every 300 ms (down after 2 failures, up after 2 successes), a connection refused by a dead node is
redispatched to another, and sessions on a node marked down are shut so clients notice at once.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from plitzi_jobs_mysql.testing.host import free_port


def haproxy_binary() -> str | None:
    return shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if Path(p).exists()), None
    )


class HaProxy:
    def __init__(self, backend_ports: list[int]) -> None:
        binary = haproxy_binary()
        if binary is None:
            raise RuntimeError("haproxy is not installed (Debian package haproxy; CI's .ci/run installs it)")
        self.binary = binary
        self.backend_ports = backend_ports
        self.port = 0
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> HaProxy:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="plitzi-haproxy-"))
        self.port = free_port()
        servers = "\n".join(
            f"    server node{i + 1} 127.0.0.1:{port} check" for i, port in enumerate(self.backend_ports)
        )
        config = self.dir / "haproxy.cfg"
        config.write_text(
            "global\n"
            "    maxconn 512\n"
            "defaults\n"
            "    mode tcp\n"
            "    timeout connect 1s\n"
            "    timeout client 1h\n"
            "    timeout server 1h\n"
            "    retries 3\n"
            "    option redispatch\n"
            "frontend galera\n"
            f"    bind 127.0.0.1:{self.port}\n"
            "    default_backend nodes\n"
            "backend nodes\n"
            "    balance leastconn\n"
            "    default-server inter 300ms fall 2 rise 2 on-marked-down shutdown-sessions\n"
            f"{servers}\n"
        )
        with open(self.dir / "haproxy.log", "wb") as out:
            self.proc = subprocess.Popen(
                [self.binary, "-db", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"haproxy exited with {self.proc.returncode}: {self.log()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not listen within 10 s: {self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        if self.dir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.dir / "haproxy.log").read_text(errors="replace")[-3000:]
        return ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None
