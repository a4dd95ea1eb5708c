"""Failure groups (GET /failures/, /failures/<fingerprint>/): failed steps grouped by signature
(DESIGN.md section 6), read from the rows ingest keeps. Operators and up."""

from django.http import Http404
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from jobs.dashboard import failure_groups
from jobs.dashboard.window import iso, parse_window, zone_label
from jobs.models import FailureGroup
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
        "rows": [{"row": row, "jobs_url": group_jobs_url(row.group)} for row in rows],
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
            f"{reverse('job', args=[example.job_id])}?{step_query(node_id, int(attempt))}"
            if example is not None and attempt.isdigit()
            else ""
        ),
        "zone": zone_label(),
        "display_zone": display_zone(),
    }
    return render(request, "failures/detail.html", context)
