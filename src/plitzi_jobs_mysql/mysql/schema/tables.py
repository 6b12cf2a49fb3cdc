"""The three tables: their names, their DDL, and the version record each carries.

Identifiers are VARBINARY so they compare byte for byte: `utf8mb4_bin` is PAD SPACE on MariaDB and MySQL 5.7
(`'a' = 'a '`), and the case-insensitive collations made `Job-1`, `job-1` and `job-1 ` one job. Instants are
BIGINT epoch milliseconds taken from the server's clock, so no session time zone can shift them. JSON is kept as
LONGTEXT so MariaDB and MySQL store the same text.

The version record is the table's COMMENT (`plitzi_jobs_mysql schema N`): written by the CREATE TABLE that makes
the table and by the same ALTER that changes it, so it can never disagree with the columns it describes, and every
path that creates the tables (first use, sql/schema.sql, Alembic, `migrate`) writes it without doing anything else.

A layout is a table's columns as `name type` in order, as information_schema's COLUMN_NAME and DATA_TYPE spell
them: what the upgrade steps and the first-use check compare, on MySQL 8 and MariaDB alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(r"[A-Za-z0-9_]*")
# The longest table name is `{prefix}action_schedules`; MySQL names stop at 64 characters.
PREFIX_MAX_CHARS = 64 - len("action_schedules")

#: The schema this release runs on. A new step in `upgrades.py` raises it.
SCHEMA_VERSION = 3
MARKER_TEXT = "plitzi_jobs_mysql schema "
_MARKER = re.compile(re.escape(MARKER_TEXT) + r"(\d+)")
_OPTIONS = "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"


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

    def all(self) -> tuple[str, str, str]:
        return (self.jobs, self.schedules, self.kv)


def table_names(prefix: str = "") -> Tables:
    prefix = check_prefix(prefix)
    return Tables(jobs=f"{prefix}action_jobs", schedules=f"{prefix}action_schedules", kv=f"{prefix}action_kv")


def side_names(prefix: str, side: str) -> Tables:
    """Where a table-copying step builds a table (`new`) and keeps the one it replaced (`old`).

    16 characters at most after the prefix, like `action_schedules`, so every allowed prefix fits in 64.
    """
    prefix = check_prefix(prefix)
    return Tables(jobs=f"{prefix}action_jobs_{side}", schedules=f"{prefix}action_sched_{side}",
                  kv=f"{prefix}action_kv_{side}")  # fmt: skip


def marker(version: int) -> str:
    return f"{MARKER_TEXT}{version}"


def marker_version(comment: str | None) -> int | None:
    """The schema version a table COMMENT records, or None when it records none."""
    found = _MARKER.fullmatch((comment or "").strip())
    return int(found.group(1)) if found else None


# -- version 1 ------------------------------------------------------------------------------------------------
# When a later step changes a table, these stay as they are (step 1 builds version-1 tables from them) and the
# current definitions below move on.


def jobs_v1(name: str) -> str:
    return f"""CREATE TABLE IF NOT EXISTS `{name}` (
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
) {_OPTIONS} COMMENT='{marker(1)}'"""


def schedules_v1(name: str, version: int = 1) -> str:
    return f"""CREATE TABLE IF NOT EXISTS `{name}` (
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
) {_OPTIONS} COMMENT='{marker(version)}'"""


def kv_v1(name: str, version: int = 1) -> str:
    return f"""CREATE TABLE IF NOT EXISTS `{name}` (
  `k` VARBINARY(764) NOT NULL,
  `v` LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  `expires_at` BIGINT NULL,
  PRIMARY KEY (`k`),
  KEY `kv_expiry` (`expires_at`)
) {_OPTIONS} COMMENT='{marker(version)}'"""


# -- the current schema ---------------------------------------------------------------------------------------

#: What the priorities step adds to the jobs table (upgrades.py builds its ALTER from these, so the upgraded
#: table and a fresh one are alike): the column after `key`, and the index a claim reads due jobs through, in
#: claim order within each priority (`job_due` stays for the finished ranges, which are by status and run_at).
PRIORITY_COLUMN = "`priority` TINYINT NOT NULL DEFAULT 0"
#: 1 while a pause covers the job (`pause`, mysql/pause_calls.py): in front of the claim index, so a claim's
#: ranges (`held = 0`) never walk the jobs of a paused action, however many wait.
HELD_COLUMN = "`held` TINYINT NOT NULL DEFAULT 0"
CLAIM_INDEX = "`job_claim` (`status`, `held`, `priority`, `run_at`)"
#: The index the totals' step adds: a space's jobs of one status, newest first (list_jobs with a status filter).
SPACE_STATUS_RECENT = "KEY `job_space_status_recent` (`space_id`, `status`, `updated_at`)"


def jobs_current(name: str) -> str:
    ddl = jobs_v1(name)
    ddl = ddl.replace(
        "  `key` VARBINARY(764) NULL,\n", f"  `key` VARBINARY(764) NULL,\n  {PRIORITY_COLUMN},\n  {HELD_COLUMN},\n"
    )
    ddl = ddl.replace(
        "  KEY `job_due` (`status`, `run_at`),\n", f"  KEY `job_due` (`status`, `run_at`),\n  KEY {CLAIM_INDEX},\n"
    )
    ddl = ddl.replace("  KEY `job_space_key`", f"  {SPACE_STATUS_RECENT},\n  KEY `job_space_key`")
    return ddl.replace(f"COMMENT='{marker(1)}'", f"COMMENT='{marker(SCHEMA_VERSION)}'")


def schedules_current(name: str) -> str:
    return schedules_v1(name, SCHEMA_VERSION)


def kv_current(name: str) -> str:
    return kv_v1(name, SCHEMA_VERSION)


CURRENT_DDL = (jobs_current, schedules_current, kv_current)  # jobs, schedules, kv

_COLUMN = re.compile(r"^  `(\w+)` (\w+)", re.MULTILINE)


def layout_of(ddl: str) -> str:
    """A CREATE TABLE statement's columns as information_schema will report them: `name type,name type,...`."""
    return ",".join(f"{name} {kind.lower()}" for name, kind in _COLUMN.findall(ddl))


CURRENT_LAYOUTS = tuple(layout_of(ddl("t")) for ddl in CURRENT_DDL)
#: What this package's first tables look like; made before tables carried a version record, they have none.
V1_LAYOUTS = tuple(layout_of(ddl("t")) for ddl in (jobs_v1, schedules_v1, kv_v1))

#: The tables of the TypeScript original (@plitzi/sdk-server 0.37.2) as its schema helper made them.
TS_LAYOUTS = (
    "id varchar,space_id bigint,action_id varchar,environment varchar,trigger_type varchar,input mediumtext,"
    "due_at bigint,max_attempts int,missed int,status varchar,run_at bigint,attempts int,lease_until bigint,"
    "worker_id varchar,run_id varchar,cancel_requested tinyint,created_at bigint,updated_at bigint,error text,"
    "history mediumtext,expires_at bigint",
    "space_id bigint,action_id varchar,cron varchar,timezone varchar,environment varchar,enabled tinyint,"
    "next_run_at bigint,last_fire_at bigint,missed int,max_attempts int,updated_at bigint",
    "k varbinary,v mediumtext,expires_at bigint",
)
