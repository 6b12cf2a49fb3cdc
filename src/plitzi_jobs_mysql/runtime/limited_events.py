"""The worker's `limited` events: a claim with `limits` reports each due job it left waiting, which on a saturated
action is every claim; an operator needs to see it, not hundreds of times a second."""

from __future__ import annotations

import time
from typing import Final

from ..contract.events import Emitter, JobEvent

#: One `limited` event per action (per space) and worker in this long, at most.
EVERY_S: Final = 1.0


class LimitedEvents:
    def __init__(self, emit: Emitter, every_s: float = EVERY_S) -> None:
        self._emit = emit
        self._every_s = every_s
        self._last: dict[tuple[int, str], float] = {}

    def __call__(self, event: JobEvent) -> None:
        now = time.monotonic()
        group = (event.space_id, event.action_id)
        last = self._last.get(group)
        if last is not None and now - last < self._every_s:
            return
        self._last[group] = now
        self._emit(event)
