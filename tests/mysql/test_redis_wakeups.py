"""Cross-process wake-ups through a real (throwaway) redis-server: a worker whose poll is ten minutes away
starts a job another queue object (another process's, as far as Redis can tell) enqueued; with Redis gone the
job still runs, at the poll."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from plitzi_jobs_mysql import create_mysql_job_queue
from plitzi_jobs_mysql.records import Job
from plitzi_jobs_mysql.runtime.worker import create_job_worker

from ..conftest import empty_tables, open_pool
from ..support import job

pytest.importorskip("redis")
REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS is None, reason="redis-server is not installed (Debian: redis-server)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def redis_url() -> Iterator[str]:
    assert REDIS is not None
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        server = subprocess.Popen(
            [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            import redis

            client = redis.Redis(port=port)
            for _ in range(200):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    subprocess.run(["sleep", "0.05"], check=True)
            client.close()
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            server.terminate()
            server.wait(timeout=10)


@pytest.fixture
async def pools(session_db: str) -> AsyncIterator[tuple[Any, Any]]:
    empty_tables(session_db)
    first, second = await open_pool(session_db), await open_pool(session_db)
    try:
        yield first, second
    finally:
        for pool in (first, second):
            pool.close()
            await pool.wait_closed()


async def test_an_enqueue_elsewhere_wakes_the_worker_through_redis(redis_url: str, pools: tuple[Any, Any]) -> None:
    from plitzi_jobs_mysql.redis_wakeups import RedisWakeups

    here, there = RedisWakeups(redis_url), RedisWakeups(redis_url)  # two processes' channels
    started = asyncio.Event()

    async def handler(j: Job) -> str | None:
        started.set()
        return None

    consumer = create_mysql_job_queue(pools[0], wakeups=here)
    producer = create_mysql_job_queue(pools[1], wakeups=there)
    assert consumer.wakeup_topic == producer.wakeup_topic
    worker = create_job_worker(queue=consumer, handler=handler, workers=1, poll_ms=600_000)
    worker.start()
    try:
        await asyncio.wait_for(here.listening(), 30)
        now = int((await producer.now()).timestamp() * 1000)
        await producer.enqueue(job("through-redis", due_at=now - 1))
        # The poll is ten minutes away: only the message can have started it.
        await asyncio.wait_for(started.wait(), 30)
    finally:
        await worker.stop()
        await here.close()
        await there.close()


async def test_without_redis_the_job_still_runs_at_the_poll(pools: tuple[Any, Any]) -> None:
    from plitzi_jobs_mysql.redis_wakeups import RedisWakeups

    gone = RedisWakeups(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    started = asyncio.Event()

    async def handler(j: Job) -> str | None:
        started.set()
        return None

    queue = create_mysql_job_queue(pools[0], wakeups=gone)
    other = create_mysql_job_queue(pools[1], wakeups=RedisWakeups(f"redis://127.0.0.1:{free_port()}/0"))
    worker = create_job_worker(queue=queue, handler=handler, workers=1, poll_ms=200)
    worker.start()
    try:
        now = int((await other.now()).timestamp() * 1000)
        assert await other.enqueue(job("no-redis", due_at=now - 1))  # the lost message costs nothing but time
        await asyncio.wait_for(started.wait(), 30)
    finally:
        await worker.stop()
        await gone.close()
        await other.wakeups.close()  # type: ignore[attr-defined]
