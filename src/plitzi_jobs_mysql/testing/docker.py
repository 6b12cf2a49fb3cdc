"""A MySQL container through testcontainers, where a Docker daemon answers.

The image is ``mysql:8.4`` unless ``PLITZI_MYSQL_IMAGE`` (or the ``image`` argument) names another that honours
the official image's ``MYSQL_ROOT_PASSWORD`` / ``MYSQL_DATABASE`` / ``MYSQL_USER`` / ``MYSQL_PASSWORD``.
``PLITZI_MYSQL_DOCKER_NETWORK=host`` (or ``host_network=True``) runs it with host networking instead of a
published port: the server listens on a free port of 127.0.0.1 only, for daemons run without a bridge network
(``dockerd --bridge=none``), and nothing but loopback is ever contacted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator

from ..url import MysqlUrl
from .host import free_port

__all__ = [
    "DOCKER_IMAGE",
    "ENV_IMAGE",
    "ENV_NETWORK",
    "docker_available",
    "docker_image",
    "docker_image_ready",
    "docker_mysql_url",
]

logger = logging.getLogger(__name__)

DOCKER_IMAGE = "mysql:8.4"
ENV_IMAGE = "PLITZI_MYSQL_IMAGE"
ENV_NETWORK = "PLITZI_MYSQL_DOCKER_NETWORK"


def docker_image() -> str:
    """The image the container path runs: ``PLITZI_MYSQL_IMAGE``, else the official ``mysql:8.4``."""
    return os.environ.get(ENV_IMAGE, "").strip() or DOCKER_IMAGE


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


def docker_image_ready(image: str | None = None, timeout: float = 300.0) -> bool:
    """Whether `image` is on the daemon or can be pulled now. A daemon with no registry in reach (a closed network)
    says so in one warning, and the caller falls back to a local server. Never raises."""
    image = image or docker_image()
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
def docker_mysql_url(
    how_to_get_one: str = "", *, image: str | None = None, host_network: bool | None = None
) -> Iterator[str]:
    """Yield the root URL of a fresh MySQL container (`image`, else `docker_image()`), removed afterwards."""
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
    image = image or docker_image()
    if host_network is None:
        host_network = os.environ.get(ENV_NETWORK, "").strip().lower() == "host"
    password = secrets.token_hex(12)
    container = MySqlContainer(image, username="root", password=password, root_password=password, dbname="test")
    options = "--character-set-server=utf8mb4 --collation-server=utf8mb4_0900_ai_ci --max-allowed-packet=64M"
    port = 3306
    if host_network:
        # The container shares this machine's network: its server takes a free loopback port of its own (and no
        # X Protocol port, which would be the same 33060 for every container).
        port = free_port()
        options += f" --port={port} --bind-address=127.0.0.1 --mysqlx=OFF"
        container.with_kwargs(network_mode="host")
        container.ports = {}
    container.with_command(options)
    logger.info("starting a %s container%s", image, " (host network)" if host_network else "")
    started = time.monotonic()
    with container:
        if host_network:
            host = "127.0.0.1"
        else:
            host = container.get_container_host_ip()
            port = int(container.get_exposed_port(3306))
        url = MysqlUrl(host=host, port=port, user="root", password=password).render(hide_password=False)
        logger.info("%s ready at %s:%d in %.1f s", image, host, port, time.monotonic() - started)
        yield url
