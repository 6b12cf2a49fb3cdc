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
#: A limit of 36 for 24 claimers of 2 starts with room to spare: slots reserved for a while (limit_reserved.py),
#: each claimer its own queue, until the jobs held at once bring it close to binding.
ROOMY = 36


async def test_a_concurrency_limit_holds_across_nodes(pools: list[Any]) -> None:  # noqa: F811
    await limit_holds_across_nodes(pools, "galera")


async def test_a_roomy_concurrency_limit_holds_across_nodes(pools: list[Any]) -> None:  # noqa: F811
    await limit_holds_across_nodes(pools, "galera", concurrency=ROOMY, claimers=24)


async def limit_holds_across_nodes(
    node_pools: list[Any], cluster_kind: str, concurrency: int = CONCURRENCY, claimers: int = 6
) -> None:
    """Claimers spread over the nodes drain a limited action beside an unlimited one; every job settled by its
    claimer."""
    roomy = concurrency > CONCURRENCY
    # Roomy: one queue per claimer, each holding reservations of its own; else one per node.
    queues = [create_mysql_job_queue(node_pools[n % 3]) for n in range(claimers if roomy else 3)]
    await queues[0].enqueue_many([job(f"l{n}", action_id="limited", due_at=n) for n in range(JOBS)])
    await queues[0].enqueue_many([job(f"o{n}", action_id="other", due_at=n) for n in range(JOBS // 3)])
    limits = {"limited": ActionLimit(concurrency=concurrency)}
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
            await asyncio.sleep(rng.uniform(0.2, 0.4) if roomy else rng.uniform(0.001, 0.01))
            for claimed in taken:
                held.discard(claimed.id)  # before its settle gives the slot back
                ran.append(claimed.id)
                await queue.settle(job_id=claimed.id, worker_id=name, status="succeeded",
                                   attempt=AttemptOutcome(status="succeeded", worker_id=name))  # fmt: skip

    await asyncio.gather(*(claimer(queues[n % len(queues)], f"node{n % 3}-c{n}") for n in range(claimers)))
    print(f"\n{cluster_kind}: {len(ran)} runs, most limited jobs held at once: {most} of {concurrency}")
    assert most <= concurrency
    if not roomy:
        assert most == concurrency, "the limit bound in this run"
    assert sorted(ran) == sorted([f"l{n}" for n in range(JOBS)] + [f"o{n}" for n in range(JOBS // 3)])
