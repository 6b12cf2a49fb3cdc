"""What every `KvStore` must do, written once and run against each store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ..contract.protocols import KvStore
from .capability_contract import KvCapabilityContract
from .support import eventually


class KvContract(KvCapabilityContract):
    """The key/value contract. Supply a `kv` fixture yielding a fresh, empty `KvStore`."""

    pytestmark = pytest.mark.asyncio

    async def test_set_get_delete(self, kv: KvStore) -> None:
        assert await kv.get("k") is None
        await kv.set("k", "v")
        assert await kv.get("k") == "v"
        await kv.set("k", "w")
        assert await kv.get("k") == "w"
        await kv.delete("k")
        await kv.delete("k")
        assert await kv.get("k") is None

    async def test_keys_are_compared_byte_for_byte(self, kv: KvStore) -> None:
        keys = ["Board", "board", "board ", "bóard", "bo\u0301ard", ""]
        for n, key in enumerate(keys):
            await kv.set(key, str(n))
        assert [await kv.get(key) for key in keys] == [str(n) for n in range(len(keys))]

    async def test_values_round_trip_whole(self, kv: KvStore) -> None:
        value = "😀 \x00 'quoted' \"double\" \\ ; DROP TABLE x; --" + "é" * 10_000
        await kv.set("hostile", value)
        assert await kv.get("hostile") == value
        await kv.set("empty", "")
        assert await kv.get("empty") == ""

    async def test_a_key_past_its_lifetime_answers_nothing(self, kv: KvStore) -> None:
        await kv.set("short", "v", ttl_seconds=0.05)
        await kv.set("long", "v", ttl_seconds=60)
        assert await kv.get("long") == "v"
        await eventually(lambda: kv.get("short"), lambda v: v is None, "the key lapsing")
        assert await kv.get("long") == "v"

    async def test_set_replaces_the_lifetime(self, kv: KvStore) -> None:
        await kv.set("k", "v", ttl_seconds=0.05)
        await kv.set("k", "w")
        await asyncio.sleep(0.1)  # past the first lifetime, which must be gone
        assert await kv.get("k") == "w"

    async def test_increment(self, kv: KvStore) -> None:
        assert await kv.increment("n") == 1
        assert await kv.increment("n", 41) == 42
        assert await kv.increment("n", -50) == -8
        assert await kv.get("n") == "-8"
        await kv.set("big", str(2**63 - 2))
        assert await kv.increment("big") == 2**63 - 1
        with pytest.raises(ValueError):
            await kv.increment("big")
        assert await kv.get("big") == str(2**63 - 1)

    async def test_increments_do_not_race(self, kv: KvStore) -> None:
        results = await asyncio.gather(*(kv.increment("n") for _ in range(40)))
        assert sorted(results) == list(range(1, 41))
        assert await kv.get("n") == "40"

    async def test_increment_keeps_a_live_lifetime_and_restarts_a_lapsed_key(self, kv: KvStore) -> None:
        await kv.set("n", "5", ttl_seconds=0.2)
        assert await kv.increment("n") == 6
        await eventually(lambda: kv.get("n"), lambda v: v is None, "the counter lapsing")
        assert await kv.increment("n", 3) == 3
        await asyncio.sleep(0.25)  # the old lifetime is lost with the old value
        assert await kv.get("n") == "3"

    async def test_increment_refuses_what_is_not_a_counter(self, kv: KvStore) -> None:
        for text in ["abc", "1.5", "", " 1", "1e3", "99999999999999999999"]:
            await kv.set("text", text)
            with pytest.raises(ValueError):
                await kv.increment("text")
            assert await kv.get("text") == text
        with pytest.raises(TypeError):
            await kv.increment("n", 1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            await kv.increment("n", True)
        assert await kv.get("n") is None

    async def test_expire(self, kv: KvStore) -> None:
        await kv.set("k", "v")
        await kv.expire("k", 0.05)
        await eventually(lambda: kv.get("k"), lambda v: v is None, "the key lapsing")
        await kv.expire("missing", 10)
        assert await kv.get("missing") is None

    async def test_swap_only_if_absent(self, kv: KvStore) -> None:
        assert await kv.swap("k", None, "first") is True
        assert await kv.swap("k", None, "second") is False
        assert await kv.get("k") == "first"

    async def test_a_lapsed_key_is_absent_for_swap(self, kv: KvStore) -> None:
        await kv.set("k", "old", ttl_seconds=0.05)
        await eventually(lambda: kv.get("k"), lambda v: v is None, "the key lapsing")
        assert await kv.swap("k", "old", "x") is False
        assert await kv.swap("k", None, "new") is True
        assert await kv.get("k") == "new"

    async def test_swap_compares_the_exact_value(self, kv: KvStore) -> None:
        await kv.set("k", "v")
        assert await kv.swap("k", "V", "x") is False
        assert await kv.swap("k", "v ", "x") is False
        assert await kv.swap("k", "v", "w") is True
        assert await kv.swap("k", "w", "w") is True  # writing back the same value is a success
        assert await kv.get("k") == "w"

    async def test_swap_gives_the_written_value_its_lifetime(self, kv: KvStore) -> None:
        await kv.set("k", "v")
        assert await kv.swap("k", "v", "v", ttl_seconds=0.05) is True
        await eventually(lambda: kv.get("k"), lambda v: v is None, "the key lapsing")
        assert await kv.swap("t", None, "token", ttl_seconds=60) is True
        assert await kv.swap("t", "token", "token") is True  # no lifetime now, as `set` would
        await asyncio.sleep(0.05)
        assert await kv.get("t") == "token"

    async def test_exactly_one_racing_writer_wins(self, kv: KvStore) -> None:
        answers = await asyncio.gather(*(kv.swap("lock", None, f"w{n}", ttl_seconds=30) for n in range(20)))
        assert answers.count(True) == 1
        assert await kv.get("lock") == f"w{answers.index(True)}"
        await kv.set("cas", "0")
        moved = await asyncio.gather(*(kv.swap("cas", "0", f"w{n}") for n in range(20)))
        assert moved.count(True) == 1

    @pytest.mark.parametrize(
        ("call", "error"),
        [
            pytest.param(lambda kv: kv.set("k" * 765, "v"), ValueError, id="set-key-765-bytes"),
            pytest.param(lambda kv: kv.set("😀" * 192, "v"), ValueError, id="set-key-768-bytes-of-emoji"),
            pytest.param(lambda kv: kv.get("é" * 383), ValueError, id="get-key-766-bytes"),
            pytest.param(lambda kv: kv.set("k", "v", ttl_seconds=0), ValueError, id="set-ttl-0"),
            pytest.param(lambda kv: kv.set("k", "v", ttl_seconds=-1), ValueError, id="set-ttl-negative"),
            pytest.param(lambda kv: kv.set("k", "v", ttl_seconds=float("inf")), ValueError, id="set-ttl-inf"),
            pytest.param(lambda kv: kv.expire("k", 0), ValueError, id="expire-ttl-0"),
            pytest.param(lambda kv: kv.swap("k", None, "v", ttl_seconds=0), ValueError, id="swap-ttl-0"),
            pytest.param(lambda kv: kv.set("k", 5), TypeError, id="set-value-int"),
            pytest.param(lambda kv: kv.set(5, "v"), TypeError, id="set-key-int"),
            pytest.param(lambda kv: kv.set("k", "\ud800"), ValueError, id="set-value-lone-surrogate"),
            pytest.param(lambda kv: kv.set("k", "x" * (16 * 1024 * 1024 + 1)), ValueError, id="set-value-over-16-mib"),
        ],
    )
    async def test_bad_input_is_refused_before_anything_is_written(
        self, kv: KvStore, call: Callable[[KvStore], Awaitable[Any]], error: type[Exception]
    ) -> None:
        with pytest.raises(error):
            await call(kv)
        assert await kv.get("k") is None

    async def test_the_longest_key_fits_whole(self, kv: KvStore) -> None:
        longest = "😀" * 191  # 764 bytes
        await kv.set(longest, "v")
        assert await kv.get(longest) == "v"
        assert await kv.get(longest[:-1]) is None
