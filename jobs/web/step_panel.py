"""The job page's step detail panel: a step's reason, attempts, payloads, arguments, audit
trail, findings, span and raw events (docs/pages.md), and the step keys its links carry.

The page (``job_page``) asks for the panel's context when it renders a selected step, in
full or as the partial an HTMX click swaps; it reads rows and calls the taxonomy and layout
helpers, never replays.
"""

import json
from dataclasses import dataclass

from django.db.models.functions import Length
from django.utils.dateparse import parse_datetime

from jobs.models import Event, Job, Step
from jobs.replay import failures
from jobs.web import access, job_header, narrative, span_panel, timeline
from jobs.web.rendering import (
    MAX_CHARS_OF_A_LINKED_NODE,
    is_short_node,
    link_node,
    link_step_key,
    parse_step_key,
    step_query,
)


@dataclass(slots=True)
class StepEntry:
    step: Step
    key: str
    query: str
    is_root: bool
    label: str


def resolve_step_key(job: Job, raw: str) -> str:
    """A ``step`` parameter as a link carried it: a node's short form (``link_node``) becomes
    that node's own ``node:attempt`` key; anything else, an old link's long key too, is
    returned as it is. Only the job's node ids long enough for the short form are read."""
    parsed = parse_step_key(raw)
    if parsed is None or not is_short_node(parsed[0]):
        return raw
    long_ids = (
        job.own_steps()
        .annotate(chars=Length("node_id"))
        .filter(chars__gt=MAX_CHARS_OF_A_LINKED_NODE)
        .order_by()
        .values_list("node_id", flat=True)
        .distinct()
    )
    node_id = next((node for node in long_ids if link_node(node) == parsed[0]), None)
    return f"{node_id}:{parsed[1]}" if node_id is not None else raw


def _step_entry(step: Step, root_key: str) -> StepEntry:
    label = step.result_type or ("running" if not step.finished_at else "success")
    key = step.step_key
    return StepEntry(
        step=step,
        key=key,
        query=step_query(step.node_id, step.attempt),
        is_root=key == root_key,
        label=label,
    )


def panel_context(
    request, job: Job, raw_key: str | None, root_key: str, all_events: list | None = None
) -> tuple[dict, int]:
    """The detail panel's context and the HTTP status (404 for a step the job does not have).
    ``all_events``: every event of the job when the caller has read them (the raw events
    are picked from them instead of read again)."""
    if not raw_key:
        return {"step": None, "panel_message": ""}, 200
    parsed = parse_step_key(resolve_step_key(job, raw_key))
    attempts = (
        list(
            job.own_steps()
            .filter(node_id=parsed[0])
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
        if all_events is not None:
            # Already in event order, so in time order.
            rows = [
                Event(
                    job_id=e.job_id,
                    event_id=e.event_id,
                    type=e.type,
                    ts=e.ts,
                    seq=e.seq,
                    payload=e.payload,
                )
                for e in all_events
                if e.event_id in ids
            ]
        else:
            rows = list(job.own_events().filter(event_id__in=ids).order_by("ts"))
        raw_events = [
            {
                "type": row.type,
                "event_id": row.event_id,
                "json": json.dumps(
                    row.as_contract_dict(), indent=2, ensure_ascii=False, default=str
                ),
            }
            for row in rows
        ]
    findings = [f for f in job.findings if _involves(f, step)]
    # Calls come from spans only: with every event in hand and none a span, there are none.
    has_spans = all_events is None or any(event.type == "span" for event in all_events)
    code, error_type = step.failure_code, step.error_type
    return {
        "step": step,
        "step_group": step.failure_group,
        "step_key": step.step_key,
        "step_link_key": link_step_key(step.step_key),
        "panel_message": "",
        "attempts": [_step_entry(s, root_key) for s in attempts],
        "attempt_count": len(attempts),
        "is_root": step.step_key == root_key,
        "retry_owner": failures.retry_owner(code) if code else "",
        "retry_meaning": failures.retry_meaning(code) if code else "",
        "canonical_code": failures.canonical_failure_code(code) if code else "",
        "error_run_status": failures.run_status_for_error_type(error_type) if error_type else "",
        "error_classified": failures.is_classified_error_type(error_type),
        "duration": narrative.format_duration_ms(timeline.step_duration_ms(step)),
        "payload_json": span_panel.pretty(step.payload_results),
        "argument_rows": timeline.argument_diff(
            context.get("expected_arguments"), context.get("actual_arguments")
        ),
        "step_definition_json": span_panel.pretty(context.get("step_definition")),
        "audit_trail": [_audit_entry(entry) for entry in job_header.as_list(step.audit_trail)],
        "history": [_earlier_result(record) for record in job_header.as_list(step.history)],
        "otel": span_panel.span_context(job, step, read_calls=has_spans),
        "extra_json": span_panel.pretty(step.extra),
        "step_findings": findings,
        "show_raw": show_raw,
        "raw_events": raw_events,
    }, 200


def _involves(finding: dict, step: Step) -> bool:
    """A finding involves a step when it names its node and (if it lists any) its attempt."""
    attempts = finding.get("attempts") or []
    return finding.get("node_id") == step.node_id and (not attempts or step.attempt in attempts)


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
