"""Rows of the MySQL store decoded into records, by column name (the names are the SELECTs' column lists)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..records import Attempt, Job, Schedule
from .session import as_text
from .statements import JOB_COLUMN_NAMES, SCHEDULE_COLUMN_NAMES


def job_columns(row: Sequence[Any]) -> dict[str, Any]:
    """A row read with `JOB_COLUMNS`, by column name."""
    return dict(zip(JOB_COLUMN_NAMES, row, strict=True))


def job_from_row(row: Sequence[Any]) -> Job:
    return job_from_columns(job_columns(row))


def job_from_columns(c: dict[str, Any]) -> Job:
    return Job(
        id=as_text(c["id"]),
        space_id=int(c["space_id"]),
        action_id=as_text(c["action_id"]),
        environment=as_text(c["environment"]),
        trigger=as_text(c["trigger"]),
        input=json.loads(c["input"]),
        due_at=int(c["due_at"]),
        max_attempts=int(c["max_attempts"]),
        missed=_optional_int(c["missed"]),
        key=_optional_text(c["key"]),
        priority=int(c["priority"]),
        status=as_text(c["status"]),
        run_at=int(c["run_at"]),
        attempts=int(c["attempts"]),
        created_at=int(c["created_at"]),
        updated_at=int(c["updated_at"]),
        history=tuple(_attempt(entry) for entry in json.loads(c["history"])),
        lease_until=_optional_int(c["lease_until"]),
        worker_id=_optional_text(c["worker_id"]),
        run_id=_optional_text(c["run_id"]),
        cancel_requested=bool(c["cancel_requested"]),
        error=None if c["error"] is None else str(c["error"]),
        claimed_at=_optional_int(c["claimed_at"]),
    )


def schedule_from_row(row: Sequence[Any]) -> Schedule:
    c = dict(zip(SCHEDULE_COLUMN_NAMES, row, strict=True))
    return Schedule(
        space_id=int(c["space_id"]),
        action_id=as_text(c["action_id"]),
        cron=as_text(c["cron"]),
        timezone=_optional_text(c["timezone"]),
        environment=as_text(c["environment"]),
        enabled=bool(c["enabled"]),
        next_run_at=int(c["next_run_at"]),
        max_attempts=int(c["max_attempts"]),
        missed=int(c["missed"]),
        updated_at=int(c["updated_at"]),
        last_fire_at=_optional_int(c["last_fire_at"]),
    )


def _attempt(entry: dict[str, Any]) -> Attempt:
    """One entry of a job's JSON history (written by the statements' `_attempt_json`)."""
    return Attempt(
        attempt=int(entry["attempt"]),
        status=str(entry["status"]),
        started_at=int(entry.get("started_at") or 0),
        ended_at=int(entry["ended_at"]),
        worker_id=str(entry["worker_id"]),
        run_id=entry.get("run_id"),
        error=entry.get("error"),
    )


def _optional_text(value: Any) -> str | None:
    return None if value is None else as_text(value)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)
