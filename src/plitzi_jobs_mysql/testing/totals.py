"""The job totals' drift check for tests: a MySQL queue's kept totals must say what a recount says."""

from __future__ import annotations

from typing import Any


async def assert_totals_exact(queue: Any) -> None:
    """Recounts a MySQL queue's jobs and fails naming every (space, action, status) whose kept total differs. A
    queue without kept totals (the memory queue counts its rows) passes."""
    drift = getattr(queue, "totals_drift", None)
    if drift is None:
        return
    found = await drift()
    if found.differences:
        lines = ", ".join(
            f"space {space} action {action!r} {status}: kept {kept}, counted {counted}"
            for (space, action, status), (kept, counted) in sorted(found.differences.items())
        )
        raise AssertionError(f"job totals drifted from a recount: {lines}")
