"""Declared actions: each action an async function with its own policy, the whole registry one job handler.

`Actions` is what a worker runs (`handler=actions`): it looks up the function declared for `job.action_id` and runs
it under that action's time limit and retry policy. It is also how jobs are written: `actions.enqueue` fills what
the declaration knows (attempts, the due instant from the store's clock, an id) so the caller names only the
action, its input and the space.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, TypeVar

from ..contract import validation as check
from ..contract.clock import to_epoch_ms
from ..contract.protocols import JobQueue
from ..records import ActionLimit, Job, JobInput
from .handler import AttemptFailed, PermanentFailure, RetryLater
from .retry import RetryPolicy

__all__ = ["ActionFunction", "Actions", "DeclaredAction"]

#: A declared action's function: `fn(job)`, or `fn(job, input)` when the action declares an `input_type`.
ActionFunction = Callable[..., Awaitable[str | None]]
F = TypeVar("F", bound=ActionFunction)
PRIORITY_MIN: Final = -100
PRIORITY_MAX: Final = 100


@dataclass(frozen=True, kw_only=True)
class DeclaredAction:
    """One action as `@actions.action(...)` declared it."""

    id: str
    function: ActionFunction
    max_attempts: int = 3
    backoff_base_ms: int = 30_000
    backoff_max_ms: int = 900_000
    timeout_s: float | None = None
    priority: int = 0
    limit: ActionLimit | None = None
    input_type: type | None = None

    def __post_init__(self) -> None:
        check.text("action id", self.id, check.ID_MAX_CHARS)
        function = self.function
        if not (inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__)):
            raise TypeError(f"action {self.id!r}: what is declared must be an async function (async def)")
        check.integer("max_attempts", self.max_attempts, 1, check.MAX_INT32)
        check.duration_ms("backoff_base_ms", self.backoff_base_ms, allow_zero=True)
        check.duration_ms("backoff_max_ms", self.backoff_max_ms, allow_zero=True)
        if self.backoff_max_ms < self.backoff_base_ms:
            raise ValueError(
                f"action {self.id!r}: backoff_max_ms ({self.backoff_max_ms}) is below backoff_base_ms "
                f"({self.backoff_base_ms})"
            )
        timeout = self.timeout_s
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
                raise TypeError(f"timeout_s must be a number of seconds or None, not {type(timeout).__name__}")
            if not (math.isfinite(timeout) and 0 < timeout <= check.MAX_DURATION_MS / 1000):
                raise ValueError(f"timeout_s must be a positive, finite number of seconds, got {timeout!r}")
        check.integer("priority", self.priority, PRIORITY_MIN, PRIORITY_MAX)
        if self.limit is not None and not isinstance(self.limit, ActionLimit):
            raise TypeError(f"limit must be an ActionLimit or None, not {type(self.limit).__name__}")
        kind = self.input_type
        if kind is not None and not (
            isinstance(kind, type)
            and (dataclasses.is_dataclass(kind) or callable(getattr(kind, "model_validate", None)))
        ):
            raise TypeError("input_type must be a dataclass or a model class with model_validate (pydantic-style)")

    def retry(self, chance: Callable[[], float] = random.random) -> RetryPolicy:
        return RetryPolicy(base_ms=self.backoff_base_ms, max_ms=self.backoff_max_ms, random=chance)

    def encode(self, value: object) -> dict[str, Any]:
        """The job input stored for `value`: checked against `input_type` first, so a bad input is refused before
        anything is written. Without an input type, `value` is the input as given (None: `{}`)."""
        kind = self.input_type
        if value is None:
            value = {}
        if kind is None:
            return value  # type: ignore[return-value]  # the queue's own check names what is wrong with it
        try:
            if isinstance(value, kind):
                model = value
            elif isinstance(value, Mapping):
                model = self._build(dict(value))
            else:
                raise TypeError(f"expected a {kind.__name__} or a dict, got {type(value).__name__}")
            return self._dump(model)
        except TypeError as error:
            raise TypeError(f"input of action {self.id!r}: {error}") from error
        except Exception as error:  # a ValueError, or a model library's own ValidationError
            raise ValueError(f"input of action {self.id!r}: {error}") from error

    def decode(self, job: Job) -> object:
        """The job's input as the function receives it: an `input_type` instance (None without one)."""
        return None if self.input_type is None else self._build(dict(job.input))

    def _build(self, data: dict[str, Any]) -> object:
        kind = self.input_type
        assert kind is not None
        if dataclasses.is_dataclass(kind):
            return kind(**data)  # an unknown or missing field is a TypeError naming it
        return kind.model_validate(data)  # type: ignore[attr-defined]

    def _dump(self, model: object) -> dict[str, Any]:
        if dataclasses.is_dataclass(model) and not isinstance(model, type):
            return dataclasses.asdict(model)
        dump = model.model_dump  # type: ignore[attr-defined]
        try:
            return dict(dump(mode="json"))  # pydantic 2: dates and decimals as JSON text
        except TypeError:
            return dict(dump())


class Actions:
    """A registry of declared actions, and the job handler that runs them (see API.md, "Declared actions").
    `random` (answering a float in [0, 1)) is the retry jitter's only source of chance."""

    def __init__(self, *, random: Callable[[], float] = random.random) -> None:
        self._declared: dict[str, DeclaredAction] = {}
        self._random = random

    def action(
        self,
        id: str,
        *,
        max_attempts: int = 3,
        backoff_base_ms: int = 30_000,
        backoff_max_ms: int = 900_000,
        timeout_s: float | None = None,
        priority: int = 0,
        limit: ActionLimit | None = None,
        input_type: type | None = None,
    ) -> Callable[[F], F]:
        """Declares the decorated async function as action `id`. Everything is checked here, when the module
        loads; a second declaration of one id is a `ValueError`."""

        def declare(function: F) -> F:
            declared = DeclaredAction(
                id=id,
                function=function,
                max_attempts=max_attempts,
                backoff_base_ms=backoff_base_ms,
                backoff_max_ms=backoff_max_ms,
                timeout_s=timeout_s,
                priority=priority,
                limit=limit,
                input_type=input_type,
            )
            if id in self._declared:
                raise ValueError(f"action {id!r} is declared twice")
            self._declared[id] = declared
            return function

        return declare

    # -- what is declared ------------------------------------------------------------------------------------

    def __getitem__(self, action_id: str) -> DeclaredAction:
        return self._declared[action_id]

    def __contains__(self, action_id: object) -> bool:
        return action_id in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)

    @property
    def limits(self) -> Mapping[str, ActionLimit]:
        """The declared limits by action id, as `create_job_worker(..., limits=)` takes them."""
        return MappingProxyType({key: d.limit for key, d in self._declared.items() if d.limit is not None})

    # -- writing jobs ----------------------------------------------------------------------------------------

    async def enqueue(
        self,
        queue: JobQueue,
        action_id: str,
        input: object = None,
        /,
        *,
        space_id: int,
        id: str | None = None,
        delay_ms: int | None = None,
        at: int | None = None,
        key: str | None = None,
        environment: str = "main",
        trigger: str = "api",
        connection: Any = None,
    ) -> str:
        """Writes a job of a declared action and answers its id, whether the job is new or one with that id was
        already there (give `id` to make a write idempotent; without it a fresh random id is made each call).
        Due at the store's now, plus `delay_ms`, or at `at` (epoch ms of the store's clock)."""
        declared = self._declared.get(action_id) if isinstance(action_id, str) else None
        if declared is None:
            raise ValueError(f"action {action_id!r} is not declared (declared: {self._names()})")
        if delay_ms is not None and at is not None:
            raise ValueError("give delay_ms or at, not both")
        if at is not None:
            due_at = check.instant("at", at)
        else:
            delay = 0 if delay_ms is None else check.duration_ms("delay_ms", delay_ms, allow_zero=True)
            due_at = to_epoch_ms(await queue.now()) + delay
        job = self.job_input(
            declared,
            declared.encode(input),
            space_id=space_id,
            id=new_job_id() if id is None else id,
            due_at=due_at,
            key=key,
            environment=environment,
            trigger=trigger,
        )
        if connection is None:
            await queue.enqueue(job)
        else:  # a queue that writes in the caller's transaction (API.md, "Your transaction")
            await queue.enqueue(job, connection=connection)  # type: ignore[call-arg]
        return job.id

    def job_input(
        self,
        declared: DeclaredAction,
        input: dict[str, Any],
        *,
        space_id: int,
        id: str,
        due_at: int,
        key: str | None,
        environment: str,
        trigger: str,
    ) -> JobInput:
        """The one place a declaration becomes a job: its max_attempts and priority come from the declaration."""
        return JobInput(
            id=id,
            space_id=space_id,
            action_id=declared.id,
            environment=environment,
            trigger=trigger,
            input=input,
            due_at=due_at,
            max_attempts=declared.max_attempts,
            key=key,
            priority=declared.priority,
        )

    # -- running jobs ----------------------------------------------------------------------------------------

    async def __call__(self, job: Job) -> str | None:
        """Runs the function declared for `job.action_id` under its time limit and retry policy."""
        declared = self._declared.get(job.action_id)
        if declared is None:
            raise PermanentFailure(f"action {job.action_id!r} is not declared (declared: {self._names()})")
        retry = declared.retry(self._random)
        try:
            args: tuple[object, ...] = (job,)
            if declared.input_type is not None:
                try:
                    args = (job, declared.decode(job))
                except Exception as error:  # the stored input will not change on a retry
                    raise PermanentFailure(
                        f"input of action {declared.id!r} does not fit {declared.input_type.__name__}: {error}"
                    ) from error
            return await _run_limited(declared, args)
        except (PermanentFailure, AttemptFailed):
            raise
        except RetryLater as later:
            if later.delay_ms is None:  # "not now", as far as this action's own backoff says
                raise RetryLater(later.reason, delay_ms=retry.backoff_ms(1)) from later
            raise
        except Exception as error:
            raise AttemptFailed(error, retry.backoff_ms(job.attempts)) from error

    def _names(self) -> str:
        return ", ".join(repr(name) for name in self._declared) or "none"


async def _run_limited(declared: DeclaredAction, args: tuple[object, ...]) -> str | None:
    """The function under its time limit: past it, the run's task is cancelled and a `TimeoutError` saying so is
    the attempt's error (a `TimeoutError` of the function's own passes as it is)."""
    if declared.timeout_s is None:
        return await declared.function(*args)
    limit = asyncio.timeout(declared.timeout_s)
    try:
        async with limit:
            return await declared.function(*args)
    except TimeoutError:
        if not limit.expired():
            raise
        raise TimeoutError(
            f"action {declared.id!r} ran past its time limit of {declared.timeout_s:g}s (timeout_s); its run was "
            "cancelled"
        ) from None


def new_job_id() -> str:
    """A job id nobody else makes: a random UUID (version 4), as text."""
    return str(uuid.uuid4())
