"""A differential run: the memory stores and the MySQL stores driven by one random sequence of operations.

Every answer (a value, or the class of the exception raised) is compared as it comes, and after each operation
what it may have changed: every job and schedule after a queue call, every key after a kv call. A run is a seed:
the sequence is drawn from `random.Random(seed)` and from what the memory stores answered (they are
deterministic), so the same seed gives the same operations, and a failure prints them as calls to paste (and
shrunk, tests/harness/differential_run.py).

Normalised, because the contract leaves it open, and only that:
- instants: both sides read ONE injected clock (the queues through `clock=`; the MySQL kv judges lifetimes by the
  server's clock in the statement, so its connection's `SET SESSION timestamp` is moved to the same instant before
  every kv call). The queues' clock steps back now and then, the kvs' never does (`SharedClock`);
- which of several concurrent claims answered a job (a `burst`, each claim on a queue of its own as separate
  replicas are), and that they may come back short having lost races: each may take every job claimable then, a
  lone claim takes what they left (as the next poll would), and the union of the answers is compared;
- how often the MySQL queue looks for lapsed leases while a backlog keeps claims full (at most a second late, as
  the README says): its `_lapsed_read_every_ms` is 0 here, so it looks on every claim as the memory queue does.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from plitzi_jobs_mysql.records import AttemptOutcome, Job, JobInput, ScheduleInput, SucceededJob

#: Issue 18.4 (a lone claimer's own compare-and-sets met 1205, so a claim came back short and skipped older jobs)
#: and 18.5 (a lapsed job that died in a claim used up a slot of it, MySQL only) are fixed: a run reaches both
#: (lapsed jobs reach max_attempts, and the MySQL queue's pool lets one claim send its compare-and-sets side by
#: side). False keeps clear of them again (PLITZI_DIFFERENTIAL_KNOWN=1 reaches them anyway).
KNOWN_OPEN: Final = True
START_MS: Final = 1_780_000_000_000  # 2026-05-28: a fixed start, so a seed replays exactly
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

JOB_IDS: Final = [f"j{n}" for n in range(14)] + ["a", "A", "a ", "é", "😀"]
SPACES: Final = [1, 2]
ACTIONS: Final = ["send", "sync"]
JOB_KEYS: Final = [None, "k1", "k2"]
WORKERS: Final = ["w1", "w2", "w3"]
BURST_WORKER: Final = "wb"
LEASES: Final = [1_000, 5_000, 30_000]
SCHEDULE_ACTIONS: Final = ["s1", "s2", "s3", "s4"]
CRONS: Final = ["*/5 * * * *", "0 7 * * *", "0 * * * *"]
ZONES: Final = [None, "UTC", "Europe/Berlin"]
KV_KEYS: Final = ["c1", "c2", "t1", "t2", "K", "k", "k ", "é"]
KV_VALUES: Final = [
    "0", "5", "-5", "007", "9223372036854775806", "9223372036854775807", "-9223372036854775807",
    "-9223372036854775808", "9223372036854775808", "5\n", "x", "", "😀", "v", "v ",
]  # fmt: skip
AMOUNTS: Final = [1, 1, 1, -1, 0, 5, -5, INT64_MAX, -INT64_MAX, INT64_MIN, 2**63, 1.0, True]
TTLS: Final = [None, None, 0.001, 0.5, 1, 2.5, 30, 0, -1, float("inf"), 1e9]
INPUTS: Final[list[dict[str, Any]]] = [
    {},
    {"n": 1},
    {"text": "é 😀 'q' \"d\" \\ \x00", "list": [1, "b", None, True]},
    {"nested": {"deep": [{"x": 2.5}, 1e-7, 1.0]}},
]
BAD_JOB_FIELDS: Final[list[dict[str, Any]]] = [
    {"id": ""}, {"id": "x" * 192}, {"id": "\ud800"}, {"action_id": ""}, {"max_attempts": 0},
    {"due_at": -1}, {"input": {1: "int key"}}, {"environment": "e" * 65}, {"key": "\udcff"},
    {"priority": 101}, {"priority": True},
]  # fmt: skip


class Fresh:
    """An argument rebuilt for each store (a generator is used up by the first), shown as it was written."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def build(self) -> Iterator[Any]:
        return (item for item in self.items)

    def __repr__(self) -> str:
        return f"(job for job in {self.items!r})"


@dataclass(frozen=True)
class Op:
    """One call: `target` is "queue", "kv", "clock" or "burst" (concurrent claims, one per queue)."""

    target: str
    method: str
    kwargs: tuple[tuple[str, Any], ...] = ()

    def arguments(self) -> dict[str, Any]:
        return {name: value.build() if isinstance(value, Fresh) else value for name, value in self.kwargs}

    def __str__(self) -> str:
        args = ", ".join(f"{name}={value!r}" for name, value in self.kwargs)
        return f"{self.target}.{self.method}({args})"


def op(target: str, method: str, **kwargs: Any) -> Op:
    return Op(target, method, tuple(kwargs.items()))


def claimable(jobs: list[Job], now: int) -> int:
    """How many of `jobs` a claim at `now` may take: due pending jobs and lapsed leases."""
    return sum(
        1
        for j in jobs
        if (j.status == "pending" and j.run_at <= now)
        or (j.status == "running" and j.lease_until is not None and j.lease_until < now)
    )


_SCHEDULE = ScheduleInput(
    space_id=1, action_id="s1", cron="0 7 * * *", environment="main", enabled=True, next_run_at=0, max_attempts=1
)
_OK_ATTEMPT = AttemptOutcome(status="failed", worker_id="w1")
BAD_CALLS: Final = [
    Op("queue", "claim", (("worker_id", ""), ("lease_ms", 1_000), ("limit", 1))),
    Op("queue", "claim", (("worker_id", 5), ("lease_ms", 1_000), ("limit", 1))),
    Op("queue", "claim", (("worker_id", "w1"), ("lease_ms", 0), ("limit", 1))),
    Op("queue", "claim", (("worker_id", "w1"), ("lease_ms", 1_000), ("limit", 10_001))),
    Op("queue", "claim", (("worker_id", "w1"), ("lease_ms", 1.5), ("limit", 1))),
    Op("queue", "heartbeat", (("job_ids", "j1"), ("worker_id", "w1"), ("lease_ms", 1_000))),
    Op("queue", "heartbeat", (("job_ids", [1]), ("worker_id", "w1"), ("lease_ms", 1_000))),
    Op("queue", "heartbeat", (("job_ids", []), ("worker_id", "w1"), ("lease_ms", -5))),
    Op("queue", "heartbeat", (("job_ids", []), ("worker_id", "\ud800"), ("lease_ms", 1_000))),
    Op("queue", "settle", (("job_id", "j1"), ("worker_id", "w1"), ("status", "pending"), ("delay_ms", -1))),
    Op("queue", "settle", (("job_id", "j1"), ("worker_id", "w1"), ("status", "failed"), ("run_id", "r" * 192))),
    Op("queue", "settle", (("job_id", "j1"), ("worker_id", "w1"), ("status", "failed"), ("attempt", "failed"))),
    Op("queue", "settle", (("job_id", "j1"), ("worker_id", "w1"), ("status", "failed"), ("error", "\udcff"))),
    Op(
        "queue",
        "settle",
        (
            ("job_id", "j1"),
            ("worker_id", "w1"),
            ("status", "failed"),
            ("attempt", AttemptOutcome(status="x", worker_id="w1")),
        ),
    ),
    Op("queue", "settle", (("job_id", ""), ("worker_id", "w1"), ("status", "failed"), ("attempt", _OK_ATTEMPT))),
    Op("queue", "list_jobs", (("space_ids", "1"),)),
    Op("queue", "list_jobs", (("space_ids", [1]), ("status", "sleeping"))),
    Op("queue", "list_jobs", (("space_ids", [1]), ("limit", 10_001))),
    Op("queue", "list_jobs", (("space_ids", [1]), ("offset", -1))),
    Op("queue", "list_jobs", (("space_ids", []), ("action_id", "a" * 192))),
    Op("queue", "get_job", (("space_ids", [1.5]), ("job_id", "j1"))),
    Op("queue", "get_job", (("space_ids", []), ("job_id", ""))),
    Op("queue", "cancel", (("space_ids", [2**63]), ("job_id", "j1"))),
    Op("queue", "requeue", (("space_ids", [1]), ("job_id", 5))),
    Op("queue", "cancel_pending", (("space_id", 1), ("key", ""))),
    Op("queue", "cancel_pending", (("space_id", 1), ("key", "k1"), ("older_than", ""))),
    Op("queue", "put_schedules", (("space_id", 2), ("schedules", [_SCHEDULE]))),
    Op("queue", "put_schedules", (("space_id", 1), ("schedules", Fresh([_SCHEDULE])))),
    Op("queue", "put_schedules", (("space_id", 1), ("schedules", [_SCHEDULE, "s2"]))),
    Op("queue", "due_schedules", (("limit", -1),)),
    Op(
        "queue",
        "advance_schedule",
        (("space_id", 1), ("action_id", "s1"), ("from_at", 0), ("to_at", 1), ("missed", -1)),
    ),
    Op("queue", "advance_schedule", (("space_id", 1), ("action_id", ""), ("from_at", 0), ("to_at", 1), ("missed", 0))),
    Op("queue", "list_schedules", (("space_ids", "x"),)),
    Op("queue", "list_schedules", (("space_ids", [1]), ("limit", -1))),
    Op("queue", "stats", (("space_ids", ["1"]),)),
    Op("kv", "get", (("key", 5),)),
    Op("kv", "get", (("key", "é" * 383),)),
    Op("kv", "set", (("key", "k"), ("value", 5))),
    Op("kv", "set", (("key", "k" * 765), ("value", "v"))),
    Op("kv", "set", (("key", "k"), ("value", "\ud800"))),
    Op("kv", "increment", (("key", "c1"), ("amount", 1.5))),
    Op("kv", "increment", (("key", "\ud800"), ("amount", 1))),
    Op("kv", "expire", (("key", "k"), ("ttl_seconds", None))),
    Op("kv", "swap", (("key", "k"), ("expected", 5), ("value", "v"))),
    Op("kv", "take_absent", (("pairs", [("k", "a"), ("k", "b")]),)),
    Op("kv", "take_absent", (("pairs", [("k", 5)]),)),
    Op("kv", "delete_unchanged", (("pairs", [("k" * 765, "v")]),)),
]


@dataclass
class Generator:
    """Draws the next operation from the seed and what the memory stores hold now."""

    rng: random.Random
    #: Whether to reach what issue 18.4 and 18.5 report (a lapsed job dying in a claim: its max_attempts is
    #: reached), which the MySQL queue answers differently until those land; `KNOWN_OPEN` below.
    known_open: bool = True
    now: int = START_MS
    enqueued: list[str] = field(default_factory=list)

    def pick(self, values: Sequence[Any]) -> Any:
        return values[self.rng.randrange(len(values))]

    def maybe(self, chance: float) -> bool:
        return self.rng.random() < chance

    def next(self, jobs: list[Job], due_schedules: list[tuple[int, str, int]]) -> Op:
        """`jobs`: every job the memory queue holds; `due_schedules`: (space, action, next_run_at) of its schedules."""
        kinds = [
            (8, self.advance), (12, self.enqueue), (4, self.enqueue_many), (10, self.claim), (2, self.burst),
            (5, self.heartbeat), (12, self.settle), (3, self.settle_succeeded), (5, self.cancel), (3, self.requeue),
            (2, self.cancel_pending), (4, self.read_jobs), (3, self.schedules), (12, self.kv), (1, self.bad_job),
            (2, self.bad_call),
        ]  # fmt: skip
        total = sum(weight for weight, _ in kinds)
        roll = self.rng.randrange(total)
        for weight, make in kinds:
            if roll < weight:
                return make(jobs, due_schedules)
            roll -= weight
        raise AssertionError("unreachable")

    # -- the clock and the queue ----------------------------------------------------------------------------

    def advance(self, _jobs: list[Job], _due: Any) -> Op:
        # Now and then back a little: a store's clock may step back (a failover to a primary a little behind).
        ms = self.pick([0, 1, 10, 250, 999, 1_000, 1_001, 3_000, 5_000, 30_001, 60_000, -1, -1_500])
        self.now += ms
        return op("clock", "advance", ms=ms)

    def job(self, **fields: Any) -> JobInput:
        values: dict[str, Any] = {
            "id": self.pick(JOB_IDS),
            "space_id": self.pick(SPACES),
            "action_id": self.pick(ACTIONS),
            "environment": "main",
            "trigger": self.pick(["manual", "schedule"]),
            "input": self.pick(INPUTS),
            "due_at": max(0, self.now + self.pick([-10_000, -1, 0, 0, 1, 500, 5_000, 60_000])),
            "max_attempts": self.pick([1, 2, 3] if self.known_open else [40, 1_000]),
            "missed": self.pick([None, None, 0, 3]),
            "key": self.pick(JOB_KEYS),
            "priority": self.pick([0, 0, 0, -5, 5, 100, -100]),
        }
        values.update(fields)
        return JobInput(**values)

    def enqueue(self, _jobs: list[Job], _due: Any) -> Op:
        return op("queue", "enqueue", job=self.job())

    def enqueue_many(self, _jobs: list[Job], _due: Any) -> Op:
        batch = [self.job() for _ in range(self.rng.randrange(0, 6))]
        if self.maybe(0.1):
            return op("queue", "enqueue_many", jobs=Fresh(batch))  # a generator: refused by both
        return op("queue", "enqueue_many", jobs=batch if self.maybe(0.7) else tuple(batch))

    def bad_job(self, _jobs: list[Job], _due: Any) -> Op:
        bad = self.job(**self.pick(BAD_JOB_FIELDS))
        if self.maybe(0.5):
            return op("queue", "enqueue", job=bad)
        return op("queue", "enqueue_many", jobs=[self.job(), bad])

    def bad_call(self, _jobs: list[Job], _due: Any) -> Op:
        """A call with one argument out of bounds or of the wrong type: refused alike, nothing written."""
        return self.pick(BAD_CALLS)

    def claim(self, _jobs: list[Job], _due: Any) -> Op:
        return op(
            "queue", "claim", worker_id=self.pick(WORKERS), lease_ms=self.pick(LEASES), limit=self.pick([0, 1, 1, 2, 4])
        )

    def burst(self, _jobs: list[Job], _due: Any) -> Op:
        # Each claim may take every job claimable when it runs (the runner counts them), so that the burst, and
        # the lone claim after it, take them all whichever claim wins which.
        return op("burst", "claim", claims=self.pick([2, 3]), lease_ms=self.pick(LEASES))

    def holder_and_job(self, jobs: list[Job]) -> tuple[str, str, int | None]:
        """A worker, a job and the claim instant to settle it by: mostly the holder's own, now and then another
        worker's, an earlier claim's instant, or none (the guard then is the worker alone)."""
        running = [j for j in jobs if j.status == "running"]
        if running and self.maybe(0.85):
            held = self.pick(running)
            worker = held.worker_id if self.maybe(0.85) else self.pick(WORKERS)
            claimed_at = self.pick([held.claimed_at, held.claimed_at, None, (held.claimed_at or 0) - 1])
            return worker or "w1", held.id, claimed_at
        return self.pick([*WORKERS, BURST_WORKER]), self.pick(JOB_IDS), self.pick([None, self.now])

    def heartbeat(self, jobs: list[Job], _due: Any) -> Op:
        worker, _, _ = self.holder_and_job(jobs)
        mine = [j.id for j in jobs if j.worker_id == worker and j.status == "running"]
        ids = [i for i in mine if self.maybe(0.8)] + [self.pick(JOB_IDS) for _ in range(self.rng.randrange(0, 2))]
        return op("queue", "heartbeat", job_ids=ids, worker_id=worker, lease_ms=self.pick(LEASES))

    def settle(self, jobs: list[Job], _due: Any) -> Op:
        worker, job_id, claimed_at = self.holder_and_job(jobs)
        status = self.pick(["succeeded", "succeeded", "pending", "pending", "failed", "dead", "cancelled"])
        attempt = None
        if self.maybe(0.75):
            a_status = self.pick(["succeeded", "failed", "cancelled", "lost"])
            attempt = AttemptOutcome(
                status=a_status,
                worker_id=worker,
                run_id=self.pick([None, "run-1", "é"]),
                error=self.pick([None, "boom", "x" * 300]),
            )
        if self.maybe(0.04):
            status = self.pick(["running", "sleeping"])  # refused by both
        return op(
            "queue",
            "settle",
            job_id=job_id,
            worker_id=worker,
            status=status,
            delay_ms=self.pick([None, 0, 1, 2_000, 60_000]) if status == "pending" else None,
            run_id=self.pick([None, None, "run-2"]),
            error=self.pick([None, "oops"]),
            attempt=attempt,
            claimed_at=claimed_at,
        )

    def settle_succeeded(self, jobs: list[Job], _due: Any) -> Op:
        """The worker's batch of succeeded settles (the `SettlesSucceeded` capability both stores offer)."""
        worker, _, _ = self.holder_and_job(jobs)
        mine = [j for j in jobs if j.worker_id == worker and j.status == "running" and self.maybe(0.7)]
        batch = [
            SucceededJob(
                job_id=j.id,
                run_id=self.pick([None, "r-1", "é"]),
                claimed_at=self.pick([j.claimed_at, j.claimed_at, None, (j.claimed_at or 0) - 1]),
            )
            for j in mine
        ]
        batch += [SucceededJob(job_id=self.pick(JOB_IDS)) for _ in range(self.rng.randrange(0, 2))]
        return op("queue", "settle_succeeded", worker_id=worker, jobs=batch)

    def spaces(self) -> list[int] | None:
        return self.pick([[1], [2], [1, 2], [], None])

    def cancel(self, jobs: list[Job], _due: Any) -> Op:
        running = [j.id for j in jobs if j.status == "running"]
        if running and self.maybe(0.5):
            job_id = self.pick(running)  # a cancel asked (again) of a job its worker runs
        else:
            job_id = self.pick([j.id for j in jobs] or JOB_IDS) if self.maybe(0.8) else self.pick(JOB_IDS)
        spaces = self.pick([[1], [2], [1, 2], []]) if self.maybe(0.3) else [1, 2]
        return op("queue", "cancel", space_ids=spaces, job_id=job_id)

    def requeue(self, jobs: list[Job], _due: Any) -> Op:
        finished = [j.id for j in jobs if j.status in ("succeeded", "failed", "dead", "cancelled")]
        job_id = self.pick(finished) if finished and self.maybe(0.8) else self.pick(JOB_IDS)
        return op("queue", "requeue", space_ids=self.pick([[1], [2], [1, 2], []]), job_id=job_id)

    def cancel_pending(self, jobs: list[Job], _due: Any) -> Op:
        older = self.pick([None, None, *[j.id for j in jobs[:5]], "missing"])
        return op("queue", "cancel_pending", space_id=self.pick(SPACES), key=self.pick(["k1", "k2"]), older_than=older)

    def read_jobs(self, jobs: list[Job], _due: Any) -> Op:
        roll = self.rng.randrange(4)
        if roll == 0:
            return op("queue", "get_job", space_ids=self.pick([[1], [2], [1, 2], []]), job_id=self.pick(JOB_IDS))
        if roll == 1:
            return op("queue", "stats", space_ids=self.spaces())
        if roll == 2:
            since = max(0, self.now - self.pick([0, 60_000, 600_000, 3_600_000]))
            return op(
                "queue",
                "finished_counts",
                space_ids=self.spaces(),
                since=since,
                until=self.now + self.pick([0, 1, 60_000]),
                bucket_ms=self.pick([60_000, 3_600_000]),
            )
        return op(
            "queue",
            "list_jobs",
            space_ids=self.spaces(),
            action_id=self.pick([None, None, *ACTIONS]),
            status=self.pick([None, None, "pending", "running", "succeeded", "dead", "cancelled"]),
            limit=self.pick([0, 1, 3, 50]),
            offset=self.pick([0, 0, 1, 4]),
        )

    # -- schedules ------------------------------------------------------------------------------------------

    def schedules(self, _jobs: list[Job], due: list[tuple[int, str, int]]) -> Op:
        roll = self.rng.randrange(5)
        if roll == 0:
            space = self.pick(SPACES)
            chosen = [a for a in SCHEDULE_ACTIONS if self.maybe(0.5)]
            if self.maybe(0.05):
                chosen += chosen[:1]  # listed twice: refused by both
            listed = [
                ScheduleInput(
                    space_id=space,
                    action_id=action,
                    cron=self.pick(CRONS),
                    environment=self.pick(["main", "main", "staging"]),
                    enabled=self.maybe(0.8),
                    next_run_at=max(0, self.now + self.pick([-60_000, 0, 60_000, 3_600_000])),
                    max_attempts=self.pick([1, 3]),
                    timezone=self.pick(ZONES),
                )
                for action in chosen
            ]
            return op("queue", "put_schedules", space_id=space, schedules=listed)
        if roll == 1:
            return op("queue", "due_schedules", limit=self.pick([0, 1, 10]))
        if roll == 2 and due:
            space, action, at = self.pick(due)
            from_at = at if self.maybe(0.8) else at + 1
            return op(
                "queue",
                "advance_schedule",
                space_id=space,
                action_id=action,
                from_at=from_at,
                to_at=at + self.pick([60_000, 3_600_000]),
                missed=self.pick([0, 0, 2]),
            )
        if self.maybe(0.5):
            return op("queue", "list_schedules", space_ids=self.spaces())
        return op(
            "queue",
            "list_schedules",
            space_ids=self.spaces(),
            limit=self.pick([0, 1, 2, 50]),
            offset=self.pick([0, 1, 3]),
        )

    # -- the kv ---------------------------------------------------------------------------------------------

    def kv(self, _jobs: list[Job], _due: Any) -> Op:
        key = self.pick(KV_KEYS)
        roll = self.rng.randrange(10)
        if roll == 0:
            return op("kv", "get", key=key)
        if roll == 1:
            return op("kv", "set", key=key, value=self.pick(KV_VALUES), ttl_seconds=self.pick(TTLS))
        if roll == 2:
            return op("kv", "delete", key=key)
        if roll in (3, 4):
            return op("kv", "increment", key=key, amount=self.pick(AMOUNTS))
        if roll == 5:
            return op("kv", "expire", key=key, ttl_seconds=self.pick(TTLS[2:]))
        if roll in (6, 7):
            expected = self.pick([None, *KV_VALUES])
            return op("kv", "swap", key=key, expected=expected, value=self.pick(KV_VALUES), ttl_seconds=self.pick(TTLS))
        pairs = [(k, self.pick(["t-1", "t-2"])) for k in KV_KEYS if self.maybe(0.3)]
        if roll == 8:
            return op("kv", "take_absent", pairs=pairs, ttl_seconds=self.pick([None, 1, 30]))
        return op("kv", "delete_unchanged", pairs=pairs)
