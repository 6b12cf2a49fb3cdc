"""The job listing (`list_jobs`): its statements and the plan that picks one, newest first through an index.

A page of one space is one range of `job_space_recent` (`job_space_status_recent` with a status filter) read
backwards: it costs its rows, whatever the history holds. No index orders several spaces' rows together, and a
plain statement over them sorts every match (seconds at millions of jobs). So a page over several spaces (or every
space) is merged from one such range per space that has matching jobs, each cut at offset + limit: it costs the
spaces times the page. Which spaces have matching jobs, and how many, the kept totals say (schema/totals.py) in the
same read that gives the page its exact total.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .schema import totals
from .schema.tables import table_names
from .statements import JOB_COLUMN_NAMES, JOB_COLUMNS

#: Past this many spaces with matching jobs, one sort over the matches is the cheaper plan (and the statement
#: stays short).
MERGED_SPACES_MAX = 64
ORDER = "ORDER BY updated_at DESC, seq DESC"
QUALIFIED = ", ".join(f"j.`{name}`" for name in JOB_COLUMN_NAMES)


@dataclass
class Listing:
    """One `list_jobs` call's filters as SQL: `where` over space_id, action_id and status (what the totals hold
    too), and the page's start (a cursor's range, or an offset)."""

    prefix: str
    where: list[str] = field(default_factory=list)
    args: list[Any] = field(default_factory=list)
    status: bool = False
    cursor: tuple[int, int] | None = None

    def filter(self, condition: str, value: Any) -> None:
        self.where.append(condition)
        self.args.append(value)

    def condition(self, extra: str = "") -> str:
        return " AND ".join([*self.where, *([extra] if extra else [])]) or "1 = 1"

    def index(self) -> str:
        return " FORCE INDEX (job_space_status_recent)" if self.status else " FORCE INDEX (job_space_recent)"

    def _start(self) -> tuple[str, list[Any]]:
        if self.cursor is None:
            return "", []
        # A range on the index's updated_at (then seq, its primary key suffix): the page starts at the cursor.
        at, seq = self.cursor
        return "updated_at <= %s AND (updated_at < %s OR seq < %s)", [at, at, seq]

    def total(self) -> tuple[str, list[Any]]:
        return totals.total_read(self.prefix, self.condition()), list(self.args)

    def by_space(self) -> tuple[str, list[Any]]:
        """Matching jobs per space, from the totals: the spaces a merged page reads, and its total."""
        return totals.totals_by_space(self.prefix, self.condition()), list(self.args)

    def page(self, limit: int, offset: int, *, indexed: bool) -> tuple[str, list[Any]]:
        """One statement over the filters as they are: through the index where they name one space."""
        start, start_args = self._start()
        jobs = table_names(self.prefix).jobs
        hint = self.index() if indexed else ""
        if offset and indexed:
            # The rows skipped are only walked in the index, never read whole: the page's are, afterwards.
            places = (
                f"SELECT updated_at, seq FROM `{jobs}`{hint} WHERE {self.condition(start)} {ORDER} LIMIT %s OFFSET %s"
            )
            return _rows_at(jobs, places), [*self.args, *start_args, limit, offset]
        statement = f"SELECT {JOB_COLUMNS} FROM `{jobs}`{hint} WHERE {self.condition(start)} {ORDER} LIMIT %s OFFSET %s"
        return statement, [*self.args, *start_args, limit, offset]

    def merged(self, spaces: list[int], limit: int, offset: int) -> tuple[str, list[Any]]:
        """The page over these spaces: each space's newest offset + limit places (updated_at, seq) in the index,
        merged, and only the page's rows read whole. The filters' own `space_id IN` stays in each part (harmless:
        the part's space is one of them)."""
        start, start_args = self._start()
        jobs = table_names(self.prefix).jobs
        part = (
            f"(SELECT updated_at, seq FROM `{jobs}`{self.index()} WHERE space_id = %s AND {self.condition(start)} "
            f"{ORDER} LIMIT %s)"
        )
        args: list[Any] = []
        for space in spaces:
            args += [space, *self.args, *start_args, offset + limit]
        places = f"SELECT updated_at, seq FROM ({' UNION ALL '.join([part] * len(spaces))}) AS merged {ORDER} "
        return _rows_at(jobs, places + "LIMIT %s OFFSET %s"), [*args, limit, offset]


def _rows_at(jobs: str, places: str) -> str:
    """The rows at these places (a SELECT of updated_at, seq), newest first: a join by primary key, no sort of
    more than the page."""
    return (
        f"SELECT {QUALIFIED} FROM ({places}) AS place JOIN `{jobs}` AS j ON j.seq = place.seq "
        "ORDER BY place.updated_at DESC, place.seq DESC"
    )
