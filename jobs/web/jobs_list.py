"""The jobs list (GET /): jobs that need attention (or all), filtered by the URL, newest first.

One view serves the whole page and, on an HTMX request that is not a history restore, the
``job-table`` partial its live refresh swaps.
"""

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypedDict

from django.conf import settings
from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.ingest import database
from jobs.models import (
    Escalation,
    Failure,
    Job,
    NextAttempt,
    list_scope,
    matched_failures,
    next_attempts,
)
from jobs.replay import failures
from jobs.replay import strip as strip_cells
from jobs.templatetags.traceviz import stamp
from jobs.web import access, filter_chips, job_header, narrative, sorting
from jobs.web.filters import (
    JobFilterForm,
    after_cursor,
    encode_cursor,
    from_anchor,
    is_default,
    newer_than,
)
from jobs.web.rendering import display_zone, in_display_time_zone, wants_fragment

if TYPE_CHECKING:
    from django_stubs_ext import WithAnnotations


class Listed(TypedDict):
    """What the list's query annotates each job with."""

    open_escalations: int


# A mini-bar of more cells than this draws them narrower (each still a few pixels).
DENSE_STRIP_CELLS = 24
# What a mini-bar cell of each kind is drawn with (jobs.replay.strip.KINDS).
STRIP_CSS = {
    "ok": "seg-ok",
    "retryable": "seg-retryable",
    "failed": "seg-failed",
    "running": "seg-running",
    "stale": "seg-ok stale",
}
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
    # The mini-bar: (css, steps in the cell), every step of the job in at most
    # jobs.replay.strip.MAX_CELLS cells; a cell with a failed or retried step is drawn so.
    strip: list[tuple[str, int]]
    strip_dense: bool
    strip_summary: str
    reason_preview: str
    reason_truncated: bool
    # A failure at job level or in the planner (no failing node): what it was.
    job_failure: str
    duration: str
    stalled: bool
    open_escalations: int
    findings: int
    # A job paused between attempts: "waiting to retry" and, when known, when the next is due.
    waiting_to_retry: bool
    next_attempt: dict[str, str]
    # Under a reason search, the failure that found the job when the row does not show it
    # already ("recovered: fetch:1 · Timeout"), and whether it was recovered, handled or
    # neither ("matched"); both "" otherwise.
    matched_failure: str = ""
    matched_state: str = ""


def mini_bar(segment_strip, step_count: int) -> tuple[list[tuple[str, int]], str]:
    """The mini-bar's cells and what they hold, in words. A strip stored before every step was
    counted (a list of the first 200 steps' [segment, stale] cells, until the job's next
    replay) is read as the steps it holds, and its words say so."""
    if isinstance(segment_strip, list):
        strip = strip_cells.empty()
        for position, cell in enumerate(segment_strip):
            strip_cells.count(strip, position, None, cell)
    else:
        strip = segment_strip or strip_cells.empty()
    cells = [
        (STRIP_CSS[strip_cells.worst(cell)], sum(cell)) for cell in strip["cells"] if any(cell)
    ]
    totals = strip_cells.totals(strip)
    counted = sum(totals.values())
    summary = ", ".join(f"{n:,} {kind}" for kind, n in totals.items()) or "no steps"
    if counted < step_count:
        summary = f"first {counted:,} of {step_count:,} steps: {summary}"
    elif strip["per"] > 1:
        summary = f"{counted:,} steps, {strip['per']:,} a cell: {summary}"
    return cells, summary


def _job_row(
    job: "WithAnnotations[Job, Listed]",
    next_attempt: NextAttempt | None,
    now: datetime,
    matched: Failure | None = None,
) -> JobRow:
    end = job.finished_at or job.last_event_at
    duration_ms = (end - job.started_at).total_seconds() * 1000 if end and job.started_at else None
    reason = job.failing_reason
    cells, summary = mini_bar(job.segment_strip, job.step_count)
    matched_failure = matched_state = ""
    if matched is not None and not _already_shown(job, matched):
        matched_failure = matched_words(matched)[:REASON_PREVIEW_CHARS]
        matched_state = failure_state(matched)
    return JobRow(
        matched_failure=matched_failure,
        matched_state=matched_state,
        job_failure=_job_failure(job),
        job=job,
        strip=cells,
        strip_dense=len(cells) > DENSE_STRIP_CELLS,
        strip_summary=summary,
        reason_preview=reason[:REASON_PREVIEW_CHARS],
        reason_truncated=len(reason) > REASON_PREVIEW_CHARS,
        duration=narrative.format_duration_ms(duration_ms),
        stalled=job.is_stalled,
        open_escalations=job.open_escalations,
        findings=len(job.findings),
        waiting_to_retry=job.status == failures.RunStatus.PAUSED_TRANSIENT,
        next_attempt=job_header.next_attempt_words(next_attempt, now),
    )


def failure_state(failure: Failure) -> str:
    """Whether a failure a search found was recovered by a later attempt, handled by its
    caller, or neither ("matched")."""
    return "recovered" if failure.recovered else "handled" if failure.handled else "matched"


def matched_words(failure: Failure) -> str:
    """A found failure in words: its state, where it failed and its reason ("recovered:
    fetch:1 · upstream Timeout")."""
    where = f"{failure.node_id}:{failure.attempt}" if failure.node_id else failure.kind
    return f"{failure_state(failure)}: {where} · {failure.reason}"


def _already_shown(job: Job, failure: Failure) -> bool:
    """Whether the row's first failure is this failure (neither recovered nor handled)."""
    if failure.recovered or failure.handled:
        return False
    if failure.kind == Failure.Kind.STEP:
        return (failure.node_id, failure.reason) == (job.failing_node_id, job.failing_reason)
    planner = isinstance(job.last_validation_error, dict) and bool(job.last_validation_error)
    if failure.kind == Failure.Kind.PLANNER:
        return not job.failing_node_id and planner
    return not job.failing_node_id and not planner and job.finish_reason == failure.reason


def _job_failure(job: Job) -> str:
    """What failed a job that has no failing node: the planner (its last validation error) or
    the job itself (its finish code and reason); "" otherwise."""
    if job.failing_node_id:
        return ""
    planner = job.last_validation_error
    if isinstance(planner, dict) and planner:
        who = "/".join(str(p) for p in (planner.get("provider"), planner.get("model")) if p)
        attempts = planner.get("attempts")
        # The attempts are a fact beside the reason, never worded into it: a producer's reason
        # may already say them ("after 2 attempts").
        facts = [f"{attempts} attempt{'s' if attempts != 1 else ''}"] if attempts else []
        facts += [who] if who else []
        return f"planner: {planner.get('reason') or 'degraded'}" + (
            f" ({', '.join(facts)})" if facts else ""
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


def _sort(request) -> tuple[sorting.Sort, list[str]]:
    """The sort the URL asks for (the default, with its error, when it names none known)."""
    try:
        return sorting.parse_sort(request.GET.get("sort")), []
    except ValueError as error:
        return sorting.parse_sort(None), [str(error)]


def _sorted_page(matching, sort: sorting.Sort, raw_after: str | None):
    """``matching`` in ``sort``'s order, from the row after the one ``raw_after`` names (the
    first page, with the error, when it is not a link this list made)."""
    listed = sorting.ordered(matching, sort)
    if not raw_after:
        return listed, []
    try:
        return sorting.after(listed, sort, sorting.decode_cursor(raw_after, sort)), []
    except ValueError as error:
        return listed, [str(error)]


def _without(query, name: str):
    params = query.copy()
    params.pop(name, None)
    return params


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
    matching = Job.objects.matching(filters)
    # Each row found by reason search says which failure matched (counts leave it out).
    shown = matching.with_matched_failure(filters.get("reason") or "")
    sort, sort_errors = _sort(request)
    anchor = filters.get("anchor") if sort.is_default else None
    if sort.is_default:
        listed = after_cursor(shown, filters.get("cursor"))
    else:
        listed, after_error = _sorted_page(shown, sort, request.GET.get("after"))
        sort_errors += after_error
    if anchor:
        # The live refresh keeps the rows where the reader left them: newer jobs are counted.
        listed = from_anchor(listed, anchor)
    jobs = listed.defer(*LIST_DEFERRED).annotate(open_escalations=_open_escalations())
    page = list(jobs[: page_size + 1])
    next_cursor = None
    if len(page) > page_size:
        last = page[page_size - 1]
        next_cursor = encode_cursor(last) if sort.is_default else sorting.encode_cursor(last, sort)
    page = page[:page_size]
    due, now, matched = next_attempts(page), timezone.now(), matched_failures(page)
    total = database.capped_count(matching, COUNT_CAP + 1)
    new_jobs = (
        database.capped_count(newer_than(matching, anchor), NEW_JOBS_CAP + 1) if anchor else 0
    )
    query = request.GET.copy()
    for name in ("cursor", "anchor", "after"):
        query.pop(name, None)
    sort_links = sorting.header_links(_without(query, "sort"), sort)
    base_query = query.urlencode()
    refresh = query.copy()
    if anchor:
        refresh["anchor"] = request.GET["anchor"]
    elif sort.is_default and not filters.get("cursor") and page:
        refresh["anchor"] = encode_cursor(page[0])
    elif request.GET.get("cursor") and sort.is_default:
        refresh["cursor"] = request.GET["cursor"]
    elif request.GET.get("after") and not sort_errors:
        refresh["after"] = request.GET["after"]
    if next_cursor:
        query["cursor" if sort.is_default else "after"] = next_cursor
    template = "jobs/list.html"
    if wants_fragment(request):
        template += "#job-table"
    context = {
        "nav": "jobs",
        "form": form,
        "rows": [_job_row(job, due.get(job.pk), now, matched.get(job.pk)) for job in page],
        "showing_all": filters.get("show") == "all",
        "scope": list_scope(filters),
        "is_default_view": is_default(filters),
        "first_page_url": "?" + base_query if base_query else request.path,
        "is_first_page": not filters.get("cursor") and not request.GET.get("after"),
        "sort": sort,
        "sort_links": sort_links,
        "sort_errors": sort_errors,
        "sort_label": sorting.LABELS[sort.key].lower(),
        "sort_order": sorting.order_words(sort),
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
