"""The MySQL adapters: a job queue and a key/value store over an aiomysql pool the user opened."""

from .kv import MysqlKv, create_mysql_kv
from .queue import MysqlJobQueue, create_mysql_job_queue
from .schema.state import mysql_job_schema_statements, mysql_job_schema_upgrades

__all__ = [
    "MysqlJobQueue",
    "MysqlKv",
    "create_mysql_job_queue",
    "create_mysql_kv",
    "mysql_job_schema_statements",
    "mysql_job_schema_upgrades",
]
