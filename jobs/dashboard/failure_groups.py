"""Failure groups, read side (DESIGN.md section 6): the groups active in a window with their
trend and providers, from the rows ingest keeps (jobs.ingest.failure_groups). A page reads a
bounded number of hour rows; it never scans steps.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Sum

from jobs.dashboard.window import Window, wall, zone_label
from jobs.models import FailureGroup, FailureGroupHour, FailureGroupJob, hour_floor

MAX_GROUPS = 100
SPARK_WIDTH, SPARK_HEIGHT = 120, 24


@dataclass(slots=True)
class Involved:
    provider: str
    model: str
    steps: int

    @property
    def label(self) -> str:
        return "/".join(part for part in (self.provider, self.model) if part) or "none"


@dataclass(slots=True)
class GroupRow:
    """A group with its failed steps in the window: per hour (oldest first) and by
    provider/model (most first)."""

    group: FailureGroup
    steps_in_window: int
    hourly: list[int]
    involved: list[Involved] = field(default_factory=list)

    @property
    def sparkline(self) -> list[dict]:
        """Bars of an inline SVG (x, y, height in its viewBox), one per hour with failures."""
        return spark_bars(self.hourly)


def window_hours(window: Window) -> list[datetime]:
    """The UTC hours the window touches, oldest first."""
    hour, end = hour_floor(window.start), window.end
    hours = []
    while hour < end:
        hours.append(hour)
        hour += timedelta(hours=1)
    return hours


def spark_bars(counts: list[int]) -> list[dict]:
    top = max(counts, default=0)
    if not top:
        return []
    width = SPARK_WIDTH / len(counts)
    return [
        {
            "x": round(index * width, 2),
            "width": round(max(width - 0.5, 0.5), 2),
            "height": round(max(count / top * SPARK_HEIGHT, 1), 2),
            "y": round(SPARK_HEIGHT - max(count / top * SPARK_HEIGHT, 1), 2),
        }
        for index, count in enumerate(counts)
        if count
    ]


def _hour_rows(window: Window, group_ids=None):
    rows = FailureGroupHour.objects.filter(hour__gte=hour_floor(window.start), hour__lt=window.end)
    if window.provider:
        rows = rows.filter(provider__iexact=window.provider)
    if window.model:
        rows = rows.filter(model__iexact=window.model)
    if group_ids is not None:
        rows = rows.filter(group_id__in=group_ids)
    return rows


def groups_in_window(window: Window, limit: int = MAX_GROUPS) -> list[GroupRow]:
    """The groups with failed steps in the window, most steps first (three queries)."""
    top = list(
        _hour_rows(window)
        .values("group_id")
        .annotate(steps=Sum("step_count"))
        .filter(steps__gt=0)
        .order_by("-steps", "group_id")[:limit]
    )
    if not top:
        return []
    ids = [row["group_id"] for row in top]
    groups = FailureGroup.objects.in_bulk(ids)
    return _rows(window, [(groups[row["group_id"]], row["steps"]) for row in top])


def group_in_window(group: FailureGroup, window: Window) -> GroupRow:
    """One group's row over the window (zero steps when it was quiet)."""
    return _rows(window, [(group, 0)])[0]


def _rows(window: Window, groups: list[tuple[FailureGroup, int]]) -> list[GroupRow]:
    hours = window_hours(window)
    index = {hour: position for position, hour in enumerate(hours)}
    hourly = {group.pk: [0] * len(hours) for group, _ in groups}
    involved: dict[int, dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    rows = _hour_rows(window, list(hourly)).values_list(
        "group_id", "hour", "provider", "model", "step_count"
    )
    for group_id, hour, provider, model, count in rows:
        position = index.get(hour_floor(hour))
        if position is not None:
            hourly[group_id][position] += count
        involved[group_id][(provider, model)] += count
    result = []
    for group, _ in groups:
        counts = hourly[group.pk]
        people = sorted(
            (Involved(p, m, n) for (p, m), n in involved[group.pk].items() if n),
            key=lambda item: (-item.steps, item.provider, item.model),
        )
        result.append(GroupRow(group, sum(counts), counts, people))
    return result


def recent_jobs(group: FailureGroup, limit: int = 50):
    """The group's most recently stored jobs (newest first) with their step counts: served by
    the (group, job) unique index."""
    return (
        FailureGroupJob.objects.filter(group=group)
        .select_related("job")
        .only(
            "step_count",
            "job__job_id",
            "job__status",
            "job__workflow",
            "job__provider",
            "job__model",
            "job__started_at",
        )
        .order_by("-job_id")[:limit]
    )


def groups_of_job(job_pk: int) -> dict[int, FailureGroup]:
    """The failure groups a job's failures belong to, by id (the job page's labels)."""
    return {
        row.group.pk: row.group
        for row in FailureGroupJob.objects.filter(job_id=job_pk).select_related("group")
    }


def trend_figure(window: Window, group: FailureGroup) -> dict:
    """The group's failed steps per hour over the window, stacked by provider/model (a plotly
    figure as data; charts.js escapes the producer text in it)."""
    hours = window_hours(window)
    index = {hour: position for position, hour in enumerate(hours)}
    series: dict[tuple[str, str], list[int]] = {}
    rows = _hour_rows(window, [group.pk]).values_list("hour", "provider", "model", "step_count")
    for hour, provider, model, count in rows:
        position = index.get(hour_floor(hour))
        if position is not None and count:
            series.setdefault((provider, model), [0] * len(hours))[position] += count
    x = [wall(hour) for hour in hours]
    data = [
        {
            "type": "bar",
            "name": Involved(provider, model, 0).label,
            "x": x,
            "y": counts,
            "hovertemplate": "%{x}<br>%{y} failed steps<extra>%{fullData.name}</extra>",
        }
        for (provider, model), counts in sorted(series.items())
    ]
    layout = {
        "barmode": "stack",
        "height": 260,
        "margin": {"l": 48, "r": 16, "t": 24, "b": 64},
        "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom"},
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "xaxis": {
            "type": "date",
            "range": [wall(window.start), wall(window.end)],
            "title": {"text": f"Hour of failure ({zone_label()})"},
            "automargin": True,
        },
        "yaxis": {"title": {"text": "Failed steps"}, "rangemode": "tozero", "automargin": True},
    }
    return {"data": data, "layout": layout, "empty": "" if data else "No failures in this window."}
