"""Faults at the wire, for the soak (`python -m tests.harness.soak --fault NAME`) and the short versions in
tests/faults/test_faults.py.

Each fault is aimed at the PACKAGE's connections only: the worker and scheduler processes and the producer
connect as a user of their own (`package_user`), while the ledger the handlers write and the checker read go
through a clean line as root. So what the checker reads is the truth, and what the package saw is the fault.

- `ProxyCuts`: the package reaches the server through `FaultProxy` (tests/harness/faultproxy.py), which cuts one
  connection every ~200 ms at a random point (often right after a statement went out and before its reply),
  stalls streams and adds latency.
- `Kills`: an admin session runs `KILL QUERY` / `KILL CONNECTION` on random connections of the package's user
  every ~200 ms, preferring the busy ones.
- `SilentConnections`: through the same proxy, one connection every ~1 s goes silent, neither answering nor
  closing (a NAT or firewall dropping a flow, a failover moving the server's address).
- `ReadOnly`: `SET GLOBAL read_only = 1` (and `super_read_only` where the server has it) for windows of a few
  seconds: every write of the package fails (error 1290) until the window ends.

Only ever against a throwaway server (or cluster) a test started: they change global settings and kill sessions.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import secrets
import time
from typing import Any

import pymysql

from plitzi_jobs_mysql.testing.databases import server_sessions
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import sql
from .faultproxy import FaultProxy

PACKAGE_USER = "pjm_package"


def admin_sql(url: str, statement: str, args: Any = None) -> list[tuple[Any, ...]]:
    """An admin statement that gives up on connecting after 5 s (the server may be the thing that is failing)."""
    return sql(url, statement, args, connect_timeout=5)


def package_user(url: str) -> str:
    """A user with every privilege on `url`'s database and none on the server (so `read_only` binds it and an
    admin can tell its sessions apart); answers the same URL as that user."""
    parsed = parse_mysql_url(url)
    assert parsed.database, "package_user needs a database URL"
    password = secrets.token_hex(8)
    admin_sql(url, f"CREATE USER IF NOT EXISTS '{PACKAGE_USER}'@'%%' IDENTIFIED BY %s", (password,))
    admin_sql(url, f"ALTER USER '{PACKAGE_USER}'@'%%' IDENTIFIED BY %s", (password,))
    admin_sql(url, f"GRANT ALL PRIVILEGES ON `{parsed.database}`.* TO '{PACKAGE_USER}'@'%'")
    from dataclasses import replace

    return replace(parsed, user=PACKAGE_USER, password=password).render(hide_password=False)


class Fault:
    """Injected while the soak's load runs: `inject` until `stop`; `injected` counts what it did, by kind."""

    name = "fault"

    def __init__(self, *, seed: int = 1) -> None:
        self.rng = random.Random(seed)
        self.injected: collections.Counter[str] = collections.Counter()
        self._stop = asyncio.Event()

    def package_url(self, url: str) -> str:
        """The URL the package's connections use under this fault."""
        return package_user(url)

    def stop(self) -> None:
        self._stop.set()

    def satisfied(self) -> bool:
        """Whether the load may end: by default once it has produced its jobs."""
        return True

    def down_seconds(self) -> float:
        """How long the store refused everyone (0 for faults that hit one connection at a time)."""
        return 0.0

    def verdict(self, soak: Any) -> list[str]:
        """What this fault's own rule says about a finished run, beyond the checker's (failures, if any)."""
        return []

    async def pause(self, seconds: float) -> bool:
        """Sleeps, or returns True at once when stopped."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)
        return self._stop.is_set()

    async def inject(self, soak: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ProxyCuts(Fault):
    name = "proxy cuts"

    def __init__(self, *, every_s: float = 0.2, seed: int = 1) -> None:
        super().__init__(seed=seed)
        self.every_s = every_s
        self.proxy: FaultProxy | None = None

    def package_url(self, url: str) -> str:
        parsed = parse_mysql_url(url)
        self.proxy = FaultProxy(parsed.host, parsed.port, seed=self.rng.randrange(1 << 30))
        self.proxy.latency_ms = (0.0, 2.0)
        self.proxy.start()
        return self.proxy.route(package_user(url))

    async def inject(self, soak: Any) -> None:
        assert self.proxy is not None
        while not await self.pause(self.rng.uniform(0.5, 1.5) * self.every_s):
            if self.rng.random() < 0.15:
                # A stream held for a while, then flowing again: a congested or flapping network.
                self.proxy.stall(self.rng.uniform(0.2, 1.5))
            else:
                self.proxy.cut()
        self.injected.update(self.proxy.injected)

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.stop()


class SilentConnections(ProxyCuts):
    """Through the fault proxy, one connection goes silent every ~`every_s` (nothing forwarded, nothing closed):
    what a NAT gateway or firewall does to a flow it dropped, or a failover that moved the server's address."""

    name = "silent connections"

    def __init__(self, *, every_s: float = 1.0, seed: int = 4) -> None:
        super().__init__(every_s=every_s, seed=seed)

    async def inject(self, soak: Any) -> None:
        assert self.proxy is not None
        while not await self.pause(self.rng.uniform(0.5, 1.5) * self.every_s):
            self.proxy.silence_one()
        self.injected.update(self.proxy.injected)


class Kills(Fault):
    name = "KILL QUERY / KILL CONNECTION"

    def __init__(self, admin_url: str, *, every_s: float = 0.2, seed: int = 2) -> None:
        super().__init__(seed=seed)
        self.admin_url = admin_url
        self.every_s = every_s

    async def inject(self, soak: Any) -> None:
        conn = await asyncio.to_thread(
            lambda: pymysql.connect(**parse_mysql_url(self.admin_url).pymysql_kwargs(), autocommit=True)
        )
        try:
            while not await self.pause(self.rng.uniform(0.5, 1.5) * self.every_s):
                await asyncio.to_thread(self._kill_one, conn)
        finally:
            conn.close()

    def _kill_one(self, conn: Any) -> None:
        with conn.cursor() as cur:
            want_busy = self.rng.random() < 0.8
            for _ in range(20 if want_busy else 1):  # a statement in flight is a moment: look again for one
                sessions = server_sessions(cur, "USER = %s", (PACKAGE_USER,))
                busy = [s for s in sessions if s[3] != "Sleep"]
                if busy:
                    break
            if not sessions:
                return
            target, busy_now = (
                (self.rng.choice(busy), True) if busy and want_busy else (self.rng.choice(sessions), False)
            )
            what = "QUERY" if self.rng.random() < 0.5 else "CONNECTION"
            try:
                cur.execute(f"KILL {what} %s", (int(target[0]),))
            except pymysql.err.MySQLError as error:
                if error.args and error.args[0] == 1094:  # the session ended by itself meanwhile
                    return
                raise
            self.injected[f"kill_{what.lower()}_{'busy' if busy_now else 'idle'}"] += 1


class ReadOnly(Fault):
    name = "read-only windows"

    def __init__(
        self, admin_url: str, *, window_s: float = 3.0, gap_s: float = 4.0, windows: int = 2, seed: int = 3
    ) -> None:
        super().__init__(seed=seed)
        self.admin_url = admin_url
        self.window_s = window_s
        self.gap_s = gap_s
        self.windows = windows
        self.took: list[float] = []

    def satisfied(self) -> bool:
        return len(self.took) >= self.windows

    def down_seconds(self) -> float:
        return sum(self.took)

    def verdict(self, soak: Any) -> list[str]:
        # With the default lease a window costs no second run: what could not be written in it is written after.
        if soak.lease_ms >= 30_000 and (soak.report["lost_attempts"] or soak.report["reruns"]):
            return [
                f"read-only windows cost {soak.report['lost_attempts']} lost attempts and "
                f"{soak.report['reruns']} second runs with a {soak.lease_ms} ms lease"
            ]
        return []

    def _set(self, on: bool) -> None:
        # `read_only` binds the package's user (privileges on its database only) on MariaDB and MySQL alike, and
        # leaves the admin sessions alone: the ledger (written as root) must keep recording runs through the
        # window. MySQL's `super_read_only` would bind root too, and every run would lose its ledger row.
        admin_sql(self.admin_url, f"SET GLOBAL read_only = {1 if on else 0}")

    async def inject(self, soak: Any) -> None:
        done = 0
        try:
            while done < self.windows and not await self.pause(self.gap_s):
                started = time.monotonic()
                await asyncio.to_thread(self._set, True)
                self.injected["read_only_window"] += 1
                done += 1
                await asyncio.sleep(self.window_s)  # a window runs its full length even if the load stops
                await asyncio.to_thread(self._set, False)
                self.took.append(round(time.monotonic() - started, 1))
            await self._stop.wait()  # the load decides when the run ends
        finally:
            await asyncio.to_thread(self._set, False)
