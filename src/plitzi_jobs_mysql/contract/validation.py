"""The checks every store runs before it writes anything.

One module, called by the memory stores and the MySQL adapters alike, so the memory queue refuses exactly what
MySQL would: a test that passes in memory must not fail in production on a value the column cannot hold. Nothing
here trusts the server to refuse: under `sql_mode=''` MySQL truncates an over-long value with only a warning.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import PayloadTooLargeError
from ..records import (
    ATTEMPT_STATUSES,
    JOB_STATUSES,
    SETTLE_STATUSES,
    AttemptOutcome,
    JobInput,
    JobStatus,
    ScheduleInput,
    SucceededJob,
    schedule_job_id,
)
from .cron import is_known_time_zone, is_valid_cron

ID_MAX_CHARS: Final = 191  # id, action_id, key, worker_id, run_id, cron
NAME_MAX_CHARS: Final = 64  # environment, trigger, timezone
ERROR_MAX_CHARS: Final = 65_535
KV_KEY_MAX_BYTES: Final = 764
PAYLOAD_MAX_BYTES: Final = 16 * 1024 * 1024  # a job's encoded input, a kv value
INPUT_MAX_DEPTH: Final = 512  # deeper than this, decoding it again would meet Python's recursion limit
MAX_INSTANT_MS: Final = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant a datetime can hold
MAX_DURATION_MS: Final = 10 * 366 * 24 * 3_600_000  # leases, delays and lifetimes: ten years
MAX_INT32: Final = 2**31 - 1
#: A job's priority: lower runs first (as in Solid Queue, Oban and River).
PRIORITY_MIN: Final = -100
PRIORITY_MAX: Final = 100
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
MAX_LIMIT: Final = 10_000


def text(name: str, value: object, max_chars: int, *, allow_empty: bool = False) -> str:
    """A string that fits its column whole: checked in characters, and encodable as UTF-8."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if not value and not allow_empty:
        raise ValueError(f"{name} must not be empty")
    if len(value) > max_chars:
        raise ValueError(f"{name} is {len(value)} characters long; at most {max_chars} are allowed")
    if not value.isascii():  # ASCII always encodes (and `isascii` is O(1)): only other text can hold a surrogate
        utf8(name, value)
    return value


def storable_text(value: str, max_chars: int) -> str:
    """`value` made into text that `text()` accepts, for what a store is given from elsewhere (an exception's
    message, a handler's answer): a lone surrogate, which no UTF-8 can hold, written as its escape (`\\udcff`),
    and the whole clipped to `max_chars` with an ellipsis."""
    if not value.isascii():
        value = value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value if len(value) <= max_chars else value[: max_chars - 1] + "…"


def optional_text(name: str, value: object, max_chars: int) -> str | None:
    return None if value is None else text(name, value, max_chars)


def utf8(name: str, value: str) -> bytes:
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{name} is not valid Unicode text ({error.reason} at {error.start})") from None


def integer(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {value}")
    return value


def instant(name: str, value: object) -> int:
    return integer(name, value, 0, MAX_INSTANT_MS)


def duration_ms(name: str, value: object, *, allow_zero: bool = False) -> int:
    return integer(name, value, 0 if allow_zero else 1, MAX_DURATION_MS)


def space_id(value: object) -> int:
    return integer("space_id", value, INT64_MIN, INT64_MAX)


def space_ids(values: object) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError("space_ids must be a sequence of ints")
    return [integer("space_ids[]", v, INT64_MIN, INT64_MAX) for v in values]


def scoped_job(ids: object, job: object) -> list[int]:
    """The arguments of the operator's calls that name one job within some spaces."""
    spaces = space_ids(ids)
    job_id(job)
    return spaces


_check_space_id = space_id


def limit(name: str, value: object) -> int:
    return integer(name, value, 0, MAX_LIMIT)


def job_id(value: object, name: str = "job_id") -> str:
    return text(name, value, ID_MAX_CHARS)


def worker_id(value: object) -> str:
    return text("worker_id", value, ID_MAX_CHARS)


_SCALARS: Final = (str, int, bool)
# Built once rather than by every `json.dumps` call with options (a measurable share of an enqueue's client CPU).
# `_plain_json` has already refused cycles and non-finite floats, so the encoder need not look for them again.
_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


class _NotJson(Exception):
    """Carries a refusal up the nesting, gathering where it happened only once something is wrong."""

    def __init__(self, error: type[Exception], problem: str) -> None:
        self.error, self.problem, self.path = error, problem, ""


def _plain_json(value: Any, parents: set[int]) -> None:
    """JSON's own data model only: `json.dumps` would quietly turn `{1: x}` into `{"1": x}`."""
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(ValueError, f"is {value}, which JSON cannot hold")
        return
    if not isinstance(value, (dict, list, tuple)):
        raise _NotJson(TypeError, f"is a {type(value).__name__}, which is not JSON-serializable")
    if id(value) in parents:
        raise _NotJson(ValueError, "contains itself, which JSON cannot hold")
    if len(parents) >= INPUT_MAX_DEPTH:
        raise _NotJson(ValueError, f"is nested more than {INPUT_MAX_DEPTH} levels deep")
    parents.add(id(value))  # the containers on the path from the top: a cycle comes back to one of them
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, v in items:
        if isinstance(value, dict) and not isinstance(k, str):
            raise _NotJson(TypeError, f"has a {type(k).__name__} key {k!r}; JSON keys are strings")
        if v is None or type(v) in _SCALARS:
            continue
        try:
            _plain_json(v, parents)
        except _NotJson as bad:
            bad.path = (f".{k}" if isinstance(value, dict) else f"[{k}]") + bad.path
            raise
    parents.discard(id(value))


def encode_input(value: object) -> str:
    """The job's input as the JSON text the store keeps, refused whole if JSON cannot give it back as given."""
    if not isinstance(value, dict):
        raise TypeError(f"input must be a dict, not {type(value).__name__}")
    try:
        _plain_json(value, set())
    except _NotJson as bad:
        raise bad.error(f"input{bad.path} {bad.problem}") from None
    encoded = _ENCODER.encode(value)
    size = len(encoded) if encoded.isascii() else len(utf8("input", encoded))
    if size > PAYLOAD_MAX_BYTES:
        raise PayloadTooLargeError(f"input is {size} bytes encoded; at most {PAYLOAD_MAX_BYTES} are allowed")
    return encoded


def job_input(job: object) -> str:
    """Checks every field of a `JobInput`; answers its encoded input."""
    if not isinstance(job, JobInput):
        raise TypeError(f"expected a JobInput, not {type(job).__name__}")
    job_id(job.id, "id")
    space_id(job.space_id)
    text("action_id", job.action_id, ID_MAX_CHARS)
    text("environment", job.environment, NAME_MAX_CHARS)
    text("trigger", job.trigger, NAME_MAX_CHARS)
    instant("due_at", job.due_at)
    integer("max_attempts", job.max_attempts, 1, MAX_INT32)
    if job.missed is not None:
        integer("missed", job.missed, 0, MAX_INT32)
    optional_text("key", job.key, ID_MAX_CHARS)
    integer("priority", job.priority, PRIORITY_MIN, PRIORITY_MAX)
    return encode_input(job.input)


def job_inputs(jobs: object) -> list[str]:
    """Checks every job of an `enqueue_many` batch before any is written; answers their encoded inputs. The batch
    must be a sequence: a generator would be used up by the checks and leave nothing to write."""
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence):
        raise TypeError(f"jobs must be a sequence of JobInput (a list or tuple), not {type(jobs).__name__}")
    return [job_input(job) for job in jobs]


# The lease calls' checks take their arguments by name, as the `JobQueue` methods do (`_check_*` are the checks
# of one value, aliased because a parameter named like the check would hide it).
_check_worker_id = worker_id
_check_limit = limit
_check_job_id = job_id


def claim_args(*, worker_id: object, lease_ms: object, limit: object) -> None:
    _check_worker_id(worker_id)
    duration_ms("lease_ms", lease_ms)
    _check_limit("limit", limit)


def heartbeat_args(*, job_ids: object, worker_id: object, lease_ms: object) -> list[str]:
    _check_worker_id(worker_id)
    duration_ms("lease_ms", lease_ms)
    if isinstance(job_ids, (str, bytes)) or not isinstance(job_ids, Sequence):
        raise TypeError("job_ids must be a sequence of str")
    if len(job_ids) > MAX_LIMIT:
        raise ValueError(f"at most {MAX_LIMIT} job_ids per heartbeat")
    return [_check_job_id(j, "job_ids[]") for j in job_ids]


@dataclass(frozen=True, kw_only=True, slots=True)
class Settle:
    """One `settle` call, checked when built: what each store writes from. `claimed_at` given: only the claim of
    that instant may settle the job (None: any claim `worker_id` holds, the rule for callers that do not know)."""

    job_id: str
    worker_id: str
    status: str
    delay_ms: int | None = None
    run_id: str | None = None
    error: str | None = None
    attempt: AttemptOutcome | None = None
    claimed_at: int | None = None

    def __post_init__(self) -> None:
        _check_job_id(self.job_id)
        _check_worker_id(self.worker_id)
        if self.status not in SETTLE_STATUSES:
            raise ValueError(f"status must be one of {sorted(SETTLE_STATUSES)}, got {self.status!r}")
        if self.delay_ms is not None:
            duration_ms("delay_ms", self.delay_ms, allow_zero=True)
        optional_text("run_id", self.run_id, ID_MAX_CHARS)
        optional_text("error", self.error, ERROR_MAX_CHARS)
        if self.claimed_at is not None:
            instant("claimed_at", self.claimed_at)
        attempt = self.attempt
        if attempt is not None:
            if not isinstance(attempt, AttemptOutcome):
                raise TypeError(f"attempt must be an AttemptOutcome, not {type(attempt).__name__}")
            if attempt.status not in ATTEMPT_STATUSES:
                raise ValueError(f"attempt.status must be one of {sorted(ATTEMPT_STATUSES)}, got {attempt.status!r}")
            text("attempt.worker_id", attempt.worker_id, ID_MAX_CHARS)
            optional_text("attempt.run_id", attempt.run_id, ID_MAX_CHARS)
            optional_text("attempt.error", attempt.error, ERROR_MAX_CHARS)


def settle_succeeded_args(*, worker_id: object, jobs: object) -> list[Settle]:
    """The jobs of a `settle_succeeded` call, each as the `settle` it stands for (checked as that would be); a job
    named twice is settled once (by its first mention)."""
    worker = _check_worker_id(worker_id)
    if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Iterable):
        raise TypeError("jobs must be a sequence of SucceededJob")
    unique: dict[str, Settle] = {}
    for item in jobs:
        if not isinstance(item, SucceededJob):
            raise TypeError(f"jobs must hold SucceededJob records, not {type(item).__name__}")
        attempt = AttemptOutcome(status="succeeded", worker_id=worker, run_id=item.run_id)
        call = Settle(job_id=item.job_id, worker_id=worker, status="succeeded", run_id=item.run_id, attempt=attempt,
                      claimed_at=item.claimed_at)  # fmt: skip
        unique.setdefault(item.job_id, call)
    return list(unique.values())


def advance_args(*, space_id: object, action_id: object, from_at: object, to_at: object, missed: object) -> None:
    _check_space_id(space_id)
    text("action_id", action_id, ID_MAX_CHARS)
    instant("from_at", from_at)
    instant("to_at", to_at)
    integer("missed", missed, 0, MAX_INT32)


def schedule_input(schedule: object, space: int) -> None:
    if not isinstance(schedule, ScheduleInput):
        raise TypeError(f"expected a ScheduleInput, not {type(schedule).__name__}")
    if schedule.space_id != space:
        raise ValueError(f"schedule {schedule.action_id!r} belongs to space {schedule.space_id}, not to space {space}")
    text("action_id", schedule.action_id, ID_MAX_CHARS)
    text("cron", schedule.cron, ID_MAX_CHARS)
    text("environment", schedule.environment, NAME_MAX_CHARS)
    optional_text("timezone", schedule.timezone, NAME_MAX_CHARS)
    if not isinstance(schedule.enabled, bool):
        raise TypeError("enabled must be a bool")
    instant("next_run_at", schedule.next_run_at)
    integer("max_attempts", schedule.max_attempts, 1, MAX_INT32)
    if not is_valid_cron(schedule.cron):
        raise ValueError(f"schedule {schedule.action_id!r} has an invalid cron expression {schedule.cron!r}")
    if schedule.timezone is not None and not is_known_time_zone(schedule.timezone):
        raise ValueError(f"schedule {schedule.action_id!r} names an unknown time zone {schedule.timezone!r}")
    schedule_fire_id(schedule.space_id, schedule.action_id)


def schedule_fire_id(space: int, action_id: str) -> None:
    """Refuses a schedule whose fires could not be enqueued: their job id would pass `ID_MAX_CHARS` at the latest
    instant a fire can have, and every sweep reaching the schedule would fail on it."""

    longest = schedule_job_id(space, action_id, MAX_INSTANT_MS)
    if len(longest) > ID_MAX_CHARS:
        shown = action_id if len(action_id) <= 40 else action_id[:40] + "…"
        raise ValueError(
            f"schedule {shown!r} of space {space}: its fires' job id ({len(longest)} characters, "
            f"'schedule:<space>:<action>:<instant>') would pass {ID_MAX_CHARS}; use a shorter action id"
        )


def put_schedules_args(space: object, schedules: object) -> list[ScheduleInput]:
    sid = space_id(space)
    if isinstance(schedules, (str, bytes)) or not isinstance(schedules, Sequence):
        raise TypeError("schedules must be a sequence of ScheduleInput")
    seen: set[str] = set()
    for schedule in schedules:
        schedule_input(schedule, sid)
        if schedule.action_id in seen:
            raise ValueError(f"schedule {schedule.action_id!r} is listed twice")
        seen.add(schedule.action_id)
    return list(schedules)


def space_ids_or_all(values: object) -> list[int] | None:
    """An operator's view may name its spaces, or None: every space."""
    return None if values is None else space_ids(values)


def page(count: object, offset: object) -> None:
    limit("limit", count)
    integer("offset", offset, 0, INT64_MAX)


def list_schedules_args(ids: object, count: object, offset: object) -> list[int] | None:
    spaces = space_ids_or_all(ids)
    if count is not None:
        page(count, offset)
    return spaces


def list_jobs_args(ids: object, action_id: object, status: object, count: object, offset: object) -> list[int] | None:
    spaces = space_ids_or_all(ids)
    optional_text("action_id", action_id, ID_MAX_CHARS)
    if status is not None and status not in JOB_STATUSES:
        raise ValueError(f"status must be one of {sorted(JOB_STATUSES)}, got {status!r}")
    page(count, offset)
    return spaces


#: `finished_counts` buckets: a minute to a day, and at most this many in one window.
BUCKET_MIN_MS: Final = 60_000
BUCKET_MAX_MS: Final = 86_400_000
MAX_BUCKETS: Final = 1_000


def finished_counts_args(ids: object, since: object, until: object, bucket_ms: object) -> list[int] | None:
    spaces = space_ids_or_all(ids)
    instant("since", since)
    instant("until", until)
    integer("bucket_ms", bucket_ms, BUCKET_MIN_MS, BUCKET_MAX_MS)
    assert isinstance(since, int) and isinstance(until, int) and isinstance(bucket_ms, int)
    if until < since:
        raise ValueError(f"until ({until}) is before since ({since})")
    if (until - since) // bucket_ms > MAX_BUCKETS:
        raise ValueError(
            f"at most {MAX_BUCKETS} buckets of {bucket_ms} ms fit one call; widen bucket_ms or narrow the window"
        )
    return spaces


def cancel_pending_args(space: object, key: object, older_than: object) -> None:
    space_id(space)
    text("key", key, ID_MAX_CHARS)
    optional_text("older_than", older_than, ID_MAX_CHARS)


def complete_in_args(job: object, worker: object, run_id: object) -> None:
    job_id(job)
    worker_id(worker)
    optional_text("run_id", run_id, ID_MAX_CHARS)


def bulk_args(space: object, action_id: object) -> None:
    """`cancel_all` and `retry_all`: one space, and one action of it or all (None)."""
    space_id(space)
    if action_id is not None:
        text("action_id", action_id, ID_MAX_CHARS)


def finished_status(status: object) -> str:
    """`retry_all`'s status: a finished one, which `requeue` takes a job from."""
    finished = sorted(s for s in JOB_STATUSES if JobStatus(s).terminal)
    if not isinstance(status, str) or status not in finished:
        raise ValueError(f"status must be a finished status, one of {finished}, got {status!r}")
    return status
