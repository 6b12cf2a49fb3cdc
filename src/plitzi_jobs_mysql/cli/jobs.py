"""The operator's `jobs` and `schedules` commands: list, show, retry and cancel jobs; list schedules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..contract import readable
from ..contract.clock import to_epoch_ms
from ..mysql.queue import MysqlJobQueue
from ..records import TERMINAL_STATUSES, Job, JobStatus
from .connect import PROG, CliError, run_queue
from .output import job_dict, next_page, print_json, schedule_dict, scope, show_job, table, when

T = TypeVar("T")


async def _with_now(queue: MysqlJobQueue, read: Awaitable[T]) -> tuple[T, int]:
    """What `read` answers, and the server's now to tell instants' ages by."""
    return await read, to_epoch_ms(await queue.now())


def cmd_jobs_list(args: argparse.Namespace) -> int:
    page, now = run_queue(
        args,
        lambda q: _with_now(
            q,
            q.list_jobs(
                space_ids=args.space, action_id=args.action, status=args.status, limit=args.limit, offset=args.offset
            ),
        ),
    )
    if args.json:
        print_json({"jobs": [job_dict(j) for j in page.jobs], "total": page.total})
        return 0
    rows = [
        (j.id, j.space_id, j.action_id, j.status + ("*" if j.cancel_requested else ""),
         f"{j.attempts}/{j.max_attempts}", when(j.run_at, now), readable.age(j.updated_at, now), j.error)
        for j in page.jobs
    ]  # fmt: skip
    print(table(("ID", "SPACE", "ACTION", "STATUS", "ATTEMPTS", "RUN AT", "UPDATED", "ERROR"), rows))
    if page.jobs:
        shown = f"{args.offset + 1}-{args.offset + len(page.jobs)}"
        print(
            f"\n{shown} of {page.total} job(s) in {scope(args.space)}"
            + (" (* cancel requested)" if "*" in str(rows) else "")
            + next_page(args, len(page.jobs), page.total)
        )
    else:
        print(f"\nno jobs here ({page.total} match in {scope(args.space)})")
    return 0


#: A job's status as the end of "job 'x' ...": what an operator reads when an operation does not apply.
_STATE = {
    "pending": "is pending",
    "running": "is running",
    "succeeded": "already succeeded",
    "failed": "has failed",
    "dead": "is dead",
    "cancelled": "was already cancelled",
}
#: ... and as what it was before an operation changed it.
_WAS = {"succeeded": "had succeeded", "failed": "had failed", "dead": "was dead", "cancelled": "was cancelled"}


def _state(job: Job) -> str:
    return _STATE.get(job.status, f"is {job.status}")


async def _spaces_of(queue: MysqlJobQueue, args: argparse.Namespace) -> list[int] | None:
    """Where to look for the job: the spaces given, or its own, found by its id alone (ids are unique across the
    table); None when no job has that id."""
    if args.space:
        return list(args.space)
    space = await queue.space_of_job(args.id)
    return None if space is None else [space]


def _job_or_fail(job: Job | None, args: argparse.Namespace) -> Job:
    if job is None:
        where = f" in space(s) {', '.join(str(s) for s in args.space)}" if args.space else ""
        raise CliError(f"no job {args.id!r}{where}")
    return job


def cmd_jobs_show(args: argparse.Namespace) -> int:
    async def read(queue: MysqlJobQueue) -> tuple[Job | None, int]:
        spaces = await _spaces_of(queue, args)
        job = None if spaces is None else await queue.get_job(spaces, args.id)
        return job, to_epoch_ms(await queue.now())

    found, now = run_queue(args, read)
    job = _job_or_fail(found, args)
    if args.json:
        print_json(job_dict(job))
    else:
        print(show_job(job, now))
    return 0


def _change(
    args: argparse.Namespace, action: Callable[[MysqlJobQueue, list[int]], Awaitable[bool]]
) -> tuple[Job, bool, Job | None]:
    async def run(queue: MysqlJobQueue) -> tuple[Job | None, bool, Job | None]:
        spaces = await _spaces_of(queue, args)
        before = None if spaces is None else await queue.get_job(spaces, args.id)
        if spaces is None or before is None:
            return None, False, None
        done = await action(queue, spaces)
        return before, done, await queue.get_job(spaces, args.id)

    before, done, after = run_queue(args, run)
    return _job_or_fail(before, args), done, after


def _report(args: argparse.Namespace, before: Job, done: bool, after: Job | None, message: str) -> int:
    if args.json:
        print_json(
            {
                "id": before.id,
                "done": done,
                "status_before": before.status,
                "status": after.status if after else None,
                "cancel_requested": after.cancel_requested if after else None,
            }
        )
    print(message, file=sys.stdout if done and not args.json else sys.stderr)
    return 0 if done else 1


def cmd_jobs_retry(args: argparse.Namespace) -> int:
    async def requeue(queue: MysqlJobQueue, spaces: list[int]) -> bool:
        job = await queue.get_job(spaces, args.id)
        if job is not None and job.status == JobStatus.SUCCEEDED and not args.force:
            return False  # it did its work: running it again must be asked for
        return await queue.requeue(spaces, args.id)

    before, done, after = _change(args, requeue)
    if not done and before.status == JobStatus.SUCCEEDED and not args.force:
        message = (
            f"{PROG}: job {before.id!r} already succeeded; retrying runs it again: add --force if that is what you want"
        )
    elif done:
        was = _WAS.get(before.status, f"was {before.status}")
        message = f"job {before.id!r} {was}; requeued: pending now, attempts reset"
    else:
        finished = ", ".join(sorted(TERMINAL_STATUSES))
        message = f"{PROG}: job {before.id!r} {_state(before)}; only a finished job ({finished}) can be retried"
    return _report(args, before, done, after, message)


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    before, done, after = _change(args, lambda q, spaces: q.cancel(spaces, args.id))
    if not done:
        message = f"{PROG}: job {before.id!r} {_state(before)}; only a pending or running job can be cancelled"
    elif after is not None and after.status == "running":
        message = f"job {before.id!r} is running; its worker was asked to cancel it (on its next heartbeat)"
    else:
        message = f"job {before.id!r} cancelled"
    return _report(args, before, done, after, message)


def cmd_schedules_list(args: argparse.Namespace) -> int:
    schedules, now = run_queue(
        args, lambda q: _with_now(q, q.list_schedules(args.space, limit=args.limit, offset=args.offset))
    )
    if args.json:
        print_json([schedule_dict(s) for s in schedules])
        return 0
    rows = [
        (s.space_id, s.action_id, s.cron, s.timezone or "UTC", s.environment, "yes" if s.enabled else "no",
         when(s.next_run_at, now), when(s.last_fire_at, now), s.missed, s.max_attempts)
        for s in schedules
    ]  # fmt: skip
    headers = ("SPACE", "ACTION", "CRON", "TIMEZONE", "ENV", "ENABLED", "NEXT RUN", "LAST FIRE", "MISSED", "MAX")
    print(table(headers, rows))
    if schedules:
        shown = f"{args.offset + 1}-{args.offset + len(schedules)}"
        print(f"\nschedules {shown} in {scope(args.space)}" + next_page(args, len(schedules), None))
    else:
        print(f"\nno schedules here ({scope(args.space)}, from --offset {args.offset})")
    return 0
