"""A fault-injecting TCP proxy for the wire tests: loopback only, asyncio, in a thread of its own.

    proxy = FaultProxy("127.0.0.1", server_port, seed=1)
    proxy.start()                    # listens on 127.0.0.1:<proxy.port>
    url = proxy.route(url)           # the same URL, through the proxy
    proxy.cut()                      # one live connection cut at a random point (see `cut`)
    proxy.stall(seconds=1.0)         # one connection's stream held, then released
    proxy.latency_ms = (0, 3)        # every chunk delayed by a uniform draw from this range
    proxy.stop()

It runs its own event loop in a daemon thread, so blocking calls in the test (PyMySQL, subprocess waits) never
hold the stream up. Every cut is counted by kind in `proxy.injected`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import random
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from plitzi_jobs_mysql.url import parse_mysql_url

#: The points a cut lands on. "now": wherever the stream is (often an idle pooled connection, which the pool only
#: notices on its next use); "before_reply": right after the next request reached the server, before any byte
#: of its reply comes back, so the server applied a write the client never hears about; "mid_reply": part of
#: the next reply forwarded, then cut; "reset": like "now" but with a TCP RST instead of a FIN.
CUT_KINDS = ("now", "before_reply", "mid_reply", "reset")
#: "Forever", for a test: a silenced connection stays silent until the proxy stops.
SILENT_S = 3600.0


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    cut_on: str | None = None  # "before_reply" / "mid_reply": armed, waiting for the next request
    armed: bool = False  # a request went through since the cut was set
    stalled_until: float = 0.0
    closed: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    def __init__(self, target_host: str, target_port: int, *, seed: int = 0) -> None:
        if target_host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError("the fault proxy only forwards to loopback")
        self.target = ("127.0.0.1" if target_host == "localhost" else target_host, target_port)
        self.rng = random.Random(seed)
        self.port = 0
        self.latency_ms: tuple[float, float] = (0.0, 0.0)
        self.injected: collections.Counter[str] = collections.Counter()
        self.connections = 0
        self._links: list[_Link] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # -- from the test's thread ----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fault proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fault proxy did not start")

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        with contextlib.suppress(RuntimeError):
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        self._loop = self._thread = None

    def route(self, url: str) -> str:
        """`url` with its host and port replaced by the proxy's."""
        parsed = parse_mysql_url(url)
        if parsed.host not in ("127.0.0.1", "localhost"):
            raise ValueError("the fault proxy only stands in for a loopback server")
        return dataclasses.replace(parsed, host="127.0.0.1", port=self.port).render(hide_password=False)

    def cut(self, kind: str | None = None) -> str | None:
        """Cuts one random live connection at the point `kind` names (random when None); answers the kind, or
        None when no connection was open."""
        return self._call(self._cut, kind)

    def stall(self, seconds: float) -> bool:
        """Holds one random live connection's stream (both ways) for `seconds`, then lets it flow again."""
        return bool(self._call(self._stall, seconds))

    def silence_one(self) -> bool:
        """One random open connection goes silent (see `silence`)."""
        return bool(self._call(self._silence_one))

    def silence(self) -> int:
        """Every open connection goes silent: nothing forwarded either way, nothing closed, no FIN, no RST (a
        failover that moved the server's address, a NAT or firewall dropping the flow). Connections opened
        afterwards flow normally. Answers how many went silent."""
        return int(self._call(self._silence))

    def live(self) -> int:
        return int(self._call(lambda: sum(1 for link in self._links if not link.closed)))

    def _call(self, function: Any, *args: Any) -> Any:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the fault proxy is not running")

        async def call() -> Any:
            return function(*args)

        return asyncio.run_coroutine_threadsafe(call(), loop).result(10)

    # -- in the proxy's thread -----------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(asyncio.start_server(self._accept, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self._links):
            self._close(link, reset=False)
        await asyncio.sleep(0)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.connections += 1
        link = _Link(client=writer, server=up_writer)
        self._links.append(link)
        link.tasks = [
            asyncio.create_task(self._pump(link, reader, up_writer, upstream=True)),
            asyncio.create_task(self._pump(link, up_reader, writer, upstream=False)),
        ]

    async def _pump(
        self, link: _Link, source: asyncio.StreamReader, sink: asyncio.StreamWriter, upstream: bool
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while not link.closed:
                data = await source.read(65536)
                if not data:
                    break
                held = link.stalled_until - loop.time()
                if held > 0:
                    await asyncio.sleep(held)
                low, high = self.latency_ms
                if high > 0:
                    await asyncio.sleep(self.rng.uniform(low, high) / 1000)
                if link.closed:
                    break
                if upstream:
                    sink.write(data)
                    if link.cut_on is not None:
                        link.armed = True
                else:
                    if link.armed and link.cut_on == "before_reply":
                        self._close(link, reset=self.rng.random() < 0.5)  # the server's answer never arrives
                        break
                    if link.armed and link.cut_on == "mid_reply":
                        sink.write(data[: self.rng.randint(1, max(1, len(data) - 1))] if len(data) > 1 else b"")
                        await sink.drain()
                        self._close(link, reset=False)
                        break
                    sink.write(data)
                await sink.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._close(link, reset=False)

    def _close(self, link: _Link, *, reset: bool) -> None:
        if link.closed:
            return
        link.closed = True
        for writer in (link.client, link.server):
            if reset:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(Exception):
                writer.close()
        with contextlib.suppress(ValueError):
            self._links.remove(link)
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()

    def _cut(self, kind: str | None) -> str | None:
        links = [link for link in self._links if not link.closed and link.cut_on is None]
        if not links:
            return None
        link = self.rng.choice(links)
        kind = kind or self.rng.choice(CUT_KINDS)
        if kind in ("now", "reset"):
            self._close(link, reset=kind == "reset")
        else:
            link.cut_on, link.armed = kind, False
        self.injected[kind] += 1
        return kind

    def _silence(self) -> int:
        assert self._loop is not None
        links = [link for link in self._links if not link.closed]
        for link in links:
            link.stalled_until = self._loop.time() + SILENT_S
        self.injected["silenced"] += len(links)
        return len(links)

    def _silence_one(self) -> bool:
        assert self._loop is not None
        links = [link for link in self._links if not link.closed and link.stalled_until < self._loop.time()]
        if not links:
            return False
        self.rng.choice(links).stalled_until = self._loop.time() + SILENT_S
        self.injected["silenced"] += 1
        return True

    def _stall(self, seconds: float) -> bool:
        links = [link for link in self._links if not link.closed]
        if not links:
            return False
        link = self.rng.choice(links)
        assert self._loop is not None
        link.stalled_until = self._loop.time() + seconds
        self.injected["stall"] += 1
        return True
