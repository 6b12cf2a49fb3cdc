"""What a user meets: the sdist and wheel built from this checkout, installed into a fresh virtualenv in a temporary
project directory outside the checkout, running the README's examples against a real server.

One sdist, one wheel (built from the sdist, so the sdist is proved complete) and one virtualenv serve the whole
module; pip's own cache is reused, so only the first run on a machine downloads anything.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..conftest import mariadb_client, sql

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

pytestmark = [pytest.mark.xdist_group("install"), pytest.mark.timeout(600)]


@dataclass(frozen=True)
class Installed:
    sdist: Path
    wheel: Path
    venv: Path
    project: Path  # an empty directory outside the checkout: the user's project

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def run(self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 300,
            input: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Runs a command of the virtualenv in the user's project, with nothing of this checkout on the path."""
        clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PLITZI_MYSQL_URL")}
        clean["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{clean.get('PATH', '')}"
        clean.update(env or {})
        return subprocess.run(
            [str(a) for a in args],
            cwd=self.project,
            env=clean,
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
        )


#: What the copy of the checkout leaves out: what no build reads, and what tests write while others run.
SKIPPED_IN_COPY = (".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".ruff_cache",
                   ".pytest_cache", "node_modules", "plitzi_jobs_mysql-*")  # fmt: skip


def _check(result: subprocess.CompletedProcess[str], what: str) -> None:
    assert result.returncode == 0, f"{what} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("user")
    dist = base / "dist"
    # Built from a copy of the checkout: setuptools stages the sdist in the source directory, where the other
    # test process's work must not meet it (CI once lost a staged file of it there).
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*SKIPPED_IN_COPY))
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    _check(built, "python -m build")
    (sdist,) = dist.glob("*.tar.gz")
    (wheel,) = dist.glob("*.whl")
    venv = base / "venv"
    _check(subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True), "venv")
    project = base / "project"
    project.mkdir()
    target = Installed(sdist=sdist, wheel=wheel, venv=venv, project=project)
    _check(target.run(target.python, "-m", "pip", "install", "-q", f"{wheel}[testing]"), "pip install")
    yield target


def test_the_wheel_and_sdist_ship_the_licence_and_the_whole_package(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = wheel.read(metadata).decode()
        entry_points = wheel.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)
    assert "License-Expression: MIT" in meta
    assert "[pytest11]" in entry_points and "plitzi_jobs_mysql.pytest_plugin" in entry_points
    # Every file of the package in the checkout (code, SQL, Alembic's environment and templates) is in the wheel.
    tracked = subprocess.run(
        ["git", "ls-files", "src/plitzi_jobs_mysql"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    missing = [path for path in tracked if path.removeprefix("src/") not in names]
    assert not missing, f"not in the wheel: {missing}"
    package = {name for name in names if name.startswith("plitzi_jobs_mysql/")}
    stale = sorted(package - {path.removeprefix("src/") for path in tracked})
    assert not stale, f"in the wheel but not in the checkout: {stale}"
    # The dashboard's templates and stylesheet ship too: nothing is fetched or built when it is installed.
    assets = {n for n in names if n.startswith("plitzi_jobs_mysql/web/") and not n.endswith(".py")}
    assert {"plitzi_jobs_mysql/web/templates/overview.html", "plitzi_jobs_mysql/web/static/dashboard.css"} <= assets
    assert "Provides-Extra: web" in meta and re.search(r"Requires-Dist: starlette.*extra == .web.", meta)
    # Where the source, the docs and the issues are, for a reader who has only the wheel (issue 23.5).
    urls = dict(line.removeprefix("Project-URL: ").split(", ", 1) for line in meta.splitlines()
                if line.startswith("Project-URL: "))  # fmt: skip
    assert set(urls) == {"Source", "Documentation", "Issues"}, urls
    assert all(url.startswith(urls["Source"]) for url in urls.values()), urls

    with tarfile.open(installed.sdist) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {"LICENSE", "README.md", "pyproject.toml"} <= members
    # No test suite in the sdist rather than a partial one that cannot run (the contract suites are in the package).
    assert not [m for m in members if m.startswith("tests/")], sorted(members)


def test_the_readme_has_no_relative_links() -> None:
    # A package index renders README.md away from the repository: a relative link there leads nowhere.
    text = README.read_text()
    links = re.findall(r"\]\(([^)]+)\)", text) + re.findall(r"<img src=\"([^\"]+)\"", text)
    assert [link for link in links if not re.match(r"https?://", link)] == []


def test_the_readme_says_where_the_files_it_names_live() -> None:
    """Files the README names that the wheel does not carry (docs/, tests/, ...) are in the source repository: the
    README names it, as the wheel's metadata does, and every such file it names is there."""
    text = README.read_text()
    source = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Source"]
    assert f"The source repository is {source} (issues: {source}/issues)" in text
    for folder in ("docs", "tests", "bench", "scripts", "examples", "sql"):
        assert f"`{folder}/`" in text.split("The source repository is", 1)[1][:400]
    named = set(re.findall(r"\b((?:docs|tests|bench|scripts|examples|sql)/[\w./-]*\w)", text))
    assert len(named) > 20
    assert [path for path in sorted(named) if not (ROOT / path).exists()] == []


def test_ddl_from_the_installed_command_makes_the_tables(installed: Installed, database_url: str) -> None:
    ddl = installed.run("plitzi-jobs-mysql", "ddl")
    _check(ddl, "plitzi-jobs-mysql ddl")
    command, env = mariadb_client(database_url)
    subprocess.run(command, input=ddl.stdout, env=env, text=True, check=True, capture_output=True, timeout=60)
    assert {str(r[0]) for r in sql(database_url, "SHOW TABLES")} == {
        "action_jobs",
        "action_schedules",
        "action_kv",
        "action_totals",
    }
    version = installed.run("plitzi-jobs-mysql", "--help")
    _check(version, "plitzi-jobs-mysql --help")


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_quickstart_runs_from_the_wheel(installed: Installed, database_url: str) -> None:
    from .test_readme import point_at, readme_block

    quickstart = point_at(readme_block("AttemptOutcome", "queue.claim("), database_url)
    result = installed.run(installed.python, "-c", quickstart)
    _check(result, "the quickstart")
    assert result.stdout.splitlines() == ["created", "running welcome:42 {'user': 42}", "welcomes sent: 1"]


BYTES_ON_THE_SHARED_POOL = """
import asyncio, sys

import aiomysql

from plitzi_jobs_mysql import create_mysql_kv
from plitzi_jobs_mysql.url import parse_mysql_url

async def main() -> None:
    pool = await aiomysql.create_pool(**parse_mysql_url(sys.argv[1]).aiomysql_kwargs(), autocommit=True)
    try:
        await create_mysql_kv(pool).set("k", "v")
        async with pool.acquire() as conn, conn.cursor() as cur:  # the application's own query on the same pool
            await cur.execute("SELECT HEX(%s)", (b"\\x00\\xffbinary",))
            print((await cur.fetchone())[0])
    finally:
        pool.close()
        await pool.wait_closed()


asyncio.run(main())
"""


def test_a_fresh_install_resolves_drivers_that_send_bytes(installed: Installed, database_url: str) -> None:
    # aiomysql 0.3.2 with PyMySQL >= 1.2.3 fails on any bytes parameter (aio-libs/aiomysql#1080).
    result = installed.run(installed.python, "-c", BYTES_ON_THE_SHARED_POOL, database_url)
    _check(result, "a bytes parameter on the shared pool")
    assert result.stdout.strip() == b"\x00\xffbinary".hex().upper()


# -- the contract suites, as a user's own project runs them ----------------------------------------------------

# No asyncio_mode: pytest-asyncio's default (strict) mode, as in a project that never configured it.
PYTEST_INI = "[pytest]\naddopts = -p no:cacheprovider\n"


def _contract_examples() -> tuple[str, str]:
    memory = [b for b in _python_blocks() if "JobQueueContract" in b and "create_memory_job_queue" in b]
    mysql = [b for b in _python_blocks() if "JobQueueContract" in b and "plitzi_mysql_pool" in b]
    assert len(memory) == 1 and len(mysql) == 1, "the README's two contract examples are not where expected"
    return memory[0], mysql[0]


def test_the_readme_contract_examples_pass_in_a_fresh_project(installed: Installed, mysql_url: str) -> None:
    memory, mysql = _contract_examples()
    project = installed.project / "contracts"
    project.mkdir()
    (project / "pytest.ini").write_text(PYTEST_INI)
    (project / "test_memory_stores.py").write_text(memory)
    (project / "test_mysql_stores.py").write_text(mysql)
    result = installed.run(
        installed.python, "-m", "pytest", "contracts", "-q", "-rfE", "-p", "no:cacheprovider",
        "-c", str(project / "pytest.ini"), env={"PLITZI_MYSQL_URL": mysql_url}, timeout=600,
    )  # fmt: skip
    _check(result, "pytest on the README's contract examples")
    summary = result.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))  # type: ignore[union-attr]
    assert passed > 150 and "skipped" not in summary and "error" not in summary, summary


BROKEN_STORE = """
import pytest_asyncio

from plitzi_jobs_mysql import create_memory_job_queue
from plitzi_jobs_mysql.testing import JobQueueContract


class ForgetfulQueue:
    '''A store with a bug: enqueue answers True for a job it already has.'''

    def __init__(self):
        self.inner = create_memory_job_queue()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    async def enqueue(self, job):
        await self.inner.enqueue(job)
        return True


class TestForgetfulQueue(JobQueueContract):
    @pytest_asyncio.fixture
    async def queue(self):
        yield ForgetfulQueue()
"""


def test_a_failing_contract_shows_the_values(installed: Installed) -> None:
    project = installed.project / "broken"
    project.mkdir()
    (project / "pytest.ini").write_text(PYTEST_INI)
    (project / "test_broken.py").write_text(BROKEN_STORE)
    result = installed.run(
        installed.python, "-m", "pytest", "broken", "-q", "-c", str(project / "pytest.ini"),
        "-k", "test_enqueue_is_idempotent_by_id",
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout
    assert "assert True is False" in result.stdout, result.stdout  # rewritten: the values, not a bare AssertionError


def test_the_installed_package_is_the_wheel(installed: Installed) -> None:
    result = installed.run(installed.python, "-c", "import plitzi_jobs_mysql; print(plitzi_jobs_mysql.__file__)")
    _check(result, "import")
    assert Path(result.stdout.strip()).is_relative_to(installed.venv), result.stdout


DASHBOARD_FROM_THE_WHEEL = """
import asyncio, sys

import httpx

from plitzi_jobs_mysql import create_memory_job_queue
from plitzi_jobs_mysql.web import create_dashboard


async def main() -> None:
    app = create_dashboard(create_memory_job_queue())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
        for path in ("/", "/jobs", "/schedules", "/static/dashboard.css"):
            answer = await client.get(path)
            print(path, answer.status_code, len(answer.text) > 200)


asyncio.run(main())
"""


def test_the_dashboard_runs_from_the_wheel_with_the_web_extra(installed: Installed) -> None:
    _check(installed.run(installed.python, "-m", "pip", "install", "-q", f"{installed.wheel}[web]", "httpx"),
           "pip install the web extra")  # fmt: skip
    result = installed.run(installed.python, "-c", DASHBOARD_FROM_THE_WHEEL)
    _check(result, "the dashboard from the wheel")
    assert result.stdout.split("\n")[:4] == [
        f"{p} 200 True" for p in ("/", "/jobs", "/schedules", "/static/dashboard.css")
    ]
    _check(installed.run("plitzi-jobs-mysql", "dashboard", "--help"), "plitzi-jobs-mysql dashboard --help")


# -- the done-test of issue 23: an application written only with the declared-actions API ---------------------

DECLARED_ACTIONS_APP = """
import asyncio, json, sys

import aiomysql

from plitzi_jobs_mysql import Actions, Job, create_job_worker, create_mysql_job_queue

actions = Actions()


@actions.action("greet")
async def greet(job: Job) -> str:
    return f"hello {job.input['name']}"


@actions.action("slow", timeout_s=0.2, max_attempts=2, backoff_base_ms=100, backoff_max_ms=100)
async def slow(job: Job) -> None:
    await asyncio.sleep(60)  # never finishes within its time limit


@actions.action("flaky", max_attempts=3, backoff_base_ms=400, backoff_max_ms=400)
async def flaky(job: Job) -> str:
    if job.attempts < 2:
        raise RuntimeError("the first try fails")
    return "second try"


async def main() -> None:
    pool = await aiomysql.create_pool(**json.loads(sys.argv[1]), autocommit=True)
    try:
        queue = create_mysql_job_queue(pool)
        ids = {name: await actions.enqueue(queue, name, {"name": "Ada"}, space_id=1) for name in actions}
        worker = create_job_worker(queue=queue, handler=actions, poll_ms=50, worker_id="app")
        worker.start()
        done = {}
        while len(done) < len(ids):
            for name, job_id in ids.items():
                job = await queue.get_job([1], job_id)
                if job is not None and job.status in ("succeeded", "dead"):
                    done[name] = job
            await asyncio.sleep(0.05)
        await worker.stop()
        for name, job in done.items():
            attempts = [(a.status, a.error, a.started_at, a.ended_at) for a in job.history]
            print(json.dumps({"name": name, "status": job.status, "max_attempts": job.max_attempts,
                              "run_id": job.run_id, "attempts": attempts}))
    finally:
        pool.close()
        await pool.wait_closed()


asyncio.run(main())
"""


def test_an_app_written_with_declared_actions_runs_from_the_wheel(installed: Installed, database_url: str) -> None:
    """Enqueue, run, a time limit hit, a retry policy followed: from the installed wheel, against a real server."""
    import json

    from plitzi_jobs_mysql.url import parse_mysql_url

    kwargs = {k: v for k, v in parse_mysql_url(database_url).aiomysql_kwargs().items() if k != "ssl"}
    result = installed.run(installed.python, "-c", DECLARED_ACTIONS_APP, json.dumps(kwargs), timeout=120)
    _check(result, "the declared-actions app")
    jobs = {job["name"]: job for job in map(json.loads, result.stdout.splitlines())}
    assert (jobs["greet"]["status"], jobs["greet"]["run_id"], len(jobs["greet"]["attempts"])) == (
        "succeeded", "hello Ada", 1)  # fmt: skip
    # The time limit: each run cancelled past 0.2 s, the attempt failed saying so; 2 attempts, then dead.
    slow = jobs["slow"]
    assert (slow["status"], slow["max_attempts"]) == ("dead", 2)
    limit = "TimeoutError: action 'slow' ran past its time limit of 0.2s (timeout_s); its run was cancelled"
    assert [(status, error) for status, error, *_ in slow["attempts"]] == [("failed", limit)] * 2
    assert all(200 <= ended - started < 5_000 for *_, started, ended in slow["attempts"])
    # The retry policy: a failed first attempt, the second one after the declared 400 ms (plus < 400 ms jitter).
    flaky = jobs["flaky"]
    assert (flaky["status"], flaky["max_attempts"], flaky["run_id"]) == ("succeeded", 3, "second try")
    (first, second) = flaky["attempts"]
    assert (first[0], first[1], second[0]) == ("failed", "RuntimeError: the first try fails", "succeeded")
    assert 400 <= second[2] - first[3] < 5_000, (first, second)


def test_the_readmes_declared_actions_example_runs_from_the_wheel(installed: Installed, database_url: str) -> None:
    from .test_readme import point_at

    result = installed.run(installed.python, "-c", point_at(_python_blocks()[0], database_url))
    _check(result, "the README's first example")
    assert result.stdout.splitlines() == ["welcoming user 42", "welcome:42 succeeded mail-1"]
