"""The queue's contract for pauses (`Pausing`, API.md Extensions): claims skip the jobs of a paused space or
action until it is resumed; running jobs finish and settle; enqueues go on and their jobs wait."""

from __future__ import annotations

from typing import Any

import pytest

from ..contract.capabilities import Pausing
from ..contract.protocols import JobQueue
from ..contract.validation import ID_MAX_CHARS
from ..records import AttemptOutcome, PausedAction
from .support import Advance, claim_one, job, now_ms


def _pausing(store: object) -> Any:
    if not isinstance(store, Pausing):
        pytest.skip("the store does not offer Pausing")
    return store


async def _claimed(queue: JobQueue, limit: int = 10, worker: str = "w1", lease_ms: int = 60_000) -> list[str]:
    return sorted(j.id for j in await queue.claim(worker_id=worker, lease_ms=lease_ms, limit=limit))


class PauseContract:
    """`pause`, `resume`, `list_paused`: a part of `JobQueueContract`."""

    async def test_a_claim_skips_a_paused_action_and_takes_its_jobs_after_resume(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        emails = [job("e-1", action_id="emails"), job("e-2", action_id="emails")]
        await queue.enqueue_many([*emails, job("o-1", action_id="other"), job("e-3", action_id="emails", space_id=2)])
        await paused.pause(space_id=1, action_id="emails")
        assert await _claimed(queue) == ["e-3", "o-1"]  # the same action of another space is not paused
        assert await _claimed(queue) == []
        await paused.resume(space_id=1, action_id="emails")
        assert await _claimed(queue) == ["e-1", "e-2"]

    async def test_pausing_a_space_pauses_every_action_of_it_and_no_other_space(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        await queue.enqueue_many([job("a", action_id="a"), job("b", action_id="b"), job("there", space_id=2)])
        before = await now_ms(queue)
        await paused.pause(space_id=1)
        after = await now_ms(queue)
        [pause] = await paused.list_paused([1, 2])
        assert (pause.space_id, pause.action_id) == (1, None) and before <= pause.since <= after
        assert await _claimed(queue) == ["there"]
        await paused.resume(space_id=1)
        assert await paused.list_paused([1, 2]) == []
        assert await _claimed(queue) == ["a", "b"]

    async def test_running_jobs_finish_and_settle_under_a_pause(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        await queue.enqueue_many([job("runs"), job("again"), job("waits")])
        runs = await claim_one(queue, "w1")
        again = await claim_one(queue, "w1")
        await paused.pause(space_id=1, action_id=runs.action_id)
        assert await queue.heartbeat(job_ids=[runs.id, again.id], worker_id="w1", lease_ms=60_000) == []
        await queue.settle(job_id=runs.id, worker_id="w1", status="succeeded",
                           attempt=AttemptOutcome(status="succeeded", worker_id="w1"))  # fmt: skip
        found = await queue.get_job([1], runs.id)
        assert found is not None and found.status == "succeeded"
        # A job handed back under the pause waits with the others.
        await queue.settle(job_id=again.id, worker_id="w1", status="pending")
        assert await _claimed(queue) == []
        await paused.resume(space_id=1, action_id=runs.action_id)
        assert await _claimed(queue) == ["again", "waits"]

    async def test_jobs_enqueued_under_a_pause_wait_and_none_is_lost(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        await paused.pause(space_id=1)
        assert await queue.enqueue(job("one"))
        assert await queue.enqueue_many([job("two"), job("three", action_id="other")]) == [True, True]
        assert await _claimed(queue) == []
        stats = await queue.list_jobs(space_ids=[1], status="pending")
        assert stats.total == 3  # waiting, none dropped or cancelled
        await paused.resume(space_id=1)
        assert await _claimed(queue) == ["one", "three", "two"]

    async def test_a_lapsed_lease_of_a_paused_action_is_not_taken_over(self, queue: JobQueue, advance: Advance) -> None:
        paused: Pausing = _pausing(queue)
        await queue.enqueue(job("lapses"))
        held = await claim_one(queue, "gone", lease_ms=50)
        await paused.pause(space_id=1, action_id=held.action_id)
        await advance(51)
        assert await _claimed(queue, worker="w2") == []
        await paused.resume(space_id=1, action_id=held.action_id)
        taken = await claim_one(queue, "w2")
        assert taken.id == "lapses" and taken.attempts == 2

    async def test_a_job_cancelled_while_paused_stays_cancelled_after_resume(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        await queue.enqueue_many([job("keep"), job("drop")])
        await paused.pause(space_id=1)
        assert await _claimed(queue) == []  # a claim met both under the pause
        assert await queue.cancel([1], "drop")
        await paused.resume(space_id=1)
        assert await _claimed(queue) == ["keep"]
        found = await queue.get_job([1], "drop")
        assert found is not None and found.status == "cancelled"

    async def test_pausing_twice_or_resuming_what_is_not_paused_changes_nothing(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        await paused.resume(space_id=1)
        await paused.resume(space_id=1, action_id="never")
        assert await paused.list_paused([1]) == []
        await paused.pause(space_id=1, action_id="emails")
        [first] = await paused.list_paused([1])
        await paused.pause(space_id=1, action_id="emails")
        assert await paused.list_paused([1]) == [first]  # the first pause's instant stands
        await paused.resume(space_id=1)  # the space was not paused: the action's own pause stays
        assert await paused.list_paused([1]) == [first]
        await queue.enqueue(job("e", action_id="emails"))
        assert await _claimed(queue) == []

    async def test_list_paused_answers_the_spaces_asked_whole_space_first(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        await paused.pause(space_id=1, action_id="zeta")
        await paused.pause(space_id=2)
        await paused.pause(space_id=1, action_id="alpha")
        await paused.pause(space_id=1)
        await paused.pause(space_id=3, action_id="elsewhere")
        found = await paused.list_paused([2, 1])
        assert [(p.space_id, p.action_id) for p in found] == [(1, None), (1, "alpha"), (1, "zeta"), (2, None)]
        assert all(isinstance(p, PausedAction) for p in found)
        assert await paused.list_paused([]) == []

    async def test_bad_pause_input_is_refused_before_anything_is_written(self, queue: JobQueue) -> None:
        paused: Pausing = _pausing(queue)
        for call in (paused.pause, paused.resume):
            with pytest.raises(ValueError, match="action_id"):
                await call(space_id=1, action_id="")
            with pytest.raises(ValueError, match="action_id"):
                await call(space_id=1, action_id="x" * (ID_MAX_CHARS + 1))
            with pytest.raises(TypeError, match="space_id"):
                await call(space_id="1", action_id="a")  # type: ignore[arg-type]
            with pytest.raises(ValueError, match="space_id"):
                await call(space_id=2**63, action_id="a")
        with pytest.raises(TypeError, match="space_ids"):
            await paused.list_paused(1)  # type: ignore[arg-type]
        assert await paused.list_paused([1]) == []
