"""Alembic environment for the plitzi_jobs_mysql tables.

The database URL comes from `-x url=...`, else `PLITZI_MYSQL_URL` (any URL `parse_mysql_url` takes; it is run
with SQLAlchemy over PyMySQL, charset utf8mb4). The table prefix comes from `-x prefix=...`. The version table
carries the prefix (`{prefix}plitzi_jobs_alembic_version`): it never collides with the user's own
`alembic_version`, and two prefixes in one database keep separate histories.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from alembic.util import CommandError
from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from plitzi_jobs_mysql.mysql.schema import check_prefix
from plitzi_jobs_mysql.url import parse_database_url, parse_mysql_url

ENV_URL = "PLITZI_MYSQL_URL"

config = context.config
# A user's own alembic.ini may be two lines (`[alembic]` and `script_location = plitzi_jobs_mysql:alembic`).
if (
    config.config_file_name is not None
    and config.attributes.get("configure_logger", True)
    and config.file_config.has_section("loggers")
):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

x_args = context.get_x_argument(as_dictionary=True)

# Programmatic callers may set config.attributes["table_prefix"] / ["url"] instead of -x.
prefix = x_args.get("prefix", config.attributes.get("table_prefix", ""))
try:
    check_prefix(prefix)
except ValueError as error:
    raise CommandError(str(error)) from None
config.attributes["table_prefix"] = prefix
version_table = f"{prefix}plitzi_jobs_alembic_version"


def _sqlalchemy_url(required: bool) -> str | None:
    raw = x_args.get("url") or config.attributes.get("url") or os.environ.get(ENV_URL, "").strip()
    if not raw:
        if required:
            raise CommandError(
                f"no database URL: pass -x url=mysql://user:password@host:3306/database or set {ENV_URL}"
            )
        return None
    try:
        url = parse_database_url(raw)
    except ValueError as error:
        raise CommandError(str(error)) from None
    return url.sqlalchemy_url()


def run_migrations_offline() -> None:
    """`alembic upgrade head --sql`: print the SQL; a URL is optional (the dialect is MySQL either way)."""
    url = _sqlalchemy_url(required=False)
    if url:
        context.configure(url=url, literal_binds=True, version_table=version_table)
    else:
        context.configure(dialect_name="mysql", literal_binds=True, version_table=version_table)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = _sqlalchemy_url(required=True)
    assert url is not None
    engine = create_engine(url, poolclass=NullPool)
    try:
        connection = engine.connect()
    except SQLAlchemyError as error:
        # One line instead of a driver traceback: the server is down, the database missing, access denied.
        reason = getattr(error, "orig", None) or error
        raise CommandError(f"cannot connect to {parse_mysql_url(url).render()}: {reason}") from None
    with connection:
        context.configure(connection=connection, version_table=version_table)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
