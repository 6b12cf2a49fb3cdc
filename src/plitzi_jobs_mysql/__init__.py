"""plitzi_jobs_mysql: a durable job queue, exactly-once cron schedules and a key/value store in MySQL.

This module is the public surface, re-exported; nothing else lives here.
"""

from .assembly.action_jobs import ActionJobs, create_action_jobs
from .assembly.signals import close_on_signals
from .contract.clock import StoreClock, create_store_clock
from .contract.cron import cron_fires_between, cron_next_fire, is_known_time_zone
from .contract.events import EventHook, EventKind, JobEvent
from .contract.protocols import JobQueue, KvStore, OperatorReads
from .contract.wakeups import LocalWakeups, WakeupChannel
from .errors import (
    ConnectionCharsetError,
    KvRowLockedError,
    LeaseLostError,
    PayloadTooLargeError,
    PlitziJobsError,
    SchemaMismatchError,
    StoreUnavailableError,
)
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
    ActionLimit,
    Attempt,
    AttemptOutcome,
    AttemptStatus,
    FinishedCount,
    Job,
    JobInput,
    JobPage,
    JobStatus,
    MissedFires,
    PausedAction,
    Schedule,
    ScheduleInput,
    SweepResult,
    schedule_job_id,
)
from .runtime.actions import Actions, DeclaredAction
from .runtime.scheduler import Scheduler, create_scheduler
from .runtime.schedules import ActionEntry, ActionLookups, ScheduleTrigger, schedule_for
from .runtime.worker import JobWorker, PermanentFailure, RetryLater, create_job_worker

__all__ = [
    "ActionEntry",
    "ActionJobs",
    "ActionLimit",
    "ActionLookups",
    "Actions",
    "Attempt",
    "AttemptOutcome",
    "AttemptStatus",
    "ConnectionCharsetError",
    "DeclaredAction",
    "EventHook",
    "EventKind",
    "FinishedCount",
    "Job",
    "JobEvent",
    "JobInput",
    "JobPage",
    "JobQueue",
    "JobStatus",
    "JobWorker",
    "KvRowLockedError",
    "KvStore",
    "LeaseLostError",
    "LocalWakeups",
    "MissedFires",
    "MysqlJobQueue",
    "MysqlKv",
    "OperatorReads",
    "PausedAction",
    "PayloadTooLargeError",
    "PermanentFailure",
    "PlitziJobsError",
    "RetryLater",
    "Schedule",
    "ScheduleInput",
    "ScheduleTrigger",
    "Scheduler",
    "SchemaMismatchError",
    "StoreClock",
    "StoreUnavailableError",
    "SweepResult",
    "WakeupChannel",
    "close_on_signals",
    "create_action_jobs",
    "create_job_worker",
    "create_memory_job_queue",
    "create_memory_kv",
    "create_mysql_job_queue",
    "create_mysql_kv",
    "create_scheduler",
    "create_store_clock",
    "cron_fires_between",
    "cron_next_fire",
    "is_known_time_zone",
    "mysql_job_schema_statements",
    "mysql_job_schema_upgrades",
    "schedule_for",
    "schedule_job_id",
]
