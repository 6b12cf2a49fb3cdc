"""Payloads against the server's `max_allowed_packet` (issue 9, item 6).

A statement larger than the server's `max_allowed_packet` is refused by the server with a raw 1153 error and the
connection is dropped. The adapters learn the limit on first use and refuse, before sending, a job input or kv
value whose statement could not fit — with `PayloadTooLargeError` (a `ValueError`) naming the limit and the
setting — and send each kv value once. A throwaway server with a 4 MiB packet (MySQL 5.7's default) makes the
limits small enough to test quickly; the session server (64 MiB, MySQL 8's default) takes the full 16 MiB.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from plitzi_jobs_mysql import PayloadTooLargeError, create_mysql_job_queue, create_mysql_kv
from plitzi_jobs_mysql.testing import LocalMysqlServer, fresh_database

from ..conftest import local_flavours, open_pool, sql, throwaway_server
from ..support import job

pytestmark = pytest.mark.timeout(120)

MiB = 1024 * 1024
PACKET = 4 * MiB


@pytest.fixture(scope="module", params=local_flavours())
def small_packet_server(request: pytest.FixtureRequest) -> Iterator[LocalMysqlServer]:
    with throwaway_server(request.param, load_tz=False, extra_args=(f"--max-allowed-packet={PACKET}",)) as started:
        yield started


@pytest.fixture
async def small(small_packet_server: LocalMysqlServer) -> AsyncIterator[tuple[Any, str]]:
    """A pool of 2 connections on a fresh database of the 4 MiB server."""
    with fresh_database(small_packet_server.url, "pjm_packet") as url:
        pool = await open_pool(url, maxsize=2)
        try:
            yield pool, url
        finally:
            pool.close()
            await pool.wait_closed()


async def assert_pool_healthy(pool: Any) -> None:
    """Every connection of the pool still answers (a 1153 makes the server drop the one that sent it)."""
    held = [await pool.acquire() for _ in range(pool.maxsize)]
    try:
        for conn in held:
            async with conn.cursor() as cur:
                await cur.execute("SELECT 1")
                assert await cur.fetchone() == (1,)
    finally:
        for conn in held:
            pool.release(conn)


async def test_an_input_the_server_cannot_take_is_refused_before_sending(small: tuple[Any, str]) -> None:
    pool, url = small
    queue = create_mysql_job_queue(pool)
    assert await queue.enqueue(job("small", input={"s": "x" * 1000}))
    with pytest.raises(PayloadTooLargeError) as raised:
        await queue.enqueue(job("big", input={"s": "x" * (5 * MiB)}))
    assert isinstance(raised.value, ValueError)
    message = str(raised.value)
    assert "max_allowed_packet" in message and str(PACKET) in message, message
    # A batch with one input too large writes none of the others.
    with pytest.raises(PayloadTooLargeError):
        await queue.enqueue_many([job("b1"), job("b2", input={"s": "y" * (5 * MiB)}), job("b3")])
    assert sorted(row[0] for row in sql(url, "SELECT id FROM action_jobs")) == [b"small"]
    await assert_pool_healthy(pool)
    assert await queue.enqueue(job("after"))


async def test_escaping_counts_against_the_packet(small: tuple[Any, str]) -> None:
    # 3 MiB of quotes travel as 6 MiB once escaped: refused before sending, not by the server.
    pool, _url = small
    queue = create_mysql_job_queue(pool)
    with pytest.raises(PayloadTooLargeError):
        await queue.enqueue(job("quotes", input={"s": "'" * (3 * MiB)}))
    await assert_pool_healthy(pool)


async def test_inputs_near_the_packet_round_trip_across_batches(small: tuple[Any, str]) -> None:
    # Each input alone fits a 4 MiB packet, two together do not: the batch is split by what is sent.
    pool, _url = small
    queue = create_mysql_job_queue(pool)
    inputs = [{"s": "😀" * (700_000 + n)} for n in range(3)]  # ~2.7 MiB of UTF-8 each
    assert await queue.enqueue_many([job(f"near-{n}", input=inputs[n]) for n in range(3)]) == [True] * 3
    for n in range(3):
        found = await queue.get_job([1], f"near-{n}")
        assert found is not None and found.input == inputs[n]


async def test_kv_sends_each_value_once(small: tuple[Any, str]) -> None:
    # 2.5 MiB fits a 4 MiB packet once, not twice: today's upsert sends it twice and the server refuses it.
    pool, _url = small
    kv = create_mysql_kv(pool)
    value = "v" * (5 * MiB // 2)
    await kv.set("k", value)
    assert await kv.get("k") == value
    other = "w" * (5 * MiB // 2)
    await kv.set("k", other)  # the update path too
    assert await kv.get("k") == other
    assert await kv.swap("k", other, value)  # the compare-and-set sends the expected value as a digest
    assert await kv.get("k") == value
    assert await kv.swap("k", value, value)  # writing back the same value still counts
    assert not await kv.swap("k", other, other)
    await assert_pool_healthy(pool)


async def test_a_kv_value_the_server_cannot_take_is_refused_before_sending(small: tuple[Any, str]) -> None:
    pool, _url = small
    kv = create_mysql_kv(pool)
    await kv.set("k", "kept")
    for call in (
        lambda: kv.set("k", "v" * (5 * MiB)),
        lambda: kv.swap("k", "kept", "v" * (5 * MiB)),
        lambda: kv.swap("new", None, "v" * (5 * MiB)),
    ):
        with pytest.raises(PayloadTooLargeError, match="max_allowed_packet"):
            await call()
    assert await kv.get("k") == "kept"
    assert await kv.get("new") is None
    await assert_pool_healthy(pool)


async def test_the_full_16_mib_fits_a_64_mib_packet(pool: Any, session_db: str) -> None:
    # The session server runs with 64 MiB (MySQL 8's default), the setting the README asks for.
    assert sql(session_db, "SELECT @@max_allowed_packet")[0][0] >= 64 * MiB
    queue, kv = create_mysql_job_queue(pool, table_prefix="pkt_"), create_mysql_kv(pool, table_prefix="pkt_")
    sql(session_db, "DROP TABLE IF EXISTS pkt_action_jobs, pkt_action_schedules, pkt_action_kv")
    try:
        value = '"' * (16 * MiB)  # the worst case: every byte escaped
        await kv.set("big", value)
        assert await kv.get("big") == value
        encoded = {"s": '"' * (8 * MiB - 20)}  # JSON escapes it again: ~16 MiB stored, ~32 MiB sent
        assert await queue.enqueue(job("big", input=encoded))
        found = await queue.get_job([1], "big")
        assert found is not None and found.input == encoded
    finally:
        sql(session_db, "DROP TABLE IF EXISTS pkt_action_jobs, pkt_action_schedules, pkt_action_kv")


async def test_a_packet_lowered_after_first_use_is_learned_again(
    small: tuple[Any, str], small_packet_server: LocalMysqlServer
) -> None:
    # The server's setting changes under a running adapter (a restart with another max_allowed_packet): the
    # statement the server refuses is reported as PayloadTooLargeError, and the next call knows the new limit.
    pool, url = small
    queue = create_mysql_job_queue(pool)
    assert await queue.enqueue(job("first"))  # learns 4 MiB
    sql(small_packet_server.url, f"SET GLOBAL max_allowed_packet = {PACKET // 2}")
    try:
        await pool.clear()  # the pool's new connections take the new setting
        with pytest.raises(PayloadTooLargeError, match="max_allowed_packet"):
            await queue.enqueue(job("refused-by-the-server", input={"s": "x" * (3 * MiB)}))
        # The server dropped the connection that sent it; the client would learn so only on its next read, so
        # the connection is closed before the pool could hand it to the next caller.
        assert pool.size == 0, "the connection the server dropped went back to the pool"
        with pytest.raises(PayloadTooLargeError, match=str(PACKET // 2)):
            await queue.enqueue(job("refused-before-sending", input={"s": "x" * (3 * MiB)}))
        assert await queue.enqueue(job("after"))
        await assert_pool_healthy(pool)
        assert sorted(row[0] for row in sql(url, "SELECT id FROM action_jobs")) == [b"after", b"first"]
    finally:
        sql(small_packet_server.url, f"SET GLOBAL max_allowed_packet = {PACKET}")


def test_a_value_passed_without_measuring_it_always_fits() -> None:
    from plitzi_jobs_mysql.mysql import packet

    max_packet = packet.STATEMENT_ROOM + 1_000  # room for 1,000 bytes as sent
    for text in ["", "a" * 249, "'" * 249, "\\\n\x00" * 83, "é" * 249, "😀" * 249]:
        assert packet.surely_fits(text, max_packet)
        assert packet.sent_size(text) <= packet.room_for_payload(max_packet), text[:3]
    assert not packet.surely_fits("a" * 250, max_packet)  # no longer sure: measured instead, and it fits
    assert packet.check_fits("x", "a" * 250, max_packet) == 252
    with pytest.raises(PayloadTooLargeError):
        packet.check_fits("x", "'" * 500, max_packet)  # 1,002 bytes once escaped
