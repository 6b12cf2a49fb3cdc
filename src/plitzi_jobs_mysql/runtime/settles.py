"""Succeeded settles written together: a worker's jobs whose handlers succeeded while its last batch was being
written go in the next one, one call (the queue's `settle_succeeded`, the `SettlesSucceeded` capability: one
statement on MySQL) rather than one UPDATE per job. Only the drain's common case is batched; every other settle
(a retry, a failure, a cancel, a hand-back) stays one call per job (completer.py)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

from ..records import SucceededJob

#: A succeeded job waits this long for others to settle with it: by default no longer than the statement already
#: in flight (group commit: those arriving while one batch is written go in the next), plus one turn of the loop
#: for handlers that returned together. A real linger (5 ms was tried) costs crash safety: the slot already runs
#: the next job, so a worker killed in the linger (tests/faults/test_killed_workers.py, a job that SIGKILLs its
#: worker claimed right after a slot freed) has finished jobs still 'running' in the table, and they run again.
SETTLE_LINGER_S: Final = 0.0
#: ... unless this many are waiting already (a statement of that many primary-key lookups, still small).
SETTLE_BATCH: Final = 32


class SucceededSettles:
    """Succeeded settles batched: those arriving while one statement is in flight go in the next one, and each
    waits at most `linger_s` for company. Each caller learns whether its batch was written; on a failure it
    settles its job alone (the holder guard makes a row the batch did write a no-op then)."""

    def __init__(
        self,
        settle_many: Callable[[list[SucceededJob]], Awaitable[None]],
        on_error: Callable[[BaseException], None],
        *,
        linger_s: float | None = None,
        batch: int | None = None,
    ) -> None:
        self._settle_many = settle_many
        self._on_error = on_error
        self._linger_s = SETTLE_LINGER_S if linger_s is None else linger_s
        self._batch = SETTLE_BATCH if batch is None else batch
        self._waiting: list[SucceededJob] = []
        self._outcome: asyncio.Future[BaseException | None] | None = None  # the waiting ones' batch
        self._flusher: asyncio.Future[None] | None = None
        self._hurry = asyncio.Event()

    async def settle(self, job: SucceededJob, *, urgent: bool = False) -> BaseException | None:
        """Returns once the job's batch was written (None) or failed (the error, already reported: settle the job
        alone). `urgent`: the worker is stopping, so nothing lingers."""
        if self._outcome is None:
            self._outcome = asyncio.get_running_loop().create_future()
        outcome = self._outcome
        self._waiting.append(job)
        if urgent or len(self._waiting) >= self._batch:
            self._hurry.set()
        if self._flusher is None:
            self._flusher = asyncio.ensure_future(self._flush())
        return await asyncio.shield(outcome)

    def hurry(self) -> None:
        """Write what waits now (the worker is stopping)."""
        self._hurry.set()

    async def _flush(self) -> None:
        try:
            while self._waiting:
                if self._hurry.is_set():
                    pass
                elif self._linger_s > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._hurry.wait(), self._linger_s)
                else:
                    await asyncio.sleep(0)  # the handlers that returned in this turn of the loop come along
                self._hurry.clear()
                # All that wait go (the batch size only cuts the linger short: they share one answer); those
                # arriving from here on wait for the next statement.
                batch, self._waiting = self._waiting, []
                outcome, self._outcome = self._outcome, None
                assert outcome is not None
                try:
                    await self._settle_many(batch)
                except BaseException as error:
                    outcome.set_result(error)  # each job falls back to its own settle
                    if not isinstance(error, Exception):
                        raise
                    self._on_error(error)  # once per batch, not once per job
                else:
                    outcome.set_result(None)
        finally:
            self._flusher = None
