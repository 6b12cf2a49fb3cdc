"""The request's parameters, read and bounded before any queue call: a bad one is a `BadRequest` (a 400 saying
which parameter and why), never a 500. Nothing here builds query text: the values go to the queue's own methods,
which validate them again and pass them to the server as parameters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..contract import validation as check
from ..contract.cursor import decode_after
from ..records import JOB_STATUSES, TERMINAL_STATUSES, JobStatus

PAGE_DEFAULT: Final = 50
PAGE_MAX: Final = 200  # rows on one page
#: An offset costs what it skips (page 1,000 by offset: 333 ms at a million jobs): deeper pages go by the keyset
#: cursor (`after`), as the pager's links do.
OFFSET_MAX: Final = 10_000
STATUSES: Final = tuple(status.value for status in JobStatus)


class BadRequest(ValueError):
    """A parameter the dashboard will not use; its message says which and why (shown with status 400)."""


def _one(query: Mapping[str, str], name: str) -> str | None:
    value = query.get(name)
    return None if value is None or value == "" else value


def integer(query: Mapping[str, str], name: str, *, default: int, low: int, high: int) -> int:
    text = _one(query, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, got {text[:40]!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}, got {value}")
    return value


def space(query: Mapping[str, str], scope: Sequence[int] | None, name: str = "space") -> int | None:
    """A space id, which must be one the dashboard was given (any, when it was given none)."""
    text = _one(query, name)
    if text is None:
        return None
    value = integer(query, name, default=0, low=check.INT64_MIN, high=check.INT64_MAX)
    if scope is not None and value not in scope:
        raise BadRequest(f"space {value} is not one this dashboard shows ({', '.join(map(str, scope))})")
    return value


def identifier(query: Mapping[str, str], name: str) -> str | None:
    """An id as the store takes it: checked by the store's own rule (`validation.text`), not a copy of it."""
    text = _one(query, name)
    if text is None:
        return None
    try:
        return check.text(name, text, check.ID_MAX_CHARS)
    except ValueError as error:
        raise BadRequest(str(error)) from None


def status(query: Mapping[str, str], *, allowed: frozenset[str] = JOB_STATUSES) -> str | None:
    text = _one(query, "status")
    if text is None:
        return None
    if text not in allowed:
        raise BadRequest(f"status must be one of {', '.join(s for s in STATUSES if s in allowed)}, got {text[:40]!r}")
    return text


@dataclass(frozen=True)
class JobFilters:
    """What the jobs page lists: space, action, status, an exact id, and the page."""

    space: int | None
    action: str | None
    status: str | None
    id: str | None
    limit: int
    offset: int
    after: str | None = None  # the queue's keyset cursor (JobPage.next_after): the page after it

    def query(self, **changes: object) -> dict[str, str]:
        """These filters as query parameters (empty ones left out), with `changes` applied."""
        values: dict[str, object] = {
            "space": self.space, "action": self.action, "status": self.status, "id": self.id,
            "limit": None if self.limit == PAGE_DEFAULT else self.limit, "offset": self.offset or None,
            "after": self.after,
        }  # fmt: skip
        values.update(changes)
        return {name: str(value) for name, value in values.items() if value is not None and value != ""}


def job_filters(query: Mapping[str, str], scope: Sequence[int] | None) -> JobFilters:
    return JobFilters(
        space=space(query, scope),
        action=identifier(query, "action"),
        status=status(query),
        id=identifier(query, "id"),
        limit=integer(query, "limit", default=PAGE_DEFAULT, low=1, high=PAGE_MAX),
        offset=integer(query, "offset", default=0, low=0, high=OFFSET_MAX),
        after=cursor(query),
    )


def cursor(query: Mapping[str, str]) -> str | None:
    """A keyset cursor the queue made, checked by its own rule (contract/cursor.py) before any call."""
    text = _one(query, "after")
    if text is None:
        return None
    try:
        decode_after(text, _one(query, "offset") not in (None, "0"))
    except ValueError as error:
        raise BadRequest(str(error)) from None
    return text


@dataclass(frozen=True)
class JobRef:
    """One job: its space (jobs are looked up within a space) and its exact id."""

    space: int
    id: str


def job_ref(query: Mapping[str, str], scope: Sequence[int] | None) -> JobRef:
    found_space = space(query, scope)
    job_id = identifier(query, "id")
    if found_space is None or job_id is None:
        raise BadRequest("a job is named by its space and id: ?space=N&id=...")
    return JobRef(space=found_space, id=job_id)


@dataclass(frozen=True)
class Target:
    """What a pause, resume or bulk operation applies to: a space, and one action of it or (None) all."""

    space: int
    action: str | None


def target(query: Mapping[str, str], scope: Sequence[int] | None) -> Target:
    found_space = space(query, scope)
    if found_space is None:
        raise BadRequest("space is required")
    return Target(space=found_space, action=identifier(query, "action"))


BULK_OPERATIONS: Final = ("retry", "cancel")
#: What a bulk retry may take again: finished jobs of one status.
RETRYABLE: Final = TERMINAL_STATUSES


def bulk_operation(query: Mapping[str, str]) -> str:
    text = _one(query, "operation")
    if text not in BULK_OPERATIONS:
        raise BadRequest(f"operation must be one of {', '.join(BULK_OPERATIONS)}, got {(text or '')[:40]!r}")
    return text
