"""A worker's store calls, each bounded in time: a connection gone silent must not hold a lease's work forever."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

from ..errors import StoreUnavailableError

# The worker's logger: operators filter on one name for everything a worker does.
logger = logging.getLogger("plitzi_jobs_mysql.worker")

#: A store call that has not answered within a third of the lease (a claim: the lease; never less than this) is
#: abandoned: its connection went silent (a failover that moved the server's address, a NAT or firewall dropping
#: the flow, no FIN and no RST), and TCP would take about 15 minutes to say so, long after the lease lapsed under a
#: running handler. The floor keeps a merely slow call on a busy machine from being cut (which costs a reconnect)
#: under short leases.
MIN_CALL_BOUND_S: Final = 2.0
#: Exception text recorded on a job is clipped to this: the store refuses errors over 65,535 characters, and a
#: settle that fails on an enormous message would leave the job to its lease instead of recording the failure.
ERROR_CLIP_CHARS: Final = 4_000
T = TypeVar("T")


class StoreCallAbandoned(StoreUnavailableError):
    """A store call given up on after its time bound (which it took, so retrying at once is no hot loop)."""


def call_bound_s(lease_ms: int) -> float:
    """How long a heartbeat, settle or kv call may take under leases of `lease_ms`."""
    return max(lease_ms / 3000, MIN_CALL_BOUND_S)


async def bounded(what: str, call: Coroutine[Any, Any, T], seconds: float) -> T:
    """`call`, abandoned when the store does not answer in `seconds` (cancelling it closes its connection, so the
    pool opens a fresh one), as a StoreUnavailableError an operator can act on."""
    timer = asyncio.timeout(seconds)
    try:
        async with timer:
            return await call
    except TimeoutError:
        if not timer.expired():
            raise
        raise StoreCallAbandoned(
            f"the store did not answer {what} within {seconds:g} s; abandoned that connection (a connection gone "
            "silent: a failover that moved the server's address, or a NAT or firewall dropping the flow?)"
        ) from None


def log_error(error: BaseException) -> None:
    """`on_error`'s default: the error, with its traceback, on the worker's logger."""
    logger.error("job worker error", exc_info=error)


def clip(text: str, limit: int = ERROR_CLIP_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(error: BaseException) -> str:
    """An error as one line for a log or a job's `error`: its type and message, clipped."""
    message = str(error)
    return clip(f"{type(error).__name__}: {message}" if message else type(error).__name__)
