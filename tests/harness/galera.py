"""A throwaway 3-node MariaDB Galera cluster on loopback, for the multi-primary tests.

Each node is a ``mariadbd`` with its own temporary directory, client port, group-communication (gmcast) port,
IST port and SST port, all on 127.0.0.1. Node 1 bootstraps the cluster (``--wsrep-new-cluster``) from a data
directory made by ``mariadb-install-db``; nodes 2 and 3 start empty and receive node 1's data by rsync state
transfer. The nodes run as the ``mysql`` user (rsync cannot write root-owned data directories), so the
directories are chowned to it.

``galera_library()`` answers the path of ``libgalera_smm.so`` or None; ``galera_missing_reason()`` answers why
a cluster cannot be started here (None when it can).

    with GaleraCluster() as cluster:
        cluster.urls   # three root URLs, one per node
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import pymysql

from plitzi_jobs_mysql.testing.host import (
    find_binary,
    find_server_binary,
    free_ports,
    is_mariadb_binary,
    log_tail,
    stop_process,
)

LIBRARY_PATHS = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
    "/usr/lib64/galera/libgalera_smm.so",
)
NODE_USER = "mysql"


def galera_library() -> str | None:
    for path in LIBRARY_PATHS:
        if os.path.isfile(path):
            return path
    return None


def galera_missing_reason() -> str | None:
    """Why a Galera cluster cannot be started on this machine, or None when it can."""
    missing: list[str] = []
    if galera_library() is None:
        missing.append("libgalera_smm.so (Debian package galera-4) in " + ", ".join(LIBRARY_PATHS))
    binary = find_server_binary()
    if binary is None or ("mysqld" in os.path.basename(binary) and not is_mariadb_binary(binary)):
        missing.append("a MariaDB server (mariadbd)")
    if shutil.which("rsync") is None:
        missing.append("rsync (Debian package rsync)")
    if shutil.which("wsrep_sst_rsync") is None and not os.path.exists("/usr/bin/wsrep_sst_rsync"):
        missing.append("wsrep_sst_rsync (Debian package mariadb-server)")
    if find_binary(("mariadb-install-db", "mysql_install_db")) is None:
        missing.append("mariadb-install-db")
    try:
        pwd.getpwnam(NODE_USER)
    except KeyError:
        missing.append(f"a system user {NODE_USER!r} to run the nodes as")
    if os.geteuid() != 0:
        missing.append("root (to start the nodes as the mysql user)")
    if not missing:
        return None
    return (
        "GALERA CLUSTER TESTS NOT RUN: missing "
        + "; ".join(missing)
        + ". Install them with: apt-get install galera-4 rsync mariadb-server (CI's .ci/run does)."
    )


class GaleraNode:
    def __init__(self, index: int, base: Path, port: int, gmcast: int, ist: int, sst: int) -> None:
        self.index = index
        self.base = base
        self.port = port
        self.gmcast = gmcast
        self.ist = ist
        self.sst = sst
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"mysql://root@127.0.0.1:{self.port}"

    @property
    def datadir(self) -> Path:
        return self.base / "data"

    @property
    def error_log(self) -> Path:
        return self.base / "error.log"

    def write_config(self, library: str, cluster_address: str) -> Path:
        config = self.base / "my.cnf"
        options = (
            f"gmcast.listen_addr=tcp://127.0.0.1:{self.gmcast};ist.recv_addr=127.0.0.1:{self.ist};"
            "gcache.size=64M;pc.recovery=false"
        )
        config.write_text(
            "[mysqld]\n"
            f"datadir={self.datadir}\n"
            f"port={self.port}\n"
            "bind-address=127.0.0.1\n"
            f"socket={self.base / 'mysqld.sock'}\n"
            f"pid-file={self.base / 'mysqld.pid'}\n"
            f"log-error={self.error_log}\n"
            f"tmpdir={self.base / 'tmp'}\n"
            f"user={NODE_USER}\n"
            "character-set-server=utf8mb4\n"
            "collation-server=utf8mb4_general_ci\n"
            "max-allowed-packet=64M\n"
            "innodb-buffer-pool-size=64M\n"
            "innodb-log-file-size=48M\n"
            "innodb-flush-log-at-trx-commit=0\n"
            "binlog_format=ROW\n"
            "default_storage_engine=InnoDB\n"
            "innodb_autoinc_lock_mode=2\n"
            "skip-name-resolve\n"
            "performance_schema=OFF\n"
            "wsrep_on=ON\n"
            f"wsrep_provider={library}\n"
            f"wsrep_cluster_address={cluster_address}\n"
            "wsrep_cluster_name=plitzi_test\n"
            f"wsrep_node_name=node{self.index}\n"
            "wsrep_node_address=127.0.0.1\n"
            f'wsrep_provider_options="{options}"\n'
            "wsrep_sst_method=rsync\n"
            f"wsrep_sst_receive_address=127.0.0.1:{self.sst}\n"
            "wsrep_slave_threads=2\n"
        )
        return config

    def spawn(self, binary: str, *, bootstrap: bool) -> None:
        args = [binary, f"--defaults-file={self.base / 'my.cnf'}"]
        if bootstrap:
            args.append("--wsrep-new-cluster")
        with open(self.base / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.base,
            )

    def status(self, name: str) -> str | None:
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", connect_timeout=2)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW STATUS LIKE %s", (name,))
                row = cur.fetchone()
                return None if row is None else str(row[1])
        finally:
            conn.close()

    def wait_synced(self, deadline: float, cluster_size: int) -> None:
        last: object = None
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(
                    f"galera node {self.index} exited with code {self.proc.returncode} while starting; its error "
                    f"log ({self.error_log}) ends with:\n{log_tail(self.error_log)}"
                )
            try:
                state = self.status("wsrep_local_state_comment")
                size = self.status("wsrep_cluster_size")
                ready = self.status("wsrep_ready")
                last = (state, size, ready)
                if state == "Synced" and ready == "ON" and size is not None and int(size) >= cluster_size:
                    return
            except pymysql.err.MySQLError as error:
                last = error
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"galera node {self.index} not synced in time (last: {last}); its error log ends with:\n"
                    + log_tail(self.error_log)
                )
            time.sleep(0.2)

    def terminate(self, timeout: float = 30.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process(proc, timeout, f"galera node {self.index}")


class GaleraCluster:
    """Three MariaDB Galera nodes on loopback. `start()` takes about 15 s; `stop()` ends them and removes the
    directories."""

    def __init__(self, nodes: int = 3, startup_timeout: float = 120.0) -> None:
        reason = galera_missing_reason()
        if reason is not None:
            raise RuntimeError(reason)
        binary = find_server_binary()
        assert binary is not None
        self.binary = binary
        self.library = galera_library() or ""
        self.size = nodes
        self.startup_timeout = startup_timeout
        self.root: Path | None = None
        self.nodes: list[GaleraNode] = []
        self.start_seconds: float | None = None

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def __enter__(self) -> GaleraCluster:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        deadline = started + self.startup_timeout
        user = pwd.getpwnam(NODE_USER)
        self.root = Path(tempfile.mkdtemp(prefix="plitzi-galera-"))
        try:
            os.chmod(self.root, 0o755)
            ports = free_ports(4 * self.size)
            for i in range(self.size):
                base = self.root / f"node{i + 1}"
                (base / "tmp").mkdir(parents=True)
                (base / "data").mkdir()
                self.nodes.append(GaleraNode(i + 1, base, *ports[4 * i : 4 * i + 4]))
            address = "gcomm://" + ",".join(f"127.0.0.1:{node.gmcast}" for node in self.nodes)
            for node in self.nodes:
                node.write_config(self.library, address)
            self._install_db(self.nodes[0])
            for node in self.nodes:
                for path in [node.base, *node.base.rglob("*")]:
                    os.chown(path, user.pw_uid, user.pw_gid)
            first = self.nodes[0]
            first.spawn(self.binary, bootstrap=True)
            first.wait_synced(deadline, 1)
            # One joiner at a time: two rsync state transfers from one donor at once only slow both down.
            for node in self.nodes[1:]:
                node.spawn(self.binary, bootstrap=False)
                node.wait_synced(deadline, node.index)
            for node in self.nodes:
                node.wait_synced(deadline, self.size)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started

    def _install_db(self, node: GaleraNode) -> None:
        tool = find_binary(("mariadb-install-db", "mysql_install_db"))
        assert tool is not None
        log = node.base / "install.log"
        with open(log, "wb") as out:
            result = subprocess.run(
                [
                    tool,
                    "--no-defaults",
                    f"--datadir={node.datadir}",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    f"--user={NODE_USER}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=300,
                check=False,
            )
        if result.returncode != 0:
            raise RuntimeError(f"mariadb-install-db failed ({result.returncode}):\n{log_tail(log)}")

    def stop(self) -> None:
        # Joiners first, then the bootstrap node: the last one out leaves a clean state behind (not that it
        # matters, the directories go).
        for node in reversed(self.nodes):
            node.terminate()
        self.nodes = []
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None
