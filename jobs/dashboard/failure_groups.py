"""Failure groups, read side (docs/architecture.md, docs/failures.md): a page of groups with
their trend and providers in a window, their failure records' counts, a group's failures and
escalations, from the rows ingest keeps (jobs.ingest.failure_groups). A page reads a bounded
number of hour rows (and, over more than 48 hours, day rows for the whole days); it
never scans steps.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Count, Exists, IntegerField, OuterRef, Q, Sum
from django.db.models.expressions import RawSQL

from jobs.dashboard import figures
from jobs.dashboard.window import Window, wall, zone_label
from jobs.ingest import database
from jobs.models import (
    AlertRule,
    Escalation,
    Failure,
    FailureGroup,
    FailureGroupDay,
    FailureGroupHour,
    FailureGroupJob,
    hour_floor,
)

SPARK_WIDTH, SPARK_HEIGHT = 120, 24
# At most this many hourly bars: a longer window has a bar per UTC day (as Sentry's 14-day
# trend does), read from the day rows, and merges neighbouring days past this many days.
SPARK_BARS = 48
HOUR, DAY = timedelta(hours=1), timedelta(days=1)


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
    """A group with its failed steps in the window: per bar (an hour, or a UTC day on a long
    window; oldest first) and by provider/model (most first)."""

    group: FailureGroup
    steps_in_window: int
    trend: list[int]
    per: str = "hour"
    involved: list[Involved] = field(default_factory=list)

    @property
    def sparkline(self) -> str:
        """An inline SVG path of bars (in a SPARK_WIDTH x SPARK_HEIGHT viewBox), one per hour
        or day with failures: one element per row, so a 7-day range stays cheap to render."""
        return spark_path(self.trend)


@dataclass(frozen=True, slots=True)
class Span:
    """Which rows answer a window. Its UTC hours are [first_hour, end_hour). Up to SPARK_BARS
    hours it reads hour rows and has a bar per hour; a longer one has a bar per UTC day and
    reads day rows for the days it covers whole, [whole_from, whole_to), and hour rows only
    for the partial days at its two ends (at most 46 hours, whatever its length)."""

    first_hour: datetime
    end_hour: datetime
    by_day: bool
    whole_from: date
    whole_to: date

    @property
    def bars(self) -> int:
        if not self.by_day:
            return (self.end_hour - self.first_hour) // HOUR
        return ((self.end_hour - HOUR).date() - self.first_hour.date()).days + 1

    @property
    def has_whole_days(self) -> bool:
        return self.whole_from < self.whole_to


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def span_of(window: Window) -> Span:
    first = hour_floor(window.start)
    end = hour_floor(window.end)
    if end < window.end:
        end += HOUR
    end = max(end, first)
    by_day = (end - first) // HOUR > SPARK_BARS
    whole_from = first.date() if first.hour == 0 else first.date() + DAY
    return Span(first, end, by_day, whole_from, end.date())


def window_hours(window: Window) -> list[datetime]:
    """The UTC hours the window touches, oldest first."""
    span = span_of(window)
    return [span.first_hour + HOUR * n for n in range((span.end_hour - span.first_hour) // HOUR)]


def spark_path(counts: list[int]) -> str:
    """``M x,y h w v h h -w z`` per bar with failures (an hour or day, or several merged),
    heights relative to the busiest bar; "" when there are none."""
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


def _filtered(rows, window: Window, group_ids):
    if window.provider:
        rows = rows.filter(provider__iexact=window.provider)
    if window.model:
        rows = rows.filter(model__iexact=window.model)
    if group_ids is not None:
        rows = rows.filter(group_id__in=group_ids)
    return rows


def _hour_rows(window: Window, group_ids=None, *, every_hour: bool = False):
    """Hour rows of the window's hours (of a long window, unless ``every_hour``: only those of
    its partial days, the day rows answer for the rest)."""
    span = span_of(window)
    hours = Q(hour__gte=span.first_hour, hour__lt=span.end_hour)
    if span.by_day and span.has_whole_days and not every_hour:
        whole = Q(
            hour__gte=_midnight(span.whole_from),
            hour__lt=_midnight(span.whole_to),
        )
        hours &= ~whole
    return _filtered(FailureGroupHour.objects.filter(hours), window, group_ids)


def _day_rows(window: Window, group_ids=None):
    """Day rows of the days a long window covers whole (none for a short one)."""
    span = span_of(window)
    if not (span.by_day and span.has_whole_days):
        return FailureGroupDay.objects.none()
    days = FailureGroupDay.objects.filter(day__gte=span.whole_from, day__lt=span.whole_to)
    return _filtered(days, window, group_ids)


def rows_for(window: Window, groups: list[FailureGroup]) -> list[GroupRow]:
    """These groups' rows over the window, in their order (a page of the failures list)."""
    if not groups:
        return []
    return _rows(window, groups, [group.pk for group in groups])


@dataclass(frozen=True, slots=True)
class FailureCounts:
    """A group's stored failure records: how many were recovered (a later attempt of their
    node succeeded)."""

    recovered: int = 0


def failure_counts(group_ids: list[int]) -> dict[int, FailureCounts]:
    """By group, how many of its failure records were recovered: one query reading only the
    recovered rows (a partial index), so a page of busy groups costs what they recovered."""
    rows = (
        Failure.objects.filter(group_id__in=group_ids, recovered=True)
        .values("group_id")
        .annotate(recovered_failures=Count("id"))
        .order_by()
    )
    return {row["group_id"]: FailureCounts(row["recovered_failures"]) for row in rows}


def group_failures(group: FailureGroup, *, ended: bool = False, limit: int = 50) -> list[Failure]:
    """The group's latest failure records (newest first), with their jobs; ``ended``: only
    those that ended their job."""
    rows = Failure.objects.filter(group=group)
    if ended:
        rows = rows.ended_their_job()
    return list(
        rows.select_related("job")
        .only(
            "kind",
            "node_id",
            "attempt",
            "reason",
            "provider",
            "model",
            "at",
            "recovered",
            "handled",
            "group_id",
            "job__job_id",
            "job__status",
        )
        .order_by("-at", "-id")[:limit]
    )


GROUP_ALERT_KINDS = (AlertRule.Kind.NEW_FAILURE_SIGNATURE, AlertRule.Kind.FAILURE_GROUP_REGRESSED)
OPEN = (Escalation.Status.OPEN, Escalation.Status.ACKNOWLEDGED)


def open_escalations(group: FailureGroup, limit: int = 50) -> list[Escalation]:
    """The group's open (or acknowledged) escalations, oldest first: those of a job and node
    (or of a whole job, for a job-level failure) where the group has a failure, and the alerts
    fired on the group itself (new signature, regressed)."""
    of_failure = Failure.objects.filter(
        group=group, job=OuterRef("job"), node_id=OuterRef("node_id")
    )
    fingerprints = list(group.fingerprints.values_list("fingerprint", flat=True)) or [
        group.fingerprint
    ]
    alerts = Q(alert_rule__kind__in=GROUP_ALERT_KINDS, node_id__in=fingerprints)
    return list(
        Escalation.objects.filter(status__in=OPEN)
        .filter(Q(job__isnull=False) & Exists(of_failure) | alerts)
        .select_related("job")
        .order_by("created_at", "pk")[:limit]
    )


def groups_of_escalation(escalation: Escalation) -> list[FailureGroup]:
    """The failure groups an escalation is about: the groups of its job's failures at its node
    (the whole job's failures for a job-level escalation), or for an alert on a group, that
    group (followed to the group it was merged into)."""
    rule = escalation.alert_rule
    if rule is not None:
        if rule.kind not in GROUP_ALERT_KINDS:
            return []
        found = list(FailureGroup.objects.filter(fingerprint=escalation.node_id))
        return [group.merged_into if group.merged_into_id else group for group in found]
    if escalation.job_id is None:
        return []
    ids = Failure.objects.filter(job_id=escalation.job_id, node_id=escalation.node_id).values(
        "group_id"
    )
    return list(FailureGroup.objects.filter(pk__in=ids).order_by("pk"))


def group_in_window(group: FailureGroup, window: Window) -> GroupRow:
    """One group's row over the window (zero steps when it was quiet)."""
    return _rows(window, [group], [group.pk])[0]


def _epoch(unit_hours: int) -> RawSQL:
    """Whole hours (or days) from 1970 to the row's hour, as an integer."""
    hours = database.sql_hours_since_epoch('"hour"')
    sql = hours if unit_hours == 1 else f"({hours}) / {unit_hours}"
    return RawSQL(sql, [], output_field=IntegerField())


def _epoch_hour(value: datetime) -> int:
    return int(value.timestamp()) // 3600


def _cells(window: Window, group_ids) -> list[tuple[int, int, str, str, int]]:
    """(group, bar index, provider, model, failed steps) of the window, summed in SQL."""
    span = span_of(window)
    if not span.by_day:
        first = _epoch_hour(span.first_hour)
        rows = (
            _hour_rows(window, group_ids)
            .filter(step_count__gt=0)
            .annotate(epoch_hour=_epoch(1))
            .values_list("group_id", "epoch_hour", "provider", "model", "step_count")
        )
        return [(g, hour - first, p, m, n) for g, hour, p, m, n in rows]
    first_day = span.first_hour.date()
    first = first_day.toordinal() - date(1970, 1, 1).toordinal()
    edges = (
        _hour_rows(window, group_ids)
        .annotate(epoch_day=_epoch(24))
        .values_list("group_id", "epoch_day", "provider", "model")
        .annotate(steps=Sum("step_count"))
        .order_by()
    )
    cells = [(g, day - first, p, m, n) for g, day, p, m, n in edges if n]
    days = (
        _day_rows(window, group_ids)
        .filter(step_count__gt=0)
        .values_list("group_id", "day", "provider", "model", "step_count")
    )
    cells.extend((g, (day - first_day).days, p, m, n) for g, day, p, m, n in days)
    return cells


def _rows(window: Window, groups: list[FailureGroup], group_ids) -> list[GroupRow]:
    """Rows for these groups from one pass over their cells (``group_ids`` None: every group
    with failures in the window is among them)."""
    span = span_of(window)
    bars = span.bars
    trend = {group.pk: [0] * bars for group in groups}
    per_provider: dict[int, Counter] = {group.pk: Counter() for group in groups}
    for group_id, index, provider, model, count in _cells(window, group_ids):
        if group_id in trend:
            if 0 <= index < bars:
                trend[group_id][index] += count
            per_provider[group_id][(provider, model)] += count
    rows = []
    for group in groups:
        involved = sorted(
            (Involved(p, m, n) for (p, m), n in per_provider[group.pk].items() if n),
            key=lambda who: (-who.steps, who.provider, who.model),
        )
        counts = trend[group.pk]
        rows.append(
            GroupRow(group, sum(counts), counts, "day" if span.by_day else "hour", involved)
        )
    return rows


def recent_jobs(group: FailureGroup, limit: int = 50):
    """The group's most recently stored jobs (newest first), a row per provider/model they
    failed on, with its failure count: served by the (group, job, provider, model) unique
    index."""
    return (
        FailureGroupJob.objects.filter(group=group)
        .select_related("job")
        .only(
            "step_count",
            "provider",
            "model",
            "job__job_id",
            "job__status",
            "job__workflow",
            "job__started_at",
        )
        .order_by("-job_id", "provider", "model")[:limit]
    )


def trend_figure(window: Window, group: FailureGroup) -> dict:
    """The group's failed steps per hour over the window, stacked by provider/model (a plotly
    figure as data; charts.js escapes the producer text in it)."""
    hours = window_hours(window)
    index = {hour: position for position, hour in enumerate(hours)}
    series: dict[tuple[str, str], list[int]] = {}
    rows = _hour_rows(window, [group.pk], every_hour=True).values_list(
        "hour", "provider", "model", "step_count"
    )
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
            "hovertemplate": "%{x}<br>%{y} failures<extra>%{fullData.name}</extra>",
        }
        for (provider, model), counts in sorted(series.items())
    ]
    layout = figures.layout(
        barmode="stack",
        height=260,
        margin={"l": 48, "r": 16, "t": 24, "b": 64},
        xaxis={
            "type": "date",
            "range": [wall(window.start), wall(window.end)],
            "title": {"text": f"Hour of failure ({zone_label()})"},
            "automargin": True,
        },
        yaxis={"title": {"text": "Failures"}, "rangemode": "tozero", "automargin": True},
    )
    return figures.figure(data, layout, "No failures in this window.")
