"""The three tables, as plain statements: what the adapters create on first use and what users' migrations run.

Identifiers are VARBINARY so they compare byte for byte: `utf8mb4_bin` is PAD SPACE on MariaDB and MySQL 5.7
(`'a' = 'a '`), and the case-insensitive collations made `Job-1`, `job-1` and `job-1 ` one job. Instants are
BIGINT epoch milliseconds taken from the server's clock, so no session time zone can shift them. JSON is kept as
LONGTEXT so MariaDB and MySQL store the same text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(r"[A-Za-z0-9_]*")
# The longest table name is `{prefix}action_schedules`; MySQL names stop at 64 characters.
PREFIX_MAX_CHARS = 64 - len("action_schedules")


def check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"table_prefix must be a str, not {type(prefix).__name__}")
    if not _PREFIX.fullmatch(prefix):
        raise ValueError(f"table_prefix may only hold letters, digits and '_', got {prefix!r}")
    if len(prefix) > PREFIX_MAX_CHARS:
        raise ValueError(f"table_prefix is {len(prefix)} characters; at most {PREFIX_MAX_CHARS} are allowed")
    return prefix


@dataclass(frozen=True)
class Tables:
    jobs: str
    schedules: str
    kv: str


def table_names(prefix: str = "") -> Tables:
    prefix = check_prefix(prefix)
    return Tables(jobs=f"{prefix}action_jobs", schedules=f"{prefix}action_schedules", kv=f"{prefix}action_kv")


def mysql_job_schema_statements(prefix: str = "") -> list[str]:
    """`CREATE TABLE IF NOT EXISTS` for the jobs, schedules and kv tables, for users' own migrations."""
    t = table_names(prefix)
    return [
        f"""CREATE TABLE IF NOT EXISTS `{t.jobs}` (
  `seq` BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  `id` VARBINARY(764) NOT NULL,
  `space_id` BIGINT NOT NULL,
  `action_id` VARBINARY(764) NOT NULL,
  `environment` VARBINARY(256) NOT NULL,
  `trigger` VARBINARY(256) NOT NULL,
  `input` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `due_at` BIGINT NOT NULL,
  `max_attempts` INT NOT NULL,
  `missed` INT NULL,
  `key` VARBINARY(764) NULL,
  `status` VARCHAR(9) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  `run_at` BIGINT NOT NULL,
  `attempts` INT NOT NULL,
  `created_at` BIGINT NOT NULL,
  `updated_at` BIGINT NOT NULL,
  `claimed_at` BIGINT NULL,
  `lease_until` BIGINT NULL,
  `worker_id` VARBINARY(764) NULL,
  `run_id` VARBINARY(764) NULL,
  `cancel_requested` TINYINT(1) NOT NULL DEFAULT 0,
  `error` MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
  `history` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  PRIMARY KEY (`seq`),
  UNIQUE KEY `job_id` (`id`),
  KEY `job_due` (`status`, `run_at`),
  KEY `job_space_recent` (`space_id`, `updated_at`),
  KEY `job_space_key` (`space_id`, `key`, `status`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
        f"""CREATE TABLE IF NOT EXISTS `{t.schedules}` (
  `space_id` BIGINT NOT NULL,
  `action_id` VARBINARY(764) NOT NULL,
  `cron` VARBINARY(764) NOT NULL,
  `timezone` VARBINARY(256) NULL,
  `environment` VARBINARY(256) NOT NULL,
  `enabled` TINYINT(1) NOT NULL,
  `next_run_at` BIGINT NOT NULL,
  `max_attempts` INT NOT NULL,
  `missed` BIGINT NOT NULL DEFAULT 0,
  `updated_at` BIGINT NOT NULL,
  `last_fire_at` BIGINT NULL,
  PRIMARY KEY (`space_id`, `action_id`),
  KEY `schedule_due` (`enabled`, `next_run_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
        f"""CREATE TABLE IF NOT EXISTS `{t.kv}` (
  `k` VARBINARY(764) NOT NULL,
  `v` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `expires_at` BIGINT NULL,
  PRIMARY KEY (`k`),
  KEY `kv_expiry` (`expires_at`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    ]


def mysql_job_schema_upgrades(prefix: str = "") -> list[str]:
    """Statements that bring tables made by an earlier release up to date. The first release has none."""
    table_names(prefix)  # a bad prefix is refused here too
    return []
