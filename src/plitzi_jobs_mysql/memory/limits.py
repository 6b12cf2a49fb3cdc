"""The memory queue's fleet-wide limits (rules: contract/limits.py): per group, the claims holding a slot and the
ring of recent starts. One event loop runs the memory queue, so a check and its take cannot interleave."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..contract.events import limit_reached
from ..contract.limits import Group, LimitUsage, job_group
from ..records import ActionLimit, Job

#: Whether the job with this id is still `running` under a live lease by this claim (worker, claimed_at) at `at`.
HeldBy = Callable[[str, str, int, int], bool]


@dataclass
class MemoryLimits:
    # group -> (job_id, worker_id, claimed_at) of each slot taken; a holder that no longer runs is dropped lazily.
    _slots: dict[Group, list[tuple[str, str, int]]] = field(default_factory=dict)
    _starts: dict[Group, deque[int]] = field(default_factory=dict)
    _limits: dict[Group, ActionLimit] = field(default_factory=dict)  # as the last claim that met the group gave it

    def refuses(self, job: Job, limits: Mapping[str, ActionLimit], at: int, held_by: HeldBy) -> str | None:
        """None when a claim at `at` may start `job` now (without taking anything), else the limit it is at."""
        found = job_group(job, limits)
        if found is None:
            return None
        group, limit = found
        self._limits[group] = limit
        if limit.concurrency is not None:
            holders = [h for h in self._slots.get(group, []) if held_by(h[0], h[1], h[2], at)]
            self._slots[group] = holders
            if len(holders) >= limit.concurrency:
                return limit_reached(limit, True, job.key)
        if limit.rate is not None:
            starts = self._starts.setdefault(group, deque())
            while starts and starts[0] <= at - limit.per_ms:
                starts.popleft()
            if len(starts) >= limit.rate:
                return limit_reached(limit, False, job.key)
        return None

    def started(self, job: Job, limits: Mapping[str, ActionLimit], at: int) -> None:
        """Records the claim of `job` (as claimed, with its worker and claim instant) that `admits` allowed."""
        found = job_group(job, limits)
        if found is None:
            return
        group, limit = found
        if limit.concurrency is not None:
            self._slots.setdefault(group, []).append((job.id, job.worker_id or "", job.claimed_at or 0))
        if limit.rate is not None:
            self._starts.setdefault(group, deque()).append(at)

    def usage(self, spaces: list[int] | None, at: int, held_by: HeldBy) -> list[LimitUsage]:
        found = []
        for group, limit in sorted(self._limits.items(), key=lambda item: repr(item[0])):
            if spaces is not None and group[0] not in spaces:
                continue
            running = sum(1 for h in self._slots.get(group, []) if held_by(h[0], h[1], h[2], at))
            started = sum(1 for s in self._starts.get(group, ()) if s > at - limit.per_ms)
            space_id, action_id, key = group
            found.append(LimitUsage(space_id=space_id, action_id=action_id, key=key, concurrency=limit.concurrency,
                                    running=running, rate=limit.rate, per_ms=limit.per_ms,
                                    started=started))  # fmt: skip
        return found
