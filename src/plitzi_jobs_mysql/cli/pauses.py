"""`pause`, `resume` and `paused`: claims skip a paused space (or one action of it) until it is resumed.

Running jobs finish and schedules keep firing (their jobs wait); pausing twice or resuming what is not paused
changes nothing, and says so.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..mysql.queue import MysqlJobQueue
from ..records import PausedAction
from .connect import run_queue
from .output import print_json, table, when


def _where(args: argparse.Namespace) -> str:
    return f"space {args.space}" + (f", action {args.action!r}" if args.action else " (every action)")


def _scoped(paused: list[PausedAction], args: argparse.Namespace) -> bool:
    return any(p.space_id == args.space and p.action_id == args.action for p in paused)


def _switch(args: argparse.Namespace, pausing: bool) -> int:
    async def run(queue: MysqlJobQueue) -> tuple[bool, bool]:
        before = _scoped(await queue.list_paused([args.space]), args)
        if pausing:
            await queue.pause(space_id=args.space, action_id=args.action)
        else:
            await queue.resume(space_id=args.space, action_id=args.action)
        return before, _scoped(await queue.list_paused([args.space]), args)

    before, after = run_queue(args, run)
    if args.json:
        print_json({"space": args.space, "action": args.action, "paused": after, "changed": before != after})
    elif before == after:
        print(f"{_where(args)} was {'already' if after else 'not'} paused: nothing changed")
    else:
        print(f"{'paused' if after else 'resumed'} {_where(args)}")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    return _switch(args, pausing=True)


def cmd_resume(args: argparse.Namespace) -> int:
    return _switch(args, pausing=False)


def cmd_paused(args: argparse.Namespace) -> int:
    async def run(queue: MysqlJobQueue) -> tuple[list[PausedAction], int]:
        return await queue.list_paused(args.space), int((await queue.now()).timestamp() * 1000)

    paused, now = run_queue(args, run)
    if args.json:
        print_json([{"space": p.space_id, "action": p.action_id, "since": p.since} for p in paused])
        return 0
    if not paused:
        print("nothing is paused in " + ", ".join(f"space {space}" for space in args.space))
        return 0
    rows = [(p.space_id, "(every action)" if p.action_id is None else p.action_id, when(p.since, now)) for p in paused]
    print(table(["space", "action", "paused since"], rows))
    return 0


def add_parsers(commands: Any, common: argparse.ArgumentParser, space_type: Any) -> None:
    scope = argparse.ArgumentParser(add_help=False, parents=[common])
    scope.add_argument("--space", type=space_type, required=True, metavar="N", help="the space")
    scope.add_argument("--action", default=None, help="only this action id (default: the whole space)")
    pause = commands.add_parser("pause", parents=[scope], help="claims skip the space's (action's) jobs")
    pause.set_defaults(func=cmd_pause)
    resume = commands.add_parser("resume", parents=[scope], help="lift a pause")
    resume.set_defaults(func=cmd_resume)
    paused = commands.add_parser("paused", parents=[common], help="what is paused in those spaces")
    paused.add_argument("--space", action="append", type=space_type, required=True, metavar="N",
                        help="this space (repeatable)")  # fmt: skip
    paused.set_defaults(func=cmd_paused)
