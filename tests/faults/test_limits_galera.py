"""Fleet-wide limits on a 3-node MariaDB Galera cluster: claimers on every node at once, each node's pool as users
open them (node 2 with autocommit off, so its conflicts arrive at COMMIT). Locks do not replicate and a node may
read a little behind, so only the compare-and-sets' certification holds the limit: the jobs held at once (from a
claim's answer to its settle, inside the store's slot) never pass it, and every job runs once."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from plitzi_jobs_mysql import ActionLimit, AttemptOutcome, create_mysql_job_queue

from ..support import job
from .test_galera import cluster, database, pools  # noqa: F401 - the cluster and its pools, as fixtures

pytestmark = [pytest.mark.xdist_group("clusters"), pytest.mark.slow, pytest.mark.timeout(240)]

JOBS = 150
CONCURRENCY = 3


async def test_a_concurrency_limit_holds_across_nodes(pools: list[Any]) -> None:  # noqa: F811
    await limit_holds_across_nodes(pools, "galera")


async def limit_holds_across_nodes(node_pools: list[Any], cluster_kind: str) -> None:
    """Six claimers, two per node, drain a limited action beside an unlimited one; every job settled by its claimer."""
    queues = [create_mysql_job_queue(pool) for pool in node_pools]
    await queues[0].enqueue_many([job(f"l{n}", action_id="limited", due_at=n) for n in range(JOBS)])
    await queues[0].enqueue_many([job(f"o{n}", action_id="other", due_at=n) for n in range(JOBS // 3)])
    limits = {"limited": ActionLimit(concurrency=CONCURRENCY)}
    held: set[str] = set()
    most = 0
    ran: list[str] = []
    rng = random.Random(21)

    async def claimer(queue: Any, name: str) -> None:
        nonlocal most
        idle = 0
        while idle < 40:
            taken = await queue.claim(worker_id=name, lease_ms=60_000, limit=2, limits=limits)
            if not taken:
                idle += 1
                await asyncio.sleep(0.01)
                continue
            idle = 0
            for claimed in taken:
                if claimed.action_id == "limited":
                    held.add(claimed.id)
                    most = max(most, len(held))
            await asyncio.sleep(rng.uniform(0.001, 0.01))
            for claimed in taken:
                held.discard(claimed.id)  # before its settle gives the slot back
                ran.append(claimed.id)
                await queue.settle(job_id=claimed.id, worker_id=name, status="succeeded",
                                   attempt=AttemptOutcome(status="succeeded", worker_id=name))  # fmt: skip

    await asyncio.gather(*(claimer(queues[n % 3], f"node{n % 3}-c{n}") for n in range(6)))
    print(f"\n{cluster_kind}: {len(ran)} runs, most limited jobs held at once: {most} of {CONCURRENCY}")
    assert most <= CONCURRENCY
    assert most == CONCURRENCY, "the limit bound in this run"
    assert sorted(ran) == sorted([f"l{n}" for n in range(JOBS)] + [f"o{n}" for n in range(JOBS // 3)])
