"""Fleet-wide limits per action (`ActionLimit`), enforced by the store at claim time. The rules every store keeps:

- The surface: `claim(..., limits=None, on_limited=None)`, keywords beyond the `JobQueue` protocol (a user's own
  store without them keeps working; a worker given limits refuses a queue whose `claim` does not take them).
  `on_limited` is told of each due job a claim left waiting, as a `limited` `JobEvent` naming the limit.
- Who decides: the claiming worker passes its limits (`claim(..., limits={action_id: ActionLimit})`; a worker
  given none takes those its declared `Actions` handler declares); a job of an action without a limit is claimed
  as before. The store keeps the limits' state, not the limits (but for the operator's view), so workers that disagree
  are each held to their own limit against the state all of them share: a fleet with one action limited 2 in one
  worker and 5 in another runs at most 5 of it at once (the larger). Give every worker the same limits.
- A group is one (space, action) or, with `by_key`, one (space, action, job key); jobs without a key share one
  group. Both the concurrency and the rate count per group.
- Concurrency: a claim takes one of the group's `concurrency` slots with the job, before the job's own
  compare-and-set, and the settle frees it (the MySQL store: by the job's state, with no write of its own, but for
  a retry, which gives it back). A slot holder that is no longer `running` under a live lease (by
  that worker) frees the slot by itself: a killed worker's slot comes back when its job's lease lapses. A slot
  taken for a job whose compare-and-set then lost is given back at once.
- Rate: every start of a group's job is an instant in a ring of `rate` entries; a start takes an entry only when
  the start it recorded is at least `per_ms` old, so no window of `per_ms` holds more than `rate` starts
  (sliding, by the store's clock). A start is never given back, even if its job's compare-and-set lost.
- Cost (contract): a claim that meets a saturated group reads past it, so the other due jobs are claimed; how
  much that costs is the store's (the MySQL store steps over the group's waiting jobs in its due index, the
  memory store over its heap entries): bench/limits.py measures it.
- A job over its limit stays `pending` as it was (no attempt spent, no error) and is claimed by a later claim once
  a slot or the window allows; the other due jobs of the claim are taken past it.
- What an operator sees: `limit_usage(space_ids=None)` on both stores, a `LimitUsage` per group a claim has
  worked to (its limit as that claim gave it, the slots held, the starts in the last `per_ms`); the CLI's
  `plitzi-jobs-mysql limits`.

Each store implements this as single-row compare-and-sets (the MySQL store: mysql/limits.py; the memory store:
memory/limits.py); `testing/limits_contract.py` checks both.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..records import ActionLimit, Job
from . import validation as check

#: What identifies a limit's group: (space_id, action_id, job key if `by_key` else None).
Group = tuple[int, str, str | None]

NO_LIMITS: Final[Mapping[str, ActionLimit]] = {}


def limits_arg(limits: object) -> Mapping[str, ActionLimit]:
    """`limits` of a claim or a worker: None, or a mapping of action_id to `ActionLimit`."""
    if limits is None:
        return NO_LIMITS
    if not isinstance(limits, Mapping):
        raise TypeError(f"limits must be a mapping of action_id to ActionLimit, not {type(limits).__name__}")
    for action_id, limit in limits.items():
        check.text("limits' action_id", action_id, check.ID_MAX_CHARS)
        if not isinstance(limit, ActionLimit):
            raise TypeError(f"limits[{action_id!r}] must be an ActionLimit, not {type(limit).__name__}")
    return dict(limits)


def group_of(space_id: int, action_id: str, key: str | None, limit: ActionLimit) -> Group:
    return (space_id, action_id, key if limit.by_key else None)


def job_group(job: Job, limits: Mapping[str, ActionLimit]) -> tuple[Group, ActionLimit] | None:
    limit = limits.get(job.action_id)
    return None if limit is None else (group_of(job.space_id, job.action_id, job.key, limit), limit)


@dataclass(frozen=True, kw_only=True)
class LimitUsage:
    """An operator's view of one limited group (`limit_usage()` of both stores): the limit the claims last worked
    to, the slots held now and the starts within the last `per_ms`."""

    space_id: int
    action_id: str
    key: str | None  # with `by_key`; None otherwise
    concurrency: int | None
    running: int  # jobs running under the limit (slots held; a reserved slot with no job on it does not count)
    rate: int | None
    per_ms: int
    started: int  # starts within the last `per_ms`, by the store's clock
