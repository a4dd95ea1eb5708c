"""The dashboard's LLM panels (docs/otlp.md): tokens and cost per provider/model over
time, from the calls replay made of OpenTelemetry spans (Call rows).

A call counts in the bucket of its job's start, like every step panel, so a bar's link lists
exactly the jobs whose calls it sums (a job's calls may use several models: the link lists the
bucket's jobs, not only those of the bar's model). One SQL aggregate (GROUP BY provider, model,
bucket) over the window's jobs' LLM calls for minute buckets; hour and day buckets read the
dashboard rollup's LLM rows (jobs.dashboard.rollup), which hold the same sums per hour of job
start.
"""

from datetime import UTC

from django.db.models import Count, Q, Sum
from django.db.models.functions import Trunc

from jobs.dashboard import figures, rollup
from jobs.dashboard.charts import PLANNER_COLORS, _bucket_bar, _time_axis
from jobs.dashboard.window import Window, jobs_url, wall
from jobs.models import BoundedSum, Call

EMPTY = (
    "No LLM calls in this range. Export traces from an instrumented LLM client (OpenInference "
    "or the gen_ai.* conventions) to /v1/traces: tokens and cost show here per provider/model."
)


def usage_rows(window: Window, plan: rollup.Plan | None = None) -> list[dict]:
    """Per provider/model and bucket: calls, input and output tokens, cost (None: unknown),
    ordered by provider, model and bucket."""
    if window.bucket != "minute":
        return _from_rollup(window, plan)
    return _from_calls(window)


def _from_calls(window: Window) -> list[dict]:
    """usage_rows aggregated from the window's jobs' Call rows."""
    # The calls whose tokens the job's header counts (an embedding's too), as the rollup's.
    counted = Q(kind="llm") | Q(input_tokens__isnull=False) | Q(output_tokens__isnull=False)
    calls = Call.objects.filter(
        counted, job__started_at__gte=window.start, job__started_at__lt=window.end
    ).exclude(provider="", model="")
    if window.provider:
        calls = calls.filter(provider__iexact=window.provider)
    if window.model:
        calls = calls.filter(model__iexact=window.model)
    return list(
        calls.annotate(bucket=Trunc("job__started_at", window.bucket, tzinfo=UTC))
        .values("provider", "model", "bucket")
        .annotate(
            calls=Count("id"),
            input_tokens=BoundedSum("input_tokens"),
            output_tokens=BoundedSum("output_tokens"),
            cost=Sum("cost"),
        )
        .order_by("provider", "model", "bucket")
    )


def _from_rollup(window: Window, plan: rollup.Plan | None) -> list[dict]:
    """usage_rows from the rollup's LLM cells: the same sums, SUM's None kept (None + x = x)."""
    rows: dict[tuple, dict] = {}
    for cell in window.cells(plan, rollup.Kind.LLM):
        key = (cell.provider, cell.model, window.bucket_of(cell.hour))
        row = rows.setdefault(
            key,
            dict(zip(("provider", "model", "bucket"), key, strict=True))
            | {"calls": 0, "input_tokens": None, "output_tokens": None, "cost": None},
        )
        row["calls"] += cell.steps
        for name in ("input_tokens", "output_tokens", "cost"):
            value = getattr(cell, name)
            if value is not None:
                row[name] = value if row[name] is None else row[name] + value
    return [rows[key] for key in sorted(rows)]


def panels(window: Window, plan: rollup.Plan | None = None) -> dict:
    """Two figures: tokens (input and output, stacked) and cost in USD, per provider/model.
    ``plan``: the window's rollup plan when the caller made one already."""
    series: dict[str, list[dict]] = {}
    for row in usage_rows(window, plan):
        subject = "/".join(part for part in (row["provider"], row["model"]) if part)
        series.setdefault(subject, []).append(row)
    tokens, cost = [], []
    for index, (subject, points) in enumerate(sorted(series.items())):
        color = PLANNER_COLORS[index % len(PLANNER_COLORS)]
        x = [wall(point["bucket"]) for point in points]
        links = [jobs_url(window, *window.bucket_bounds(point["bucket"])) for point in points]
        custom = [[link, point["calls"]] for link, point in zip(links, points, strict=True)]
        for side, opacity in (("input", 1.0), ("output", 0.5)):
            tokens.append(
                {
                    "type": "bar",
                    "name": f"{subject} {side}",
                    "legendgroup": subject,
                    "x": x,
                    "y": [point[f"{side}_tokens"] or 0 for point in points],
                    "customdata": custom,
                    "marker": {"color": color, "opacity": opacity},
                    **_bucket_bar(window),
                    "meta": [subject],
                    "hovertemplate": f"%{{meta[0]}}<br>%{{y:,}} {side} tokens in %{{customdata[1]}}"
                    " calls<br>%{x}<extra>click to list the jobs</extra>",
                }
            )
        if any(point["cost"] is not None for point in points):
            cost.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers",
                    "name": subject,
                    "x": x,
                    "y": [float(point["cost"] or 0) for point in points],
                    "customdata": custom,
                    "line": {"color": color},
                    "meta": [subject],
                    "hovertemplate": "%{meta[0]}: $%{y:.4f} in %{customdata[1]} calls"
                    "<br>%{x}<extra>click to list the jobs</extra>",
                }
            )
    xaxis = _time_axis(window, "job start")
    return {
        "llm_tokens": figures.figure(
            tokens,
            figures.layout(barmode="stack", xaxis=xaxis, yaxis={"title": {"text": "tokens"}}),
            EMPTY,
        ),
        "llm_cost": figures.figure(
            cost,
            figures.layout(
                xaxis=xaxis,
                yaxis={"title": {"text": "cost (USD)"}, "tickprefix": "$", "rangemode": "tozero"},
            ),
            EMPTY if not tokens else "No prices known for these models (genai-prices).",
        ),
    }
