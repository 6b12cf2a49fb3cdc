"""What every `JobQueue` and `KvStore` must do, written once and run against each store.

A contract is where a scheduling bug lives: a claim that is not atomic runs a job twice, a heartbeat that does not
renew hands a running job to another replica, a settle from a worker that lost its lease overwrites a live
attempt. Subclass a suite and supply a fixture that yields a fresh, empty subject:

    class TestMyQueue(JobQueueContract):
        @pytest_asyncio.fixture  # not @pytest.fixture: that needs asyncio_mode=auto
        async def queue(self):
            yield make_my_queue()

Time moves through the `advance` fixture: by default real time passes (leases are tens of milliseconds and the
tests poll the store's clock until it has moved on, never a fixed sleep); a store that takes an injected clock
overrides `advance` to move it at once, so the suite runs without waiting; such a store may also mix in
`ClockStepContract` (clock_contract.py) with a `rewind` fixture, for a clock that steps back. The kv suite always
runs on the store's own clock: a kv lifetime is judged by the store itself.
"""

from __future__ import annotations

import pytest

from ..contract.protocols import JobQueue
from .activity_contract import ActivityContract
from .bulk_contract import BulkContract
from .capability_contract import CapabilityContract
from .clock_contract import ClockStepContract
from .enqueue_contract import EnqueueContract
from .kv_contract import KvContract
from .lease_contract import LeaseContract
from .pause_contract import PauseContract
from .priority_contract import ClaimOrderContract, PriorityContract
from .schedule_contract import OperatorContract, ScheduleContract
from .support import Advance, real_time_advance

__all__ = ["ClockStepContract", "JobQueueContract", "KvContract"]


class JobQueueContract(
    EnqueueContract,
    LeaseContract,
    PriorityContract,
    ClaimOrderContract,
    ScheduleContract,
    OperatorContract,
    ActivityContract,
    CapabilityContract,
    BulkContract,
    PauseContract,
):
    """The job queue contract. Supply a `queue` fixture yielding a fresh, empty `JobQueue`."""

    pytestmark = pytest.mark.asyncio

    @pytest.fixture
    def advance(self, queue: JobQueue) -> Advance:
        """Moves the queue's clock on by at least `ms`; override it where the queue takes an injected clock."""
        return real_time_advance(queue)
