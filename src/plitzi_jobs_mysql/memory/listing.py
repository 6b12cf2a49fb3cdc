"""The memory queue's `list_jobs`: its rows filtered, newest first, one page of them (contract/cursor.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..contract.cursor import Place, keyset_page


def _place(row: Any) -> Place:
    return int(row.job.updated_at), int(row.seq)  # seq: the row's order of enqueue, as MySQL's seq breaks ties


def list_page(
    rows: Iterable[Any],
    spaces: list[int] | None,
    action_id: str | None,
    status: str | None,
    cursor: Place | None,
    offset: int,
    limit: int,
) -> tuple[list[Any], int, str | None]:
    """(the page's rows, how many match in all, the next page's cursor)."""
    matching = sorted(
        (
            r
            for r in rows
            if (spaces is None or r.job.space_id in spaces)
            and action_id in (None, r.job.action_id)
            and status in (None, r.job.status)
        ),
        key=_place,
        reverse=True,
    )
    shown, token = keyset_page(matching, _place, cursor, offset, limit)
    return shown, len(matching), token
