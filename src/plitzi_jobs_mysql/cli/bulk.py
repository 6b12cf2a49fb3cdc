"""`jobs cancel-all` and `jobs retry-all`: every job of a space (or one action of it), counted first.

Without `--yes` a bulk command only counts and refuses (exit 2), saying what it would change; `--dry-run` only
counts (exit 0). With `--yes` it runs the queue's `cancel_all` / `retry_all` (bounded batches, safe beside running
workers) and reports how many jobs changed.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..mysql.queue import MysqlJobQueue
from ..records import TERMINAL_STATUSES, JobStatus
from .connect import PROG, CliError, run_queue
from .output import print_json

FINISHED = tuple(status.value for status in JobStatus if status.value in TERMINAL_STATUSES)


async def _count(queue: MysqlJobQueue, args: argparse.Namespace, status: str) -> int:
    page = await queue.list_jobs(space_ids=[args.space], action_id=args.action, status=status, limit=0)
    return page.total


def _where(args: argparse.Namespace) -> str:
    return f"space {args.space}" + (f", action {args.action!r}" if args.action else "")


def _finish(args: argparse.Namespace, counts: dict[str, int], changed: int | None, doing: str) -> int:
    if args.json:
        print_json({"space": args.space, "action": args.action, **counts, "changed": changed,
                    "dry_run": args.dry_run, "done": changed is not None})  # fmt: skip
    if changed is not None:
        if not args.json:
            print(f"{changed} job(s) changed in {_where(args)}")
        return 0
    if args.dry_run:
        if not args.json:
            print(f"would {doing} in {_where(args)} (--dry-run: nothing changed)")
        return 0
    raise CliError(f"{PROG}: would {doing} in {_where(args)}; add --yes to do it (--dry-run only counts)")


def cmd_jobs_cancel_all(args: argparse.Namespace) -> int:
    async def run(queue: MysqlJobQueue) -> tuple[dict[str, int], int | None]:
        counts = {"pending": await _count(queue, args, "pending"), "running": await _count(queue, args, "running")}
        if args.dry_run or not args.yes:
            return counts, None
        return counts, await queue.cancel_all(space_id=args.space, action_id=args.action)

    counts, changed = run_queue(args, run)
    doing = f"cancel {counts['pending']} pending job(s) and ask {counts['running']} running job(s) to stop"
    return _finish(args, counts, changed, doing)


def cmd_jobs_retry_all(args: argparse.Namespace) -> int:
    async def run(queue: MysqlJobQueue) -> tuple[dict[str, int], int | None]:
        counts = {args.status: await _count(queue, args, args.status)}
        if args.dry_run or not args.yes:
            return counts, None
        return counts, await queue.retry_all(space_id=args.space, action_id=args.action, status=args.status)

    counts, changed = run_queue(args, run)
    return _finish(args, counts, changed, f"requeue {counts[args.status]} {args.status} job(s)")


def add_parsers(jobs: Any, common: argparse.ArgumentParser, space_type: Any) -> None:
    bulk = argparse.ArgumentParser(add_help=False, parents=[common])
    bulk.add_argument("--space", type=space_type, required=True, metavar="N", help="the space")
    bulk.add_argument("--action", default=None, help="only this action id (default: every action of the space)")
    bulk.add_argument("--dry-run", action="store_true", help="only count what it would change")
    bulk.add_argument("--yes", action="store_true", help="do it (without it: count, and refuse)")
    cancel = jobs.add_parser("cancel-all", parents=[bulk], help="cancel every pending job, stop every running one")
    cancel.set_defaults(func=cmd_jobs_cancel_all)
    retry = jobs.add_parser("retry-all", parents=[bulk], help="requeue every job finished in one status")
    retry.add_argument("--status", default="dead", choices=FINISHED, help="the finished status (default dead)")
    retry.set_defaults(func=cmd_jobs_retry_all)
