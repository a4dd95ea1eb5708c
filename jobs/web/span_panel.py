"""The step panel's OpenTelemetry part (docs/otlp.md): the calls a step made (LLM calls
with their transcript, tokens and cost; tools with their arguments and result), the span's own
events, links and attributes, and the stack trace apart from the one-line reason.

Reads Call and Job rows; replay decided everything (``jobs.replay.spans``).
"""

import json
from decimal import Decimal
from typing import Any

from django.urls import reverse

from jobs.contract.events import loads_within_depth
from jobs.models import Call, Job, Step
from jobs.web.narrative import format_duration_ms

TRANSCRIPT_PREVIEW_CHARS = 240


def span_context(job: Job, step: Step, *, read_calls: bool = True) -> dict[str, Any]:
    """The panel's OTel context for ``step``: empty for a step no span made. ``read_calls``
    False: the caller knows the job has no calls (its events hold no span), so none are read."""
    calls = []
    if read_calls:
        step_calls = Call.objects.filter(job=job, node_id=step.node_id, attempt=step.attempt)
        calls = list(step_calls.order_by("position"))
    span = step.span if isinstance(step.span, dict) else {}
    if not calls and not span and not step.stack:
        return {}
    links = [link for link in span.get("links", []) if isinstance(link, dict)]
    jobs_by_trace = Job.objects.ids_by_trace(str(link.get("trace_id", "")) for link in links)
    # A tool's step is its own call: its card shows the input and output as arguments and
    # result, not again below it.
    own_tool = any(c.span_id == step.trace_span_id and isinstance(c.tool, dict) for c in calls)
    return {
        "calls": call_items(calls),
        "usage": usage(calls),
        "span": {
            "name": span.get("name", ""),
            "kind": span.get("kind", ""),
            "status": span.get("status", ""),
            "events": [_entry(e) for e in span.get("events", []) if isinstance(e, dict)],
            "has_logs": any(isinstance(e, dict) and e.get("log") for e in span.get("events", [])),
            "links": [_link(link, jobs_by_trace) for link in links],
            "attributes_json": pretty(span.get("attributes")),
            "input": None if own_tool else _io(span.get("input")),
            "output": None if own_tool else _io(span.get("output")),
            "dropped": span.get("dropped") or {},
        },
        "stack": step.stack,
    }


def steps_of_spans(
    job: Job, steps, span_ids: list, log_span_ids: list
) -> dict[str, tuple[str, int]]:
    """The (node, attempt) of the step each of ``span_ids`` is (among ``steps``, the job's),
    and the step a log record of ``log_span_ids`` was logged in (a call's: the call's step)."""
    found = {
        span_id: (node_id, attempt)
        for span_id, node_id, attempt in steps.filter(
            trace_span_id__in=[*span_ids, *log_span_ids]
        ).values_list("trace_span_id", "node_id", "attempt")
    }
    if missing := set(log_span_ids) - set(found) - {None}:
        calls = Call.objects.filter(job=job, span_id__in=missing, attempt__isnull=False)
        rows = calls.values_list("span_id", "node_id", "attempt")
        found |= {span_id: (node_id, attempt) for span_id, node_id, attempt in rows}
    return found


def usage(calls: list[Call]) -> dict[str, Any]:
    """Tokens and cost summed over calls; cost None when no call has a known price. A call's
    own tokens only: a run total an agent's span repeats is not among them (replay keeps it
    apart), so this counts each model call once, as the job's header does."""
    costs = [call.cost for call in calls if call.cost is not None]
    return {
        "input_tokens": sum(call.input_tokens or 0 for call in calls),
        "output_tokens": sum(call.output_tokens or 0 for call in calls),
        "cost": format_cost(sum(costs, Decimal(0))) if costs else "",
        "llm_calls": sum(1 for call in calls if call.kind == "llm" and not _attempt_of(call)),
    }


def _attempt_of(call: Call) -> str:
    """The span id of the call an earlier attempt is one of ("" for a call of its own)."""
    detail = call.detail if isinstance(call.detail, dict) else {}
    value = detail.get("attempt_of")
    return value if isinstance(value, str) else ""


def call_items(calls: list[Call]) -> list[dict[str, Any]]:
    """The panel's call cards, in order: a model call an SDK retried is one card, its earlier
    attempts (failed) listed in it, never a failed call beside the one that answered."""
    by_span = {call.span_id for call in calls}
    earlier: dict[str, list[Call]] = {}
    for call in calls:
        if (of := _attempt_of(call)) and of in by_span:
            earlier.setdefault(of, []).append(call)
    return [
        call_item(call, earlier.get(call.span_id, []))
        for call in calls
        if _attempt_of(call) not in by_span
    ]


def format_cost(amount: Decimal | None) -> str:
    """``$0.0045``: enough digits to see a cent's fraction, no trailing zeros."""
    if amount is None:
        return ""
    if amount >= 1:
        return f"${amount:,.2f}"
    return "$" + (f"{amount:.6f}".rstrip("0").rstrip(".") or "0")


def call_item(call: Call, earlier: list[Call] | None = None) -> dict[str, Any]:
    """A call's card; ``earlier``: its failed earlier attempts (``call_items``)."""
    messages = [m for m in call.messages if isinstance(m, dict)]
    detail = call.detail if isinstance(call.detail, dict) else {}
    total = detail.get("usage_total") if isinstance(detail.get("usage_total"), dict) else None
    return {
        "call": call,
        "attempts": [
            {
                "number": number,
                "reason": attempt.reason,
                "duration": format_duration_ms(attempt.duration_ms),
            }
            for number, attempt in enumerate(earlier or [], start=1)
        ],
        "attempt": len(earlier or []) + 1,
        "usage_total": total,
        "duration": format_duration_ms(call.duration_ms),
        "cost": format_cost(call.cost),
        "failed": call.status == "error",
        "messages": [
            {
                "direction": m.get("direction", ""),
                "role": m.get("role") or ("input" if m.get("direction") == "in" else "output"),
                "content": str(m.get("content", "")),
                "long": len(str(m.get("content", ""))) > TRANSCRIPT_PREVIEW_CHARS,
                "tool_calls": [t for t in m.get("tool_calls", []) if isinstance(t, dict)],
            }
            for m in messages
        ],
        "input": _io(call.input),
        "output": _io(call.output),
        "tool": call.tool if isinstance(call.tool, dict) else None,
        "tool_arguments": _pretty_text((call.tool or {}).get("arguments")),
        "tool_result": _pretty_text((call.tool or {}).get("result")),
        "stack": (call.detail or {}).get("stack", ""),
        "attributes_json": pretty((call.detail or {}).get("attributes")),
        "events": [e for e in (call.detail or {}).get("events", []) if isinstance(e, dict)],
    }


def _entry(entry: dict) -> dict:
    """A span event, or a log record logged in the span (``log``: its body as text)."""
    if not entry.get("log"):
        return entry
    body = entry.get("body")
    text = body if isinstance(body, str) else pretty(body) if body is not None else ""
    return {**entry, "body_text": text}


def _io(value: Any) -> dict[str, str] | None:
    """An input or output value, pretty-printed when it is JSON."""
    if not isinstance(value, dict) or value.get("value") in (None, ""):
        return None
    return {"text": _pretty_text(value.get("value")), "mime_type": value.get("mime_type", "")}


def _pretty_text(value: Any) -> str:
    if isinstance(value, str):
        parsed = loads_within_depth(value)
        if isinstance(parsed, str):
            return parsed
        if parsed is None:
            # JSON's null; else not JSON, or nested too deep to print: the text as it came.
            return "" if value.strip() == "null" else value
        value = parsed
    if value is None:
        return ""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def pretty(value: Any) -> str:
    """Indented JSON (a string of JSON read first) for a panel, "" when there is nothing."""
    return _pretty_text(value) if value else ""


def _link(link: dict, jobs_by_trace: dict[str, str]) -> dict[str, str]:
    """A span link, with a link to the job it points at when that job is here."""
    trace_id = str(link.get("trace_id", ""))
    job_id = jobs_by_trace.get(trace_id)
    return {
        "trace_id": trace_id,
        "span_id": str(link.get("span_id", "")),
        "job_id": job_id or "",
        "href": reverse("jobs:job", args=[job_id]) if job_id else "",
    }
