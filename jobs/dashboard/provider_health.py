"""The dashboard's "which provider is degraded?" panel: per provider/model, the share of the
jobs started in the window that failed (the failed family), most failing first."""

from django.db.models import Count, Q

from jobs.dashboard.window import Window, jobs_url
from jobs.replay.failures import RunStatus

FAILED_FAMILY = (RunStatus.FAILED, RunStatus.FAILED_LOGIC, RunStatus.FAILED_INTERNAL)
MAX_SUBJECTS = 15


def failure_rates(window: Window) -> list[dict]:
    """Rows of provider, model, jobs, failed, rate: one aggregate over the jobs started in the
    window (the job start index), highest rate first, then most jobs."""
    rows = (
        window.jobs()
        .values("provider", "model")
        .annotate(
            jobs=Count("id"),
            failed=Count("id", filter=Q(status__in=[s.value for s in FAILED_FAMILY])),
        )
        .order_by()
    )
    found = [{**row, "rate": row["failed"] / row["jobs"]} for row in rows if row["jobs"]]
    found.sort(key=lambda r: (-r["rate"], -r["jobs"], r["provider"], r["model"]))
    return found[:MAX_SUBJECTS]


def panel(window: Window) -> dict:
    """A horizontal bar per provider/model (its failure rate); a bar opens the list of its
    failed jobs. Producer text (provider, model) is data, escaped by charts.js."""
    rows = failure_rates(window)
    labels = ["/".join(p for p in (r["provider"], r["model"]) if p) or "(none)" for r in rows]
    data = (
        [
            {
                "type": "bar",
                "orientation": "h",
                "name": "failure rate",
                "y": labels,
                "x": [round(r["rate"], 4) for r in rows],
                "customdata": [
                    [
                        jobs_url(
                            window,
                            status=RunStatus.FAILED.value,
                            provider=r["provider"],
                            model=r["model"],
                        ),
                        r["failed"],
                        r["jobs"],
                    ]
                    for r in rows
                ],
                "marker": {"color": "var(--failed, #c62828)"},
                "hovertemplate": "%{y}: %{x:.0%} failed<br>%{customdata[1]} of "
                "%{customdata[2]} jobs<extra>click to list the failed jobs</extra>",
            }
        ]
        if rows
        else []
    )
    layout = {
        "margin": {"l": 56, "r": 16, "t": 24, "b": 56},
        "height": max(220, 60 + 28 * len(rows)),
        "hovermode": "closest",
        "showlegend": False,
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "xaxis": {
            "title": {"text": "failed jobs / jobs started"},
            "tickformat": ".0%",
            "range": [0, 1],
            "automargin": True,
        },
        "yaxis": {"automargin": True, "autorange": "reversed"},
    }
    return {
        "data": data,
        "layout": layout,
        "empty": "" if data else "No jobs started in this range.",
    }
