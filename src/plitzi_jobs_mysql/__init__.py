"""plitzi_jobs_mysql: a durable job queue, exactly-once cron schedules and a key/value store in MySQL.

This module is the public surface, re-exported; nothing else lives here.
"""

from .clock import StoreClock, create_store_clock
from .contract import JobQueue, KvStore
from .memory import create_memory_job_queue, create_memory_kv
from .mysql import (
    MysqlJobQueue,
    MysqlKv,
    create_mysql_job_queue,
    create_mysql_kv,
    mysql_job_schema_statements,
    mysql_job_schema_upgrades,
)
from .records import (
    Attempt,
    AttemptOutcome,
    Job,
    JobInput,
    JobPage,
    MissedFires,
    Schedule,
    ScheduleInput,
    SweepResult,
)

__all__ = [
    "Attempt",
    "AttemptOutcome",
    "Job",
    "JobInput",
    "JobPage",
    "JobQueue",
    "KvStore",
    "MissedFires",
    "MysqlJobQueue",
    "MysqlKv",
    "Schedule",
    "ScheduleInput",
    "StoreClock",
    "SweepResult",
    "create_memory_job_queue",
    "create_memory_kv",
    "create_mysql_job_queue",
    "create_mysql_kv",
    "create_store_clock",
    "mysql_job_schema_statements",
    "mysql_job_schema_upgrades",
]
