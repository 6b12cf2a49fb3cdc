"""Groups a claim found at their concurrency limit, kept for a moment so the next claims read past them at once.

A saturated group's waiting jobs come first in claim order while its slots are all taken; without this, every
claim would read them, read the group's slots, refuse them and read again past them, stepping over the whole
backlog in the `job_claim` index (which holds no action), so claims of every other action would pay for the
saturated one (bench/limits.py, "claims beside a saturated action").

So a claim that had to read past saturated groups remembers them, and where each priority's first other job was
then (every job of that priority due before it belonged to those groups). For `SATURATED_MS` the next claims
read each priority from that point on with the groups left out: one read, as cheap as with no limits. The memory
ends early when this queue frees a slot of one of the groups (a settle, a give-back: its own workers claim the
slot at once); a slot freed by another replica is seen when the memory ends, within `SATURATED_MS`. A job of
another group made due before that point meanwhile (a resumed pause, an enqueue due in the past) also waits at
most that long. A group held at its rate is remembered until its window next lets a start in, at most as long: the
oldest start its claim read leaves the window then (starts are never handed back, so no window opens sooner), and
the claims from that instant on read the group again. Lapsed leases are read as ever, the groups' included: a
lapsed job's slot is free, and its takeover uses it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from ..contract.limits import Group
from .claim_values import Candidate

#: How long claims read past the groups a claim found saturated, unless this queue frees one of their slots.
SATURATED_MS = 200
#: Beyond this many groups (many saturated `by_key` groups) none is remembered: each claim reads and plans.
MAX_REMEMBERED = 16
#: The start of a priority with no point known: its read starts at its oldest job.
FROM_THE_START = -(2**62)


class SaturatedGroups:
    def __init__(self) -> None:
        self._groups: dict[str, tuple[Group, bool]] = {}  # group prefix -> (group, whether it is one key's)
        self._from: dict[int, int] = {}  # priority -> run_at its reads start at
        self._since = self._until = 0
        #: Counts this queue's frees: a claim that read slots before the last one must not remember what it saw.
        self.frees = 0

    def remember(
        self, refused: Mapping[Group, bool], full: set[Group], opens: Mapping[Group, int],
        past: Sequence[Candidate], prefix_of: Callable[[Group], str], now: int, frees: int,
    ) -> None:  # fmt: skip
        """After a claim refused these groups (`full`: those at their concurrency limit, the others at their rate,
        whose window next lets a start in at `opens`) and, if it had to, read past them (`past`: what that read
        found, in claim order). The memory runs `SATURATED_MS` from the claim that started it, however many claims
        refuse the groups again, and ends sooner when a rate's window opens: then a claim reads them again.
        `frees`: the count of frees when the claim started (a slot freed since may be one it saw taken)."""
        if not refused or frees != self.frees:
            return
        rated = set(refused) - full
        if len(refused) > MAX_REMEMBERED or any(group not in opens for group in rated):
            self.forget()  # too many groups to leave out, or a rate whose window's opening is not known
            return
        if not self._live(now):
            self.forget()
            self._since, self._until = now, now + SATURATED_MS
        self._until = min([self._until, *(opens[group] for group in rated)])  # the first start a window lets in
        self._groups.update({prefix_of(group): (group, by_key) for group, by_key in refused.items()})
        for _seq, run_at, lapsed, priority in past:
            # The first of each priority, in claim order: every job of it due before was one of these groups'.
            if not lapsed and priority not in self._from:
                self._from[priority] = run_at

    def starts_at(self, priority: int, run_at: int) -> None:
        """A read of this priority past the groups found its first other job here: the next reads start here."""
        if self._groups:
            self._from[priority] = run_at

    def freed(self, prefixes: Iterable[str]) -> None:
        """This queue freed slots of these groups (their prefixes): claims read them again from now on."""
        self.frees += 1
        if self._groups and any(prefix in self._groups for prefix in prefixes):
            self.forget()

    def forget(self) -> None:
        self._groups, self._from = {}, {}
        self._until = 0

    def _live(self, now: int) -> bool:
        return self._since <= now < self._until  # a clock that went back ends the memory too

    def past(self, now: int) -> tuple[list[tuple[Group, bool]], dict[int, int]]:
        """The groups a claim's reads leave out now, and where each priority's read starts (none: read all)."""
        if not self._groups or not self._live(now):
            self.forget()
            return [], {}
        return list(self._groups.values()), self._from
