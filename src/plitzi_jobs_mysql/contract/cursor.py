"""`list_jobs`' keyset cursor: `JobPage.next_after` names the last job of a page by its place in the order (newest
`updated_at` first, then the newest job), so the next page starts right after it through the index, however deep.

The token is opaque to callers (URL-safe text); a job that changed since only moves in the order, never repeats a
page's jobs twice in place of others that stayed.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import TypeVar

Place = tuple[int, int]  # (updated_at, the job's order of enqueue)
T = TypeVar("T")
_PREFIX = "k1."
MAX_CHARS = 64


def encode_after(updated_at: int, seq: int) -> str:
    text = f"{updated_at}.{seq}".encode("ascii")
    return _PREFIX + base64.urlsafe_b64encode(text).decode("ascii").rstrip("=")


def decode_after(after: object, offset: object = 0) -> Place | None:
    """The place a token names, or None without one; ValueError/TypeError naming `after` for anything else."""
    if after is None:
        return None
    if not isinstance(after, str):
        raise TypeError(f"after must be a str from JobPage.next_after, not {type(after).__name__}")
    if offset:
        raise ValueError("pass either after (a cursor) or offset, not both")
    try:
        if not after.startswith(_PREFIX) or len(after) > MAX_CHARS:
            raise ValueError
        body = after[len(_PREFIX) :]
        updated_at, seq = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode("ascii").split(".")
        place = int(updated_at), int(seq)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"after is not a cursor this store made (JobPage.next_after): {after[:MAX_CHARS]!r}") from None
    if not (-(2**63) <= place[0] < 2**63 and 0 <= place[1] < 2**64):
        raise ValueError(f"after is not a cursor this store made (JobPage.next_after): {after!r}")
    return place


def keyset_page(
    ordered: Sequence[T], place: Callable[[T], Place], cursor: Place | None, offset: int, limit: int
) -> tuple[list[T], str | None]:
    """A page of `ordered` (newest first) after `cursor` (or from `offset`), and the token of the next page (None
    when this one is not full)."""
    rows = [row for row in ordered if place(row) < cursor] if cursor is not None else ordered
    shown = list(rows[offset : offset + limit])
    return shown, next_after([place(row) for row in shown], limit)


def next_after(places: Sequence[Place], limit: int) -> str | None:
    return encode_after(*places[-1]) if places and len(places) >= limit else None
