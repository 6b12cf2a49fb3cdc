"""The pytest plugin (entry point ``pytest11``): fixtures for running the contract suites against MySQL.

Loaded by pytest wherever the package is installed (disable with ``-p no:plitzi_jobs_mysql``):

- ``plitzi_mysql_url`` (session): a root URL of a server — ``PLITZI_MYSQL_URL`` if set, else a testcontainers
  MySQL container where a Docker daemon answers, else a ``mysqld``/``mariadbd`` started in a temporary directory;
- ``plitzi_mysql_database`` (per test): the URL of a fresh, empty ``utf8mb4_bin`` database, dropped after;
- ``plitzi_mysql_pool`` (per test, needs pytest-asyncio): an aiomysql pool on that database (utf8mb4,
  autocommit), closed after.

It also has pytest rewrite the contract suites' assertions, so a failing contract shows the values it compared.
The fixtures are declared for pytest-asyncio's default strict mode; nothing here needs ``asyncio_mode=auto``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

# Before anything imports the suites: pytest rewrites only modules imported after they are registered (which is
# why this module lives outside the `testing` package: importing it must not import that package first).
pytest.register_assert_rewrite("plitzi_jobs_mysql.testing")

from .testing import fresh_database, mysql_server_url  # noqa: E402

__all__ = ["plitzi_mysql_database", "plitzi_mysql_url"]


@pytest.fixture(scope="session")
def plitzi_mysql_url() -> Iterator[str]:
    """A root URL (no database) of the session's MySQL server."""
    with mysql_server_url() as url:
        yield url


@pytest.fixture
def plitzi_mysql_database(plitzi_mysql_url: str) -> Iterator[str]:
    """The URL of a fresh, empty database of this test's own, dropped after it."""
    with fresh_database(plitzi_mysql_url) as url:
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
