"""A MySQL 8 container through testcontainers, where a Docker daemon answers."""

from __future__ import annotations

import contextlib
import logging
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator

from ..url import MysqlUrl

__all__ = ["DOCKER_IMAGE", "docker_available", "docker_image_ready", "docker_mysql_url"]

logger = logging.getLogger(__name__)

DOCKER_IMAGE = "mysql:8.4"


def docker_available(timeout: float = 5.0) -> bool:
    """Whether a Docker daemon answers (``docker info``, else the docker SDK's ping). Never raises."""
    cli = shutil.which("docker")
    if cli is not None:
        try:
            result = subprocess.run(
                [cli, "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return False
        return result.returncode == 0 and bool(result.stdout.strip())
    try:
        import docker  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        return False
    try:
        client = docker.from_env(timeout=int(max(1, timeout)))
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:
        return False


def docker_image_ready(image: str = DOCKER_IMAGE, timeout: float = 300.0) -> bool:
    """Whether `image` is on the daemon or can be pulled now. A daemon with no registry in reach (a closed network)
    says so in one warning, and the caller falls back to a local server. Never raises."""
    cli = shutil.which("docker")
    if cli is None:
        return True  # only the SDK: testcontainers pulls it, and says why if it cannot
    try:
        inspect = subprocess.run([cli, "image", "inspect", image], capture_output=True, timeout=30,
                                 stdin=subprocess.DEVNULL, check=False)  # fmt: skip
        if inspect.returncode == 0:
            return True
        pulled = subprocess.run([cli, "pull", "-q", image], capture_output=True, text=True, timeout=timeout,
                                stdin=subprocess.DEVNULL, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as error:
        logger.warning("a Docker daemon answers but image %s could not be checked (%s); not using Docker", image, error)
        return False
    if pulled.returncode != 0:
        reason = (pulled.stderr or pulled.stdout).strip().splitlines()[-1:] or ["no reason given"]
        logger.warning("a Docker daemon answers but image %s is not there and cannot be pulled (%s); not using Docker",
                       image, reason[0])  # fmt: skip
        return False
    return True


@contextlib.contextmanager
def docker_mysql_url(how_to_get_one: str = "") -> Iterator[str]:
    try:
        from testcontainers.community.mysql import MySqlContainer
    except ImportError:
        try:
            from testcontainers.mysql import MySqlContainer
        except ImportError as exc:
            raise RuntimeError(
                "a Docker daemon answers but testcontainers[mysql] is not installed "
                "(pip install 'plitzi_jobs_mysql[testing]'); " + how_to_get_one
            ) from exc
    password = secrets.token_hex(12)
    container = MySqlContainer(
        DOCKER_IMAGE, username="root", password=password, root_password=password, dbname="test"
    )
    container.with_command(
        "--character-set-server=utf8mb4 --collation-server=utf8mb4_0900_ai_ci --max-allowed-packet=64M"
    )
    logger.info("starting a %s container", DOCKER_IMAGE)
    started = time.monotonic()
    with container:
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(3306))
        url = MysqlUrl(host=host, port=port, user="root", password=password).render(hide_password=False)
        logger.info("%s ready at %s:%d in %.1f s", DOCKER_IMAGE, host, port, time.monotonic() - started)
        yield url
