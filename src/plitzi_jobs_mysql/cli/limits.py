"""`plitzi-jobs-mysql limits [--space N] [--json]`: the fleet-wide limits claims work to, per space, action (and
key, with `by_key`): running / concurrency, and starts in the last window / rate (contract/limits.py)."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any

from .connect import run_queue
from .output import print_json, scope, table


def cmd_limits(args: argparse.Namespace) -> int:
    spaces: list[int] | None = args.space
    usage = run_queue(args, lambda q: q.limit_usage(space_ids=spaces))
    if args.json:
        print_json({"spaces": spaces, "limits": [dataclasses.asdict(u) for u in usage]})
        return 0
    if not usage:
        print(f"no fleet-wide limits in use, {scope(spaces)} (workers given `limits=` show here once they claim)")
        return 0
    rows = [
        (u.space_id, u.action_id, "-" if u.key is None else u.key,
         "-" if u.concurrency is None else f"{u.running} / {u.concurrency}",
         "-" if u.rate is None else f"{u.started} / {u.rate} per {u.per_ms} ms")
        for u in usage
    ]  # fmt: skip
    print(f"fleet-wide limits, {scope(spaces)} (RUNNING: jobs running under the limit; STARTS: in the last window)\n")
    print(table(("SPACE", "ACTION", "KEY", "RUNNING", "STARTS"), rows))
    return 0


def add_parser(commands: Any, parents: list[argparse.ArgumentParser], space_id: Callable[[str], int]) -> None:
    limits = commands.add_parser("limits", parents=parents, help="fleet-wide limits: running / limit, starts / rate")
    limits.add_argument("--space", action="append", type=space_id, metavar="N", help="only this space (repeatable)")
    limits.set_defaults(func=cmd_limits)
