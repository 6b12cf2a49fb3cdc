"""Connecting like production does: TLS URLs (`ssl-mode`, `ssl-ca`, `ssl-cert`, `ssl-key`) against a throwaway
server of each flavour (MariaDB 10.11, MySQL 9.7) started with TLS, with a certificate authority, server and client
certificates made here by `openssl`. The users log in with a password: on MySQL `caching_sha2_password`, whose
login over TLS needs no RSA exchange, and without TLS (refused here) does."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomysql
import pymysql
import pytest

from plitzi_jobs_mysql import JobInput, create_mysql_job_queue
from plitzi_jobs_mysql.testing import LocalMysqlServer, fresh_database
from plitzi_jobs_mysql.url import parse_mysql_url

from ..conftest import local_flavours, throwaway_server
from ..harness.mysql97 import ChrootMysqlServer
from .test_cli import cli, fails, ok

pytestmark = pytest.mark.timeout(180)

PASSWORD = "tls-Pa55"
EXTENSIONS = (
    "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
)


@dataclass(frozen=True)
class Tls:
    server: LocalMysqlServer
    dir: Path

    def url(self, user: str, query: str = "", host: str = "127.0.0.1", database: str = "tlsdb") -> str:
        return f"mysql://{user}:{PASSWORD}@{host}:{self.server.port}/{database}" + (f"?{query}" if query else "")

    def path(self, name: str) -> str:
        return str(self.dir / name)


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("this test makes its certificates with the `openssl` command (Debian: apt-get install openssl)")
    subprocess.run([openssl, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _make_ca(cwd: Path, name: str) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
             "-keyout", f"{name}.key", "-out", f"{name}.pem", "-subj", f"/CN=plitzi test {name}", cwd=cwd)  # fmt: skip


def _make_cert(cwd: Path, name: str, ca: str, subject_alt_name: str | None) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
             f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=cwd)  # fmt: skip
    ext = cwd / f"{name}.ext"
    ext.write_text(EXTENSIONS + (f"subjectAltName={subject_alt_name}\n" if subject_alt_name else ""))
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
             "-days", "2", "-out", f"{name}.pem", "-extfile", ext.name, cwd=cwd)  # fmt: skip


@pytest.fixture(scope="module", params=local_flavours())
def tls(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tls]:
    server = throwaway_server(request.param, load_tz=False)
    # A chrooted server (MySQL 9.7) reads its certificates inside its root; the clients read the same files.
    root = server.root if isinstance(server, ChrootMysqlServer) else None
    if root is not None:
        certs = Path(tempfile.mkdtemp(prefix="plitzi-certs-", dir=root / "tmp"))
    else:
        certs = tmp_path_factory.mktemp("certs")
    try:
        yield from _tls_server(server, certs)
    finally:
        if root is not None:
            shutil.rmtree(certs, ignore_errors=True)


def _tls_server(server: LocalMysqlServer, certs: Path) -> Iterator[Tls]:
    _make_ca(certs, "ca")
    _make_ca(certs, "other-ca")  # a CA the server's certificate does not come from
    _make_cert(certs, "server", "ca", "IP:127.0.0.1")  # valid for 127.0.0.1, NOT for the name localhost
    _make_cert(certs, "client", "ca", None)
    server.extra_args = (
        f"--ssl-ca={certs / 'ca.pem'}",
        f"--ssl-cert={certs / 'server.pem'}",
        f"--ssl-key={certs / 'server.key'}",
    )
    with server:
        conn = pymysql.connect(**parse_mysql_url(server.url).pymysql_kwargs(), autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE DATABASE tlsdb")
                for user, require in (("tls", "SSL"), ("x509", "X509")):
                    cur.execute(f"CREATE USER '{user}'@'%%' IDENTIFIED BY %s REQUIRE {require}", (PASSWORD,))
                    cur.execute(f"GRANT ALL ON *.* TO '{user}'@'%'")  # the helpers create and drop databases
        finally:
            conn.close()
        tls = Tls(server=server, dir=certs)
        # Each test stands alone (xdist may hand this module's tests to different processes, each its own server).
        ok(cli("migrate", "--url", tls.url("tls", "ssl-mode=REQUIRED")))
        yield tls


def test_the_cli_connects_in_each_ssl_mode(tls: Tls) -> None:
    ok(cli("migrate", "--url", tls.url("tls", "ssl-mode=REQUIRED")))
    ca = tls.path("ca.pem")
    for query in (f"ssl-mode=VERIFY_CA&ssl-ca={ca}", f"ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}", f"ssl-ca={ca}"):
        result = ok(cli("stats", "--json", "--url", tls.url("tls", query)))
        assert '"total": 0' in result.stdout
    # VERIFY_CA checks the authority, not the name: localhost is not in the certificate and still passes.
    ok(cli("stats", "--url", tls.url("tls", f"ssl-mode=VERIFY_CA&ssl-ca={ca}", host="localhost")))


def test_tls_refusals_are_one_line_and_exit_2(tls: Tls) -> None:
    ca, other = tls.path("ca.pem"), tls.path("other-ca.pem")
    # The user requires TLS: a URL without it is refused by the server.
    assert "refused the login" in fails(cli("stats", "--url", tls.url("tls")))
    # Identity: the certificate names 127.0.0.1, not localhost.
    line = fails(cli("stats", "--url", tls.url("tls", f"ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}", host="localhost")))
    assert "localhost" in line and "certificate" in line.lower(), line
    # A certificate from another authority.
    line = fails(cli("stats", "--url", tls.url("tls", f"ssl-mode=VERIFY_CA&ssl-ca={other}")))
    assert "certificate verify failed" in line.lower(), line
    # A CA file that is not there: said before connecting.
    line = fails(cli("stats", "--url", tls.url("tls", "ssl-ca=/nonexistent/ca.pem")))
    assert "ssl-ca=/nonexistent/ca.pem" in line and PASSWORD not in line, line


def test_a_client_certificate(tls: Tls) -> None:
    cert, key = tls.path("client.pem"), tls.path("client.key")
    ok(cli("stats", "--url", tls.url("x509", f"ssl-mode=REQUIRED&ssl-cert={cert}&ssl-key={key}")))
    ok(cli("stats", "--url", tls.url("x509", f"ssl-ca={tls.path('ca.pem')}&ssl-cert={cert}&ssl-key={key}")))
    assert "refused the login" in fails(cli("stats", "--url", tls.url("x509", "ssl-mode=REQUIRED")))


def test_the_helpers_and_a_pool_opened_from_the_url_speak_tls(tls: Tls) -> None:
    files = f"ssl-ca={tls.path('ca.pem')}&ssl-cert={tls.path('client.pem')}&ssl-key={tls.path('client.key')}"
    url = tls.url("x509", files)

    async def use(database_url: str) -> tuple[bool, str]:
        pool = await aiomysql.create_pool(**parse_mysql_url(database_url).aiomysql_kwargs(), autocommit=True)
        try:
            queue = create_mysql_job_queue(pool)
            created = await queue.enqueue(
                JobInput(id="tls-1", space_id=1, action_id="a", environment="main", trigger="t", input={},
                         due_at=0, max_attempts=1)
            )  # fmt: skip
            async with pool.acquire() as conn, conn.cursor() as cur:
                await cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
                cipher: Any = (await cur.fetchone())[1]
            return created, str(cipher)
        finally:
            pool.close()
            await pool.wait_closed()

    with fresh_database(tls.url("x509", url.split("?", 1)[1], database="")) as database_url:
        assert "ssl-ca=" in database_url
        created, cipher = asyncio.run(use(database_url))
    assert created and cipher, "the pool's connection is not encrypted"


def test_required_tls_is_never_a_silent_plain_connection(mysql_url: str) -> None:
    server = parse_mysql_url(mysql_url)
    conn = pymysql.connect(**server.pymysql_kwargs())
    offers_tls = bool(conn.server_capabilities & pymysql.constants.CLIENT.SSL)
    conn.close()
    if offers_tls:
        pytest.skip("the session's server offers TLS; this needs one that does not (the throwaway mariadbd)")
    with fresh_database(mysql_url) as plain:
        line = fails(cli("migrate", "--url", plain + ("&" if "?" in plain else "?") + "ssl-mode=REQUIRED"))
        assert "offers no TLS" in line and "ssl-mode=REQUIRED" in line, line
        ok(cli("migrate", "--url", plain + ("&" if "?" in plain else "?") + "ssl-mode=PREFERRED"))
        line = fails(cli("stats", "--url", plain + ("&" if "?" in plain else "?") + "ssl-mode=VERIFY_CA&ssl-ca=/x.pem"))
        assert "ssl-ca=/x.pem" in line, line


def test_a_charset_other_than_utf8mb4_is_one_line_and_exit_2(database_url: str) -> None:
    line = fails(cli("stats", "--url", database_url + ("&" if "?" in database_url else "?") + "charset=latin1"))
    assert "charset 'latin1' is not supported" in line and "utf8mb4" in line, line


def test_alembic_migrates_over_tls(tls: Tls) -> None:
    from .test_alembic import alembic
    from .test_alembic import ok as alembic_ok

    files = f"ssl-ca={tls.path('ca.pem')}&ssl-cert={tls.path('client.pem')}&ssl-key={tls.path('client.key')}"
    # The environment hands SQLAlchemy the URL in its own spelling (ssl_ca, ssl_cert, ssl_key, ssl_check_hostname).
    with fresh_database(tls.url("x509", "ssl-mode=VERIFY_IDENTITY&" + files, database="")) as database_url:
        alembic_ok(alembic(database_url, "upgrade", "head"))
        conn = pymysql.connect(**parse_mysql_url(database_url).pymysql_kwargs())
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW TABLES")
                tables = {str(row[0]) for row in cur.fetchall()}
        finally:
            conn.close()
    assert {"action_jobs", "action_schedules", "action_kv"} <= tables
