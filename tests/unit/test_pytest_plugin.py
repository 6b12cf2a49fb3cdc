"""The pytest plugin as a user's project meets it (issue 23.4): no deprecation warning from pytest-asyncio in a
project that configures nothing, readable test ids in the contract suites, the databases' prefix configurable."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from plitzi_jobs_mysql.pytest_plugin import DEFAULT_PREFIX, PREFIX_ENV, database_prefix

CONTRACTS = """
import pytest_asyncio

from plitzi_jobs_mysql import create_memory_job_queue, create_memory_kv
from plitzi_jobs_mysql.testing import JobQueueContract, KvContract


class TestMemoryQueue(JobQueueContract):
    @pytest_asyncio.fixture
    async def queue(self):
        yield create_memory_job_queue(retain_finished=10_000)


class TestMemoryKv(KvContract):
    @pytest_asyncio.fixture
    async def kv(self):
        yield create_memory_kv()
"""


def pytest_in(project: Path, *args: str, ini: str = "") -> subprocess.CompletedProcess[str]:
    """pytest in a project of its own that sets nothing for pytest-asyncio (its strict default mode)."""
    (project / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n" + ini)
    (project / "test_contracts.py").write_text(CONTRACTS)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(project / "pytest.ini"), "--rootdir", str(project), *args],
        cwd=project, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_project_that_sets_nothing_sees_no_loop_scope_warning(tmp_path: Path) -> None:
    result = pytest_in(tmp_path, "-q", "-k", "idempotent")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "passed" in result.stdout
    assert "asyncio_default_fixture_loop_scope" not in result.stdout + result.stderr
    assert "PytestDeprecationWarning" not in result.stdout + result.stderr


def test_a_project_that_sets_the_loop_scope_keeps_its_own(tmp_path: Path) -> None:
    result = pytest_in(tmp_path, "-k", "idempotent", ini="asyncio_default_fixture_loop_scope = module\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "asyncio_default_fixture_loop_scope=module" in result.stdout  # pytest-asyncio's header: its own value


def test_the_contract_suites_test_ids_are_words(tmp_path: Path) -> None:
    result = pytest_in(tmp_path, "--collect-only", "-q")
    assert result.returncode == 0, result.stdout + result.stderr
    ids = [line for line in result.stdout.splitlines() if "::" in line]
    assert len(ids) > 100
    # `Class::test_what_it_checks`, and a parameter's id in words (`id-192-chars`), never `case0` or a repr.
    unreadable = [
        i for i in ids if not re.fullmatch(r"test_contracts\.py::Test\w+::test_[a-z0-9_]+(\[[a-z0-9-]+\])?", i)
    ]
    assert not unreadable, unreadable


def test_the_database_prefix_comes_from_the_environment_or_the_ini(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pytestconfig: pytest.Config
) -> None:
    monkeypatch.delenv(PREFIX_ENV, raising=False)
    assert database_prefix(pytestconfig) == DEFAULT_PREFIX  # this project's pyproject sets none
    monkeypatch.setenv(PREFIX_ENV, "ci_run_7")
    assert database_prefix(pytestconfig) == "ci_run_7"
    (tmp_path / "test_prefix.py").write_text(
        "from plitzi_jobs_mysql.pytest_plugin import database_prefix\n\n"
        "def test_prefix(pytestconfig):\n    print('prefix', database_prefix(pytestconfig))\n"
    )
    monkeypatch.delenv(PREFIX_ENV)
    result = pytest_in(tmp_path, "-q", "-s", "test_prefix.py", ini="plitzi_mysql_database_prefix = myapp_t\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "prefix myapp_t" in result.stdout
