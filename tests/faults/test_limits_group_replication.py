"""Fleet-wide limits on 3-node multi-primary MySQL Group Replication: claimers on every member at once. A member's
lost certification comes back at COMMIT (3101 and kin), so, as on Galera, only the compare-and-sets hold the
limit (the test's body: test_limits_galera.py)."""

from __future__ import annotations

from typing import Any

import pytest

from .test_group_replication import cluster, database, pools  # noqa: F401 - the group and its pools, as fixtures
from .test_limits_galera import ROOMY, limit_holds_across_nodes

pytestmark = [pytest.mark.xdist_group("clusters"), pytest.mark.slow, pytest.mark.timeout(300)]


async def test_a_concurrency_limit_holds_across_members(pools: list[Any]) -> None:  # noqa: F811
    await limit_holds_across_nodes(pools, "group replication")


async def test_a_roomy_concurrency_limit_holds_across_members(pools: list[Any]) -> None:  # noqa: F811
    await limit_holds_across_nodes(pools, "group replication", concurrency=ROOMY, claimers=24)
