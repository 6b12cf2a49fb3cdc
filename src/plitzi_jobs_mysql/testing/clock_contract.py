"""The queue's contract, for a clock that steps back: opt in where a test can move the queue's clock both ways."""

from __future__ import annotations

import pytest

from ..contract.protocols import JobQueue
from .support import Advance, claim_one, job


class ClockStepContract:
    """A store's clock may step back (a failover to a primary a little behind, a time step), and the queue must
    judge every lease by the clock as it reads now. Mix it into a `JobQueueContract` subclass whose queue runs on
    a clock the test moves: supply `advance` and `rewind` fixtures (`async (ms) -> None`, moving it on and back);
    a `rewind` of None skips these tests (a server's own clock cannot be moved back)."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture
    def rewind(self) -> Advance | None:
        """Moves the queue's clock BACK by `ms`; override it (None: these tests skip)."""
        return None

    async def test_a_lease_lapses_only_while_the_clock_reads_past_it(
        self, queue: JobQueue, advance: Advance, rewind: Advance | None
    ) -> None:
        # The store's clock may step back: a lease that a claim found lapsed is under its lease again once the
        # clock reads before its end, and is not taken over then (its worker may well be running it).
        if rewind is None:
            pytest.skip("this store's clock cannot be moved back here")
        await queue.enqueue_many([job("short"), job("long")])
        await claim_one(queue, "w1", lease_ms=1_000)
        await claim_one(queue, "w1", lease_ms=5_000)
        await advance(5_001)  # both lapsed; one claim takes the older over
        assert (await claim_one(queue, "w2", lease_ms=60_000)).id == "short"
        await rewind(3_000)  # "long" is under its lease again
        assert await queue.claim(worker_id="w3", lease_ms=60_000, limit=5) == []
        await advance(3_000)
        taken = await queue.claim(worker_id="w3", lease_ms=60_000, limit=5)
        assert [(j.id, j.worker_id, [a.status for a in j.history]) for j in taken] == [("long", "w3", ["lost"])]
