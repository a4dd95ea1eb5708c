"""The job page (GET /jobs/<job_id>/[?step=node:attempt]): header, resume preview, waterfall,
step list, narrative and the step detail panel (DESIGN.md section 6).

One view serves the whole page and, on an HTMX request that is not a history restore, the
partial that request swaps (the step panel, or the next window of a long list). It reads rows
and calls the taxonomy and layout helpers; it never replays or classifies by itself.
"""

import json
from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.shortcuts import render
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.http import urlencode
from django.views.decorators.http import require_GET
from django.views.decorators.vary import vary_on_headers

from jobs.contract.events import Event as ReplayEvent
from jobs.contract.events import order_key
from jobs.models import Event, Job, Step
from jobs.replay import failures
from jobs.web import access, narrative, span_panel, timeline
from jobs.web.access import get_job_for_user
from jobs.web.rendering import (
    display_zone,
    in_display_time_zone,
    parse_step_key,
    step_query,
    wants_fragment,
)

ROWS_WINDOW = 200
MAX_ROWS_WINDOW = 20_000
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
        .select_related("failure_group")
        .only("node_id", "attempt", "finished_event_id", "failure_group")
        .first()
    )


def _panel_context(request, job: Job, raw_key: str | None, root_key: str) -> tuple[dict, int]:
    """The detail panel's context and the HTTP status (404 for a step the job does not have)."""
    if not raw_key:
        return {"step": None, "panel_message": ""}, 200
    parsed = parse_step_key(raw_key)
    attempts = (
        list(
            job.steps.filter(node_id=parsed[0])
            .select_related("failure_group")
            .order_by("attempt", "position")
        )
        if parsed
        else []
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
        # A step replay made of an OpenTelemetry span: its stored event is the span's.
        ids += [i.removesuffix(":started") for i in ids if i.startswith("otlp:")]
        raw_events = [
            {
                "type": row.type,
                "event_id": row.event_id,
                "json": json.dumps(
                    row.as_contract_dict(), indent=2, ensure_ascii=False, default=str
                ),
            }
            for row in Event.objects.filter(job_id=job.job_id, event_id__in=ids).order_by("ts")
        ]
    findings = [f for f in job.findings if _involves(f, step)]
    code, error_type = step.failure_code, step.error_type
    return {
        "step": step,
        "step_group": step.failure_group,
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
        "history": [_earlier_result(record) for record in _as_list(step.history)],
        "otel": span_panel.span_context(job, step),
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


def _earlier_result(record: dict) -> dict:
    """One of the attempt's earlier results (``Step.history``), as the panel lists it."""
    result_type = record.get("result_type") or failures.ResultType.SUCCESS
    return {
        "result_type": result_type,
        "segment": failures.segment_for(result_type).value,
        "stale": record.get("why") == "stale",
        "reason": record.get("reason", ""),
        "finished_at": parse_datetime(record.get("finished_at") or ""),
    }


def _audit_entry(entry) -> str:
    if isinstance(entry, str):
        return entry
    return json.dumps(entry, ensure_ascii=False, sort_keys=True, default=str)


def _narrative(job: Job, root: Step | None, stale_steps, start: int, stop: int):
    """Narrative lines ``start:stop`` of the job's events in event order."""
    rows = Event.objects.filter(job_id=job.job_id).in_event_order()
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
    span_ids = [e.payload.get("span_id") for e in events if e.type == "span"]
    span_steps = {
        span_id: (node_id, attempt)
        for span_id, node_id, attempt in job.steps.filter(trace_span_id__in=span_ids).values_list(
            "trace_span_id", "node_id", "attempt"
        )
    }
    return narrative.lines_for(
        events,
        root_event_id=root_event_id,
        after_root=after_root,
        stale_steps=stale_steps,
        span_steps=span_steps,
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
@login_required
@vary_on_headers("HX-Request")
@in_display_time_zone
def job_detail(request, job_id: str):
    """GET /jobs/<job_id>/[?step=node:attempt]: header, resume preview, waterfall, step list,
    narrative and the step detail panel."""
    job = get_job_for_user(request, job_id)
    step_key = request.GET.get("step", "")
    fragment = wants_fragment(request)
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
        "display_zone": display_zone(),
        "job_cost": span_panel.format_cost(job.cost),
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
        "root_group": root.failure_group if root else None,
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
