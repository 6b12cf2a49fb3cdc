"""Tables and rows exactly as the TypeScript original (@plitzi/sdk-server 0.37.2) makes and writes them.

The DDL is the original's schema helper output (tests/fixtures/ts-0.37.2-schema.sql). The writes below send the
statements its MySQL queue and kv send (Plitzi/plitzi-workspace, packages/sdk-server mysql module): JSON text
from JSON.stringify (no whitespace, camelCase history keys, absent optional keys left out), epoch-ms instants,
`expires_at` on finished jobs, kv lifetimes as `NOW_MS + ttl`. Each function is one write of the original.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pymysql

from plitzi_jobs_mysql.url import parse_mysql_url

DDL = Path(__file__).resolve().parents[1] / "fixtures" / "ts-0.37.2-schema.sql"
# The original's server clock, as it read it.
TS_NOW_MS = "CAST(ROUND(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)"
DAY_MS = 86_400_000
RETENTION_MS = 90 * DAY_MS


def stringify(value: Any) -> str:
    """JSON.stringify: no whitespace, non-ASCII as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def create_tables(cur: Any, prefix: str = "") -> None:
    body = "\n".join(line for line in DDL.read_text(encoding="utf-8").splitlines() if not line.startswith("--"))
    for statement in (s for s in body.split(";") if s.strip()):
        cur.execute(statement.replace("`action_", f"`{prefix}action_"))


class Original:
    """One connection writing as the original does."""

    def __init__(self, url: str, prefix: str = "") -> None:
        self.conn = pymysql.connect(**parse_mysql_url(url).pymysql_kwargs(), autocommit=True)
        self.cur = self.conn.cursor()
        self.jobs, self.schedules, self.kv = (f"`{prefix}action_{t}`" for t in ("jobs", "schedules", "kv"))

    def close(self) -> None:
        self.conn.close()

    def enqueue(self, at: int, id: str, *, space: int = 1, action: str = "act", input: Any = None,
                due_at: int | None = None, max_attempts: int = 3, missed: int | None = None,
                trigger: str = "manual") -> None:  # fmt: skip
        due = at if due_at is None else due_at
        self.cur.execute(
            f"INSERT INTO {self.jobs} (id, space_id, action_id, environment, trigger_type, input, due_at, "
            "max_attempts, missed, status, run_at, attempts, created_at, updated_at, history) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, 'pending', %s, 0, %s, %s, '[]')",
            (id, space, action, "main", trigger, stringify(input or {}), due, max_attempts, missed, due, at, at),
        )

    def _row(self, id: str) -> dict[str, Any]:
        self.cur.execute(
            f"SELECT status, updated_at, attempts, history, worker_id, run_at FROM {self.jobs} WHERE id = %s", (id,)
        )
        status, updated_at, attempts, history, worker_id, run_at = self.cur.fetchone()
        return {"status": status, "updated_at": updated_at, "attempts": attempts, "history": json.loads(history),
                "worker_id": worker_id, "run_at": run_at}  # fmt: skip

    def claim(self, at: int, id: str, worker: str, lease_ms: int) -> None:
        """The original's claim of one read row: a lapsed lease gets its `lost` attempt written for it."""
        row = self._row(id)
        history = row["history"]
        if row["status"] == "running":
            history = [*history, {"attempt": len(history) + 1, "status": "lost", "startedAt": row["updated_at"],
                                  "endedAt": at, "workerId": row["worker_id"] or "unknown",
                                  "error": "the worker holding this job stopped reporting"}]  # fmt: skip
        self.cur.execute(
            f"UPDATE {self.jobs} SET status = 'running', worker_id = %s, lease_until = %s, updated_at = %s, "
            "attempts = attempts + 1, history = %s WHERE id = %s AND status = %s AND updated_at = %s AND attempts = %s",
            (worker, at + lease_ms, at, stringify(history), id, row["status"], row["updated_at"], row["attempts"]),
        )
        assert self.cur.rowcount == 1

    def settle(self, at: int, id: str, worker: str, status: str, *, run_id: str | None = None,
               error: str | None = None, attempt: dict[str, Any] | None = None, delay_ms: int = 0) -> None:  # fmt: skip
        row = self._row(id)
        history = row["history"]
        if attempt is not None:
            numbered = {**attempt, "attempt": len(history) + 1, "startedAt": row["updated_at"], "endedAt": at}
            history = [*history, numbered]
        pending = status == "pending"
        attempts = max(0, row["attempts"] - 1) if pending and attempt is None else row["attempts"]
        terminal = status in ("succeeded", "failed", "dead", "cancelled")
        self.cur.execute(
            f"UPDATE {self.jobs} SET status = %s, updated_at = %s, lease_until = NULL, error = %s, "
            "run_id = COALESCE(%s, run_id), run_at = %s, worker_id = %s, attempts = %s, history = %s, "
            "expires_at = %s WHERE id = %s",
            (status, at, error, run_id, at + delay_ms if pending else row["run_at"], None if pending else worker,
             attempts, stringify(history), at + RETENTION_MS if terminal else None, id),
        )  # fmt: skip

    def cancel(self, at: int, id: str, space: int = 1) -> None:
        self.cur.execute(
            f"UPDATE {self.jobs} SET status = 'cancelled', updated_at = %s, expires_at = %s, worker_id = NULL "
            "WHERE id = %s AND space_id IN (%s) AND status = 'pending'",
            (at, at + RETENTION_MS, id, space),
        )
        if self.cur.rowcount == 0:
            self.cur.execute(
                f"UPDATE {self.jobs} SET cancel_requested = 1, updated_at = %s WHERE id = %s AND space_id IN (%s) "
                "AND status = 'running'",
                (at, id, space),
            )

    def put_schedule(self, at: int, space: int, action: str, cron: str, timezone: str | None, enabled: bool,
                     next_run_at: int, max_attempts: int = 3) -> None:  # fmt: skip
        self.cur.execute(
            f"INSERT INTO {self.schedules} (space_id, action_id, cron, timezone, environment, enabled, next_run_at, "
            "missed, max_attempts, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, 0, %s, %s) "
            "ON DUPLICATE KEY UPDATE next_run_at = IF(cron = VALUES(cron) AND timezone <=> VALUES(timezone) "
            "AND environment = VALUES(environment), next_run_at, VALUES(next_run_at)), cron = VALUES(cron), "
            "timezone = VALUES(timezone), environment = VALUES(environment), enabled = VALUES(enabled), "
            "max_attempts = VALUES(max_attempts), updated_at = VALUES(updated_at)",
            (space, action, cron, timezone, "main", 1 if enabled else 0, next_run_at, max_attempts, at),
        )

    def advance_schedule(self, at: int, space: int, action: str, from_at: int, to_at: int, missed: int) -> None:
        self.cur.execute(
            f"UPDATE {self.schedules} SET next_run_at = %s, last_fire_at = %s, updated_at = %s, "
            "missed = missed + %s WHERE space_id = %s AND action_id = %s AND next_run_at = %s",
            (to_at, from_at, at, missed, space, action, from_at),
        )
        assert self.cur.rowcount == 1

    def kv_set(self, key: str, value: str, ttl_seconds: float | None = None) -> None:
        expiry = "NULL" if ttl_seconds is None else f"{TS_NOW_MS} + %s"
        args: tuple[Any, ...] = (key, value) if ttl_seconds is None else (key, value, ttl_seconds * 1000)
        self.cur.execute(
            f"INSERT INTO {self.kv} (k, v, expires_at) VALUES (%s, %s, {expiry}) "
            "ON DUPLICATE KEY UPDATE v = VALUES(v), expires_at = VALUES(expires_at)",
            args,
        )

    def kv_increment(self, key: str, amount: int) -> None:
        live = f"(expires_at IS NULL OR expires_at > {TS_NOW_MS})"
        self.cur.execute(
            f"INSERT INTO {self.kv} (k, v, expires_at) VALUES (%s, CAST(%s AS CHAR), NULL) ON DUPLICATE KEY UPDATE "
            f"v = CAST(IF({live}, (v + 0) + %s, %s) AS CHAR), expires_at = IF({live}, expires_at, NULL)",
            (key, amount, amount, amount),
        )
