"""The checks both key/value stores run before they write: keys, values, lifetimes and counters (the queue's are
in `validation`)."""

from __future__ import annotations

import math
from typing import Final

from ..errors import PayloadTooLargeError
from .validation import INT64_MAX, INT64_MIN, KV_KEY_MAX_BYTES, MAX_DURATION_MS, PAYLOAD_MAX_BYTES, integer, utf8


def kv_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"key must be a str, not {type(key).__name__}")
    size = len(utf8("key", key))
    if size > KV_KEY_MAX_BYTES:
        raise ValueError(f"key is {size} bytes of UTF-8; at most {KV_KEY_MAX_BYTES} are allowed")
    return key


def kv_value(value: object, name: str = "value") -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    size = len(utf8(name, value))
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(f"{name} is {size} bytes of UTF-8; at most {PAYLOAD_MAX_BYTES} are allowed")
    return value


def ttl_ms(ttl_seconds: object, *, optional: bool = True) -> int | None:
    """A lifetime in whole milliseconds, never rounded down to nothing."""
    if ttl_seconds is None and optional:
        return None
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)):
        raise TypeError(f"ttl_seconds must be a number, not {type(ttl_seconds).__name__}")
    if not math.isfinite(ttl_seconds) or ttl_seconds <= 0:
        raise ValueError(f"ttl_seconds must be a positive number, got {ttl_seconds}")
    ms = max(1, math.ceil(ttl_seconds * 1000))
    if ms > MAX_DURATION_MS:
        raise ValueError(f"ttl_seconds must be at most {MAX_DURATION_MS // 1000}, got {ttl_seconds}")
    return ms


def kv_write_args(key: object, value: object, ttl_seconds: object, expected: object = None) -> int | None:
    """The arguments of `set` and `swap`, checked alike in every store; answers the lifetime in ms."""
    kv_key(key)
    if expected is not None:
        kv_value(expected, "expected")
    kv_value(value)
    return ttl_ms(ttl_seconds)


#: The most digits a counter's text may have (after an optional '-'): 2**63 has 19.
COUNTER_MAX_DIGITS: Final = 19


def increment_amount(amount: object) -> int:
    """-(2**63 - 1) to 2**63 - 1: the MySQL kv reports "not counted" as the one value an amount of -(2**63) could
    produce from a missing key, so neither store takes that amount."""
    return integer("amount", amount, INT64_MIN + 1, INT64_MAX)


def increment_result(key: str, current: int, amount: int) -> int:
    """The counter's new value, anywhere in the signed 64-bit range, both ends included."""
    result = current + amount
    if not INT64_MIN <= result <= INT64_MAX:
        raise ValueError(f"incrementing {key!r} by {amount} leaves the signed 64-bit range")
    return result


def parse_counter(key: str, value: str) -> int:
    """A kv value that `increment` may count on: an optional '-' and 1 to 19 ASCII digits (nothing before or
    after them, not even a line break), within the signed 64-bit range."""
    body = value[1:] if value.startswith("-") else value
    if not body or len(body) > COUNTER_MAX_DIGITS or not body.isascii() or not body.isdigit():
        raise ValueError(f"the value of {key!r} is not an integer: {value[:40]!r}")
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise ValueError(f"the value of {key!r} is outside the signed 64-bit range")
    return number
