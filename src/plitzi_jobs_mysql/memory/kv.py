"""The in-process key/value store: one process's dict, keeping the `KvStore` contract exactly."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..contract import kv_validation as check
from ..contract.capabilities import DeletesUnchanged, TakesAbsent
from ..contract.protocols import KvStore
from .wall_clock import wall_clock_ms


@dataclass
class _Entry:
    value: str
    expires_at: int | None


@dataclass
class MemoryKv:
    """A `KvStore` in this process's memory. Build it with `create_memory_kv`."""

    clock: Callable[[], int]
    _entries: dict[str, _Entry] = field(default_factory=dict)

    def _live(self, key: str) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry.expires_at is not None and entry.expires_at <= int(self.clock()):
            del self._entries[key]
            return None
        return entry

    def _expiry(self, ttl: int | None) -> int | None:
        return None if ttl is None else int(self.clock()) + ttl

    async def get(self, key: str) -> str | None:
        entry = self._live(check.kv_key(key))
        return entry.value if entry else None

    async def set(self, key: str, value: str, ttl_seconds: float | None = None) -> None:
        self._entries[key] = _Entry(value, self._expiry(check.kv_write_args(key, value, ttl_seconds)))

    async def delete(self, key: str) -> None:
        self._entries.pop(check.kv_key(key), None)

    async def increment(self, key: str, amount: int = 1) -> int:
        check.kv_key(key)
        check.increment_amount(amount)
        entry = self._live(key)
        if entry is None:
            result = check.increment_result(key, 0, amount)
            self._entries[key] = _Entry(str(result), None)
            return result
        result = check.increment_result(key, check.parse_counter(key, entry.value), amount)
        entry.value = str(result)
        return result

    async def expire(self, key: str, ttl_seconds: float) -> None:
        check.kv_key(key)
        ttl = check.ttl_ms(ttl_seconds, optional=False)
        entry = self._live(key)
        if entry is not None:
            entry.expires_at = self._expiry(ttl)

    async def swap(self, key: str, expected: str | None, value: str, ttl_seconds: float | None = None) -> bool:
        ttl = check.kv_write_args(key, value, ttl_seconds, expected)
        entry = self._live(key)
        current = entry.value if entry else None
        if current != expected:
            return False
        self._entries[key] = _Entry(value, self._expiry(ttl))
        return True

    async def take_absent(self, pairs: Sequence[tuple[str, str]], ttl_seconds: float | None = None) -> list[bool]:
        """The `TakesAbsent` capability: `swap(key, None, value, ttl_seconds)` for many keys, answered per pair."""
        items = list(pairs)
        for key, value in items:
            check.kv_write_args(key, value, ttl_seconds)
        if len({key for key, _ in items}) != len(items):
            raise ValueError("take_absent takes each key once")
        return [await self.swap(key, None, value, ttl_seconds) for key, value in items]

    async def delete_unchanged(self, pairs: Sequence[tuple[str, str]]) -> None:
        """The `DeletesUnchanged` capability: deletes each key that still holds the value paired with it."""
        items = list(pairs)
        for key, value in items:
            check.kv_write_args(key, value, None)
        for key, value in items:
            entry = self._live(key)
            if entry is not None and entry.value == value:
                del self._entries[key]


def create_memory_kv(*, clock: Callable[[], int] | None = None) -> MemoryKv:
    """The embedded default key/value store: one process's dict, lifetimes judged by `clock`."""
    return MemoryKv(clock=clock or wall_clock_ms)


if TYPE_CHECKING:  # mypy checks the memory kv keeps the contract's Protocol and offers the capabilities
    _kv: KvStore = MemoryKv(clock=wall_clock_ms)
    _takes: TakesAbsent = MemoryKv(clock=wall_clock_ms)
    _deletes: DeletesUnchanged = MemoryKv(clock=wall_clock_ms)
