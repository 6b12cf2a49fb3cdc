"""The overview's chart as SVG geometry computed here, drawn by the template: no script, no library, nothing
loaded. Bars per hour, stacked: succeeded, then failed (failed and dead), then cancelled."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from ..records import FinishedCount

WIDTH: Final = 720
HEIGHT: Final = 160
LEFT: Final = 44  # room for the y labels
BOTTOM: Final = 22  # room for the x labels
TOP: Final = 8
#: The stacks, bottom up: (css class, label, the statuses counted in it).
SERIES: Final = (
    ("ok", "succeeded", ("succeeded",)),
    ("bad", "failed or dead", ("failed", "dead")),
    ("off", "cancelled", ("cancelled",)),
)


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    css: str
    title: str


@dataclass(frozen=True)
class Label:
    x: float
    y: float
    text: str


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    bars: list[Bar]
    x_labels: list[Label]
    y_labels: list[Label]
    grid: list[float]  # y of each grid line
    totals: dict[str, int]  # per series label, over the window
    empty: bool


def _per_series(counts: Sequence[FinishedCount]) -> list[int]:
    return [sum(c.count for c in counts if c.status in statuses) for _css, _label, statuses in SERIES]


def _nice_top(value: int) -> int:
    """The y axis' top: the smallest of 1, 2, 5 x 10^n at or above `value`."""
    top = 1
    while True:
        for step in (1, 2, 5):
            if step * top >= value:
                return step * top
        top *= 10


def hourly_chart(window: Mapping[int, Sequence[FinishedCount]], bucket_ms: int,
                 width: int = WIDTH, height: int = HEIGHT) -> Chart:  # fmt: skip
    starts = sorted(window)
    stacks = [_per_series(window[at]) for at in starts]
    top = _nice_top(max([sum(stack) for stack in stacks] + [1]))
    plot_w, plot_h = width - LEFT - 4, height - TOP - BOTTOM
    slot = plot_w / max(len(starts), 1)
    bars: list[Bar] = []
    x_labels: list[Label] = []
    for n, (at, stack) in enumerate(zip(starts, stacks, strict=True)):
        x = LEFT + n * slot
        base = float(TOP + plot_h)
        hour = datetime.fromtimestamp(at / 1000, UTC)
        for (css, label, _statuses), count in zip(SERIES, stack, strict=True):
            if count == 0:
                continue
            h = plot_h * count / top
            base -= h
            title = f"{hour:%Y-%m-%d %H:%M}Z, {bucket_ms // 60_000} min: {count} {label}"
            bars.append(Bar(x=round(x + 1, 1), y=round(base, 1), width=round(max(slot - 2, 1), 1),
                            height=round(max(h, 0.5), 1), css=css, title=title))  # fmt: skip
        if n % 3 == 0:
            x_labels.append(Label(x=round(x + slot / 2, 1), y=height - 6, text=f"{hour:%H}h"))
    grid = [round(TOP + plot_h * (1 - fraction), 1) for fraction in (0, 0.5, 1)]
    y_labels = [Label(x=LEFT - 6, y=y + 4, text=f"{top * f:,g}") for y, f in zip(grid, (0, 0.5, 1), strict=True)]
    totals = {label: sum(stack[i] for stack in stacks) for i, (_css, label, _s) in enumerate(SERIES)}
    return Chart(width=width, height=height, bars=bars, x_labels=x_labels, y_labels=y_labels, grid=grid,
                 totals=totals, empty=not any(totals.values()))  # fmt: skip


def sparkline(window: Mapping[int, Sequence[FinishedCount]], space_id: int, action_id: str) -> Chart:
    """One action's hours, small, for its row in the overview's table."""
    mine = {at: [c for c in counts if c.space_id == space_id and c.action_id == action_id]
            for at, counts in window.items()}  # fmt: skip
    starts = sorted(mine)
    stacks = [_per_series(mine[at]) for at in starts]
    width, height = 120, 22
    top = max([sum(stack) for stack in stacks] + [1])
    slot = width / max(len(starts), 1)
    bars = []
    for n, stack in enumerate(stacks):
        base = float(height)
        for (css, label, _statuses), count in zip(SERIES, stack, strict=True):
            if count:
                h = max(height * count / top, 1.0)
                base -= h
                bars.append(Bar(x=round(n * slot, 1), y=round(base, 1), width=round(max(slot - 1, 1), 1),
                                height=round(h, 1), css=css, title=f"{count} {label}"))  # fmt: skip
    totals = {label: sum(stack[i] for stack in stacks) for i, (_css, label, _s) in enumerate(SERIES)}
    return Chart(width=width, height=height, bars=bars, x_labels=[], y_labels=[], grid=[], totals=totals,
                 empty=not any(totals.values()))  # fmt: skip
