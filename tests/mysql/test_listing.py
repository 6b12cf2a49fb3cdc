"""`list_jobs` over several spaces or every space (`space_ids=None`): the MySQL queue reads each space's range of
its index and merges them, or past `MERGED_SPACES_MAX` spaces sorts the matches; either way the pages are the
memory twin's, by offset and by cursor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from plitzi_jobs_mysql import create_memory_job_queue, create_mysql_job_queue
from plitzi_jobs_mysql.memory import wall_clock_ms
from plitzi_jobs_mysql.mysql.listing import MERGED_SPACES_MAX

from ..conftest import flavour_database, open_pool, session_flavours
from ..support import Clock, job


@pytest.fixture(params=session_flavours())
async def twins(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Any, Any, Clock]]:
    clock = Clock(wall_clock_ms())
    with flavour_database(request, request.param) as url:
        pool = await open_pool(url)
        try:
            yield create_memory_job_queue(clock=clock), create_mysql_job_queue(pool, clock=clock), clock
        finally:
            pool.close()
            await pool.wait_closed()


async def pages(queue: Any, spaces: Sequence[int] | None, **filters: Any) -> tuple[list[str], list[str], int]:
    """Every page of 3 by offset, and by cursor, and the total."""
    whole = await queue.list_jobs(space_ids=spaces, limit=500, **filters)
    by_offset = []
    for offset in range(0, whole.total + 1, 3):
        by_offset += [j.id for j in (await queue.list_jobs(space_ids=spaces, limit=3, offset=offset, **filters)).jobs]
    by_cursor: list[str] = []
    after = None
    while True:
        page = await queue.list_jobs(space_ids=spaces, limit=3, after=after, **filters)
        by_cursor += [j.id for j in page.jobs]
        after = page.next_after
        if after is None:
            break
    assert by_offset == by_cursor == [j.id for j in whole.jobs]
    return by_offset, by_cursor, whole.total


@pytest.mark.parametrize("spaces", [3, MERGED_SPACES_MAX + 6])
async def test_pages_over_every_space_are_the_memory_twins(twins: tuple[Any, Any, Clock], spaces: int) -> None:
    memory, mysql, clock = twins
    for n in range(2 * spaces + 5):
        for queue in (memory, mysql):
            await queue.enqueue(job(f"j{n}", space_id=1 + n % spaces, action_id="even" if n % 2 == 0 else "odd"))
        if n % 3:
            await clock.advance(1)  # some share an instant: the tie is broken by enqueue order in both
    for queue in (memory, mysql):
        for _ in range(4):
            await queue.claim(worker_id="w", lease_ms=60_000, limit=1)
    await clock.advance(1)
    some = list(range(1, spaces + 1, 2))
    for chosen, filters in (
        (None, {}),
        (None, {"status": "running"}),
        (None, {"action_id": "odd"}),
        (some, {}),
        (some, {"status": "pending", "action_id": "even"}),
        (None, {"status": "dead"}),
    ):
        expected = await pages(memory, chosen, **filters)
        assert await pages(mysql, chosen, **filters) == expected, (chosen, filters)
