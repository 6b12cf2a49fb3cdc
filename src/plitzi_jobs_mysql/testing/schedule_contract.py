"""The queue's contract, part three: schedules, and the operator's view of jobs."""

from __future__ import annotations

import asyncio

import pytest

from ..contract.protocols import JobQueue
from ..records import AttemptOutcome
from .support import Advance, claim_one, job, now_ms, schedule


class ScheduleContract:
    """`due_schedules`, `advance_schedule`, `put_schedules` (a part of `JobQueueContract`)."""

    # -- schedules ------------------------------------------------------------------------------------------

    async def test_due_schedules_are_the_enabled_ones_oldest_first(self, queue: JobQueue) -> None:
        now = await now_ms(queue)
        await queue.put_schedules(
            space_id=1,
            schedules=[
                schedule("b", next_run_at=now - 1_000),
                schedule("a", next_run_at=now - 2_000),
                schedule("off", next_run_at=now - 5_000, enabled=False),
                schedule("future", next_run_at=now + 3_600_000),
            ],
        )
        due = await queue.due_schedules(10)
        assert [s.action_id for s in due] == ["a", "b"]
        assert [s.action_id for s in await queue.due_schedules(1)] == ["a"]
        assert due[0].missed == 0 and due[0].last_fire_at is None

    async def test_advance_schedule_is_a_compare_and_set(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=1_000)])
        answers = await asyncio.gather(
            *(
                queue.advance_schedule(space_id=1, action_id="s", from_at=1_000, to_at=2_000 + n, missed=3)
                for n in range(10)
            )
        )
        assert answers.count(True) == 1
        (stored,) = await queue.list_schedules([1])
        assert stored.next_run_at == 2_000 + answers.index(True)
        assert (stored.last_fire_at, stored.missed) == (1_000, 3)
        assert not await queue.advance_schedule(space_id=1, action_id="s", from_at=1_000, to_at=9, missed=0)
        assert not await queue.advance_schedule(space_id=1, action_id="nope", from_at=1_000, to_at=9, missed=0)

    async def test_put_schedules_makes_the_space_exactly_the_given_set(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("a"), schedule("b")])
        await queue.put_schedules(space_id=2, schedules=[schedule("a", space_id=2)])
        await queue.put_schedules(space_id=1, schedules=[schedule("b"), schedule("c")])
        assert [s.action_id for s in await queue.list_schedules([1])] == ["b", "c"]
        assert [(s.space_id, s.action_id) for s in await queue.list_schedules([2])] == [(2, "a")]
        await queue.put_schedules(space_id=1, schedules=[])
        assert await queue.list_schedules([1]) == []
        assert len(await queue.list_schedules([1, 2])) == 1
        assert await queue.list_schedules([]) == []

    async def test_an_unchanged_schedule_keeps_its_promised_fire(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=1_000, timezone="UTC")])
        await queue.advance_schedule(space_id=1, action_id="s", from_at=1_000, to_at=5_000, missed=2)
        await queue.put_schedules(
            space_id=1, schedules=[schedule("s", next_run_at=9_000, timezone="UTC", max_attempts=7)]
        )
        (kept,) = await queue.list_schedules([1])
        assert (kept.next_run_at, kept.missed, kept.last_fire_at, kept.max_attempts) == (5_000, 2, 1_000, 7)
        await queue.put_schedules(space_id=1, schedules=[schedule("s", cron="0 * * * *", next_run_at=9_000)])
        (changed,) = await queue.list_schedules([1])
        assert (changed.next_run_at, changed.cron, changed.timezone) == (9_000, "0 * * * *", None)

    async def test_a_schedule_switched_back_on_takes_the_new_fire(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=1_000)])
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=2_000, enabled=False)])
        (off,) = await queue.list_schedules([1])
        assert (off.enabled, off.next_run_at) == (False, 1_000)
        await queue.put_schedules(space_id=1, schedules=[schedule("s", next_run_at=3_000)])
        (on,) = await queue.list_schedules([1])
        assert (on.enabled, on.next_run_at) == (True, 3_000)

    async def test_put_schedules_refuses_another_spaces_schedule(self, queue: JobQueue) -> None:
        await queue.put_schedules(space_id=1, schedules=[schedule("keep")])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x"), schedule("y", space_id=2)])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x", cron="* * * *")])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x", timezone="Mars/Olympus")])
        with pytest.raises(ValueError):
            await queue.put_schedules(space_id=1, schedules=[schedule("x"), schedule("x")])
        assert [s.action_id for s in await queue.list_schedules([1])] == ["keep"]

    async def test_put_schedules_refuses_a_schedule_whose_fire_id_could_not_be_stored(self, queue: JobQueue) -> None:
        # A fire's job id is "schedule:{space}:{action}:{instant}": an action id that passes alone can make it
        # longer than any job id may be, and such a schedule would fail every sweep that reaches it.
        space = 123_456
        fits = "a" * (191 - len(f"schedule:{space}::") - len(str(253_402_300_799_999)))
        await queue.put_schedules(space_id=space, schedules=[schedule("keep", space_id=space)])
        with pytest.raises(ValueError, match="job id"):
            await queue.put_schedules(
                space_id=space, schedules=[schedule("ok", space_id=space), schedule(fits + "a", space_id=space)]
            )
        assert [s.action_id for s in await queue.list_schedules([space])] == ["keep"]
        await queue.put_schedules(space_id=space, schedules=[schedule(fits, space_id=space)])
        assert [s.action_id for s in await queue.list_schedules([space])] == [fits]

    async def test_concurrent_writers_leave_one_writers_set(self, queue: JobQueue) -> None:
        sets = [[schedule(f"w{w}-{n}") for n in range(5)] for w in range(6)]
        await asyncio.gather(*(queue.put_schedules(space_id=1, schedules=s) for s in sets))
        names = sorted(s.action_id for s in await queue.list_schedules([1]))
        assert names in [sorted(s.action_id for s in one) for one in sets]


class OperatorContract:
    """`list_jobs`, `get_job`, `requeue`, `cancel`, `cancel_pending` (a part of `JobQueueContract`)."""

    # -- the operator's view --------------------------------------------------------------------------------

    async def test_list_jobs_pages_newest_first(self, queue: JobQueue, advance: Advance) -> None:
        for n in range(5):
            await queue.enqueue(job(f"j{n}", action_id="even" if n % 2 == 0 else "odd"))
        await queue.enqueue(job("elsewhere", space_id=2))
        await advance(1)
        await queue.claim(worker_id="w1", lease_ms=60_000, limit=1)  # j0 becomes the most recently updated
        page = await queue.list_jobs(space_ids=[1], limit=2)
        assert page.total == 5 and page.jobs[0].id == "j0" and len(page.jobs) == 2
        assert (await queue.list_jobs(space_ids=[1], action_id="even")).total == 3
        running = await queue.list_jobs(space_ids=[1], status="running")
        assert [j.id for j in running.jobs] == ["j0"]
        rest = await queue.list_jobs(space_ids=[1], limit=50, offset=2)
        assert len(rest.jobs) == 3 and rest.total == 5
        assert (await queue.list_jobs(space_ids=[1, 2])).total == 6
        assert (await queue.list_jobs(space_ids=[])).total == 0

    async def test_list_jobs_pages_with_a_cursor_like_offset_does(self, queue: JobQueue, advance: Advance) -> None:
        for n in range(7):
            await queue.enqueue(job(f"j{n}", action_id="even" if n % 2 == 0 else "odd"))
            if n % 3 == 0:
                await advance(1)  # some share an updated_at, so ties are broken the same way too
        await queue.enqueue(job("elsewhere", space_id=2))
        everything = [j.id for j in (await queue.list_jobs(space_ids=[1], limit=50)).jobs]
        for action in (None, "even"):
            expected = [j.id for j in (await queue.list_jobs(space_ids=[1], action_id=action, limit=50)).jobs]
            seen: list[str] = []
            after: str | None = None
            for _ in range(10):
                page = await queue.list_jobs(space_ids=[1], action_id=action, limit=3, after=after)
                assert page.total == len(expected)
                seen += [j.id for j in page.jobs]
                after = page.next_after
                if after is None:
                    break
                assert isinstance(after, str) and len(page.jobs) == 3
            assert seen == expected
        assert len(everything) == 7
        first = await queue.list_jobs(space_ids=[1], limit=3)
        assert first.next_after is not None
        by_offset = await queue.list_jobs(space_ids=[1], limit=3, offset=3)
        by_cursor = await queue.list_jobs(space_ids=[1], limit=3, after=first.next_after)
        assert [j.id for j in by_cursor.jobs] == [j.id for j in by_offset.jobs] == everything[3:6]
        assert (await queue.list_jobs(space_ids=[1], limit=50)).next_after is None  # not a full page
        for bad in ("nonsense", "k1.!!", "k1." + "A" * 100):
            with pytest.raises(ValueError, match="after"):
                await queue.list_jobs(space_ids=[1], after=bad)
        with pytest.raises(TypeError, match="after"):
            await queue.list_jobs(space_ids=[1], after=3)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="after"):
            await queue.list_jobs(space_ids=[1], offset=3, after=first.next_after)

    async def test_pages_over_several_spaces_interleave_them_newest_first(
        self, queue: JobQueue, advance: Advance
    ) -> None:
        # Each write at its own instant, so the order is known: the claimed newest (last claimed first), then the
        # rest newest enqueued first. A store may read each space apart and merge; the pages must not show it.
        for n in range(12):
            await queue.enqueue(job(f"j{n}", space_id=1 + n % 4, action_id="even" if n % 2 == 0 else "odd"))
            await advance(1)
        for _ in range(3):
            await queue.claim(worker_id="w1", lease_ms=60_000, limit=1)  # j0, j1, j2
            await advance(1)
        everything = ["j2", "j1", "j0", *(f"j{n}" for n in range(11, 2, -1))]
        space = {f"j{n}": 1 + n % 4 for n in range(12)}
        for spaces, action, status in (
            ([1, 2, 3, 4], None, None),
            ([1, 2, 3], None, None),
            ([4, 2], "even", None),
            ([3, 1, 2, 4], None, "pending"),
            ([1, 3], "odd", "running"),
            ([2, 9], None, None),
        ):
            expected = [i for i in everything if space[i] in spaces
                        and (action is None or (int(i[1:]) % 2 == 0) == (action == "even"))
                        and (status is None or (status == "running") == (i in ("j0", "j1", "j2")))]  # fmt: skip
            whole = await queue.list_jobs(space_ids=spaces, action_id=action, status=status, limit=50)
            assert [j.id for j in whole.jobs] == expected, (spaces, action, status)
            assert whole.total == len(expected)
            by_offset = [await queue.list_jobs(space_ids=spaces, action_id=action, status=status, limit=2, offset=o)
                         for o in range(0, len(expected) + 1, 2)]  # fmt: skip
            assert [j.id for p in by_offset for j in p.jobs] == expected
            seen: list[str] = []
            after: str | None = None
            for _ in range(len(expected) + 1):
                page = await queue.list_jobs(space_ids=spaces, action_id=action, status=status, limit=2, after=after)
                seen += [j.id for j in page.jobs]
                after = page.next_after
                if after is None:
                    break
            assert seen == expected, (spaces, action, status)

    async def test_get_job_answers_only_within_the_listed_spaces(self, queue: JobQueue) -> None:
        await queue.enqueue(job(space_id=7))
        assert await queue.get_job([1], "job-1") is None
        assert await queue.get_job([], "job-1") is None
        assert await queue.get_job([1, 7], "job-1") is not None

    async def test_requeue_sends_a_finished_job_back(self, queue: JobQueue) -> None:
        await queue.enqueue(job(max_attempts=1))
        await claim_one(queue, "w1")
        assert await queue.requeue([1], "job-1") is False  # running, not finished
        await queue.settle(
            job_id="job-1",
            worker_id="w1",
            status="dead",
            error="boom",
            attempt=AttemptOutcome(status="failed", worker_id="w1", error="boom"),
        )
        assert await queue.requeue([2], "job-1") is False
        before = await now_ms(queue)
        assert await queue.requeue([1], "job-1") is True
        again = await queue.get_job([1], "job-1")
        assert again is not None
        assert (again.status, again.attempts, again.error, again.worker_id) == ("pending", 0, None, None)
        assert again.run_at >= before and len(again.history) == 1 and again.cancel_requested is False
        assert await queue.requeue([1], "job-1") is False
        assert await queue.requeue([], "job-1") is False

    async def test_cancel(self, queue: JobQueue) -> None:
        await queue.enqueue_many([job("running"), job("waiting")])
        assert (await claim_one(queue, "w1")).id == "running"  # enqueued first, so claimed first
        assert await queue.cancel([2], "waiting") is False
        assert await queue.cancel([1], "waiting") is True
        cancelled = await queue.get_job([1], "waiting")
        assert cancelled is not None and (cancelled.status, cancelled.worker_id) == ("cancelled", None)
        assert await queue.cancel([1], "running") is True
        assert await queue.cancel([1], "running") is True  # asked again: still a running job under cancel
        flagged = await queue.get_job([1], "running")
        assert flagged is not None and (flagged.status, flagged.cancel_requested) == ("running", True)
        assert await queue.cancel([1], "waiting") is False
        assert await queue.cancel([1], "missing") is False
        assert await queue.cancel([], "running") is False

    async def test_a_repeated_cancel_of_a_running_job_changes_nothing(self, queue: JobQueue, advance: Advance) -> None:
        await queue.enqueue_many([job("running"), job("other")])
        await claim_one(queue, "w1")
        assert await queue.cancel([1], "running") is True
        asked = await queue.get_job([1], "running")
        await advance(5)
        await queue.claim(worker_id="w2", lease_ms=60_000, limit=1)  # "other" is now the newest change
        await advance(5)
        assert await queue.cancel([1], "running") is True  # asked again: still a running job under cancel
        again = await queue.get_job([1], "running")
        assert asked is not None and again == asked  # updated_at included: the second ask changed nothing
        assert [j.id for j in (await queue.list_jobs(space_ids=[1])).jobs] == ["other", "running"]

    async def test_cancel_pending_by_key(self, queue: JobQueue) -> None:
        for n in range(4):
            await queue.enqueue(job(f"k{n}", key="digest"))
        await queue.enqueue(job("other-key", key="other"))
        await queue.enqueue(job("other-space", space_id=2, key="digest"))
        assert await queue.cancel_pending(space_id=1, key="digest", older_than="k2") == 2
        statuses = {j.id: j.status for j in (await queue.list_jobs(space_ids=[1, 2])).jobs}
        assert statuses == {
            "k0": "cancelled",
            "k1": "cancelled",
            "k2": "pending",
            "k3": "pending",
            "other-key": "pending",
            "other-space": "pending",
        }
        assert await queue.cancel_pending(space_id=1, key="digest", older_than="unknown") == 0
        await claim_one(queue, "w1")  # k2 (oldest pending) starts running and must be left alone
        assert await queue.cancel_pending(space_id=1, key="digest") == 1
        found = await queue.get_job([1], "k2")
        assert found is not None and found.status == "running"

    async def test_cancel_pending_orders_by_enqueue_within_a_millisecond(self, queue: JobQueue) -> None:
        await queue.enqueue_many([job(f"same-ms-{n}", key="k") for n in range(6)])
        assert await queue.cancel_pending(space_id=1, key="k", older_than="same-ms-3") == 3
        page = await queue.list_jobs(space_ids=[1], status="pending")
        assert sorted(j.id for j in page.jobs) == ["same-ms-3", "same-ms-4", "same-ms-5"]
