"""Password logins as production has them (issue 17 item 2). MySQL 8 and 9 make users `caching_sha2_password` by
default (MySQL 9 has no `mysql_native_password` at all): its first login over plain TCP needs PyMySQL's RSA
exchange, which works only with the `cryptography` package (a dependency: `PyMySQL[rsa]`); without it every pool,
the command line and Alembic failed with "RuntimeError: 'cryptography' package is required". Each test makes a
user of its own, so its first login is a full authentication, never the server's cached fast path. Over TLS the
same logins are in test_tls.py.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import replace

import aiomysql
import pytest

from plitzi_jobs_mysql import create_mysql_job_queue
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import is_mysql, sql
from ..support import job
from .test_alembic import alembic
from .test_alembic import ok as alembic_ok
from .test_cli import cli, fails, ok


@pytest.fixture
def password_url(mysql_url: str, database_url: str) -> Iterator[str]:
    """`database_url` as a user of its own with a password, made with the server's default plugin."""
    name, password = f"pjm_{secrets.token_hex(4)}", f"Pa55-{secrets.token_hex(6)}"
    database = parse_mysql_url(database_url).database
    sql(mysql_url, f"CREATE USER '{name}'@'%%' IDENTIFIED BY %s", (password,))
    sql(mysql_url, f"GRANT ALL ON `{database}`.* TO '{name}'@'%'")
    try:
        yield replace(parse_mysql_url(database_url), user=name, password=password).render(hide_password=False)
    finally:
        sql(mysql_url, f"DROP USER '{name}'@'%'")


def plugin(mysql_url: str, url: str) -> str:
    return str(sql(mysql_url, "SELECT plugin FROM mysql.user WHERE user = %s", (parse_mysql_url(url).user,))[0][0])


def test_the_user_has_the_servers_default_plugin(mysql_url: str, password_url: str) -> None:
    expected = "caching_sha2_password" if is_mysql(mysql_url) else "mysql_native_password"
    assert plugin(mysql_url, password_url) == expected


def test_a_pool_logs_in_with_a_password_over_plain_tcp(password_url: str) -> None:
    async def use() -> tuple[list[str], str]:
        pool = await aiomysql.create_pool(**parse_mysql_url(password_url).aiomysql_kwargs(), autocommit=True)
        try:
            queue = create_mysql_job_queue(pool)
            await queue.enqueue(job("login-1"))
            claimed = await queue.claim(worker_id="w", lease_ms=60_000, limit=5)
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                cipher = (await cur.fetchone())[1]
            return [j.id for j in claimed], str(cipher or "")
        finally:
            pool.close()
            await pool.wait_closed()

    claimed, cipher = asyncio.run(use())
    assert claimed == ["login-1"]
    assert cipher == "", "the login went over TLS; this test is about plain TCP"


def test_the_cli_logs_in_with_a_password(password_url: str) -> None:
    ok(cli("migrate", "--url", password_url))
    assert '"total": 0' in ok(cli("stats", "--json", "--url", password_url)).stdout


def test_alembic_logs_in_with_a_password(password_url: str) -> None:
    alembic_ok(alembic(password_url, "upgrade", "head"))
    assert len(sql(password_url, "SHOW TABLES")) >= 3


def test_a_wrong_password_is_one_line_and_exit_2(password_url: str) -> None:
    wrong = replace(parse_mysql_url(password_url), password="not-the-password").render(hide_password=False)
    line = fails(cli("stats", "--url", wrong))
    assert "refused the login" in line and "not-the-password" not in line, line
