"""Reusable contract suites and a throwaway MySQL server, for this package's tests and for users' own stores.

    from plitzi_jobs_mysql.testing import JobQueueContract

    class TestMyQueue(JobQueueContract):
        @pytest.fixture
        async def queue(self):
            yield my_fresh_empty_queue()

`mysql_server_url()` yields a root URL of a server: `PLITZI_MYSQL_URL` if set, else a testcontainers MySQL
container where a Docker daemon answers, else a local `mysqld`/`mariadbd` started in a temporary directory.
The contract suites need pytest; they are imported on first use, so the server helper works without it.
"""

from typing import TYPE_CHECKING, Any

from .server import LocalMysqlServer, fresh_database, load_time_zones, mysql_server_url

if TYPE_CHECKING:
    from .contract import JobQueueContract, KvContract

__all__ = [
    "JobQueueContract",
    "KvContract",
    "LocalMysqlServer",
    "fresh_database",
    "load_time_zones",
    "mysql_server_url",
]


def __getattr__(name: str) -> Any:
    if name in ("JobQueueContract", "KvContract"):
        from . import contract

        return getattr(contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
