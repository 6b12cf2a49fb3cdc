"""Oracle MySQL 9.7 LTS for this repository's tests, from the Debian root `scripts/mysql_root.sh` builds and caches.

`mysql_root()` answers the root's path (building it the first time, about a minute), or raises saying why it
cannot; `mysql_root_missing_reason()` says why not without building. `ChrootMysqlServer` is a `CrashableServer`
whose `mysqld` runs inside that root (`chroot` shares this machine's loopback, so it answers on 127.0.0.1); its
directory lives under the root's /tmp, where the server can see it.

    with ChrootMysqlServer() as server:
        server.url    # mysql://root@127.0.0.1:<port>, zone tables loaded
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from plitzi_jobs_mysql.testing import server as server_module
from plitzi_jobs_mysql.testing.host import log_tail

from .servers import CrashableServer

__all__ = ["ROOT_SCRIPT", "ChrootMysqlServer", "in_root", "mysql_root", "mysql_root_missing_reason"]

ROOT_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "mysql_root.sh"
MYSQLD = "/usr/sbin/mysqld"


def cache_dir() -> Path:
    return Path(os.environ.get("PLITZI_CACHE") or Path.home() / ".cache" / "plitzi_jobs_mysql")


def root_path() -> Path:
    return Path(os.environ.get("PLITZI_MYSQL_ROOT") or cache_dir() / "mysql-9.7-root")


def mysql_root_missing_reason() -> str | None:
    """Why no MySQL 9.7 root can be had here (None when it exists or can be built)."""
    if (root_path() / ".plitzi-ready").exists():
        return None
    missing = []
    if os.geteuid() != 0:
        missing.append("root (debootstrap and chroot)")
    if shutil.which("debootstrap") is None and not os.path.exists("/usr/sbin/debootstrap"):
        missing.append("debootstrap (Debian package debootstrap)")
    if not missing:
        return None
    return "MYSQL 9.7 TESTS NOT RUN: missing " + "; ".join(missing) + " (CI's .ci/run installs them)."


@functools.cache
def mysql_root() -> Path:
    """The cached root, built by `scripts/mysql_root.sh` on first use (the script serialises builders)."""
    reason = mysql_root_missing_reason()
    if reason is not None:
        raise RuntimeError(reason)
    result = subprocess.run(
        ["bash", str(ROOT_SCRIPT)], capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1200, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{ROOT_SCRIPT} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


def in_root(root: Path, path: str | os.PathLike[str]) -> str:
    """A host path under `root` as the chrooted server sees it."""
    return "/" + str(Path(path).relative_to(root))


class ChrootMysqlServer(CrashableServer):
    """A throwaway MySQL 9.7 (`mysqld --no-defaults`, X Protocol off) chrooted into the cached root."""

    def __init__(self, *, load_tz: bool = True, extra_args: tuple[str, ...] = (), **options: object) -> None:
        self.root = mysql_root()
        super().__init__(
            str(self.root / MYSQLD.lstrip("/")),
            load_tz=False,
            extra_args=extra_args,
            **options,  # type: ignore[arg-type]
        )
        self._is_mariadb = False
        self.load_root_tz = load_tz

    def __repr__(self) -> str:
        return "<ChrootMysqlServer " + super().__repr__().split(" ", 1)[1]

    def start(self) -> None:
        with self._lock:
            if self._base is None:  # under the root's /tmp, where the chrooted server sees it
                self._base = Path(tempfile.mkdtemp(prefix="plitzi-mysql-", dir=self.root / "tmp"))
                os.chmod(self._base, 0o755)
                self._initialised = False
                self._tz_loaded = False
                server_module._live_servers.add(self)
            super().start()
            if self.load_root_tz and not self._tz_loaded:
                self._load_zones()
                self._tz_loaded = True

    def chroot_command(self, args: list[str]) -> list[str]:
        root = str(self.root)
        return ["chroot", root, *(arg.replace(root + "/", "/") for arg in args)]

    def _server_args(self) -> list[str]:
        return self.chroot_command(super()._server_args())

    def _initialise(self) -> None:
        self.datadir.mkdir(parents=True, exist_ok=True)
        cmd = self.chroot_command(
            [
                str(self.root / MYSQLD.lstrip("/")),
                "--no-defaults",
                "--initialize-insecure",
                f"--datadir={self.datadir}",
                "--user=root",
            ]
        )
        log_path = self.base_dir / "initialise.log"
        with open(log_path, "wb") as log:
            result = subprocess.run(
                cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=300, check=False
            )
        if result.returncode != 0:
            raise RuntimeError(f"mysqld --initialize-insecure failed ({result.returncode}):\n{log_tail(log_path)}")

    def _load_zones(self) -> None:
        """The zone tables from the root's own `mysql_tzinfo_to_sql` (MariaDB's script does not load on MySQL)."""
        started = time.monotonic()
        script = subprocess.run(
            ["chroot", str(self.root), "mysql_tzinfo_to_sql", "/usr/share/zoneinfo"],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            check=True,
        ).stdout
        subprocess.run(
            ["chroot", str(self.root), "mysql", "--protocol=TCP", "-h127.0.0.1", f"-P{self.port}", "-uroot", "mysql"],
            input=script,
            capture_output=True,
            timeout=300,
            check=True,
        )
        server_module.logger.info("MySQL zone tables loaded in %.1f s", time.monotonic() - started)
