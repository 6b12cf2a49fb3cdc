"""`plitzi-jobs-mysql dashboard` as a process of its own, as an operator runs it, for the dashboard's tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from plitzi_jobs_mysql.testing.host import free_port

CHROMIUM = os.environ.get("PLITZI_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
#: Where the browser tests keep their screenshots (printed at the end of the run by tests/conftest.py).
ARTIFACTS = Path(os.environ.get("PLITZI_ARTIFACTS", ROOT / "build" / "artifacts")) / "dashboard"
START_S = 60.0


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium; .ci/run installs it)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (it comes with the dev extra)"
    return None


@dataclass
class Dashboard:
    url: str
    process: subprocess.Popen[str]

    def stop(self) -> str:
        """Ends the process (SIGINT, as Ctrl-C) and answers everything it wrote."""
        if self.process.poll() is None:
            self.process.send_signal(2)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        out, _ = self.process.communicate(timeout=20)
        return out


@contextmanager
def dashboard(database_url: str, *args: str, env: dict[str, str] | None = None) -> Iterator[Dashboard]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "plitzi_jobs_mysql", "dashboard", "--url", database_url, "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    running = Dashboard(url=f"http://127.0.0.1:{port}", process=process)
    try:
        deadline = time.monotonic() + START_S
        while True:
            if process.poll() is not None:
                raise AssertionError(f"the dashboard exited with {process.returncode}: {running.stop()}")
            try:
                with urllib.request.urlopen(f"{running.url}/static/dashboard.css", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"the dashboard did not answer within {START_S}s: {running.stop()}")
            time.sleep(0.1)
        yield running
    finally:
        running.stop()
