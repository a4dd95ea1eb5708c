"""The operations dashboard's numbers and figures (docs/architecture.md; the planner contract's
dashboard).

Every number is a SQL aggregate (GROUP BY, COUNT DISTINCT, percentile_cont); Python only shapes
the few aggregated rows into plotly figures (plain dicts, emitted with ``json_script`` and drawn by
``static/js/charts.js``).

Time: a job belongs to the bucket of its start (``Job.started_at``, event time), and its steps
with it. The jobs list filters ``since``/``until`` on the same field, so the link of every bar
lists exactly the jobs whose steps the bar counts, and the job count in each tooltip equals that
list's count. Planner panels count events by their own ``ts``.

The step panels read hourly pre-aggregates (``jobs.rollup``) for the whole hours of the range and
aggregate only the partial hours at its ends (and hours not yet refreshed) from Step rows; the
planner panels likewise (``jobs.dashboard.planner_rollup``), from Event rows.
"""

from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from django.db.models import Count, Q
from django.db.models.functions import Trunc
from django.urls import reverse

from jobs.dashboard import figures, histograms, planner_rollup, rollup
from jobs.dashboard.window import BUCKETS, Window, jobs_url, wall, zone_label
from jobs.escalations import alerts
from jobs.models import AlertRule, Escalation
from jobs.replay import failures
from jobs.replay.failures import FailureCode, RunStatus, Segment

TOP_NODES = 10
PERCENTILES = (("p50", 0.5), ("p95", 0.95))
# Up to this many timed steps (of the top nodes) percentiles are exact, from the steps
# themselves; above it they come from the rollup's histograms (within 2 %).
DURATION_EXACT_STEPS = 20_000
Kind = rollup.Kind

# The job pages' segment colours (traceviz.css: --ok, --retry, --failed), with this fallback
# when the stylesheet does not define them (charts.js resolves "var(--name, fallback)").
SEGMENT_COLORS = {
    Segment.OK: "var(--ok, #2e7d32)",
    Segment.RETRYABLE: "var(--retry, #b26a00)",
    Segment.FAILED: "var(--failed, #c62828)",
}
RESULT_SEGMENTS = (Segment.OK, Segment.RETRYABLE, Segment.FAILED)
OWNER_COLORS = {"adapter": "#1565c0", "plan": "#6a1b9a", "reducer": "#c62828"}
STATUS_COLORS = {
    RunStatus.FAILED: "#c62828",
    RunStatus.FAILED_LOGIC: "#ad1457",
    RunStatus.FAILED_INTERNAL: "#6d1b1b",
    RunStatus.PAUSED_TRANSIENT: "#b26a00",
    RunStatus.PAUSED_APPROVAL: "#f9a825",
    RunStatus.PAUSED_RECONCILIATION: "#8d6e63",
    RunStatus.RUNNING: "#546e7a",
    RunStatus.CANCELLING: "#78909c",
    RunStatus.CANCELLED: "#90a4ae",
    RunStatus.COMPLETED: "#2e7d32",
}
AGE_BANDS = (
    ("under 1 h", timedelta(hours=1), "#90caf9"),
    ("1-24 h", timedelta(hours=24), "#42a5f5"),
    ("1-7 d", timedelta(days=7), "#1565c0"),
    ("over 7 d", None, "#0d2b5e"),
)
PLANNER_COLORS = ("#6a1b9a", "#00838f", "#ef6c00", "#283593", "#558b2f", "#ad1457")


def _time_axis(window: Window, title: str) -> dict:
    return {
        "type": "date",
        "range": [wall(window.start), wall(window.end)],
        "title": {"text": f"{title} ({zone_label()})", "standoff": 8},
        # Two-line ticks (time, then the date where it changes) need the room automargin
        # makes; a fixed bottom margin clipped the dates.
        "automargin": True,
        "nticks": 8,
    }


def _bucket_bar(window: Window, index: int = 0, of: int = 1) -> dict:
    """A time-axis bar trace's width and offset (ms, from x, the bucket's start), so each bar
    covers its bucket less a tenth either side (plotly's default width is the gap between a
    trace's x values: a lone day's bar was a hairline); ``index`` of ``of`` grouped traces."""
    bucket = BUCKETS[window.bucket].total_seconds() * 1000
    width = 0.8 * bucket / of
    return {"width": width, "offset": 0.1 * bucket + index * width}


# --- figures ----------------------------------------------------------------------------------


def step_results(window: Window, plan: rollup.Plan | None = None) -> dict:
    """Finished steps per bucket, stacked by segment (ok / retryable / failed).

    customdata per bar: [jobs list URL, number of jobs that list shows]. For retryable and failed
    those are the jobs with such a step (``segment=`` filter); the list cannot filter on ok, so
    an ok bar lists every job started in the bucket and says so. Minute buckets (ranges up to
    3 hours) are counted from Step rows, hour and day buckets from the rollup.
    """
    if window.bucket == "minute":
        counts, jobs_per_bucket = _step_results_raw(window)
    else:
        counts, jobs_per_bucket = {}, {}
        for cell in window.cells(plan, Kind.SEGMENT, Kind.JOBS):
            bucket = window.bucket_of(cell.hour)
            if cell.kind == Kind.JOBS:
                jobs_per_bucket[bucket] = jobs_per_bucket.get(bucket, 0) + cell.jobs
            elif cell.dimension in RESULT_SEGMENTS:
                row = counts.setdefault((bucket, cell.dimension), {"steps": 0, "jobs": 0})
                row["steps"] += cell.steps
                row["jobs"] += cell.jobs
    return _step_results_figure(window, counts, jobs_per_bucket)


def _step_results_raw(window: Window) -> tuple[dict, dict]:
    rows = (
        window.steps()
        .filter(segment__in=RESULT_SEGMENTS)
        .annotate(bucket=Trunc("job__started_at", window.bucket, tzinfo=UTC))
        .values("bucket", "segment")
        .annotate(steps=Count("id"), jobs=Count("job_id", distinct=True))
        .order_by("bucket", "segment")
    )
    counts = {(row["bucket"], row["segment"]): row for row in rows}
    jobs_per_bucket = dict(
        window.jobs()
        .annotate(bucket=Trunc("started_at", window.bucket, tzinfo=UTC))
        .values_list("bucket")
        .annotate(n=Count("id"))
        .order_by()
    )
    return counts, jobs_per_bucket


def _step_results_figure(window: Window, counts: dict, jobs_per_bucket: dict) -> dict:
    buckets = sorted({bucket for bucket, _segment in counts})
    data = []
    for segment in RESULT_SEGMENTS:
        x, y, custom = [], [], []
        for bucket in buckets:
            row = counts.get((bucket, segment))
            if row is None:
                continue
            since, until = window.bucket_bounds(bucket)
            if segment == Segment.OK:
                url, jobs = jobs_url(window, since, until), jobs_per_bucket.get(bucket, 0)
                note = "jobs started then (the list has no ok-only filter)"
            else:
                url, jobs = jobs_url(window, since, until, segment=segment.value), row["jobs"]
                note = f"jobs with a {segment.value} step"
            x.append(wall(bucket))
            y.append(row["steps"])
            custom.append([url, jobs, note])
        if x:
            data.append(
                {
                    "type": "bar",
                    "name": segment.value,
                    "x": x,
                    "y": y,
                    "customdata": custom,
                    "marker": {"color": SEGMENT_COLORS[segment]},
                    **_bucket_bar(window),
                    "hovertemplate": f"%{{y}} {segment.value} steps<br>%{{customdata[1]}} "
                    "%{customdata[2]}<br>%{x}<extra>click to list them</extra>",
                }
            )
    layout = figures.layout(
        barmode="stack",
        xaxis=_time_axis(window, "job started"),
        yaxis={"title": {"text": "steps"}, "rangemode": "tozero"},
    )
    return figures.figure(
        data,
        layout,
        "No finished steps for jobs started in this range. Send "
        "node_finished events with a result_type to POST /api/v1/events to see them.",
    )


def failures_by_code(window: Window, plan: rollup.Plan | None = None) -> dict:
    """Steps carrying each canonical failure code, coloured by its retry owner (the failure-code
    contract);
    customdata: [list URL, jobs with such a step, owner]. Producer codes outside the canonical
    set count as unknown_failure in the taxonomy but cannot be listed by code: ``unlisted``
    reports how many steps carry them."""
    by_code: dict[str, dict] = {}
    for cell in window.cells(plan, Kind.FAILURE_CODE):
        row = by_code.setdefault(
            cell.dimension, {"failure_code": cell.dimension, "steps": 0, "jobs": 0}
        )
        row["steps"] += cell.steps
        row["jobs"] += cell.jobs
    rows = sorted(by_code.values(), key=lambda row: (-row["steps"], row["failure_code"]))
    canonical = {code.value for code in FailureCode}
    listed = [row for row in rows if row["failure_code"] in canonical]
    unlisted = sum(row["steps"] for row in rows if row["failure_code"] not in canonical)
    data = []
    for owner, color in OWNER_COLORS.items():
        own = [r for r in listed if failures.retry_owner(r["failure_code"]).value == owner]
        if not own:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": f"retried by {owner}",
                "y": [r["failure_code"] for r in own],
                "x": [r["steps"] for r in own],
                "customdata": [
                    [jobs_url(window, failure_code=r["failure_code"]), r["jobs"], owner]
                    for r in own
                ],
                "marker": {"color": color},
                "hovertemplate": "%{y}: %{x} failed steps<br>%{customdata[1]} jobs · retry owner "
                "%{customdata[2]}<extra>click to list them</extra>",
            }
        )
    layout = figures.layout(
        barmode="stack",
        yaxis={"automargin": True, "categoryorder": "total ascending"},
        xaxis={"title": {"text": "steps"}, "rangemode": "tozero"},
    )
    figure = figures.figure(
        data,
        layout,
        "No failure codes in this range. Failed node_finished events "
        "with a failure_code (a canonical failure code) show up here.",
    )
    figure["unlisted"] = unlisted
    return figure


def failures_by_error_type(window: Window, plan: rollup.Plan | None = None) -> dict:
    """Jobs by the error type of their final root failure (each job once, not every type it
    hit on the way), stacked by the job's run status (the run-status contract's table); each
    segment links to exactly those jobs (root_error_type + status)."""
    cells: dict[tuple[str, str], dict] = {}
    for cell in window.cells(plan, Kind.ERROR_TYPE):
        if cell.dimension not in failures.RUN_STATUS_BY_ERROR_TYPE:
            continue
        row = cells.setdefault(
            (cell.dimension, cell.status),
            {"error_type": cell.dimension, "job__status": cell.status, "steps": 0, "jobs": 0},
        )
        row["steps"] += cell.steps
        row["jobs"] += cell.jobs
    rows = [cells[key] for key in sorted(cells)]
    by_status: dict[str, list[dict]] = {}
    for row in rows:
        by_status.setdefault(row["job__status"], []).append(row)
    data = []
    for status, color in STATUS_COLORS.items():
        own = by_status.get(status.value)
        if not own:
            continue
        data.append(
            {
                "type": "bar",
                "orientation": "h",
                "name": status.value,
                "y": [r["error_type"] for r in own],
                "x": [r["jobs"] for r in own],
                "customdata": [
                    [
                        jobs_url(window, root_error_type=r["error_type"], status=status.value),
                        r["jobs"],
                    ]
                    for r in own
                ],
                "marker": {"color": color},
                "hovertemplate": f"%{{y}} → {status.value}: %{{customdata[1]}} jobs whose root "
                "failure has it<extra>click to list them</extra>",
            }
        )
    layout = figures.layout(
        barmode="stack",
        yaxis={"automargin": True, "categoryorder": "total ascending"},
        xaxis={"title": {"text": "jobs"}, "rangemode": "tozero"},
    )
    return figures.figure(
        data,
        layout,
        "No classified error types in this range. Failed "
        "node_finished events with an error_type (auth, network, logic, …) show here.",
    )


def degraded_rate_threshold(window: Window) -> AlertRule | None:
    """The enabled degraded-rate rule that applies to the filtered provider/model (a rule for
    that exact provider/model first, then a generic one)."""
    rules = AlertRule.objects.filter(kind=AlertRule.Kind.PLANNER_DEGRADED_RATE, enabled=True)
    rules = (
        rules.filter(Q(provider="") | Q(provider=window.provider))
        if window.provider
        else (rules.filter(provider=""))
    )
    rules = (
        rules.filter(Q(model="") | Q(model=window.model))
        if window.model
        else (rules.filter(model=""))
    )
    return rules.order_by("-provider", "-model", "pk").first()


def planner(window: Window, plan: rollup.Plan | None = None) -> tuple[dict, dict]:
    """Two figures from one aggregate over planner events: parse_invalid and degraded counts per
    provider/model and bucket, and the degraded rate (degraded events / jobs carrying that
    provider/model) with the alert threshold as a dashed line. Hour and day buckets read the
    planner pre-aggregates for the ``plan``'s whole clean hours (the same numbers); minute
    buckets (ranges up to 3 h) read the events."""
    if window.bucket == "minute":
        rows = list(
            alerts.planner_activity(
                window.start,
                window.end,
                provider=window.provider,
                model=window.model,
                bucket=window.bucket,
            )
        )
    else:
        plan = plan or window.plan()
        rows = planner_rollup.activity(
            plan.rollup, plan.raw, window.bucket, window.provider, window.model
        )
    series: dict[str, list[dict]] = {}
    for row in rows:
        series.setdefault(f"{row['provider']}/{row['model']}", []).append(row)
    counts, rates = [], []
    for index, (subject, points) in enumerate(sorted(series.items())):
        color = PLANNER_COLORS[index % len(PLANNER_COLORS)]
        custom = [
            [
                jobs_url(
                    window,
                    *window.bucket_bounds(p["bucket"]),
                    provider=p["provider"],
                    model=p["model"],
                ),
                p["jobs"],
                p["parse_invalid"],
                p["degraded"],
            ]
            for p in points
        ]
        x = [wall(p["bucket"]) for p in points]
        for kind, opacity in (("parse_invalid", 0.45), ("degraded", 1.0)):
            if not any(p[kind] for p in points):
                continue
            counts.append(
                {
                    "type": "bar",
                    "name": f"{subject} {kind}",
                    "legendgroup": subject,
                    "x": x,
                    "y": [p[kind] for p in points],
                    "customdata": custom,
                    "marker": {"color": color, "opacity": opacity},
                    # Producer text goes in as data (meta), never into the template: charts.js
                    # escapes data so plotly draws it as text, not as its HTML subset.
                    "meta": [subject],
                    "hovertemplate": f"%{{meta[0]}}<br>%{{y}} {kind} events in %{{customdata[1]}} "
                    "jobs<br>%{x}<extra>click to list the jobs</extra>",
                }
            )
        rates.append(
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": f"{subject} degraded rate",
                "x": x,
                "y": [round(p["degraded"] / p["jobs"], 4) if p["jobs"] else 0 for p in points],
                "customdata": custom,
                "line": {"color": color},
                "meta": [subject],
                "hovertemplate": "%{meta[0]}: %{y:.0%} degraded<br>%{customdata[3]} of "
                "%{customdata[1]} jobs<br>%{x}<extra>click to list the jobs</extra>",
            }
        )
    for index, trace in enumerate(counts):
        trace.update(_bucket_bar(window, index, len(counts)))
    rule = degraded_rate_threshold(window)
    if rates and rule is not None:
        rates.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": f"alert threshold {rule.threshold:.0%}",
                "x": [wall(window.start), wall(window.end)],
                "y": [rule.threshold, rule.threshold],
                "line": {"color": "#c62828", "dash": "dash", "width": 2},
                "hoverinfo": "name",
            }
        )
    empty = (
        "No planner events in this range. Send graph.next_step.parse_invalid and "
        "graph.next_step.degraded events with provider and model (the planner contract)."
    )
    xaxis = _time_axis(window, "event time")
    counts_figure = figures.figure(
        counts,
        figures.layout(barmode="group", xaxis=xaxis, yaxis={"title": {"text": "events"}}),
        empty,
    )
    rate_figure = figures.figure(
        rates,
        figures.layout(
            xaxis=xaxis,
            yaxis={"title": {"text": "degraded rate"}, "tickformat": ".0%", "rangemode": "tozero"},
        ),
        empty,
    )
    return counts_figure, rate_figure


def duration_percentiles(window: Window, plan: rollup.Plan | None = None) -> list[dict]:
    """p50/p95 of duration_ms per node for the TOP_NODES nodes with the most timed steps:
    rows of node_id, steps, p50, p95, exact (bool), in descending step count.

    Step counts come from the rollup. Percentiles are percentile_cont over the steps themselves
    while the top nodes have at most DURATION_EXACT_STEPS timed steps in the range, else they
    are read from the merged hourly histograms (within 2 % of the exact value)."""
    by_node: dict[str, list] = {}
    for cell in window.cells(plan, Kind.DURATION):
        entry = by_node.setdefault(cell.dimension, [0, []])
        entry[0] += cell.steps
        entry[1].append(cell.histogram)
    ranked = sorted(by_node.items(), key=lambda item: (-item[1][0], item[0]))[:TOP_NODES]
    top = [{"node_id": node, "steps": steps} for node, (steps, _histograms) in ranked]
    if sum(row["steps"] for row in top) <= DURATION_EXACT_STEPS:
        exact = _exact_percentiles(window, [row["node_id"] for row in top])
        for row in top:
            row.update(zip((name for name, _f in PERCENTILES), exact[row["node_id"]], strict=True))
            row["exact"] = True
        return top
    for row, (_node, (_steps, node_histograms)) in zip(top, ranked, strict=True):
        merged = histograms.merge(node_histograms)
        values = histograms.percentiles(merged, [f for _n, f in PERCENTILES])
        row.update(zip((name for name, _f in PERCENTILES), values, strict=True))
        row["exact"] = False
    return top


def _exact_percentiles(window: Window, nodes: list[str]) -> dict[str, list[float]]:
    """percentile_cont per node from the (few) timed steps themselves, in one query."""
    durations_by_node: dict[str, list[float]] = {node: [] for node in nodes}
    rows = (
        window.steps()
        .filter(node_id__in=nodes, duration_ms__isnull=False)
        .values_list("node_id", "duration_ms")
    )
    for node, duration in rows:
        durations_by_node[node].append(duration)
    return {
        node: [_percentile_cont(sorted(values), fraction) for _name, fraction in PERCENTILES]
        for node, values in durations_by_node.items()
    }


def _percentile_cont(ordered: list[float], fraction: float) -> float:
    """percentile_cont: the two values around position fraction*(n-1), interpolated."""
    position = fraction * (len(ordered) - 1)
    lower = int(position)
    if position == lower:
        return ordered[lower]
    return ordered[lower] + (ordered[lower + 1] - ordered[lower]) * (position - lower)


def durations(window: Window, plan: rollup.Plan | None = None) -> dict:
    """Grouped horizontal bars: p50 and p95 per top node. The jobs list has no node filter, so
    a bar opens the jobs of the range. ``note`` says when the percentiles are approximate."""
    rows = duration_percentiles(window, plan)
    nodes = [row["node_id"] for row in rows]
    url = jobs_url(window)
    data = [
        {
            "type": "bar",
            "orientation": "h",
            "name": name,
            "y": nodes,
            "x": [round(row[name], 1) for row in rows],
            "customdata": [[url, row["steps"]] for row in rows],
            "marker": {"color": color},
            "hovertemplate": f"%{{y}} {name}: %{{x}} ms over %{{customdata[1]}} steps"
            "<extra>click for the range's jobs</extra>",
        }
        for name, color in (("p50", "#64b5f6"), ("p95", "#0d47a1"))
        if rows
    ]
    layout = figures.layout(
        barmode="group",
        yaxis={"automargin": True, "autorange": "reversed"},
        xaxis={"title": {"text": "ms"}, "rangemode": "tozero"},
    )
    figure = figures.figure(
        data,
        layout,
        "No step durations in this range. node_finished events with "
        "duration_ms (or a node_started before them) show up here.",
    )
    if not all(row["exact"] for row in rows):
        figure["note"] = (
            f"Over {DURATION_EXACT_STEPS:,} timed steps, p50 and p95 are read from hourly "
            "histograms (log-spaced buckets 2 % wide): within 2 % of the exact value."
        )
    return figure


def open_escalations(now: datetime) -> dict:
    """Unresolved escalations by kind, stacked by age since they (re)opened (triggered_at);
    a segment opens the escalation queue for that kind."""
    bands = {}
    lower = None
    for label, upper, _color in AGE_BANDS:
        condition = Q()
        if lower is not None:
            condition &= Q(triggered_at__lte=now - lower)
        if upper is not None:
            condition &= Q(triggered_at__gt=now - upper)
        # Count triggered_at (never null), not ids: the partial index escalation_unresolved
        # (kind, triggered_at) then answers alone.
        bands[label] = Count("triggered_at", filter=condition or None)
        lower = upper
    rows = list(
        Escalation.objects.exclude(status=Escalation.Status.RESOLVED)
        .values("kind")
        .annotate(**{f"band{i}": expr for i, expr in enumerate(bands.values())})
        .order_by("kind")
    )
    data = []
    for i, (label, _upper, color) in enumerate(AGE_BANDS):
        own = [row for row in rows if row[f"band{i}"]]
        if not own:
            continue
        data.append(
            {
                "type": "bar",
                "name": f"open {label}",
                "x": [row["kind"] for row in own],
                "y": [row[f"band{i}"] for row in own],
                "customdata": [
                    [
                        reverse("jobs:escalations") + "?" + urlencode({"kind": row["kind"]}),
                        row[f"band{i}"],
                    ]
                    for row in own
                ],
                "marker": {"color": color},
                "hovertemplate": f"%{{x}}: %{{y}} unresolved, open {label}"
                "<extra>click for the queue</extra>",
            }
        )
    layout = figures.layout(
        barmode="stack",
        # Kind names are long (contract_violation, repair_budget_exhausted): room below for them.
        xaxis={"automargin": True, "tickangle": -30},
        yaxis={"title": {"text": "escalations"}, "dtick": 1, "rangemode": "tozero"},
    )
    return figures.figure(
        data,
        layout,
        "No unresolved escalations. They open from replay rules, "
        "escalation_raised events and firing alert rules.",
    )


def panels(window: Window, now: datetime, plan: rollup.Plan | None = None) -> dict:
    """Every figure the dashboard shows, keyed by name (the chart id with underscores).
    ``plan``: the window's rollup plan when the caller made one already."""
    plan = plan or window.plan()
    planner_counts, planner_rate = planner(window, plan)
    # The provider failure rates' cells come with them (provider_health.panel reads them).
    kinds = [Kind.FAILURE_CODE, Kind.ERROR_TYPE, Kind.DURATION, Kind.PROVIDERS]
    if window.bucket != "minute":
        # Minute buckets read step results and LLM usage from Step and Call rows.
        kinds += [Kind.SEGMENT, Kind.JOBS, Kind.LLM]
    rollup.prefetch(plan, kinds, window.provider, window.model)
    return {
        "step_results": step_results(window, plan),
        "failures_by_code": failures_by_code(window, plan),
        "failures_by_error_type": failures_by_error_type(window, plan),
        "planner_counts": planner_counts,
        "planner_rate": planner_rate,
        "durations": durations(window, plan),
        "open_escalations": open_escalations(now),
    }
