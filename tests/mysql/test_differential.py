"""The memory stores and the MySQL stores, driven by one random sequence of operations, answer alike.

A few seeds of a few hundred operations run in `make test`; `make differential` (SEEDS=, OPS=) runs more. A
failure prints the seed, the operations up to the difference, and a shrunk sequence that still shows it;
`PLITZI_DIFFERENTIAL_SEED=n` replays one seed. What is compared and what is normalised (only what the contract
leaves open): tests/harness/differential.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from pymysql.constants import CLIENT

from tests.harness.differential import KNOWN_OPEN
from tests.harness.differential_run import Stacks, explore, report, shrink

from ..conftest import pooled

#: The pool setups of the MySQL contract suite, one per seed in turn.
SETUPS: dict[str, tuple[str, dict[str, Any]]] = {
    "autocommit": ("", {"autocommit": True}),
    "no-autocommit": ("", {"autocommit": False}),
    "found-rows": ("", {"autocommit": True, "client_flag": CLIENT.FOUND_ROWS}),
    "read-committed": (
        "",
        {"autocommit": False, "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"},
    ),
    "sql-mode-empty": ("", {"autocommit": True, "init_command": "SET SESSION sql_mode = ''"}),
    "prefixed": ("pjm_", {"autocommit": False}),
}
ONE_SEED = os.environ.get("PLITZI_DIFFERENTIAL_SEED")
SEEDS = [int(ONE_SEED)] if ONE_SEED else list(range(1, 1 + int(os.environ.get("PLITZI_DIFFERENTIAL_SEEDS", "3"))))
OPS = int(os.environ.get("PLITZI_DIFFERENTIAL_OPS", "300"))
SHRINK_S = float(os.environ.get("PLITZI_DIFFERENTIAL_SHRINK_S", "60"))
REACH_KNOWN = KNOWN_OPEN or os.environ.get("PLITZI_DIFFERENTIAL_KNOWN") == "1"


@pytest.mark.parametrize("seed", SEEDS)
async def test_memory_and_mysql_stores_answer_alike(seed: int, database_url: str) -> None:
    setup = sorted(SETUPS)[seed % len(SETUPS)]
    prefix, options = SETUPS[setup]
    # A pool of 2 lends a claim one connection for its compare-and-sets (the other is a settle's): issue 18.4.
    queue_pool_size = 10 if REACH_KNOWN else 2
    async with (
        pooled(database_url, **options, maxsize=queue_pool_size) as queue_pool,
        pooled(database_url, **options, maxsize=1) as kv_pool,
    ):
        stacks = Stacks(queue_pool, kv_pool, prefix)
        ops, difference = await explore(seed, OPS, stacks, known_open=REACH_KNOWN)
        if difference is None:
            return
        shrunk, still = await shrink(ops, stacks, SHRINK_S) if SHRINK_S > 0 else (None, None)
        pytest.fail(report(seed, setup, ops[: difference.index + 1], difference, shrunk, still))
