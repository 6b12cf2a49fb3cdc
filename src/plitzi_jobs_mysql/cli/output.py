"""How the operator commands print: aligned one-line-per-row tables, instants in ISO UTC with their age,
durations as `3d 4h`; JSON (epoch milliseconds) for machines."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from ..contract import readable
from ..records import Job, Schedule

__all__ = ["job_dict", "next_page", "print_json", "schedule_dict", "scope", "show_job", "table", "when"]


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def when(ms: int | None, now: int | None = None) -> str:
    """An instant in ISO UTC, and with `now` (the server's) its age: `2026-12-02T03:00:00Z (4h 5m ago)`."""
    if ms is None:
        return "-"
    return readable.instant(ms) + ("" if now is None else f" ({readable.age(ms, now)})")


def cell(value: object, width: int = 60) -> str:
    text = "-" if value is None else str(value)
    text = " ".join(text.split())  # one line per row, whatever an error message holds
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(row[i]) for row in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def job_dict(job: Job) -> dict[str, Any]:
    return dataclasses.asdict(job)


def schedule_dict(schedule: Schedule) -> dict[str, Any]:
    return dataclasses.asdict(schedule)


def show_job(job: Job, now: int | None = None) -> str:
    fields: list[tuple[str, object]] = [
        ("id", job.id),
        ("space", job.space_id),
        ("action", job.action_id),
        ("status", job.status + (" (cancel requested)" if job.cancel_requested else "")),
        ("attempts", f"{job.attempts} of {job.max_attempts}"),
        ("priority", job.priority),
        ("environment", job.environment),
        ("trigger", job.trigger),
        ("key", job.key),
        ("missed", job.missed),
        ("due at", when(job.due_at, now)),
        ("run at", when(job.run_at, now)),
        ("created at", when(job.created_at, now)),
        ("updated at", when(job.updated_at, now)),
        ("lease until", when(job.lease_until, now)),
        ("worker", job.worker_id),
        ("run id", job.run_id),
        ("error", job.error),
        ("input", json.dumps(job.input, ensure_ascii=False)),
    ]
    width = max(len(name) for name, _ in fields)
    text = "\n".join(f"{name.ljust(width)}  {'-' if value is None else value}" for name, value in fields)
    if job.history:
        rows = [
            (a.attempt, a.status, when(a.started_at, now), readable.duration(a.ended_at - a.started_at), a.worker_id,
             a.run_id, a.error)
            for a in job.history
        ]  # fmt: skip
        text += "\n\nhistory\n" + table(("#", "STATUS", "STARTED", "TOOK", "WORKER", "RUN ID", "ERROR"), rows)
    else:
        text += "\n\nhistory  (no attempts yet)"
    return text


def next_page(args: argparse.Namespace, shown: int, total: int | None) -> str:
    """The hint under a full page: how to ask for the next one."""
    more = args.offset + shown < total if total is not None else shown == args.limit and shown > 0
    return f"; next page: --offset {args.offset + shown}" if more else ""


def scope(spaces: Sequence[int] | None) -> str:
    """The spaces a listing covers, in words."""
    return "all spaces" if not spaces else "space(s) " + ", ".join(str(s) for s in spaces)
