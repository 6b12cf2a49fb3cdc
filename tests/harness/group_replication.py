"""A throwaway 3-node MySQL 9.7 Group Replication cluster (multi-primary) on loopback, for the multi-primary tests.

Each node is a `mysqld --no-defaults` chrooted into the cached MySQL 9.7 root (`tests/mysql97.py`), with its own
directory under the root's /tmp, client port and group-communication port on 127.0.0.1. What it takes beyond a
plain server (DESIGN-NOTES, measured here): GTIDs on, the plugin loaded, multi-primary with update-everywhere
checks, an allowlist with loopback, and a replication user on EVERY node (created with binary logging off) named
for the recovery channel; without it a join "succeeds" and then hangs in RECOVERING once data exists. Node 1
bootstraps the group, nodes 2 and 3 join one at a time (distributed recovery from a donor).

`group_replication_member_expel_timeout` is 0 here, so a killed node is expelled about 6 s after it stops
answering rather than 21 s (the survivors' commits stall until then).

    with GroupReplicationCluster() as cluster:
        cluster.urls     # three root URLs, one per node
        cluster.kill(1); cluster.rejoin(1)
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import time
import uuid
from types import TracebackType

import pymysql

from plitzi_jobs_mysql.testing.host import free_ports, log_tail

from .mysql97 import ChrootMysqlServer, mysql_root, mysql_root_missing_reason

__all__ = ["GroupReplicationCluster", "group_replication_missing_reason"]

logger = logging.getLogger(__name__)

RECOVERY_USER = "plitzi_recovery"
RECOVERY_PASSWORD = "recovery-pw"  # loopback only, a throwaway cluster


def group_replication_missing_reason() -> str | None:
    """Why a Group Replication cluster cannot be started here, or None when it can (PLITZI_GROUP_REPLICATION=0
    skips it on purpose).

    Fixed 2026-12-02 (evening): with the job totals' triggers, a lone write under `group_replication_consistency =
    BEFORE` deadlocked with the member's applier (the consistency wait runs again for each trigger's statement,
    holding the rows the statement changed); the adapter now sends each write between BEGIN and COMMIT, where the
    wait runs once, at BEGIN (mysql/flavour.py)."""
    if os.environ.get("PLITZI_GROUP_REPLICATION", "") == "0":
        return "GROUP REPLICATION TESTS SKIPPED: PLITZI_GROUP_REPLICATION=0"
    reason = mysql_root_missing_reason()
    if reason is not None:
        return reason.replace("MYSQL 9.7 TESTS", "GROUP REPLICATION TESTS")
    return None


def _connect(port: int, timeout: float = 5.0) -> pymysql.connections.Connection:
    return pymysql.connect(
        host="127.0.0.1",
        port=port,
        user="root",
        password="",
        connect_timeout=timeout,
        read_timeout=120,
        autocommit=True,
    )


def _run(port: int, *statements: str) -> list[tuple[object, ...]]:
    conn = _connect(port)
    try:
        rows: list[tuple[object, ...]] = []
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall())
        return rows
    finally:
        conn.close()


class GroupNode(ChrootMysqlServer):
    """One member: a chrooted MySQL 9.7 with the group_replication plugin and this group's settings."""

    def __init__(self, index: int, port: int, gcs_port: int, group: str, seeds: str) -> None:
        self.index = index
        self.gcs_port = gcs_port
        super().__init__(
            port=port,
            # Zone tables only on the node that bootstraps: written on a joiner, they would be transactions the
            # group does not have, and the joiner would be refused.
            load_tz=index == 1,
            stop_timeout=60.0,
            extra_args=(
                f"--server-id={index}",
                "--gtid-mode=ON",
                "--enforce-gtid-consistency=ON",
                "--log-bin=binlog",
                "--log-replica-updates=ON",
                "--report-host=127.0.0.1",
                f"--report-port={port}",
                "--plugin-load-add=group_replication.so",
                f"--loose-group-replication-group-name={group}",
                "--loose-group-replication-start-on-boot=OFF",
                f"--loose-group-replication-local-address=127.0.0.1:{gcs_port}",
                f"--loose-group-replication-group-seeds={seeds}",
                "--loose-group-replication-ip-allowlist=127.0.0.1/8",
                "--loose-group-replication-single-primary-mode=OFF",
                "--loose-group-replication-enforce-update-everywhere-checks=ON",
                "--loose-group-replication-member-expel-timeout=0",
                "--innodb-buffer-pool-size=128M",
                "--innodb-flush-log-at-trx-commit=2",
                "--sync-binlog=0",
                "--performance-schema=ON",
            ),
        )

    def _server_args(self) -> list[str]:
        # The base server's `--skip-log-bin` would turn GTID replication off; the group needs the binary log.
        return [arg for arg in super()._server_args() if arg != "--skip-log-bin"]

    def sql(self, *statements: str) -> list[tuple[object, ...]]:
        return _run(self.port, *statements)

    def member_states(self) -> dict[int, str]:
        rows = self.sql("SELECT MEMBER_PORT, MEMBER_STATE FROM performance_schema.replication_group_members")
        return {int(str(port)): str(state) for port, state in rows if port}

    def set_up_recovery(self) -> None:
        """The recovery user, created on every node with binary logging off (it must not replicate, it is needed
        before the node is a member), and the recovery channel's credentials."""
        self.sql(
            "SET SESSION sql_log_bin = 0",
            f"CREATE USER IF NOT EXISTS '{RECOVERY_USER}'@'%' IDENTIFIED BY '{RECOVERY_PASSWORD}'",
            f"GRANT REPLICATION SLAVE, BACKUP_ADMIN, CONNECTION_ADMIN ON *.* TO '{RECOVERY_USER}'@'%'",
            "SET SESSION sql_log_bin = 1",
            f"CHANGE REPLICATION SOURCE TO SOURCE_USER = '{RECOVERY_USER}', SOURCE_PASSWORD = '{RECOVERY_PASSWORD}' "
            "FOR CHANNEL 'group_replication_recovery'",
        )


class GroupReplicationCluster:
    """Three MySQL 9.7 Group Replication members, multi-primary, on loopback. `start()` takes about 30 s."""

    def __init__(self, nodes: int = 3, startup_timeout: float = 180.0) -> None:
        reason = group_replication_missing_reason()
        if reason is not None:
            raise RuntimeError(reason)
        mysql_root()
        self.size = nodes
        self.startup_timeout = startup_timeout
        self.nodes: list[GroupNode] = []
        self.start_seconds: float | None = None

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def __enter__(self) -> GroupReplicationCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        ports = free_ports(2 * self.size)
        group = str(uuid.uuid4())
        seeds = ",".join(f"127.0.0.1:{ports[2 * i + 1]}" for i in range(self.size))
        self.nodes = [GroupNode(i + 1, ports[2 * i], ports[2 * i + 1], group, seeds) for i in range(self.size)]
        try:
            # Initialising a data directory is the slow part of a start: all three at once.
            with concurrent.futures.ThreadPoolExecutor(self.size) as pool:
                list(pool.map(lambda node: node.start(), self.nodes))
            for node in self.nodes:
                node.set_up_recovery()
            first = self.nodes[0]
            first.sql(
                "SET GLOBAL group_replication_bootstrap_group = ON",
                "START GROUP_REPLICATION",
                "SET GLOBAL group_replication_bootstrap_group = OFF",
            )
            self.wait_online(first, 1)
            for node in self.nodes[1:]:  # one joiner at a time: each recovers from a donor
                node.sql("START GROUP_REPLICATION")
                self.wait_online(node, node.index)
            self.wait_online(first, self.size)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        logger.info("group replication cluster of %d up in %.1f s", self.size, self.start_seconds)

    def wait_online(self, node: GroupNode, count: int, timeout: float | None = None) -> None:
        """Until `node` sees at least `count` members ONLINE (itself among them)."""
        deadline = time.monotonic() + (timeout or self.startup_timeout)
        last: object = None
        while True:
            try:
                states = node.member_states()
                last = states
                online = [port for port, state in states.items() if state == "ONLINE"]
                if node.port in online and len(online) >= count:
                    return
            except pymysql.err.MySQLError as error:
                last = error
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"group member {node.index} not ONLINE with {count} members in time (last: {last}); its error "
                    f"log ends with:\n{log_tail(node.error_log)}"
                )
            time.sleep(0.2)

    def wait_members(self, node: GroupNode, count: int, timeout: float = 120.0) -> float:
        """Until `node`'s view has exactly `count` members (a killed one expelled); answers the seconds waited."""
        started = time.monotonic()
        while True:
            try:
                if len(node.member_states()) == count:
                    return time.monotonic() - started
            except pymysql.err.MySQLError:
                pass
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"member {node.index} still sees {node.member_states()} after {timeout:.0f} s")
            time.sleep(0.1)

    def kill(self, index: int) -> None:
        """SIGKILL member `index` (1-based), keeping its data for `rejoin`."""
        self.nodes[index - 1].kill()

    def rejoin(self, index: int) -> float:
        """Start a killed member again and have it rejoin the group; answers the seconds until it is ONLINE."""
        node = self.nodes[index - 1]
        started = time.monotonic()
        node.start()
        node.sql("START GROUP_REPLICATION")
        self.wait_online(node, self.size)
        return time.monotonic() - started

    def stop(self) -> None:
        for node in reversed(self.nodes):
            try:
                node.kill()  # a clean shutdown of a member under load takes about a minute: nothing to keep
            finally:
                node.stop()
        self.nodes = []
