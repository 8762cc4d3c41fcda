"""The timeline of a subject as a drawing: pure layout, no I/O.

``layout`` places each version of a subject on a time axis (x: its event date; y: a lane per
author, authors also told apart by colour), draws supersession as arrows from the older
version to the one that replaced it, and puts the as-of line where the page's date says. The
template turns the result into inline SVG; the page's script moves the as-of line and greys
the versions dated after it, using the ``day_min``/``day_span`` scale carried along.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta

# Okabe-Ito: eight colours that stay distinct under the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
WIDTH = 960
LEFT = 150  # room for the author names
RIGHT = 24
TOP = 16
LANE = 44
AXIS = 36
GAP = 11  # arrows stop this far from a point's centre (radius 7-9, and the arrow head)


@dataclass(frozen=True, slots=True)
class Version:
    """One record about the subject, as the timeline needs it."""

    id: int
    day: str | None  # YYYY-MM-DD, None if undated
    author: str | None
    state: str
    superseded_by: int | None
    summary: str
    reasons: tuple[str, ...] = ()  # why it belongs to the subject (Memory.history)


@dataclass(frozen=True, slots=True)
class Point:
    version: Version
    x: float
    y: float
    color: str
    after_as_of: bool


@dataclass(frozen=True, slots=True)
class Arrow:
    x1: float
    y1: float
    x2: float
    y2: float
    older: int
    newer: int


@dataclass(frozen=True, slots=True)
class Lane:
    author: str
    y: float
    color: str


@dataclass(frozen=True, slots=True)
class Tick:
    x: float
    label: str


@dataclass(frozen=True, slots=True)
class Timeline:
    width: int
    height: int
    axis_y: float
    plot_left: int
    plot_right: int
    lanes: list[Lane]
    points: list[Point]
    arrows: list[Arrow]
    ticks: list[Tick]
    undated: list[Version]
    day_min: str | None
    day_span: int
    as_of_x: float | None


def layout(versions: Sequence[Version], as_of: str | None = None) -> Timeline:
    """Place ``versions`` on a time axis. ``as_of`` (``YYYY-MM-DD``) puts the as-of line."""
    dated = [v for v in versions if v.day]
    undated = [v for v in versions if not v.day]
    authors: list[str] = []
    for version in sorted(dated, key=lambda v: (v.day, v.id)):
        name = version.author or "(no author)"
        if name not in authors:
            authors.append(name)
    lanes = [
        Lane(name, TOP + LANE * (i + 0.5), PALETTE[i % len(PALETTE)])
        for i, name in enumerate(authors)
    ]
    lane_of = {lane.author: lane for lane in lanes}
    axis_y = TOP + LANE * max(len(lanes), 1) + 8
    height = int(axis_y + AXIS)
    if not dated:
        return Timeline(
            WIDTH, height, axis_y, LEFT, WIDTH - RIGHT, lanes, [], [], [], undated, None, 0, None
        )
    days = [date.fromisoformat(v.day[:10]) for v in dated if v.day]
    first, last = min(days), max(days)
    as_of_day = date.fromisoformat(as_of[:10]) if as_of else None
    if as_of_day is not None:
        first, last = min(first, as_of_day), max(last, as_of_day)
    # A little room either side so the first and last points are not on the frame.
    pad = max(1, (last - first).days // 20)
    first, last = first - timedelta(days=pad), last + timedelta(days=pad)
    span = (last - first).days
    points: list[Point] = []
    where: dict[int, Point] = {}
    stacked: dict[tuple[str, date], int] = {}
    for version in sorted(dated, key=lambda v: (v.day, v.id)):
        assert version.day is not None
        day = date.fromisoformat(version.day[:10])
        lane = lane_of[version.author or "(no author)"]
        # Versions of one author on one day fan out vertically instead of hiding each other.
        nth = stacked.get((lane.author, day), 0)
        stacked[(lane.author, day)] = nth + 1
        y = lane.y + (nth % 3 - 1) * 10 if nth else lane.y
        point = Point(
            version,
            _x(day, first, span),
            y,
            lane.color,
            as_of_day is not None and day > as_of_day,
        )
        points.append(point)
        where[version.id] = point
    arrows = [
        _arrow(old, new)
        for old in points
        if old.version.superseded_by is not None
        and (new := where.get(old.version.superseded_by)) is not None
    ]
    ticks = [Tick(_x(day, first, span), label) for day, label in _ticks(first, last)]
    as_of_x = _x(as_of_day, first, span) if as_of_day is not None else None
    return Timeline(
        WIDTH,
        height,
        axis_y,
        LEFT,
        WIDTH - RIGHT,
        lanes,
        points,
        arrows,
        ticks,
        undated,
        first.isoformat(),
        span,
        as_of_x,
    )


def _arrow(old: Point, new: Point) -> Arrow:
    """From the edge of the older point to just short of the newer one (room for the head)."""
    dx, dy = new.x - old.x, new.y - old.y
    length = math.hypot(dx, dy)
    if length < 2 * GAP:  # the two points touch: a short stub to the right
        return Arrow(old.x, old.y, old.x + GAP, old.y, old.version.id, new.version.id)
    ux, uy = dx / length, dy / length
    return Arrow(
        round(old.x + ux * GAP, 1),
        round(old.y + uy * GAP, 1),
        round(new.x - ux * GAP, 1),
        round(new.y - uy * GAP, 1),
        old.version.id,
        new.version.id,
    )


def _x(day: date, first: date, span: int) -> float:
    if span <= 0:
        return (LEFT + WIDTH - RIGHT) / 2
    return round(LEFT + (WIDTH - RIGHT - LEFT) * (day - first).days / span, 1)


def _ticks(first: date, last: date) -> list[tuple[date, str]]:
    """Axis labels: years, quarters, months or days, whichever gives at most about ten."""
    span = (last - first).days
    if span > 365 * 4:
        step_years = max(1, span // 365 // 8)
        return [
            (date(year, 1, 1), str(year))
            for year in range(first.year + 1, last.year + 1)
            if (year - first.year) % step_years == 0
        ]
    if span > 120:
        months = 1 if span <= 330 else 3 if span <= 1000 else 6
        out = []
        year, month = first.year, first.month
        while True:
            month += 1
            if month > 12:
                year, month = year + 1, 1
            day = date(year, month, 1)
            if day > last:
                return out
            if (month - 1) % months == 0:
                out.append(
                    (day, day.strftime("%b %Y") if month == 1 or not out else day.strftime("%b"))
                )
    step = max(1, span // 8)
    return [
        (first + timedelta(days=n), (first + timedelta(days=n)).strftime("%d %b"))
        for n in range(step, span, step)
    ]
