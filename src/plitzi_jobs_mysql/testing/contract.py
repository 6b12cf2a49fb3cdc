"""What every `JobQueue` and `KvStore` must do, written once and run against each store.

A contract is where a scheduling bug lives: a claim that is not atomic runs a job twice, a heartbeat that does not
renew hands a running job to another replica, a settle from a worker that lost its lease overwrites a live
attempt. Subclass a suite and supply a fixture that yields a fresh, empty subject:

    class TestMyQueue(JobQueueContract):
        @pytest.fixture
        async def queue(self):
            yield make_my_queue()

Real time, real stores: leases are tens of milliseconds and the tests wait for them to lapse (polling for the
condition, never a fixed sleep), because the store's own clock is part of what is being tested.
"""

from __future__ import annotations

import pytest

from .enqueue_contract import EnqueueContract
from .kv_contract import KvContract
from .lease_contract import LeaseContract
from .schedule_contract import OperatorContract, ScheduleContract

__all__ = ["JobQueueContract", "KvContract"]


class JobQueueContract(EnqueueContract, LeaseContract, ScheduleContract, OperatorContract):
    """The job queue contract. Supply a `queue` fixture yielding a fresh, empty `JobQueue`."""

    pytestmark = pytest.mark.asyncio

