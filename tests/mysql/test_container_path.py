"""The container path, for real (issue 17 item 4): the contract suites through the package's testcontainers path,
the way a user's own suite runs them "against a MySQL container".

No image registry is reachable here, so the image is made locally: `scripts/docker_image.sh` imports the cached
MySQL 9.7 root (`docker import`) with an entrypoint that honours the official image's MYSQL_* variables, once per
root and entrypoint. Containers run with host networking only, on loopback (`dockerd --bridge=none
--iptables=false`, which `scripts/dockerd.sh` and `.ci/run` start). Where no Docker daemon answers, these tests
skip, saying why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest
import pytest_asyncio

from plitzi_jobs_mysql import JobQueue, KvStore, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.testing import JobQueueContract, KvContract, mysql_server_url
from plitzi_jobs_mysql.testing.docker import ENV_IMAGE, ENV_NETWORK, docker_available
from plitzi_jobs_mysql.testing.server import ENV_URL
from plitzi_jobs_mysql.url import parse_mysql_url

from ..harness.mysql97 import ROOT_SCRIPT, mysql_root_missing_reason

pytestmark = [pytest.mark.xdist_group("containers"), pytest.mark.timeout(300)]

IMAGE_SCRIPT = ROOT_SCRIPT.parent / "docker_image.sh"
#: testcontainers' reaper container comes from a registry; without one it cannot start (each test removes its
#: own container instead).
NO_REAPER = {"TESTCONTAINERS_RYUK_DISABLED": "true"}


def missing_reason() -> str | None:
    if not docker_available():
        return (
            "CONTAINER PATH NOT RUN: no Docker daemon answers (scripts/dockerd.sh starts one with --bridge=none "
            "--iptables=false; .ci/run does, after installing docker.io)"
        )
    reason = mysql_root_missing_reason()
    return None if reason is None else reason.replace("MYSQL 9.7 TESTS", "CONTAINER PATH")


@pytest.fixture(scope="module")
def image() -> str:
    """The local MySQL 9.7 image's tag (made the first time, about a minute)."""
    reason = missing_reason()
    if reason is not None:
        warnings.warn(reason, stacklevel=1)
        print("\n" + "!" * 100 + "\n" + reason + "\n" + "!" * 100)
        pytest.skip(reason)
    built = subprocess.run(["bash", str(IMAGE_SCRIPT)], capture_output=True, text=True, timeout=1200,
                           stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


@contextlib.contextmanager
def container_environment(image: str) -> Iterator[dict[str, str]]:
    """This process's environment as a user's suite on a closed network sets it: the image, host networking, no
    reaper, and no PLITZI_MYSQL_URL (which would win over the container)."""
    settings = {ENV_IMAGE: image, ENV_NETWORK: "host", **NO_REAPER}
    saved = {name: os.environ.get(name) for name in [*settings, ENV_URL]}
    os.environ.update(settings)
    os.environ.pop(ENV_URL, None)
    from testcontainers.core.config import testcontainers_config  # read its environment once, at import

    reaper = testcontainers_config.ryuk_disabled
    testcontainers_config.ryuk_disabled = True
    try:
        yield {k: v for k, v in os.environ.items() if k != ENV_URL}
    finally:
        testcontainers_config.ryuk_disabled = reaper
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="module")
def plitzi_mysql_url(image: str) -> Iterator[str]:
    """The plugin's own fixture (which the plugin's `plitzi_mysql_database` and `plitzi_mysql_pool` build on), for
    this module: the same `mysql_server_url()` it calls, here taking the container path."""
    with container_environment(image), mysql_server_url() as url:
        yield url


def test_the_server_is_the_container(plitzi_mysql_url: str, image: str) -> None:
    parsed = parse_mysql_url(plitzi_mysql_url)
    assert parsed.host == "127.0.0.1" and parsed.password, parsed  # a root password, as the entrypoint set it
    conn = pymysql.connect(**parsed.pymysql_kwargs())
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION(), @@port, (SELECT COUNT(*) FROM mysql.time_zone_name)")
            version, port, zones = cur.fetchone()
    finally:
        conn.close()
    assert str(version).startswith("9.7") and port == parsed.port and zones > 0
    containers = subprocess.run(["docker", "ps", "--filter", f"ancestor={image}", "--format", "{{.Networks}}"],
                                capture_output=True, text=True, timeout=30, check=True).stdout.split()  # fmt: skip
    assert containers and set(containers) == {"host"}, containers


class TestContainerQueue(JobQueueContract):
    @pytest_asyncio.fixture
    async def queue(self, plitzi_mysql_pool: Any) -> AsyncIterator[JobQueue]:
        yield create_mysql_job_queue(plitzi_mysql_pool)


class TestContainerKv(KvContract):
    @pytest_asyncio.fixture
    async def kv(self, plitzi_mysql_pool: Any) -> AsyncIterator[KvStore]:
        yield create_mysql_kv(plitzi_mysql_pool)


USERS_SUITE = """
import pytest_asyncio

from plitzi_jobs_mysql import create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.testing import JobQueueContract, KvContract


class TestMysqlQueue(JobQueueContract):
    @pytest_asyncio.fixture
    async def queue(self, plitzi_mysql_pool):
        yield create_mysql_job_queue(plitzi_mysql_pool)


class TestMysqlKv(KvContract):
    @pytest_asyncio.fixture
    async def kv(self, plitzi_mysql_pool):
        yield create_mysql_kv(plitzi_mysql_pool)
"""


def test_a_users_suite_runs_through_the_plugins_container(image: str, tmp_path: Path) -> None:
    """The README's example in a project of its own: pytest loads the plugin by itself, and its session fixture
    starts the container the environment names."""
    (tmp_path / "test_users_store.py").write_text(USERS_SUITE)
    with container_environment(image) as env:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "test_users_store.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=280,
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout.splitlines()[-1], result.stdout[-500:]
