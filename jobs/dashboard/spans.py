"""UTC days of the dashboard's pre-aggregates (jobs.dashboard.rollup, planner_rollup): a range's
whole days, which day rows answer, and the rest of the range, which hour rows answer."""

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from jobs.models import hour_floor

DAY = timedelta(days=1)
Ranges = Iterable[tuple[datetime, datetime]]


def day_floor(value: datetime) -> datetime:
    """The UTC midnight starting ``value``'s day."""
    return hour_floor(value).replace(hour=0)


def whole_days(ranges: Ranges) -> list[datetime]:
    """The UTC days lying wholly inside one of these ranges."""
    days = []
    for since, until in ranges:
        day = day_floor(since)
        day = day if day == since else day + DAY
        while day + DAY <= until:
            days.append(day)
            day += DAY
    return days


def without_days(ranges: Ranges, days: Sequence[datetime]) -> list[tuple[datetime, datetime]]:
    """``ranges`` less these whole UTC days, in order, adjacent pieces joined."""
    cut = set(days)
    left: list[tuple[datetime, datetime]] = []
    for day, pieces in by_day(ranges).items():
        if day in cut:
            continue
        for since, until in pieces:
            if left and left[-1][1] == since:
                left[-1] = (left[-1][0], until)
            else:
                left.append((since, until))
    return left


def by_day(ranges: Ranges) -> dict[datetime, list[tuple[datetime, datetime]]]:
    """``ranges`` cut at UTC midnights, grouped by their day; adjacent pieces joined."""
    days: dict[datetime, list[tuple[datetime, datetime]]] = {}
    for since, until in sorted(ranges):
        cursor = since
        while cursor < until:
            day = day_floor(cursor)
            end = min(until, day + DAY)
            pieces = days.setdefault(day, [])
            if pieces and pieces[-1][1] == cursor:
                pieces[-1] = (pieces[-1][0], end)
            else:
                pieces.append((cursor, end))
            cursor = end
    return days
