"""What stops a runtime for good: a store that refuses its tables (`SchemaMismatchError`: the TypeScript
original's, a newer release's, or missing columns) answers every call the same until someone migrates them, so
polling on would only log the same refusal again and again. Whichever part meets it first (the worker's claim,
the scheduler's sweep) logs it ONCE, with the fix it names, and every part sharing the `Halt` stops."""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..errors import SchemaMismatchError
from .options import ErrorHandler


class Halt:
    """Shared by the worker and the scheduler of one `create_action_jobs` (each has its own otherwise)."""

    def __init__(self) -> None:
        self.error: SchemaMismatchError | None = None
        self._stops: list[Callable[[], None]] = []

    def when_tripped(self, stop: Callable[[], None]) -> None:
        self._stops.append(stop)

    def trip(self, error: SchemaMismatchError, log: logging.Logger, what: str, on_error: ErrorHandler | None) -> None:
        """Records the refusal (the first one only), logs it once on `log`, and stops everyone sharing this."""
        if self.error is not None:
            return
        self.error = error
        log.error("%s, for good: %s", what, error)
        if on_error is not None:
            on_error(error)
        for stop in self._stops:
            stop()
