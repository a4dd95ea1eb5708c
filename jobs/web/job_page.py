"""Server-rendered pages: the jobs list and the job page (DESIGN.md section 6).

Each view serves its whole page and, on an HTMX request that is not a history restore, the
template partial that request swaps. Views read rows and call the taxonomy and layout helpers;
they never replay or classify by themselves.
"""

import json
from dataclasses import dataclass
from functools import wraps
from urllib.parse import quote
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db.models import Case, Count, IntegerField, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Coalesce
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.http import urlencode
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.contract.events import OTHER_TYPE_RANK, TYPE_RANK, order_key
from jobs.contract.events import Event as ReplayEvent
from jobs.models import Escalation, Event, Job, Step
from jobs.replay import failures
from jobs.replay.walk import sort_events
from jobs.web import access, narrative, timeline
from jobs.web.filters import JobFilterForm, after_cursor, encode_cursor, filter_jobs, is_default

STRIP_CELLS = 40
REASON_PREVIEW_CHARS = 120
ROWS_WINDOW = 200
MAX_ROWS_WINDOW = 20_000
OPEN_ESCALATION_STATUSES = (Escalation.Status.OPEN, Escalation.Status.ACKNOWLEDGED)
# Job columns the list never shows: left in the database so a page of 200 rows stays light.
LIST_DEFERRED = (
    "metadata",
    "completed_node_ids",
    "payload_results",
    "last_validation_error",
    "finish_reason",
    "cancel_reason",
)
# Step columns the waterfall and step list read: not the payloads or the (long) reasons.
STEP_LIST_FIELDS = (
    "node_id",
    "attempt",
    "position",
    "result_type",
    "segment",
    "ignored_stale",
    "compensated",
    "started_at",
    "finished_at",
    "duration_ms",
    "trace_span_id",
    "parent_span_id",
)
MORE_PARTS = {"steps": "step-rows", "waterfall": "waterfall-rows", "narrative": "narrative-rows"}


def in_display_time_zone(view):
    """Render in TRACEVIZ_DISPLAY_TIME_ZONE (the pages show its offset beside times)."""

    @wraps(view)
    def wrapper(request, *args, **kwargs):
        with timezone.override(ZoneInfo(settings.TRACEVIZ_DISPLAY_TIME_ZONE)):
            return view(request, *args, **kwargs)

    return wrapper


def _wants_fragment(request) -> bool:
    return bool(request.htmx) and not request.htmx.history_restore_request


def _display_zone() -> dict:
    offset = timezone.localtime().strftime("%z")
    return {"name": settings.TRACEVIZ_DISPLAY_TIME_ZONE, "offset": f"{offset[:3]}:{offset[3:]}"}


def step_query(node_id: str, attempt: int) -> str:
    """``step=<node_id>:<attempt>`` with the node id URL-encoded (the colon stays readable)."""
    return f"step={quote(node_id, safe='')}:{attempt}"


# -- jobs list -------------------------------------------------------------------------------


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
    if _wants_fragment(request):
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
        "display_zone": _display_zone(),
        "stall_after_minutes": int(settings.TRACEVIZ_STALL_AFTER.total_seconds() // 60),
    }
    return render(request, template, context)


# -- job page --------------------------------------------------------------------------------


def _get_job_for_user(request, job_id: str) -> Job:
    """The job or 404; the role check is the view's decorator (every role may read jobs)."""
    return get_object_or_404(Job, job_id=job_id)


def parse_step_key(raw: str) -> tuple[str, int] | None:
    """``node:attempt`` split at the last colon (node ids may contain colons); None if malformed."""
    node_id, sep, attempt = raw.rpartition(":")
    if not sep or not node_id or not attempt.isdigit():
        return None
    return node_id, int(attempt)


@dataclass(slots=True)
class StepRow:
    """The few columns of a step the waterfall and the step list show: a plain row, so a job of
    5,000 steps does not build 5,000 model instances."""

    node_id: str
    attempt: int
    position: int
    result_type: str
    segment: str
    ignored_stale: bool
    compensated: bool
    started_at: object
    finished_at: object
    duration_ms: float | None
    trace_span_id: str
    parent_span_id: str

    @property
    def step_key(self) -> str:
        return f"{self.node_id}:{self.attempt}"


def _step_rows(steps) -> list[StepRow]:
    return [StepRow(*row) for row in steps.order_by("position").values_list(*STEP_LIST_FIELDS)]


@dataclass(slots=True)
class StepEntry:
    step: Step
    key: str
    query: str
    is_root: bool
    label: str


def _step_entry(step: Step | StepRow, root_key: str) -> StepEntry:
    label = step.result_type or ("running" if not step.finished_at else "success")
    key = step.step_key
    return StepEntry(
        step=step,
        key=key,
        query=step_query(step.node_id, step.attempt),
        is_root=key == root_key,
        label=label,
    )


# Rows of the long lists go to the template as dicts with their strings made here: Django
# resolves ``row.x`` on a dict with one lookup, where an object costs a failed dict lookup first,
# and a 5,000-step job renders hundreds of these rows.


def _step_item(step: Step | StepRow, root_key: str) -> dict:
    key = step.step_key
    stale = " stale" if step.ignored_stale else ""
    return {
        "key": key,
        "href": "?" + step_query(step.node_id, step.attempt),
        "segment": step.segment,
        "css": f"seg-word seg-{step.segment}{stale}",
        "name": f"Node {step.node_id} · "
        + (step.result_type or ("running" if not step.finished_at else "success")),
        "attempt": step.attempt,
        "stale": step.ignored_stale,
        "compensated": step.compensated,
        "root": key == root_key,
    }


def _waterfall_item(row: timeline.WaterfallRow) -> dict:
    return {
        "node_id": row.node_id,
        "depth": row.depth,
        "title": row.node_id + (f" (child of {row.parent_node_id})" if row.parent_node_id else ""),
        "bars": [
            {
                "href": "?" + step_query(bar.step.node_id, bar.step.attempt),
                "style": f"left:{bar.left:.3f}%;width:{bar.width:.3f}%",
                "css": f"seg-{bar.step.segment}{' stale' if bar.step.ignored_stale else ''}",
                "label": f"{row.node_id} {bar.label}",
                "segment": bar.step.segment,
                "stale": bar.step.ignored_stale,
            }
            for bar in row.bars
        ],
        "gaps": [
            {"style": f"left:{gap.left:.3f}%;width:{gap.width:.3f}%", "label": gap.label}
            for gap in row.gaps
        ],
    }


def _line_item(line: narrative.NarrativeLine) -> dict:
    local = timezone.localtime(line.at) if line.at else None
    return {
        "iso": local.isoformat() if local else "",
        "clock": local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}" if local else "",
        "text": line.text,
        "css": f"line tone-{line.tone}" + (f" role-{line.role}" if line.role else ""),
        "href": "?" + step_query(line.node_id, line.attempt) if line.step_key else "",
        "role": line.role,
    }


def _root_failure(job: Job) -> Step | None:
    """The root failure: the failing node's latest non-stale failed attempt."""
    if not job.failing_node_id:
        return None
    return (
        job.steps.filter(node_id=job.failing_node_id, ignored_stale=False)
        .exclude(result_type__in=["", failures.ResultType.SUCCESS])
        .order_by("-position")
        .only("node_id", "attempt", "finished_event_id")
        .first()
    )


def _panel_context(request, job: Job, raw_key: str | None, root_key: str) -> tuple[dict, int]:
    """The detail panel's context and the HTTP status (404 for a step the job does not have)."""
    if not raw_key:
        return {"step": None, "panel_message": ""}, 200
    parsed = parse_step_key(raw_key)
    attempts = (
        list(job.steps.filter(node_id=parsed[0]).order_by("attempt", "position")) if parsed else []
    )
    step = next((s for s in attempts if s.attempt == parsed[1]), None) if parsed else None
    if step is None:
        return {
            "step": None,
            "panel_message": f"This job has no step {raw_key!r} (expected node_id:attempt).",
        }, 404
    context = step.context if isinstance(step.context, dict) else {}
    show_raw = access.can_see_raw_events(request.user)
    raw_events = []
    if show_raw:
        ids = [i for i in (step.started_event_id, step.finished_event_id) if i]
        raw_events = [
            {
                "type": row.type,
                "event_id": row.event_id,
                "json": json.dumps(_event_json(row), indent=2, ensure_ascii=False, default=str),
            }
            for row in Event.objects.filter(job_id=job.job_id, event_id__in=ids).order_by("ts")
        ]
    findings = [f for f in job.findings if _involves(f, step)]
    code, error_type = step.failure_code, step.error_type
    return {
        "step": step,
        "step_key": step.step_key,
        "panel_message": "",
        "attempts": [_step_entry(s, root_key) for s in attempts],
        "attempt_count": len(attempts),
        "is_root": step.step_key == root_key,
        "retry_owner": failures.retry_owner(code) if code else "",
        "canonical_code": failures.canonical_failure_code(code) if code else "",
        "error_run_status": failures.run_status_for_error_type(error_type) if error_type else "",
        "error_classified": failures.is_classified_error_type(error_type),
        "duration": narrative.format_duration_ms(step.duration_ms),
        "payload_json": _pretty(step.payload_results),
        "argument_rows": timeline.argument_diff(
            context.get("expected_arguments"), context.get("actual_arguments")
        ),
        "step_definition_json": _pretty(context.get("step_definition")),
        "audit_trail": [_audit_entry(entry) for entry in _as_list(step.audit_trail)],
        "extra_json": _pretty(step.extra),
        "step_findings": findings,
        "show_raw": show_raw,
        "raw_events": raw_events,
    }, 200


def _involves(finding: dict, step: Step) -> bool:
    """A finding involves a step when it names its node and (if it lists any) its attempt."""
    attempts = finding.get("attempts") or []
    return finding.get("node_id") == step.node_id and (not attempts or step.attempt in attempts)


def _pretty(value) -> str:
    """Indented JSON for the panel, "" when there is nothing to show."""
    if not value:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _as_list(value) -> list:
    return value if isinstance(value, list) else []


def _audit_entry(entry) -> str:
    if isinstance(entry, str):
        return entry
    return json.dumps(entry, ensure_ascii=False, sort_keys=True, default=str)


def _event_json(row: Event) -> dict:
    return {
        "type": row.type,
        "job_id": row.job_id,
        "event_id": row.event_id,
        "ts": row.ts.isoformat().replace("+00:00", "Z"),
        "seq": row.seq,
        "payload": row.payload,
    }


def _event_order():
    """Event order (DESIGN.md section 4) as SQL: ts, seq (missing = 0), type rank, attempt,
    event_id, so a long narrative reads one window of events, not all of them."""
    rank = Case(
        *(When(type=name, then=Value(r)) for name, r in TYPE_RANK.items()),
        default=Value(OTHER_TYPE_RANK),
        output_field=IntegerField(),
    )
    return ["ts", Coalesce("seq", Value(0)).asc(), rank.asc(), "attempt", "event_id"]


def _narrative(job: Job, root: Step | None, stale_steps, start: int, stop: int):
    """Narrative lines ``start:stop`` of the job's events in event order."""
    rows = Event.objects.filter(job_id=job.job_id).order_by(*_event_order())
    events = [
        ReplayEvent(*row)
        for row in rows[start:stop].values_list(
            "type", "job_id", "event_id", "ts", "seq", "payload"
        )
    ]
    after_root = False
    root_event_id = root.finished_event_id if root else ""
    if root_event_id and start and events:
        root_event = Event.objects.filter(job_id=job.job_id, event_id=root_event_id).first()
        first = events[0]
        after_root = root_event is not None and order_key(
            root_event.ts, root_event.seq, root_event.type, root_event.attempt, root_event.event_id
        ) < order_key(first.ts, first.seq, first.type, first.attempt, first.event_id)
    return narrative.lines_for(
        events, root_event_id=root_event_id, after_root=after_root, stale_steps=stale_steps
    )


def _window(request) -> int:
    try:
        rows = int(request.GET.get("rows", ROWS_WINDOW))
    except ValueError:
        rows = ROWS_WINDOW
    return min(max(rows, ROWS_WINDOW), MAX_ROWS_WINDOW)


def _more_from(request) -> int:
    try:
        return max(int(request.GET.get("from", 0)), 0)
    except ValueError:
        return 0


def _more_links(request, part: str, end: int, total: int, step_key: str) -> dict:
    """Where "show more" fetches the next rows (HTMX) and the no-JS page with a larger window."""
    if end >= total:
        return {}
    parsed = parse_step_key(step_key) if step_key else None
    keep = step_query(*parsed) + "&" if parsed else ""
    return {
        "fragment": "?" + keep + urlencode({"more": part, "from": end}),
        "page": "?" + keep + urlencode({"rows": end + ROWS_WINDOW}) + f"#{part}",
        "remaining": total - end,
    }


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
@in_display_time_zone
def job_detail(request, job_id: str):
    """GET /jobs/<job_id>/[?step=node:attempt]: header, resume preview, waterfall, step list,
    narrative and the step detail panel."""
    job = _get_job_for_user(request, job_id)
    step_key = request.GET.get("step", "")
    fragment = _wants_fragment(request)
    more = request.GET.get("more", "")
    if fragment and more in MORE_PARTS:
        return _more_rows(request, job, more, step_key)
    root = _root_failure(job)
    root_key = root.step_key if root else ""
    panel, status = _panel_context(request, job, step_key, root_key)
    panel["job"] = job
    panel["can_see_raw"] = access.can_see_raw_events(request.user)
    if fragment:
        return render(request, "jobs/detail.html#step-panel", panel, status=status)
    window = _window(request)
    steps = _step_rows(job.steps)
    waterfall = timeline.waterfall(steps, now=job.last_event_at, stop=window)
    stale_steps = {(s.node_id, s.attempt) for s in steps if s.ignored_stale}
    lines = _narrative(job, root, stale_steps, 0, window)
    runs = (
        Q(retry_of=job.job_id) | Q(job_id=job.retry_of) if job.retry_of else Q(retry_of=job.job_id)
    )
    related = list(
        Job.objects.filter(runs)
        .only("job_id", "status", "retry_of", "started_at")
        .order_by("started_at", "id")
    )
    end = job.finished_at or job.last_event_at
    context = {
        **panel,
        "nav": "jobs",
        "job": job,
        "display_zone": _display_zone(),
        "job_duration": narrative.format_duration_ms(
            (end - job.started_at).total_seconds() * 1000 if end and job.started_at else None
        ),
        "stalled": job.is_stalled,
        "previous_run": next((j for j in related if j.job_id == job.retry_of), None),
        "next_runs": [j for j in related if j.retry_of == job.job_id],
        "escalations": list(job.escalations.order_by("created_at", "pk")),
        "resume": timeline.resume_preview(job.completed_node_ids, steps),
        "findings": job.findings,
        "waterfall": waterfall,
        "waterfall_rows": [_waterfall_item(row) for row in waterfall.rows],
        "waterfall_more": _more_links(request, "waterfall", window, waterfall.node_count, step_key),
        "step_rows": [_step_item(s, root_key) for s in steps[:window]],
        "steps_more": _more_links(request, "steps", window, len(steps), step_key),
        "step_count": len(steps),
        "narrative_lines": [_line_item(line) for line in lines],
        "narrative_more": _more_links(request, "narrative", window, job.event_count, step_key),
        "narrative_count": job.event_count,
        "root_key": root_key,
        "current_step_key": panel.get("step_key", ""),
    }
    return render(request, "jobs/detail.html", context, status=status)


def _more_rows(request, job: Job, part: str, step_key: str):
    """The next window of one of the long lists, as the partial that appends it."""
    start = _more_from(request)
    stop = start + ROWS_WINDOW
    root = _root_failure(job)
    root_key = root.step_key if root else ""
    context: dict = {"job": job, "current_step_key": step_key, "root_key": root_key}
    if part == "steps":
        steps = _step_rows(job.steps.filter(position__gte=start, position__lt=stop))
        context["step_rows"] = [_step_item(s, root_key) for s in steps]
        context["steps_more"] = _more_links(request, part, stop, job.step_count, step_key)
    elif part == "waterfall":
        waterfall = timeline.waterfall(
            _step_rows(job.steps), now=job.last_event_at, start=start, stop=stop
        )
        context["waterfall_rows"] = [_waterfall_item(row) for row in waterfall.rows]
        context["waterfall_more"] = _more_links(request, part, stop, waterfall.node_count, step_key)
    else:
        stale = set(job.steps.filter(ignored_stale=True).values_list("node_id", "attempt"))
        lines = _narrative(job, root, stale, start, stop)
        context["narrative_lines"] = [_line_item(line) for line in lines]
        context["narrative_more"] = _more_links(request, part, stop, job.event_count, step_key)
    return render(request, f"jobs/detail.html#{MORE_PARTS[part]}", context)


# -- export ----------------------------------------------------------------------------------


def _export(job_id: str, as_ndjson: bool) -> HttpResponse:
    job = get_object_or_404(Job.objects.only("id", "job_id"), job_id=job_id)
    rows = Event.objects.filter(job_id=job.job_id)
    by_key = {row.event_id: row for row in rows.iterator(chunk_size=5000)}
    ordered = sort_events(
        ReplayEvent(r.type, r.job_id, r.event_id, r.ts, r.seq, r.payload) for r in by_key.values()
    )
    items = [_event_json(by_key[event.event_id]) for event in ordered]
    safe_name = "".join(c if c.isalnum() or c in "-_." else "_" for c in job.job_id)[:100]
    if as_ndjson:
        body = "".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items)
        response = HttpResponse(body, content_type="application/x-ndjson; charset=utf-8")
        extension = "ndjson"
    else:
        body = json.dumps(items, ensure_ascii=False, indent=2)
        response = HttpResponse(body, content_type="application/json; charset=utf-8")
        extension = "json"
    response["Content-Disposition"] = f'attachment; filename="{safe_name}.{extension}"'
    return response


@require_GET
@access.role_required(access.can_see_raw_events)
def job_events_ndjson(request, job_id: str):
    """The job's stored events in event order, one JSON object a line (engineers, staff)."""
    return _export(job_id, as_ndjson=True)


@require_GET
@access.role_required(access.can_see_raw_events)
def job_events_json(request, job_id: str):
    """The job's stored events in event order as one JSON array (engineers, staff)."""
    return _export(job_id, as_ndjson=False)
