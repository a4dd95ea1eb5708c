"""The jobs list (GET /): jobs that need attention (or all), filtered by the URL, newest first.

One view serves the whole page and, on an HTMX request that is not a history restore, the
``job-table`` partial its live refresh swaps.
"""

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.models import Escalation, Job
from jobs.replay import failures
from jobs.web import access, narrative
from jobs.web.filters import JobFilterForm, after_cursor, encode_cursor, filter_jobs, is_default
from jobs.web.rendering import display_zone, in_display_time_zone, wants_fragment

STRIP_CELLS = 40
REASON_PREVIEW_CHARS = 120
OPEN_ESCALATION_STATUSES = (Escalation.Status.OPEN, Escalation.Status.ACKNOWLEDGED)
# Job columns the list never shows: left in the database so a page of 200 rows stays light.
LIST_DEFERRED = (
    "metadata",
    "completed_node_ids",
    "payload_results",
    "last_validation_error",
    "finish_reason",
    "cancel_reason",
    "fold",
)


@dataclass(slots=True)
class JobRow:
    job: Job
    strip: list[tuple[str, bool]]
    strip_more: int
    strip_summary: str
    reason_preview: str
    reason_truncated: bool
    duration: str
    stalled: bool
    open_escalations: int
    findings: int


def _job_row(job: Job) -> JobRow:
    counts: dict[str, int] = {}
    for segment, _stale in job.segment_strip:
        counts[segment] = counts.get(segment, 0) + 1
    end = job.finished_at or job.last_event_at
    duration_ms = (end - job.started_at).total_seconds() * 1000 if end and job.started_at else None
    reason = job.failing_reason
    return JobRow(
        job=job,
        strip=[(segment, stale) for segment, stale in job.segment_strip[:STRIP_CELLS]],
        strip_more=max(job.step_count - STRIP_CELLS, 0),
        strip_summary=", ".join(f"{n} {segment}" for segment, n in counts.items()) or "no steps",
        reason_preview=reason[:REASON_PREVIEW_CHARS],
        reason_truncated=len(reason) > REASON_PREVIEW_CHARS,
        duration=narrative.format_duration_ms(duration_ms),
        stalled=job.is_stalled,
        open_escalations=job.open_escalations,
        findings=len(job.findings),
    )


def _open_escalations():
    counts = (
        Escalation.objects.filter(job=OuterRef("pk"), status__in=OPEN_ESCALATION_STATUSES)
        .order_by()
        .values("job")
        .annotate(n=Count("id"))
        .values("n")
    )
    return Coalesce(Subquery(counts, output_field=IntegerField()), 0)


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
@in_display_time_zone
def jobs_list(request):
    """GET /: jobs that need attention (or all), filtered by the URL, newest first."""
    form = JobFilterForm(request.GET)
    form.is_valid()  # invalid fields are shown with their error and left out of the filter
    filters = form.cleaned_data
    page_size = settings.TRACEVIZ_JOBS_PAGE_SIZE
    jobs = (
        after_cursor(filter_jobs(filters), filters.get("cursor"))
        .defer(*LIST_DEFERRED)
        .annotate(open_escalations=_open_escalations())
    )
    page = list(jobs[: page_size + 1])
    next_cursor = encode_cursor(page[page_size - 1]) if len(page) > page_size else None
    page = page[:page_size]
    query = request.GET.copy()
    query.pop("cursor", None)
    base_query = query.urlencode()
    if next_cursor:
        query["cursor"] = next_cursor
    template = "jobs/list.html"
    if wants_fragment(request):
        template += "#job-table"
    context = {
        "nav": "jobs",
        "form": form,
        "rows": [_job_row(job) for job in page],
        "showing_all": filters.get("show") == "all",
        "is_default_view": is_default(filters),
        "first_page_url": "?" + base_query if base_query else request.path,
        "is_first_page": not filters.get("cursor"),
        "next_page_url": "?" + query.urlencode() if next_cursor else "",
        "refresh_url": request.get_full_path(),
        "status_choices": [s.value for s in failures.RunStatus],
        "selected_statuses": filters.get("status") or [],
        "display_zone": display_zone(),
        "stall_after_minutes": int(settings.TRACEVIZ_STALL_AFTER.total_seconds() // 60),
    }
    return render(request, template, context)
