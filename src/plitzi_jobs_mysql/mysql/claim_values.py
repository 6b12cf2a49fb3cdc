"""What a claim's steps hand each other, shared by claim.py and its limits (limits.py)."""

from __future__ import annotations

# What one compare-and-set of a claim came to.
LOST, WON, DIED = 0, 1, 2

#: A claim's candidate: (seq, run_at, lapsed 0/1, priority).
Candidate = tuple[int, int, int, int]
