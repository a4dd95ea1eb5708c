"""The dashboard's "which provider is degraded?" panel: per provider/model, the share of the
jobs started in the window that used it and ended failed on it, most failing first. A failure
counts against the provider/model that failed (the failure record's), not the job's
``job_started`` one: a job whose planner degraded on anthropic is a failure of anthropic."""

from jobs.dashboard import figures, rollup
from jobs.dashboard.window import UNSET, Window, jobs_url
from jobs.replay.failures import RunStatus

MAX_SUBJECTS = 15


def failure_rates(window: Window, plan: rollup.Plan | None = None) -> list[dict]:
    """Rows of provider, model, jobs (that used it), failed (that ended failed on it), rate
    for the jobs started in the window (the rollup's PROVIDERS rows, its partial and dirty
    hours aggregated raw), highest rate first, then most jobs."""
    totals = rollup.provider_totals(plan or window.plan(), window.provider, window.model)
    found = [
        {"provider": provider, "model": model, "jobs": jobs, "failed": failed}
        | {"rate": failed / jobs}
        for (provider, model), (jobs, failed) in totals.items()
        if jobs
    ]
    found.sort(key=lambda r: (-r["rate"], -r["jobs"], r["provider"], r["model"]))
    return found[:MAX_SUBJECTS]


def panel(window: Window, plan: rollup.Plan | None = None) -> dict:
    """A horizontal bar per provider/model (its failure rate); a bar opens the list of the
    failed jobs that used it. Producer text (provider, model) is data, escaped by charts.js."""
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
                "hovertemplate": "%{y}: %{x:.0%} failed on it<br>%{customdata[1]} of "
                "%{customdata[2]} jobs that used it<extra>click to list the failed jobs that "
                "used it</extra>",
            }
        ]
        if rows
        else []
    )
    layout = figures.layout(
        margin={"l": 56, "r": 16, "t": 24, "b": 56},
        height=max(220, 60 + 28 * len(rows)),
        showlegend=False,
        xaxis={
            "title": {"text": "jobs failed on it / jobs that used it"},
            "tickformat": ".0%",
            "range": [0, 1],
            "automargin": True,
        },
        yaxis={"automargin": True, "autorange": "reversed"},
    )
    return figures.figure(data, layout, "No jobs started in this range.")
