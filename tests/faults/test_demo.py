"""`make demo` (examples/demo.py), run as a newcomer would, against the test server and with a short duration."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def demo(*args: str, url: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PLITZI_MYSQL_URL": url}
    return subprocess.run(
        [sys.executable, str(DEMO), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_the_demo_kills_a_replica_and_reports_nothing_lost_nothing_twice(mysql_url: str) -> None:
    result = demo("--seconds", "20", url=mysql_url)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    out = result.stdout
    lines = [line.strip() for line in out.splitlines()]
    assert "Traceback" not in result.stderr
    # Not a terminal: plain lines, no cursor movement.
    assert "\x1b[" not in out
    assert any("SIGKILL replica-" in line and "in the middle of import:big" in line for line in lines), out
    assert "Report" in lines
    fires = next(line for line in lines if line.startswith("fires produced: "))
    assert "digest" in fires and "report" in fires and "one job per fire instant" in fires
    assert any(line.startswith("jobs run: ") for line in lines)
    recovered = next(line for line in lines if line.startswith("lost attempt recovered: import:big"))
    assert "lost@" in recovered and "succeeded@" in recovered
    assert any(line.startswith("nothing ran twice: ") for line in lines)
    assert "OK: every check held." in lines
    assert "stopped on SIGTERM with exit 0" in out


def test_the_demo_says_clearly_when_it_cannot_reach_the_server() -> None:
    result = demo("--seconds", "10", url="mysql://root@127.0.0.1:1", timeout=60)
    assert result.returncode == 2
    assert "the demo could not run" in result.stderr
    assert "Traceback" not in result.stderr
