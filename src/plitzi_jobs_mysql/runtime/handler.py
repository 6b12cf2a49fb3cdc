"""What a job handler is, and what it may raise to say how its job goes on."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..records import Job

#: An async function of the claimed job; what it returns is recorded as the job's `run_id` (a `str`, or None).
#: Anything else (a dict, an int) is not recorded: the job still succeeds, and one WARNING names the job and the type.
JobHandler = Callable[[Job], Awaitable[str | None]]


class PermanentFailure(Exception):
    """Raised by a handler: retrying will not help. A 'failed' attempt (error = the message), and the job is
    dead."""


class RetryLater(Exception):
    """Raised by a handler: not now. The job goes back to the queue with its attempt refunded, after
    `delay_ms` (default: the first backoff step, with jitter). A `delay_ms` that is not a number of milliseconds
    (`inf`, `nan`, `"30.5"`) is the handler's bug: recorded as a failed attempt saying so, retried with backoff."""

    def __init__(self, reason: str = "", delay_ms: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay_ms = delay_ms


class AttemptFailed(Exception):
    """Raised by a handler that keeps its own retry policy (a declared action, `Actions`): this attempt failed
    with `error` and the job comes back after `delay_ms`, unless it has used all its attempts (then it is dead).
    Unlike `RetryLater`, the attempt counts. The recorded error is `error`'s, as for any other exception."""

    def __init__(self, error: BaseException, delay_ms: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.delay_ms = delay_ms
