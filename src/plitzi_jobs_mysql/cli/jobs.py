"""The operator's `jobs` and `schedules` commands: list, show, retry and cancel jobs; list schedules."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable

from ..mysql.queue import MysqlJobQueue
from ..records import TERMINAL_STATUSES, Job, JobStatus
from .connect import PROG, CliError, run_queue
from .output import job_dict, next_page, print_json, schedule_dict, scope, show_job, table, when


def cmd_jobs_list(args: argparse.Namespace) -> int:
    page = run_queue(
        args,
        lambda q: q.list_jobs(
            space_ids=args.space, action_id=args.action, status=args.status, limit=args.limit, offset=args.offset,
            after=args.after,
        ),
    )  # fmt: skip
    if args.json:
        print_json({"jobs": [job_dict(j) for j in page.jobs], "total": page.total, "next_after": page.next_after})
        return 0
    rows = [
        (j.id, j.space_id, j.action_id, j.status + ("*" if j.cancel_requested else ""),
         f"{j.attempts}/{j.max_attempts}", when(j.run_at), when(j.updated_at), j.error)
        for j in page.jobs
    ]  # fmt: skip
    print(table(("ID", "SPACE", "ACTION", "STATUS", "ATTEMPTS", "RUN AT", "UPDATED AT", "ERROR"), rows))
    if page.jobs:
        shown = f"{args.offset + 1}-{args.offset + len(page.jobs)} of " if args.after is None else ""
        # The next page by its cursor: as fast at page 1,000 as at page 1 (an offset is counted through).
        more = f"; next page: --after {page.next_after}" if page.next_after is not None else ""
        print(
            f"\n{shown}{page.total} job(s) in {scope(args.space)}"
            + (" (* cancel requested)" if "*" in str(rows) else "")
            + more
        )
    else:
        print(f"\nno jobs here ({page.total} match in {scope(args.space)})")
    return 0


def _job_or_fail(job: Job | None, args: argparse.Namespace) -> Job:
    if job is None:
        spaces = ", ".join(str(s) for s in args.space)
        raise CliError(f"no job {args.id!r} in space(s) {spaces}")
    return job


def cmd_jobs_show(args: argparse.Namespace) -> int:
    job = _job_or_fail(run_queue(args, lambda q: q.get_job(args.space, args.id)), args)
    if args.json:
        print_json(job_dict(job))
    else:
        print(show_job(job))
    return 0


def _change(
    args: argparse.Namespace, action: Callable[[MysqlJobQueue], Awaitable[bool]]
) -> tuple[Job, bool, Job | None]:
    async def run(queue: MysqlJobQueue) -> tuple[Job | None, bool, Job | None]:
        before = await queue.get_job(args.space, args.id)
        if before is None:
            return None, False, None
        done = await action(queue)
        return before, done, await queue.get_job(args.space, args.id)

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
    async def requeue(queue: MysqlJobQueue) -> bool:
        job = await queue.get_job(args.space, args.id)
        if job is not None and job.status == JobStatus.SUCCEEDED and not args.force:
            return False  # it did its work: running it again must be asked for
        return await queue.requeue(args.space, args.id)

    before, done, after = _change(args, requeue)
    if not done and before.status == JobStatus.SUCCEEDED and not args.force:
        message = f"{PROG}: job {before.id!r} succeeded; retrying runs it again: add --force if that is what you want"
    elif done:
        message = f"job {before.id!r} was {before.status}; requeued: pending now, attempts reset"
    else:
        finished = ", ".join(sorted(TERMINAL_STATUSES))
        message = f"{PROG}: job {before.id!r} is {before.status}; only a finished job ({finished}) can be retried"
    return _report(args, before, done, after, message)


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    before, done, after = _change(args, lambda q: q.cancel(args.space, args.id))
    if not done:
        message = f"{PROG}: job {before.id!r} is {before.status}; only a pending or running job can be cancelled"
    elif after is not None and after.status == "running":
        message = f"job {before.id!r} is running; its worker was asked to cancel it (on its next heartbeat)"
    else:
        message = f"job {before.id!r} cancelled"
    return _report(args, before, done, after, message)


def cmd_schedules_list(args: argparse.Namespace) -> int:
    schedules = run_queue(args, lambda q: q.list_schedules(args.space, limit=args.limit, offset=args.offset))
    if args.json:
        print_json([schedule_dict(s) for s in schedules])
        return 0
    rows = [
        (s.space_id, s.action_id, s.cron, s.timezone or "UTC", s.environment, "yes" if s.enabled else "no",
         when(s.next_run_at), when(s.last_fire_at), s.missed, s.max_attempts)
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
