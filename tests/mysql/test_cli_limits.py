"""`plitzi-jobs-mysql limits`: what the claims of workers given `limits=` left in the store, as an operator reads it."""

from __future__ import annotations

import asyncio

from plitzi_jobs_mysql import ActionLimit, create_mysql_job_queue

from ..conftest import pooled
from ..support import job
from .test_cli import as_json, cli, ok


def test_limits_shows_running_over_concurrency_and_starts_over_rate(database_url: str) -> None:
    async def claim_within_limits() -> None:
        async with pooled(database_url) as pool:
            queue = create_mysql_job_queue(pool)
            await queue.enqueue_many([job(f"e{n}", action_id="export") for n in range(5)])
            await queue.enqueue_many([job(f"p{n}", action_id="partner", space_id=2) for n in range(5)])
            limits = {"export": ActionLimit(concurrency=3), "partner": ActionLimit(rate=2, per_ms=3_600_000)}
            taken = await queue.claim(worker_id="w", lease_ms=60_000, limit=10, limits=limits)
            assert len(taken) == 5  # 3 exports, 2 partner calls

    ok(cli("migrate", "--url", database_url))
    assert "no fleet-wide limits in use" in ok(cli("limits", "--url", database_url)).stdout
    asyncio.run(claim_within_limits())
    shown = as_json(cli("limits", "--url", database_url, "--json"))["limits"]
    assert [
        (u["space_id"], u["action_id"], u["running"], u["concurrency"], u["started"], u["rate"]) for u in shown
    ] == [
        (1, "export", 3, 3, 0, None),
        (2, "partner", 0, None, 2, 2),
    ]
    human = ok(cli("limits", "--url", database_url, "--space", "1")).stdout
    row = next(line for line in human.splitlines() if "export" in line)
    assert "3 / 3" in row and "partner" not in human
