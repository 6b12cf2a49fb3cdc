"""The pytest plugin (entry point ``pytest11``): fixtures for running the contract suites against MySQL.

Loaded by pytest wherever the package is installed (disable with ``-p no:plitzi_jobs_mysql``):

- ``plitzi_mysql_url`` (session): a root URL of a server — ``PLITZI_MYSQL_URL`` if set, else a testcontainers
  MySQL container where a Docker daemon answers, else a ``mysqld``/``mariadbd`` started in a temporary directory;
- ``plitzi_mysql_database`` (per test): the URL of a fresh, empty ``utf8mb4_bin`` database, dropped after; its
  name starts with ``pjm_test`` unless the ini option ``plitzi_mysql_database_prefix`` or the environment variable
  ``PLITZI_MYSQL_DATABASE_PREFIX`` (which wins) says otherwise (1-40 letters, digits or underscores);
- ``plitzi_mysql_pool`` (per test, needs pytest-asyncio): an aiomysql pool on that database (utf8mb4,
  autocommit), closed after.

It also has pytest rewrite the contract suites' assertions, so a failing contract shows the values it compared.
The fixtures are declared for pytest-asyncio's default strict mode; nothing here needs ``asyncio_mode=auto``.
In a project that leaves ``asyncio_default_fixture_loop_scope`` unset, pytest-asyncio's deprecation warning about
it is silenced: every async fixture here (and the contract suites' subjects) is function-scoped, the value the
warning says the default will become, so nothing changes when it does. A project that sets it is left alone.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import pytest

# Before anything imports the suites: pytest rewrites only modules imported after they are registered (which is
# why this module lives outside the `testing` package: importing it must not import that package first).
pytest.register_assert_rewrite("plitzi_jobs_mysql.testing")

from .testing import fresh_database, mysql_server_url  # noqa: E402

__all__ = ["plitzi_mysql_database", "plitzi_mysql_url"]

PREFIX_INI: Final = "plitzi_mysql_database_prefix"
PREFIX_ENV: Final = "PLITZI_MYSQL_DATABASE_PREFIX"
DEFAULT_PREFIX: Final = "pjm_test"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        PREFIX_INI,
        help=f"how the names of plitzi_mysql_database's throwaway databases start (default {DEFAULT_PREFIX}; "
        f"${PREFIX_ENV} wins)",
        default=DEFAULT_PREFIX,
    )


@pytest.hookimpl(tryfirst=True)  # before pytest-asyncio's own pytest_configure, which warns
def pytest_configure(config: pytest.Config) -> None:
    try:
        scope = config.getini("asyncio_default_fixture_loop_scope")
    except ValueError:  # no pytest-asyncio here: nothing warns
        return
    if not scope:
        warnings.filterwarnings(
            "ignore",
            message='The configuration option "asyncio_default_fixture_loop_scope" is unset',
            category=pytest.PytestDeprecationWarning,
        )


def database_prefix(config: pytest.Config) -> str:
    """The prefix of this session's throwaway databases: the environment's, the ini option's, or the default."""
    return os.environ.get(PREFIX_ENV, "").strip() or str(config.getini(PREFIX_INI) or DEFAULT_PREFIX)


@pytest.fixture(scope="session")
def plitzi_mysql_url() -> Iterator[str]:
    """A root URL (no database) of the session's MySQL server."""
    with mysql_server_url() as url:
        yield url


@pytest.fixture
def plitzi_mysql_database(plitzi_mysql_url: str, request: pytest.FixtureRequest) -> Iterator[str]:
    """The URL of a fresh, empty database of this test's own, dropped after it."""
    with fresh_database(plitzi_mysql_url, database_prefix(request.config)) as url:
        yield url


try:
    import pytest_asyncio
except ImportError:  # pytest without the `testing` extra: the synchronous fixtures still work
    pass
else:

    @pytest_asyncio.fixture
    async def plitzi_mysql_pool(plitzi_mysql_database: str) -> AsyncIterator[Any]:
        """An aiomysql pool (utf8mb4, autocommit) on this test's fresh database."""
        import aiomysql

        from .url import parse_mysql_url

        pool = await aiomysql.create_pool(
            **parse_mysql_url(plitzi_mysql_database).aiomysql_kwargs(), minsize=1, maxsize=10, autocommit=True
        )
        try:
            yield pool
        finally:
            pool.close()
            await pool.wait_closed()

    __all__ += ["plitzi_mysql_pool"]
