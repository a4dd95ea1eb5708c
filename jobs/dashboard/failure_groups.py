"""Failure groups, read side (DESIGN.md section 6): the groups active in a window with their
trend and providers, from the rows ingest keeps (jobs.ingest.failure_groups). A page reads a
bounded number of hour rows; it never scans steps.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import IntegerField, Sum
from django.db.models.expressions import RawSQL

from jobs.dashboard.window import Window, wall, zone_label
from jobs.ingest import database
from jobs.models import FailureGroup, FailureGroupHour, FailureGroupJob, hour_floor

MAX_GROUPS = 100
SPARK_WIDTH, SPARK_HEIGHT = 120, 24
# At most this many bars: a longer range merges neighbouring hours (7 days: 4 hours a bar).
SPARK_BARS = 48


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
    def sparkline(self) -> str:
        """An inline SVG path of bars (in a SPARK_WIDTH x SPARK_HEIGHT viewBox), one per hour
        with failures: one element per row, so a 7-day range stays cheap to render."""
        return spark_path(self.hourly)


def window_hours(window: Window) -> list[datetime]:
    """The UTC hours the window touches, oldest first."""
    hour, end = hour_floor(window.start), window.end
    hours = []
    while hour < end:
        hours.append(hour)
        hour += timedelta(hours=1)
    return hours


def spark_path(counts: list[int]) -> str:
    """``M x,y h w v h h -w z`` per bar with failures (an hour, or several merged), heights
    relative to the busiest bar; "" when there are none."""
    if len(counts) > SPARK_BARS:
        per_bar = -(-len(counts) // SPARK_BARS)
        counts = [sum(counts[i : i + per_bar]) for i in range(0, len(counts), per_bar)]
    top = max(counts, default=0)
    if not top:
        return ""
    width = SPARK_WIDTH / len(counts)
    bar = max(width - 0.5, 0.5)
    parts = []
    for index, count in enumerate(counts):
        if count:
            height = max(count / top * SPARK_HEIGHT, 1)
            parts.append(
                f"M{index * width:.2f},{SPARK_HEIGHT - height:.2f}h{bar:.2f}v{height:.2f}"
                f"h{-bar:.2f}z"
            )
    return "".join(parts)


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


def _epoch_hour(value: datetime) -> int:
    return int(value.timestamp()) // 3600


def _rows(window: Window, groups: list[tuple[FailureGroup, int]]) -> list[GroupRow]:
    """Rows for these groups: two aggregates over the window's hour rows (per group and hour,
    read as integers; per group and provider/model)."""
    first = _epoch_hour(hour_floor(window.start))
    length = len(window_hours(window))
    hourly = {group.pk: [0] * length for group, _ in groups}
    ids = list(hourly)
    epoch_hour = RawSQL(database.sql_hours_since_epoch('"hour"'), [], output_field=IntegerField())
    per_hour = (
        _hour_rows(window, ids)
        .annotate(epoch_hour=epoch_hour)
        .values_list("group_id", "epoch_hour")
        .annotate(steps=Sum("step_count"))
        .order_by()
    )
    for group_id, hour, count in per_hour:
        if 0 <= hour - first < length:
            hourly[group_id][hour - first] += count
    involved: dict[int, list[Involved]] = defaultdict(list)
    per_provider = (
        _hour_rows(window, ids)
        .values_list("group_id", "provider", "model")
        .annotate(steps=Sum("step_count"))
        .order_by("group_id", "-steps", "provider", "model")
    )
    for group_id, provider, model, count in per_provider:
        if count:
            involved[group_id].append(Involved(provider, model, count))
    return [
        GroupRow(group, sum(hourly[group.pk]), hourly[group.pk], involved[group.pk])
        for group, _ in groups
    ]


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
        position = index.get(hour)
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
