"""Instants and durations in people's words (issue 23.3): the CLI's and the log lines'."""

from __future__ import annotations

from plitzi_jobs_mysql.contract import readable
from plitzi_jobs_mysql.contract.events import EventKind, JobEvent, describe

from ..support import T


def test_durations_in_their_two_largest_units() -> None:
    cases = {
        0: "0ms", 250: "250ms", 1_000: "1s", 59_999: "59.9s", 2_500: "2.5s", 61_000: "1m 1s", 3_600_000: "1h",
        3 * 86_400_000 + 4 * 3_600_000 + 59_000: "3d 4h", 86_400_000 + 30_000: "1d", -5_000: "-5s",
    }  # fmt: skip
    assert {ms: readable.duration(ms) for ms in cases} == cases


def test_instants_in_iso_utc_with_their_age() -> None:
    assert readable.instant(T) == "2023-11-14T22:13:20Z"
    assert readable.instant(T + 250) == "2023-11-14T22:13:20.250Z"
    assert (readable.age(T, T + 90_000), readable.age(T + 7_200_000, T), readable.age(T, T)) == (
        "1m 30s ago",
        "in 2h",
        "now",
    )


def test_log_lines_say_fire_instants_and_delays_readably() -> None:
    fired = JobEvent(kind=EventKind.FIRED, job_id="schedule:1:a:1", space_id=1, action_id="a", fire_at=T)
    assert describe(fired) == "schedule of space 1, action 'a' fired at 2023-11-14T22:13:20Z: 'schedule:1:a:1'"
    missed = JobEvent(kind=EventKind.MISSED, job_id="j", space_id=1, action_id="a", fire_at=T, count=3)
    assert "missed 3 fire(s) before 2023-11-14T22:13:20Z" in describe(missed)
    retried = JobEvent(kind=EventKind.RETRIED, job_id="j", space_id=1, action_id="a", delay_ms=90_000)
    assert describe(retried).endswith("goes back to the queue, due again in 1m 30s")
    claimed = JobEvent(kind=EventKind.CLAIMED, job_id="j", space_id=1, action_id="a", worker_id="w", wait_ms=2_500)
    assert describe(claimed).endswith("claimed by w 2.5s after it was due")
