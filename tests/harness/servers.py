"""A throwaway server this repository's fault tests can crash and bring back (users' suites need only start/stop)."""

from __future__ import annotations

import contextlib
import logging
import signal

from plitzi_jobs_mysql.testing import LocalMysqlServer

__all__ = ["CrashableServer"]

logger = logging.getLogger(__name__)


class CrashableServer(LocalMysqlServer):
    """`LocalMysqlServer` plus ``kill()`` (SIGKILL, as a crash would; data kept for ``start()``) and ``restart()``
    (stop and start again on the same port and data directory)."""

    def kill(self) -> None:
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
        with self._lock:
            self.stop(keep_data=True)
            self.start()
