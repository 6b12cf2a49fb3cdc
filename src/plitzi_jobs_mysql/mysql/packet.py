"""The server's `max_allowed_packet`: what one statement may carry, and refusing a payload that cannot fit.

The server refuses a statement larger than its `max_allowed_packet` with error 1153 and drops the connection,
after the caller's other checks passed. The adapters learn the limit on first use and refuse, before sending,
a job input or kv value whose statement could not fit. What counts is the value as sent: PyMySQL escapes
quotes, backslashes, NUL, CR, LF and Ctrl-Z with a backslash, so text full of them travels up to twice its size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pymysql.constants import ER

from ..contract.validation import PAYLOAD_MAX_BYTES
from ..errors import PayloadTooLargeError

if TYPE_CHECKING:
    from ..records import JobInput

#: Room in a statement for its SQL text and every other field (ids, names: a few KiB at most).
STATEMENT_ROOM = 64 * 1024
#: What the README asks for: any payload up to the package's 16 MiB bound, even escaped twice over, fits.
FULL_PAYLOAD_PACKET = 64 * 1024 * 1024
_ESCAPED = (b"\\", b"'", b'"', b"\n", b"\r", b"\x00", b"\x1a")


def sent_size(value: str) -> int:
    """Bytes the value takes in a statement: UTF-8, each escaped byte doubled, and the two quotes."""
    encoded = value.encode("utf-8")
    return len(encoded) + sum(encoded.count(byte) for byte in _ESCAPED) + 2


def room_for_payload(max_packet: int) -> int:
    """The largest payload (as sent) one statement can carry on a server with this `max_allowed_packet`."""
    return max(0, max_packet - STATEMENT_ROOM)


def surely_fits(value: str, max_packet: int) -> bool:
    """Without encoding it: a character takes at most 4 bytes as sent (UTF-8; an escaped one is ASCII, 2 bytes),
    so a value this short fits whatever it holds. Most do, and `sent_size` walks the value eight times."""
    return 4 * len(value) + 2 <= room_for_payload(max_packet)


def check_fits(name: str, value: str, max_packet: int) -> int:
    """Answers the value's size as sent; raises `PayloadTooLargeError` when no statement could carry it."""
    size = sent_size(value)
    room = room_for_payload(max_packet)
    if size > room:
        raise PayloadTooLargeError(
            f"{name} takes {size} bytes in a statement (as sent, escaped), but the server's max_allowed_packet "
            f"is {max_packet} bytes, which leaves room for {room}: raise max_allowed_packet on the server "
            f"(at least {FULL_PAYLOAD_PACKET // (1024 * 1024)}M for any payload up to "
            f"{PAYLOAD_MAX_BYTES // (1024 * 1024)} MiB) or store less"
        )
    return size


# A batch is split so no statement nears the server's max_allowed_packet (learned on first use).
BATCH_ROWS = 1000
BATCH_BYTES = 4 * 1024 * 1024
ROW_ROOM = 2048  # a row's fields other than its input, as sent


def batches(rows: list[tuple[JobInput, str, int]], budget: int) -> list[list[tuple[JobInput, str]]]:
    """Rows (job, encoded input, its size as sent) in statements of at most `budget` bytes of input each; a row
    larger than the budget (it fits a statement alone, `check_fits` said so) goes alone."""
    split: list[list[tuple[JobInput, str]]] = []
    current: list[tuple[JobInput, str]] = []
    size = 0
    for job, encoded, sent in rows:
        weight = sent + ROW_ROOM
        if current and (len(current) >= BATCH_ROWS or size + weight > budget):
            split.append(current)
            current, size = [], 0
        current.append((job, encoded))
        size += weight
    if current:
        split.append(current)
    return split


def drop_if_refused(raw: Any, code: int | None) -> None:
    """After an error with this code: a statement refused for its size (1153) made the server drop the connection,
    which the client learns only on its next read. Closed here, so the pool never hands it to the next caller."""
    if code == ER.NET_PACKET_TOO_LARGE:
        raw.close()
