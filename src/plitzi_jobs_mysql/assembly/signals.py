"""Stops the jobs (or a server) when the process is told to stop, and only then lets the process exit.

`stop()` already does the waiting (the worker stops claiming, finishes what it runs, keeps its leases), but
nothing calls it when a deploy sends SIGTERM, and a process that simply exits leaves every running job to be
retried by somebody else. This is that call, for a deployment with no signal handling of its own. A host that
manages its own signals calls `stop()` from there instead.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import signal as signal_module
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

logger = logging.getLogger("plitzi_jobs_mysql.signals")

DEFAULT_SIGNALS = (signal_module.SIGTERM, signal_module.SIGINT)


def _exit(status: int) -> None:
    """Ends the process now, as a deploy expects, after flushing what was logged and printed.

    `os._exit` rather than `SystemExit`: raised inside the loop, that would be caught by whatever runs it,
    wait on non-daemon threads, or be swallowed by a framework; a process told to stop must stop.
    """
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(status)


def _closer(closable: object) -> Callable[[], Any]:
    for name in ("stop", "close"):
        method = getattr(closable, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    raise TypeError("closable must have an async stop() or close()")


def close_on_signals(
    closable: object,
    *,
    signals: Sequence[signal_module.Signals | int] = DEFAULT_SIGNALS,
    after_close: Callable[[], Awaitable[Any] | Any] | None = None,
) -> Callable[[], None]:
    """On the first of `signals`: await `closable.stop()` (or `.close()`), then `after_close()` (sync or
    async), then end the process with status 0, or 1 if closing raised. A second signal while closing ends it
    at once with status 1: the ^C a person presses when waiting is not what they want.

    Call it inside the running event loop. Answers a function that removes the handlers again.
    """
    close = _closer(closable)
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []

    async def shut_down() -> None:
        try:
            result = close()
            if inspect.isawaitable(result):
                await result
            if after_close is not None:
                extra = after_close()
                if inspect.isawaitable(extra):
                    await extra
        except BaseException:
            logger.exception("could not close cleanly")
            _exit(1)
        else:
            logger.info("closed; exiting")
            _exit(0)

    def on_signal(signum: int) -> None:
        name = signal_module.Signals(signum).name
        if closing:
            logger.warning("%s again: exiting without waiting", name)
            _exit(1)
            return
        logger.info("%s: finishing what is running, then exiting", name)
        closing.append(loop.create_task(shut_down(), name="close on signal"))

    installed = [signal_module.Signals(s) for s in signals]
    for signum in installed:
        loop.add_signal_handler(signum, on_signal, int(signum))

    def remove() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return remove
