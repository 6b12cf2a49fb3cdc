"""What `make demo`'s report says about the runs in its ledger (examples/demo.py), without running the demo."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime
from pathlib import Path
from types import ModuleType

from tests.harness.replica import LedgerRow

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


def demo_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("plitzi_demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("plitzi_demo", module)
    spec.loader.exec_module(module)
    return module


def run(n: int, job_id: str, outcome: str) -> LedgerRow:
    at = datetime(2026, 12, 1, 12, 0, n)
    return LedgerRow(
        id=n, job_id=job_id, space_id=1, action_id=job_id.split(":")[0], trigger="manual", attempt=1,
        worker_id="replica-A", pid=1, started_at=at, ended_at=at, outcome=outcome,
    )  # fmt: skip


def test_a_job_that_asked_to_be_retried_later_is_not_listed_as_failed() -> None:
    ledger = [
        run(1, "flaky:1", "failed"),
        run(2, "flaky:1", "succeeded"),
        run(3, "flaky:2", "failed"),
        run(4, "flaky:2", "succeeded"),
        run(5, "busy:1", "retry"),
        run(6, "busy:1", "succeeded"),
        run(7, "order:1", "succeeded"),
    ]
    line = demo_module().runs_line(ledger)
    assert line.startswith("jobs run: 4 succeeded runs of 4 jobs, 7 runs in the ledger")
    assert "failed once and retried: flaky:1, flaky:2;" in line
    assert "handed back by RetryLater and run again: busy:1" in line
    assert line.count("busy:1") == 1


def test_a_ledger_without_retries_says_none() -> None:
    line = demo_module().runs_line([run(1, "order:1", "succeeded")])
    assert "failed once and retried: none; handed back by RetryLater and run again: none" in line
