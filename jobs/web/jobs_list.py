"""The jobs list (GET /): jobs that need attention (or all), filtered by the URL, newest first.

One view serves the whole page and, on an HTMX request that is not a history restore, the
``job-table`` partial its live refresh swaps.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.shortcuts import render
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.models import Escalation, Job
from jobs.replay import failures
from jobs.templatetags.traceviz import stamp
from jobs.web import access, filter_chips, narrative
from jobs.web.filters import (
    JobFilterForm,
    after_cursor,
    encode_cursor,
    filter_jobs,
    from_anchor,
    is_default,
    newer_than,
    scope,
)
from jobs.web.rendering import display_zone, in_display_time_zone, wants_fragment

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class Listed(TypedDict):
    """What the list's query annotates each job with."""

    open_escalations: int


STRIP_CELLS = 40
# The result count stops counting here ("1,000+ jobs"): a count of every matching job would
# cost more than the page.
COUNT_CAP = 1000
NEW_JOBS_CAP = 99
REASON_PREVIEW_CHARS = 120
OPEN_ESCALATION_STATUSES = (Escalation.Status.OPEN, Escalation.Status.ACKNOWLEDGED)
# Job columns the list never shows: left in the database so a page of 200 rows stays light.
LIST_DEFERRED = (
    "metadata",
    "payload_results",
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
    # A failure at job level or in the planner (no failing node): what it was.
    job_failure: str
    duration: str
    stalled: bool
    open_escalations: int
    findings: int


def _strip_summary(counts: dict[str, int], cells: int, steps: int) -> str:
    """What the strip's cells hold, in words. The Job row keeps the first STRIP_STEPS steps'
    cells only (``replay.state``): past that, the counts are said to be of those."""
    summary = ", ".join(f"{n} {segment}" for segment, n in counts.items()) or "no steps"
    if steps > cells:
        return f"first {cells:,} of {steps:,} steps: {summary}"
    return summary


def _job_row(job: "WithAnnotations[Job, Listed]") -> JobRow:
    counts: dict[str, int] = {}
    for segment, _stale in job.segment_strip:
        counts[segment] = counts.get(segment, 0) + 1
    end = job.finished_at or job.last_event_at
    duration_ms = (end - job.started_at).total_seconds() * 1000 if end and job.started_at else None
    reason = job.failing_reason
    return JobRow(
        job_failure=_job_failure(job),
        job=job,
        strip=[(segment, stale) for segment, stale in job.segment_strip[:STRIP_CELLS]],
        strip_more=max(job.step_count - STRIP_CELLS, 0),
        strip_summary=_strip_summary(counts, len(job.segment_strip), job.step_count),
        reason_preview=reason[:REASON_PREVIEW_CHARS],
        reason_truncated=len(reason) > REASON_PREVIEW_CHARS,
        duration=narrative.format_duration_ms(duration_ms),
        stalled=job.is_stalled,
        open_escalations=job.open_escalations,
        findings=len(job.findings),
    )


def _job_failure(job: Job) -> str:
    """What failed a job that has no failing node: the planner (its last validation error) or
    the job itself (its finish code and reason); "" otherwise."""
    if job.failing_node_id:
        return ""
    planner = job.last_validation_error
    if isinstance(planner, dict) and planner:
        who = "/".join(str(p) for p in (planner.get("provider"), planner.get("model")) if p)
        attempts = planner.get("attempts")
        return (
            f"planner: {planner.get('reason') or 'degraded'}"
            + (f" after {attempts} attempts" if attempts else "")
            + (f" ({who})" if who else "")
        )
    if job.status.startswith("failed") and (job.finish_code or job.finish_reason):
        text = ": ".join(part for part in (job.finish_code, job.finish_reason) if part)
        return f"job: {text}"[:REASON_PREVIEW_CHARS]
    return ""


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
    matching = filter_jobs(filters)
    anchor = filters.get("anchor")
    listed = after_cursor(matching, filters.get("cursor"))
    if anchor:
        # The live refresh keeps the rows where the reader left them: newer jobs are counted.
        listed = from_anchor(listed, anchor)
    jobs = listed.defer(*LIST_DEFERRED).annotate(open_escalations=_open_escalations())
    page = list(jobs[: page_size + 1])
    next_cursor = encode_cursor(page[page_size - 1]) if len(page) > page_size else None
    page = page[:page_size]
    total = matching.capped_count(COUNT_CAP + 1)
    new_jobs = newer_than(matching, anchor).capped_count(NEW_JOBS_CAP + 1) if anchor else 0
    query = request.GET.copy()
    query.pop("cursor", None)
    query.pop("anchor", None)
    base_query = query.urlencode()
    refresh = query.copy()
    if anchor:
        refresh["anchor"] = request.GET["anchor"]
    elif not filters.get("cursor") and page:
        refresh["anchor"] = encode_cursor(page[0])
    elif request.GET.get("cursor"):
        refresh["cursor"] = request.GET["cursor"]
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
        "scope": scope(filters),
        "is_default_view": is_default(filters),
        "first_page_url": "?" + base_query if base_query else request.path,
        "is_first_page": not filters.get("cursor"),
        "next_page_url": "?" + query.urlencode() if next_cursor else "",
        "refresh_url": request.path + ("?" + refresh.urlencode() if refresh else ""),
        "newest_url": "?" + base_query if base_query else request.path,
        "new_jobs": new_jobs,
        "new_jobs_more": new_jobs > NEW_JOBS_CAP,
        "total": min(total, COUNT_CAP),
        "total_more": total > COUNT_CAP,
        "chips": filter_chips.chips(request.GET, filters, stamp),
        "window_since": filters.get("since"),
        "window_until": filters.get("until"),
        "status_choices": [s.value for s in failures.RunStatus],
        "selected_statuses": filters.get("status") or [],
        "display_zone": display_zone(),
        "stall_after_minutes": int(settings.TRACEVIZ_STALL_AFTER.total_seconds() // 60),
    }
    return render(request, template, context)
