"""Reusable contract suites and a throwaway MySQL server, for this package's tests and for users' own stores.

    from plitzi_jobs_mysql.testing import JobQueueContract

    class TestMyQueue(JobQueueContract):
        @pytest_asyncio.fixture
        async def queue(self):
            yield my_fresh_empty_queue()

`mysql_server_url()` yields a root URL of a server: `PLITZI_MYSQL_URL` if set, else a testcontainers MySQL
container where a Docker daemon answers, else a local `mysqld`/`mariadbd` started in a temporary directory.
The contract suites need pytest and pytest-asyncio (the `testing` extra); they are imported on first use, so the
server helper works without them. The pytest plugin (`plitzi_jobs_mysql.pytest_plugin`,
loaded through the `pytest11` entry point) adds the fixtures `plitzi_mysql_url`, `plitzi_mysql_database` and
`plitzi_mysql_pool`.
"""

from typing import TYPE_CHECKING, Any

from .server import LocalMysqlServer, fresh_database, load_time_zones, mysql_server_url
from .totals import assert_totals_exact

if TYPE_CHECKING:
    from .contract import ClockStepContract, JobQueueContract, KvContract

__all__ = [
    "ClockStepContract",
    "JobQueueContract",
    "KvContract",
    "LocalMysqlServer",
    "assert_totals_exact",
    "fresh_database",
    "load_time_zones",
    "mysql_server_url",
]


def __getattr__(name: str) -> Any:
    if name in ("ClockStepContract", "JobQueueContract", "KvContract"):
        import pytest

        # A failing contract shows the values it compared (also when the plugin is disabled with -p no:...).
        parts = (
            "contract", "enqueue_contract", "lease_contract", "schedule_contract", "activity_contract",
            "clock_contract", "kv_contract", "bulk_contract", "pause_contract", "support",
        )  # fmt: skip
        pytest.register_assert_rewrite(*(f"{__name__}.{part}" for part in parts))
        from . import contract

        return getattr(contract, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
