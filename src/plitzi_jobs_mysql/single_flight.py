"""Single-flight: the kv key a job's run holds so that no two workers run one job at once, even when a stalled
worker's lease lapsed under it, and the batching that gives those keys back."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from collections.abc import Awaitable, Callable
from typing import Final

from . import validation as check

KV_KEY_PREFIX: Final = "plitzi-jobs:run:"


def kv_token(worker_id: str) -> str:
    return f"{worker_id}:{secrets.token_hex(8)}"


class KeyReleases:
    """Single-flight keys given back together: those released while one statement is in flight go in the next
    one, so a busy worker pays a fraction of a statement per job rather than one."""

    def __init__(self, delete_unchanged: Callable[[list[tuple[str, str]]], Awaitable[None]],
                 on_error: Callable[[BaseException], None]) -> None:
        self._delete = delete_unchanged
        self._on_error = on_error
        self._waiting: list[tuple[str, str]] = []
        self._flusher: asyncio.Future[None] | None = None

    async def give_back(self, key: str, token: str) -> None:
        """Returns once the key is deleted (if it still held `token`) or the attempt failed."""
        self._waiting.append((key, token))
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush())
        await asyncio.shield(self._flusher)

    async def _flush(self) -> None:
        try:
            while self._waiting:
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

