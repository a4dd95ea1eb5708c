"""Failure groups (GET /failures/, /failures/<fingerprint>/): failed steps grouped by signature
(docs/architecture.md), read from the rows ingest keeps. Operators and up."""

from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from jobs.dashboard import failure_groups
from jobs.dashboard.window import iso, parse_window, zone_label
from jobs.models import FailureGroup
from jobs.templatetags.traceviz import stamp
from jobs.web import access
from jobs.web.dashboard import RANGE_CHOICES
from jobs.web.rendering import display_zone, in_display_time_zone, step_query

RANGE_PRESETS = [(key, label) for key, label in RANGE_CHOICES if key != "custom"]


def _range_links(request, window) -> list[dict]:
    kept = {k: v for k, v in request.GET.items() if k in ("provider", "model")}
    return [
        {
            "key": key,
            "label": label,
            "url": "?" + urlencode({**kept, "range": key}),
            "current": window.key == key,
        }
        for key, label in RANGE_PRESETS
    ]


def group_jobs_url(group: FailureGroup) -> str:
    """The jobs list filtered to the group's jobs, whatever their status."""
    return "/?" + urlencode({"show": "all", "group": group.fingerprint})


def _seen(moment) -> dict:
    """A first/last seen time as the list shows it (minutes, display time zone)."""
    if moment is None:
        return {"iso": "", "text": ""}
    return {"iso": timezone.localtime(moment).isoformat(), "text": stamp(moment)[:16]}


def _list_item(row: failure_groups.GroupRow, range_key: str) -> dict:
    """One row of the list with its strings made here: 100 rows of a dozen fields each are
    the page's main rendering cost (as on the job page, a dict resolves in one lookup)."""
    group = row.group
    shown = row.involved[:3]
    return {
        "row": row,
        "group": group,
        "href": reverse("jobs:failure-group", args=[group.fingerprint]) + f"?range={range_key}",
        "jobs_url": group_jobs_url(group),
        "sparkline": row.sparkline,
        "spark_label": f"{row.steps_in_window} failed steps over the range, per {row.per}",
        "detail": " · ".join(
            [group.workflow or "(no workflow)"]
            + [part for part in (group.failure_code, group.error_type) if part]
        ),
        "first_seen": _seen(group.first_seen),
        "last_seen": _seen(group.last_seen),
        "providers": [f"{who.label} · {who.steps}" for who in shown],
        "more_providers": len(row.involved) - len(shown),
    }


@require_GET
@access.role_required(access.can_view)
@in_display_time_zone
def failure_group_list(request):
    now = timezone.now()
    window, errors = parse_window(request.GET, now)
    rows = failure_groups.groups_in_window(window)
    context = {
        "nav": "failures",
        "window": window,
        "errors": errors,
        "ranges": _range_links(request, window),
        "rows": [_list_item(row, window.key) for row in rows],
        "since": iso(window.start),
        "until": iso(window.end),
        "zone": zone_label(),
        "display_zone": display_zone(),
        "limit": failure_groups.MAX_GROUPS,
    }
    return render(request, "failures/list.html", context)


@require_GET
@access.role_required(access.can_view)
@in_display_time_zone
def failure_group_detail(request, fingerprint: str):
    group = (
        FailureGroup.objects.select_related("example_job").filter(fingerprint=fingerprint).first()
    )
    if group is None:
        raise Http404("No failure group has this fingerprint.")
    now = timezone.now()
    window, errors = parse_window(request.GET, now)
    example = group.example_job
    node_id, _, attempt = group.example_step.rpartition(":")
    context = {
        "nav": "failures",
        "group": group,
        "window": window,
        "errors": errors,
        "ranges": _range_links(request, window),
        "row": failure_groups.group_in_window(group, window),
        "trend": failure_groups.trend_figure(window, group),
        "jobs": list(failure_groups.recent_jobs(group)),
        "jobs_url": group_jobs_url(group),
        "example_url": (
            f"{reverse('jobs:job', args=[example.job_id])}?{step_query(node_id, int(attempt))}"
            if example is not None and attempt.isdigit()
            else ""
        ),
        "zone": zone_label(),
        "display_zone": display_zone(),
    }
    return render(request, "failures/detail.html", context)
