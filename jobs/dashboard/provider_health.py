"""The dashboard's "which provider is degraded?" panel: per provider/model, the share of the
jobs started in the window that failed (the failed family), most failing first."""

from jobs.dashboard import rollup
from jobs.dashboard.window import UNSET, Window, jobs_url
from jobs.replay.failures import RunStatus

FAILED_FAMILY = rollup.FAILED_FAMILY
MAX_SUBJECTS = 15


def failure_rates(window: Window, plan: rollup.Plan | None = None) -> list[dict]:
    """Rows of provider, model, jobs, failed, rate for the jobs started in the window (the
    rollup's JOBS rows, its partial and dirty hours from Job rows), highest rate first, then
    most jobs."""
    totals = rollup.job_totals(plan or window.plan(), window.provider, window.model)
    found = [
        {"provider": provider, "model": model, "jobs": jobs, "failed": failed}
        | {"rate": failed / jobs}
        for (provider, model), (jobs, failed) in totals.items()
        if jobs
    ]
    found.sort(key=lambda r: (-r["rate"], -r["jobs"], r["provider"], r["model"]))
    return found[:MAX_SUBJECTS]


def panel(window: Window, plan: rollup.Plan | None = None) -> dict:
    """A horizontal bar per provider/model (its failure rate); a bar opens the list of its
    failed jobs. Producer text (provider, model) is data, escaped by charts.js."""
    rows = failure_rates(window, plan)
    labels = ["/".join(p for p in (r["provider"], r["model"]) if p) or UNSET for r in rows]
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
                            provider=r["provider"] or UNSET,
                            model=r["model"] or UNSET,
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
