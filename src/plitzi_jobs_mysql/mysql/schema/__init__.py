"""The tables' schema: their DDL and version record (tables.py), the upgrade steps (upgrades.py), what a database
holds (state.py) and the copy from older tables (migrate.py)."""

from .state import (
    PREFIX_MAX_CHARS,
    SCHEMA_VERSION,
    SchemaState,
    Tables,
    TableState,
    check_prefix,
    mysql_job_schema_statements,
    mysql_job_schema_upgrades,
    schema_state,
    table_names,
)

__all__ = [
    "PREFIX_MAX_CHARS",
    "SCHEMA_VERSION",
    "SchemaState",
    "TableState",
    "Tables",
    "check_prefix",
    "mysql_job_schema_statements",
    "mysql_job_schema_upgrades",
    "schema_state",
    "table_names",
]
