"""Single-flight: the kv key a job's run holds so that no two workers run one job at once, even when a stalled
worker's lease lapsed under it, and the batching that gives those keys back."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

from ..contract import validation as check

KV_KEY_PREFIX: Final = "plitzi-jobs:run:"


def kv_token(worker_id: str) -> str:
    return f"{worker_id}:{secrets.token_hex(8)}"


#: A key whose job is done for good (succeeded, dead, cancelled) waits this long for others to go back with it in
#: one statement; a key a retry may soon need again goes at once. Nobody claims a finished job again, so holding
#: its key a moment longer costs nothing but the kv row; a busy worker sends one DELETE per ~64 keys rather than
#: one per ~3 (bench: the kv's statements per job 0.42 -> 0.13).
RELEASE_LINGER_S: Final = 0.05
#: ... unless this many are waiting already (a statement of 64 primary-key lookups, still small).
RELEASE_BATCH: Final = 64


class KeyReleases:
    """Single-flight keys given back together: those released while one statement is in flight go in the next
    one, and keys of finished jobs linger a moment for company, so a busy worker pays a fraction of a statement
    per job rather than one."""

    def __init__(
        self,
        delete_unchanged: Callable[[list[tuple[str, str]]], Awaitable[None]],
        on_error: Callable[[BaseException], None],
        *,
        linger_s: float | None = None,
    ) -> None:
        self._delete = delete_unchanged
        self._on_error = on_error
        self._linger_s = RELEASE_LINGER_S if linger_s is None else linger_s
        self._waiting: list[tuple[str, str]] = []
        self._flusher: asyncio.Future[None] | None = None
        self._hurry = asyncio.Event()

    async def give_back(self, key: str, token: str, *, urgent: bool = True) -> None:
        """Returns once the key is deleted (if it still held `token`) or the attempt failed. `urgent`: the job
        may be claimed again soon (a retry, a hand-back), so the key goes in the next statement, lingering for
        no one."""
        self._waiting.append((key, token))
        if urgent or len(self._waiting) >= RELEASE_BATCH:
            self._hurry.set()
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush())
        await asyncio.shield(self._flusher)

    def hurry(self) -> None:
        """Send what waits now (the worker is stopping)."""
        self._hurry.set()

    async def _flush(self) -> None:
        try:
            while self._waiting:
                if not self._hurry.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._hurry.wait(), self._linger_s)
                self._hurry.clear()
                batch, self._waiting = self._waiting, []
                try:
                    await self._delete(batch)
                except Exception as error:
                    self._on_error(error)  # they lapse with their lifetime anyway
        finally:
            self._flusher = None  # no await since the loop found nothing waiting


def kv_key(job_id: str) -> str:
    key = KV_KEY_PREFIX + job_id
    # A 191-character id of 4-byte characters plus the prefix would pass the kv's 764-byte bound.
    if len(key.encode("utf-8")) > check.KV_KEY_MAX_BYTES:
        key = KV_KEY_PREFIX + "sha256:" + hashlib.sha256(job_id.encode("utf-8")).hexdigest()
    return key
