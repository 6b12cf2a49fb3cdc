"""Declared actions (API.md, "Declared actions"; issue 23.1): a registry of async functions with their own policies
that is a job handler, and enqueues with what each action declares."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

import pytest

from plitzi_jobs_mysql import ActionLimit, Actions, Job, JobInput, PermanentFailure, RetryLater
from plitzi_jobs_mysql.memory import create_memory_job_queue
from plitzi_jobs_mysql.runtime.worker import JobWorker

from ..support import Clock, T, job, wait_for_job


def fixed_queue() -> tuple[Clock, Any]:
    clock = Clock(T)
    return clock, create_memory_job_queue(clock=clock)


async def run_once(worker: JobWorker) -> None:
    assert await worker.poll() == 1
    await worker.idle()


# -- declaring ------------------------------------------------------------------------------------------------


def test_a_declaration_is_checked_when_it_is_made() -> None:
    actions = Actions()

    async def noop(job: Job) -> None:
        return None

    actions.action("a", priority=-100, limit=ActionLimit(concurrency=2))(noop)
    with pytest.raises(ValueError, match="'a' is declared twice"):
        actions.action("a")(noop)
    bad: list[tuple[dict[str, Any], type[Exception], str]] = [
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"priority": 101}, ValueError, "priority"),
        ({"priority": True}, TypeError, "priority"),
        ({"limit": {"concurrency": 1}}, TypeError, "limit must be an ActionLimit"),
        ({"timeout_s": 0}, ValueError, "timeout_s"),
        ({"timeout_s": float("inf")}, ValueError, "timeout_s"),
        ({"timeout_s": "5"}, TypeError, "timeout_s"),
        ({"backoff_base_ms": -1}, ValueError, "backoff_base_ms"),
        ({"backoff_base_ms": 10, "backoff_max_ms": 5}, ValueError, "backoff_max_ms"),
        ({"input_type": dict}, TypeError, "input_type"),
    ]
    for index, (options, error, names) in enumerate(bad):
        with pytest.raises(error, match=names):
            actions.action(f"bad-{index}", **options)(noop)
    with pytest.raises(ValueError, match="action id must not be empty"):
        actions.action("")(noop)
    with pytest.raises(TypeError, match=r"must be an async function \(async def\)"):
        actions.action("sync")(lambda job: None)
    assert list(actions) == ["a"]  # nothing refused was kept
    assert actions["a"].priority == -100
    assert dict(actions.limits) == {"a": ActionLimit(concurrency=2)}


# -- enqueueing -----------------------------------------------------------------------------------------------


async def test_enqueue_fills_what_the_declaration_knows() -> None:
    _, queue = fixed_queue()
    actions = Actions()

    @actions.action("send-welcome", max_attempts=5, priority=-7)
    async def send_welcome(job: Job) -> None:
        return None

    made = await actions.enqueue(queue, "send-welcome", {"user": 42}, space_id=1)
    assert str(uuid.UUID(made)) == made  # a derived id: a random UUID
    found = await queue.get_job([1], made)
    assert found is not None
    assert (found.action_id, found.input, found.max_attempts, found.priority) == ("send-welcome", {"user": 42}, 5, -7)
    assert (found.environment, found.trigger, found.key, found.due_at) == ("main", "api", None, T)

    later = await actions.enqueue(queue, "send-welcome", None, space_id=1, delay_ms=60_000, key="u42", trigger="x")
    at = await actions.enqueue(queue, "send-welcome", {}, space_id=1, at=T + 5)
    assert [(j.due_at, j.key, j.trigger, j.input) for j in [await queue.get_job([1], i) for i in (later, at)] if j] == [
        (T + 60_000, "u42", "x", {}),
        (T + 5, None, "api", {}),
    ]
    # An id given is the write's idempotency: the second write answers the same id and changes nothing.
    assert await actions.enqueue(queue, "send-welcome", {"n": 1}, space_id=1, id="welcome-42") == "welcome-42"
    assert await actions.enqueue(queue, "send-welcome", {"n": 2}, space_id=1, id="welcome-42") == "welcome-42"
    again = await queue.get_job([1], "welcome-42")
    assert again is not None and again.input == {"n": 1}


async def test_enqueue_refuses_before_writing() -> None:
    _, queue = fixed_queue()
    actions = Actions()

    @actions.action("a")
    async def a(job: Job) -> None:
        return None

    with pytest.raises(ValueError, match="action 'b' is not declared"):
        await actions.enqueue(queue, "b", {}, space_id=1)
    with pytest.raises(ValueError, match="delay_ms or at"):
        await actions.enqueue(queue, "a", {}, space_id=1, delay_ms=1, at=T)
    with pytest.raises(ValueError, match="delay_ms"):
        await actions.enqueue(queue, "a", {}, space_id=1, delay_ms=-1)
    with pytest.raises(TypeError, match="space_id"):
        await actions.enqueue(queue, "a", {}, space_id="1")  # type: ignore[arg-type]
    with pytest.raises(
        (TypeError, ValueError), match="connection"
    ):  # the memory queue writes in no caller's transaction
        await actions.enqueue(queue, "a", {}, space_id=1, connection=object())
    assert (await queue.list_jobs(space_ids=[1])).total == 0


# -- typed input ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Welcome:
    user: int
    lang: str = "en"


class Model:
    """A pydantic-style model: `model_validate` and `model_dump`."""

    def __init__(self, user: int) -> None:
        self.user = user

    @classmethod
    def model_validate(cls, data: dict[str, Any]) -> Model:
        if not isinstance(data.get("user"), int):
            raise ValueError("user: an int is required")
        return cls(data["user"])

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return {"user": self.user}


async def test_a_typed_input_is_checked_before_the_write_and_handed_to_the_function_decoded() -> None:
    _, queue = fixed_queue()
    actions = Actions()
    seen: list[object] = []

    @actions.action("dc", input_type=Welcome)
    async def dc(job: Job, welcome: Welcome) -> None:
        seen.append(welcome)

    @actions.action("model", input_type=Model)
    async def model(job: Job, value: Model) -> None:
        seen.append(value.user)

    first = await actions.enqueue(queue, "dc", Welcome(user=1), space_id=1)
    second = await actions.enqueue(queue, "dc", {"user": 2, "lang": "de"}, space_id=1)
    third = await actions.enqueue(queue, "model", {"user": 3}, space_id=1)
    stored = [await queue.get_job([1], i) for i in (first, second, third)]
    assert [j.input for j in stored if j] == [{"user": 1, "lang": "en"}, {"user": 2, "lang": "de"}, {"user": 3}]
    with pytest.raises(TypeError, match=r"input of action 'dc'.*unexpected keyword argument 'name'"):
        await actions.enqueue(queue, "dc", {"user": 1, "name": "x"}, space_id=1)
    with pytest.raises(TypeError, match=r"input of action 'dc'.*expected a Welcome or a dict"):
        await actions.enqueue(queue, "dc", [1], space_id=1)
    with pytest.raises(ValueError, match="input of action 'model': user: an int is required"):
        await actions.enqueue(queue, "model", {"user": "x"}, space_id=1)
    assert (await queue.list_jobs(space_ids=[1])).total == 3

    worker = JobWorker(queue=queue, handler=actions, worker_id="w1", workers=1)
    for _ in range(3):
        await run_once(worker)
    assert sorted(map(str, seen)) == sorted(map(str, [Welcome(1), Welcome(2, "de"), 3]))

    # A stored input that no longer fits (written some other way, or by an older version): dead at once.
    await queue.enqueue(job("old", action_id="dc", input={"who": 1}, due_at=T))
    await run_once(worker)
    dead = await wait_for_job(queue, "old", "dead")
    assert dead.attempts == 1 and "does not fit Welcome" in (dead.error or "")


# -- running --------------------------------------------------------------------------------------------------


async def test_an_undeclared_action_is_a_permanent_failure_naming_it() -> None:
    _, queue = fixed_queue()
    actions = Actions()
    await queue.enqueue(job("x", action_id="nobody", due_at=T))
    await run_once(JobWorker(queue=queue, handler=actions, worker_id="w1"))
    found = await wait_for_job(queue, "x", "dead")
    assert found.attempts == 1 and found.error == "action 'nobody' is not declared (declared: none)"


async def test_the_declared_backoff_drives_the_delay_of_a_failed_attempt() -> None:
    clock, queue = fixed_queue()
    actions = Actions(random=lambda: 0.5)

    @actions.action("flaky", max_attempts=3, backoff_base_ms=2_000, backoff_max_ms=3_000)
    async def flaky(job: Job) -> None:
        raise RuntimeError(f"broken on attempt {job.attempts}")

    made = await actions.enqueue(queue, "flaky", {}, space_id=1)
    # The worker's own backoff is far longer: the declaration's wins.
    worker = JobWorker(queue=queue, handler=actions, worker_id="w1", backoff_base_ms=600_000)
    for attempt, delay in ((1, 2_000 + 1_000), (2, 3_000 + 1_500)):  # doubling, capped at 3 s, plus jitter
        await run_once(worker)
        found = await wait_for_job(queue, made, "pending")
        assert (found.attempts, found.run_at - clock.now) == (attempt, delay)
        assert found.history[-1].error == f"RuntimeError: broken on attempt {attempt}"
        clock.now = found.run_at
    await run_once(worker)
    dead = await wait_for_job(queue, made, "dead")
    assert dead.attempts == 3 and [a.status for a in dead.history] == ["failed"] * 3


async def test_permanent_failure_and_retry_later_keep_their_meaning() -> None:
    clock, queue = fixed_queue()
    actions = Actions(random=lambda: 0.0)

    @actions.action("give-up")
    async def give_up(job: Job) -> None:
        raise PermanentFailure("no such user")

    @actions.action("not-now", backoff_base_ms=7_000)
    async def not_now(job: Job) -> None:
        raise RetryLater("busy")

    @actions.action("in-5", backoff_base_ms=7_000)
    async def in_five(job: Job) -> None:
        raise RetryLater("busy", delay_ms=5)

    ids = [await actions.enqueue(queue, name, {}, space_id=1) for name in ("give-up", "not-now", "in-5")]
    worker = JobWorker(queue=queue, handler=actions, worker_id="w1", workers=3)
    assert await worker.poll() == 3
    await worker.idle()
    dead = await wait_for_job(queue, ids[0], "dead")
    assert (dead.attempts, dead.error) == (1, "no such user")
    later = [await wait_for_job(queue, i, "pending") for i in ids[1:]]
    # RetryLater refunds the attempt; without a delay of its own, the action's first backoff step.
    assert [(j.attempts, j.run_at - clock.now) for j in later] == [(0, 7_000), (0, 5)]


async def test_a_run_past_its_time_limit_is_cancelled_and_the_attempt_fails_saying_so() -> None:
    clock, queue = fixed_queue()
    actions = Actions(random=lambda: 0.0)
    cancelled = asyncio.Event()

    @actions.action("slow", timeout_s=0.05, max_attempts=2, backoff_base_ms=1_000)
    async def slow(job: Job) -> None:
        try:
            await asyncio.Event().wait()  # never set: only the time limit ends it
        except asyncio.CancelledError:
            cancelled.set()
            raise

    @actions.action("own-timeout", timeout_s=60)
    async def own_timeout(job: Job) -> None:
        raise TimeoutError("the mail server did not answer")

    made = await actions.enqueue(queue, "slow", {}, space_id=1)
    worker = JobWorker(queue=queue, handler=actions, worker_id="w1")
    await run_once(worker)
    assert cancelled.is_set()
    found = await wait_for_job(queue, made, "pending")
    assert found.attempts == 1 and found.run_at - clock.now == 1_000
    assert found.history[-1].error == (
        "TimeoutError: action 'slow' ran past its time limit of 0.05s (timeout_s); its run was cancelled"
    )
    clock.now = found.run_at
    await run_once(worker)
    assert (await wait_for_job(queue, made, "dead")).attempts == 2

    other = await actions.enqueue(queue, "own-timeout", {}, space_id=1)
    await run_once(worker)
    mine = await wait_for_job(queue, other, "pending")
    assert mine.history[-1].error == "TimeoutError: the mail server did not answer"


async def test_an_operators_cancel_still_cancels_a_declared_action() -> None:
    _, queue = fixed_queue()
    actions = Actions()
    started = asyncio.Event()

    @actions.action("wait", timeout_s=60)
    async def wait(job: Job) -> None:
        started.set()
        await asyncio.Event().wait()

    made = await actions.enqueue(queue, "wait", {}, space_id=1)
    worker = JobWorker(queue=queue, handler=actions, worker_id="w1")
    assert await worker.poll() == 1
    await started.wait()
    assert await queue.cancel([1], made)
    await worker.beat()  # the heartbeat hears the cancel
    await worker.idle()
    assert (await wait_for_job(queue, made, "cancelled")).error == "cancelled by an operator"


async def test_a_plain_handler_and_a_successful_action_return_the_run_id() -> None:
    _, queue = fixed_queue()
    actions = Actions()

    @actions.action("ok")
    async def ok(job: Job) -> str:
        return f"run-{job.input['n']}"

    made = await actions.enqueue(queue, "ok", {"n": 7}, space_id=1)
    await run_once(JobWorker(queue=queue, handler=actions, worker_id="w1"))
    assert (await wait_for_job(queue, made, "succeeded")).run_id == "run-7"
    assert isinstance(job("x"), JobInput)  # plain handlers and JobInput are as they were (test_worker_* cover them)
