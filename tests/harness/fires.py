"""What the cluster drills assert of the sweeps' answers when a member dies under them."""

from __future__ import annotations

import collections


def assert_fires_reported(enqueued: list[str], duplicates: list[str], in_table: set[str]) -> int:
    """No fire reported enqueued twice, and every fire in the table reported by some sweep. An enqueue whose
    commit reached the cluster just as its member died cannot know it landed: that schedule stays due, and the
    sweep that moves it on finds the job there and reports it a duplicate. Answers how many fires landed unseen."""
    assert len(enqueued) == len(set(enqueued)), collections.Counter(enqueued).most_common(3)
    reported = set(enqueued) | set(duplicates)
    assert reported == in_table, sorted(reported ^ in_table)[:3]
    return len(in_table - set(enqueued))
