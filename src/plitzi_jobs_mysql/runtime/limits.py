"""The worker's side of the fleet-wide limits (the store enforces them, contract/limits.py): which limits it
passes (its `limits=`, else those its declared `Actions` handler declares), and its `limited` events: a claim
reports each due job it left waiting, which on a saturated action is every claim; an operator needs to see it,
not hundreds of times a second."""

from __future__ import annotations

import inspect
import time
from dataclasses import replace
from typing import Any, Final

from ..contract.events import Emitter, JobEvent
from ..contract.protocols import JobQueue
from .actions import Actions
from .options import WorkerSettings

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


def limits_for(settings: WorkerSettings, handler: Any, queue: JobQueue) -> WorkerSettings:
    """The settings with the limits the worker passes; a queue whose `claim` cannot take them is a `TypeError`."""
    if settings.limits is None and isinstance(handler, Actions) and handler.limits:
        settings = replace(settings, limits=dict(handler.limits))
    if settings.limits and not {"limits", "on_limited"} <= inspect.signature(queue.claim).parameters.keys():
        raise TypeError(f"limits need a queue whose claim takes them; {type(queue).__name__}.claim does not")
    return settings
