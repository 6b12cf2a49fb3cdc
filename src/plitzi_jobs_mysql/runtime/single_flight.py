"""Single-flight: the kv key a job's run holds so that no two workers run one job at once, even when a stalled
worker's lease lapsed under it; the batching that takes and gives those keys back; and the pause in claiming
while the kv cannot be reached."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from ..contract import validation as check
from ..contract.capabilities import DeletesUnchanged, TakesAbsent
from ..contract.protocols import KvStore
from ..errors import SchemaMismatchError
from .options import ErrorHandler
from .store_calls import bounded, call_bound_s, describe, log_error, logger

KV_KEY_PREFIX: Final = "plitzi-jobs:run:"
#: With the kv unreachable, a claimed job goes back after this long and the worker claims nothing meanwhile,
#: doubling with every failure in a row up to the ceiling, so an outage costs a claim every few minutes, not
#: a claim and a hand-back per job per second.
KV_BACKOFF_FIRST_MS: Final = 1_000
KV_BACKOFF_MAX_MS: Final = 300_000


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


@dataclass(frozen=True, slots=True)
class Key:
    """A single-flight key a run holds, and the token that says it is this run's."""

    name: str
    token: str


class SingleFlight:
    """The single-flight keys of one worker's runs, in its kv: taken at the claim (many in one call where the kv
    `TakesAbsent`), renewed with the heartbeat, given back after the settle (in batches where it
    `DeletesUnchanged`). While the kv cannot be reached, no key can be taken, so nothing claimed could run: the
    worker claims nothing for a pause that doubles with each failure in a row (`paused()`)."""

    def __init__(
        self,
        kv: KvStore,
        *,
        worker_id: str,
        lease_ms: int,
        on_error: ErrorHandler,
        on_refused: Callable[[SchemaMismatchError], None],
    ) -> None:
        self.kv = kv
        self._worker_id = worker_id
        self._ttl_s = lease_ms / 1000
        self._bound_s = call_bound_s(lease_ms)
        self._on_error = on_error
        self._on_refused = on_refused
        self.takes_many = isinstance(kv, TakesAbsent)
        self._releases = KeyReleases(kv.delete_unchanged, on_error) if isinstance(kv, DeletesUnchanged) else None
        self._failures = 0  # in a row
        self._delay_ms = 0
        self._resume_at = 0.0  # the loop's clock; no claims before it while the kv is unreachable

    def key_for(self, job_id: str) -> Key:
        return Key(kv_key(job_id), kv_token(self._worker_id))

    async def take_many(self, job_ids: Sequence[str]) -> list[Key | None]:
        """The keys of one claim's jobs in one call (one statement when all were free): each job's `Key`, or None
        where another run holds it. Raises when the kv cannot be asked."""
        assert isinstance(self.kv, TakesAbsent)
        keys = [self.key_for(job_id) for job_id in job_ids]
        answers = await bounded(
            "a single-flight take", self.kv.take_absent([(k.name, k.token) for k in keys], self._ttl_s), self._bound_s
        )
        self.reachable()
        return [key if taken else None for key, taken in zip(keys, answers, strict=True)]

    async def take(self, job_id: str) -> Key | None:
        """One job's key (a swap), or None where another run holds it. Raises when the kv cannot be asked."""
        key = self.key_for(job_id)
        taken = await bounded(
            "a single-flight swap", self.kv.swap(key.name, None, key.token, self._ttl_s), self._bound_s
        )
        self.reachable()
        return key if taken else None

    async def renew(self, key: Key) -> None:
        """Another lease's lifetime for a key a running job holds (its failure is reported, never raised)."""
        try:
            await self.kv.swap(key.name, key.token, key.token, self._ttl_s)
        except Exception as error:
            self._on_error(error)

    async def give_back(self, key: Key, *, urgent: bool) -> None:
        """Gives the key up, only if it is still this run's (a failure is reported: it lapses with its lifetime)."""
        if self._releases is not None:
            await self._releases.give_back(key.name, key.token, urgent=urgent)
            return
        marker, what, bound = f"released:{key.token}", "a single-flight release", self._bound_s
        try:
            # Compare-and-set to a marker that lapses at once: atomic, so a key someone else took is never
            # touched.
            if (
                await bounded(what, self.kv.swap(key.name, key.token, marker, 0.001), bound)
                and await bounded(what, self.kv.get(key.name), bound) == marker
            ):
                await bounded(what, self.kv.delete(key.name), bound)
        except Exception as error:
            self._on_error(error)

    def hurry(self) -> None:
        """Keys lingering for company go now (the worker is stopping)."""
        if self._releases is not None:
            self._releases.hurry()

    # -- the kv being down ----------------------------------------------------------------------------------

    def paused(self) -> bool:
        """Whether claiming waits out a pause: the kv was unreachable and nothing claimed could run."""
        return asyncio.get_running_loop().time() < self._resume_at

    def unreachable(self, error: Exception, job_id: str) -> int:
        """The key of `job_id` could not be asked for: claiming pauses, longer each time (the jobs of one claim
        share one failure). Answers after how long the job should come back."""
        if isinstance(error, SchemaMismatchError):
            self._on_refused(error)  # no pause heals the kv's tables
            return 0
        loop = asyncio.get_running_loop()
        if loop.time() >= self._resume_at:
            self._failures += 1
            doublings = min(self._failures - 1, 20)
            self._delay_ms = min(KV_BACKOFF_MAX_MS, KV_BACKOFF_FIRST_MS * (1 << doublings))
            self._resume_at = loop.time() + self._delay_ms / 1000
            logger.warning(
                "the kv store is unreachable (%s), so no job can take its single-flight key: job %r goes back to "
                "the queue and this worker claims nothing for %d ms (failure %d in a row; the pause doubles up "
                "to %d ms)",
                describe(error),
                job_id,
                self._delay_ms,
                self._failures,
                KV_BACKOFF_MAX_MS,
                exc_info=error if self._failures == 1 else None,
            )
            if self._on_error is not log_error:
                self._on_error(error)
        return self._delay_ms

    def reachable(self) -> None:
        if self._failures:
            logger.warning("the kv store answers again after %d failures in a row; claiming resumes", self._failures)
        self._failures = 0
        self._resume_at = 0.0
