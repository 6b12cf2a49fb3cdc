"""`plitzi-jobs-mysql dashboard` as an operator runs it: the database URL's password never reaches a page or the
log, and it will not serve beyond this machine without a token."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from urllib.parse import quote

import pytest

from plitzi_jobs_mysql.url import parse_mysql_url
from tests.conftest import sql
from tests.harness.dashboard import dashboard

PASSWORD = "Pw-9f3c-Sekret-Do-Not-Show"


@pytest.fixture
def secret_url(database_url: str) -> Iterator[str]:
    """`database_url` as a user with a password, on a database holding a job."""
    target = parse_mysql_url(database_url)
    for host in ("127.0.0.1", "localhost", "%"):
        sql(database_url, f"CREATE USER IF NOT EXISTS 'pjm_dash'@'{host}' IDENTIFIED BY '{PASSWORD}'")
        sql(database_url, f"GRANT ALL ON `{target.database}`.* TO 'pjm_dash'@'{host}'")
    subprocess.run([sys.executable, "-m", "plitzi_jobs_mysql", "migrate", "--url", database_url], check=True,
                   capture_output=True, timeout=60)  # fmt: skip
    sql(database_url, "INSERT INTO action_jobs (id, space_id, action_id, environment, `trigger`, input, due_at, "
        "max_attempts, status, run_at, attempts, created_at, updated_at, history) VALUES ('j1', 1, 'a', 'main', 't', "
        "'{}', 0, 3, 'pending', 0, 0, 0, 0, '[]')")  # fmt: skip
    yield f"mysql://pjm_dash:{quote(PASSWORD)}@{target.host}:{target.port}/{target.database}"
    for host in ("127.0.0.1", "localhost", "%"):
        sql(database_url, f"DROP USER IF EXISTS 'pjm_dash'@'{host}'")


def fetch(url: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_password_is_never_on_a_page_or_in_the_log(secret_url: str) -> None:
    with dashboard(secret_url) as served:
        pages = {path: fetch(served.url + path) for path in (
            "/", "/jobs", "/job?space=1&id=j1", "/job?space=1&id=missing", "/jobs?limit=9999", "/schedules",
            "/job.json?space=1&id=j1", "/nowhere")}  # fmt: skip
        log = served.stop()
    assert [status for status, _ in pages.values()] == [200, 200, 200, 404, 400, 200, 200, 404], pages.keys()
    for path, (_status, body) in pages.items():
        assert PASSWORD not in body and quote(PASSWORD) not in body, path
    assert "dashboard of database" in log and "GET /jobs" in log, log
    assert PASSWORD not in log and quote(PASSWORD) not in log, log


def test_a_wrong_password_is_one_line_without_it(secret_url: str) -> None:
    wrong = secret_url.replace(quote(PASSWORD), "Wrong-" + quote(PASSWORD))
    result = subprocess.run([sys.executable, "-m", "plitzi_jobs_mysql", "dashboard", "--url", wrong, "--port", "1"],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2 and "refused the login" in result.stderr, result.stderr
    assert PASSWORD not in result.stderr + result.stdout


def test_it_serves_beyond_this_machine_only_with_a_token(database_url: str) -> None:
    refused = subprocess.run(
        [sys.executable, "-m", "plitzi_jobs_mysql", "dashboard", "--url", database_url, "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert refused.returncode == 2 and "without a token" in refused.stderr, refused.stderr
    unset = subprocess.run(
        [sys.executable, "-m", "plitzi_jobs_mysql", "dashboard", "--url", database_url, "--token-env", "PJM_UNSET_X"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert unset.returncode == 2 and "PJM_UNSET_X" in unset.stderr, unset.stderr
