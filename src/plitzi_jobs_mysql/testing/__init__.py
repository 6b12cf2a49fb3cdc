"""Reusable contract suites and a throwaway MySQL server, for this package's tests and for users' own stores.

    from plitzi_jobs_mysql.testing import JobQueueContract

    class TestMyQueue(JobQueueContract):
        @pytest.fixture
        async def queue(self):
            yield my_fresh_empty_queue()

`mysql_server_url()` yields a root URL of a server: `PLITZI_MYSQL_URL` if set, else a testcontainers MySQL
container where a Docker daemon answers, else a local `mysqld`/`mariadbd` started in a temporary directory.
"""

from .contract import JobQueueContract, KvContract
from .server import LocalMysqlServer, fresh_database, load_time_zones, mysql_server_url

__all__ = [
    "JobQueueContract",
    "KvContract",
    "LocalMysqlServer",
    "fresh_database",
    "load_time_zones",
    "mysql_server_url",
]
