"""The slots one queue is done with, kept so that its next claim takes them without reading them first.

A slot's row names the job it counts (mysql/limits.py). Once this queue has settled that job, or given the slot
back, the row still holds the value this queue last wrote, and the slot counts nothing this queue runs. Its next
claim of the group may take it by a compare-and-set on that value, with no read: if another claimer took the slot
meanwhile (it saw it free), the value differs and the compare-and-set loses, a lost race like any other. So a
limit that never binds costs a claim one write for its slots, and no read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: (key as hex, the value this queue last wrote there).
Pooled = tuple[str, str]

#: Characters of a row key's group prefix: 0xFF and 16 bytes of digest, in hex.
GROUP_PREFIX_CHARS = 34
#: Beyond this many pooled slots (many `by_key` groups), the pool starts again empty: a claim then reads.
MAX_POOLED = 10_000


class SlotPool:
    def __init__(self, on_free: Callable[[set[str]], None] | None = None) -> None:
        self._by_group: dict[str, dict[str, str]] = {}
        self._count = 0
        self._on_free = on_free  # told the group prefixes of the slots each put brings

    def put(self, entries: Iterable[tuple[str, str | None]]) -> None:
        """Slots (key, value written) whose job this queue no longer runs."""
        prefixes: set[str] = set()
        for key, value in entries:
            if value is None or key[GROUP_PREFIX_CHARS : GROUP_PREFIX_CHARS + 2] != "63":  # 'c': a slot
                continue
            prefixes.add(key[:GROUP_PREFIX_CHARS])
            group = self._by_group.setdefault(key[:GROUP_PREFIX_CHARS], {})
            self._count += key not in group
            group[key] = value
        if prefixes and self._on_free is not None:
            self._on_free(prefixes)
        if self._count > MAX_POOLED:
            self._by_group, self._count = {}, 0

    def discard(self, keys: Iterable[str]) -> None:
        """Slots a read chose for a claim: the pool's value for them is about to be stale."""
        for key in keys:
            group = self._by_group.get(key[:GROUP_PREFIX_CHARS])
            if group is not None and group.pop(key, None) is not None:
                self._count -= 1

    def available(self, prefix: str, below: str) -> int:
        return sum(1 for key in self._by_group.get(prefix, {}) if key < below)

    def take(self, prefix: str, below: str, count: int) -> list[Pooled]:
        """Up to `count` pooled slots of the group numbered below `below` (the limit may have shrunk), out of the
        pool."""
        group = self._by_group.get(prefix, {})
        taken = sorted((key, value) for key, value in group.items() if key < below)[:count]
        for key, _value in taken:
            del group[key]
        self._count -= len(taken)
        return taken
