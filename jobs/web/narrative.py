"""The job page's narrative: one plain-words line per event, in event order.

Pure: events in (``jobs.events.Event``, any order), lines out. Staleness is not recomputed here:
the caller passes the (node, attempt) keys replay marked ``ignored_stale`` so the narrative never
disagrees with the projection.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from jobs.contract.events import Event
from jobs.replay import content, spans
from jobs.replay.failures import ResultType
from jobs.replay.walk import sort_events
from jobs.web.rendering import step_query

TONE_BY_RESULT_TYPE: dict[str, str] = {
    ResultType.SUCCESS: "ok",
    ResultType.RETRYABLE_FAILURE: "retryable",
    ResultType.PERMANENT_FAILURE: "failed",
    ResultType.COMPENSATABLE_FAILURE: "failed",
}


class Role:
    """Where a failure line stands relative to the job's root failure (Job.failing_node_id)."""

    ROOT = "root"
    FOLLOWS = "follows"
    NONE = ""


@dataclass(frozen=True, slots=True)
class NarrativeLine:
    at: datetime | None
    text: str
    tone: str  # ok, retryable, failed, running, info, warning
    role: str = Role.NONE
    node_id: str = ""
    attempt: int | None = None
    event_type: str = ""

    @property
    def step_key(self) -> str:
        """``node:attempt`` for lines about one attempt of a node, else ""."""
        return f"{self.node_id}:{self.attempt}" if self.node_id and self.attempt else ""


def format_duration_ms(duration_ms: float | None) -> str:
    """``812 ms``, ``5.4 s``, ``2 min 03 s``; "" when unknown."""
    if duration_ms is None:
        return ""
    if duration_ms < 1000:
        return f"{duration_ms:.0f} ms"
    seconds = duration_ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def lines_for(
    events: Iterable[Event],
    *,
    root_event_id: str = "",
    after_root: bool = False,
    stale_steps: frozenset[tuple[str, int]] | set[tuple[str, int]] = frozenset(),
    span_steps: dict[str, tuple[str, int]] | None = None,
) -> list[NarrativeLine]:
    """One line per event in event order. The event ``root_event_id`` is the root failure (the
    node_finished of Job.failing_node_id's latest failing attempt); failures after it are marked
    as following from it, failures before it (earlier retries) are left plain. ``after_root``
    says the root came before these events (a later window of a long narrative).
    ``span_steps`` maps the span id of an OpenTelemetry span to the step replay made of it."""
    lines: list[NarrativeLine] = []
    root_seen = after_root
    span_steps = span_steps or {}
    for event in sort_events(events):
        line = _line(event, stale_steps, span_steps)
        if line.tone in ("failed", "retryable") and line.event_type in _FAILURE_TYPES:
            # A span's step finishes in a node_finished replay derived: "<span event>:finished".
            finish_id = event.event_id + (":finished" if event.type == "span" else "")
            if root_event_id and finish_id == root_event_id:
                root_seen = True
                line = _with_role(line, Role.ROOT)
            elif root_seen:
                line = _with_role(line, Role.FOLLOWS)
        lines.append(line)
    return lines


_FAILURE_TYPES = frozenset({"node_finished", "job_finished", "span"})


def _with_role(line: NarrativeLine, role: str) -> NarrativeLine:
    return NarrativeLine(
        line.at, line.text, line.tone, role, line.node_id, line.attempt, line.event_type
    )


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _line(event: Event, stale_steps, span_steps: dict[str, tuple[str, int]]) -> NarrativeLine:
    payload = event.payload
    node = _text(payload.get("node_id"))
    attempt: int | None = event.attempt
    if event.type in ("span", "log"):
        node, attempt = span_steps.get(_text(payload.get("span_id")), ("", None))
    describe = _DESCRIBERS.get(event.type, _describe_other)
    text, tone = describe(payload, node, attempt, event, stale_steps)
    node_scoped = event.type in (
        "node_started",
        "node_finished",
        "state_checkpointed",
        "span",
        "log",
    )
    return NarrativeLine(
        at=event.ts,
        text=text,
        tone=tone,
        node_id=node,
        attempt=attempt if node_scoped and node else None,
        event_type=event.type,
    )


def _join(*parts: str, sep: str = " ") -> str:
    return sep.join(part for part in parts if part)


def _describe_job_started(payload, node, attempt, event, stale_steps):
    what = _join(
        _text(payload.get("name")),
        f"({payload['workflow']})" if _text(payload.get("workflow")) else "",
    )
    provider = "/".join(
        p for p in (_text(payload.get("provider")), _text(payload.get("model"))) if p
    )
    text = _join("Job started", what)
    if provider:
        text += f" on {provider}"
    if _text(payload.get("retry_of")):
        text += f", retrying {payload['retry_of']}"
    return text, "info"


def _describe_node_started(payload, node, attempt, event, stale_steps):
    return f"Node {node} started (attempt {attempt})", "running"


def _describe_node_finished(payload, node, attempt, event, stale_steps):
    result_type = _text(payload.get("result_type")) or ResultType.SUCCESS
    reason = _text(payload.get("reason"))
    if (node, attempt) in stale_steps:
        detail = f"{result_type}, {reason}" if reason else result_type
        return f"Node {node} result ignored: arrived after cancel ({detail})", "warning"
    details = _join(
        f"attempt {attempt}", format_duration_ms(_number(payload.get("duration_ms"))), sep=", "
    )
    text = f"Node {node} · {result_type} ({details})"
    if payload.get("continue_on_error") is True and result_type != ResultType.SUCCESS:
        text += " [continue on error]"
    if reason:
        text += f": {reason}"
    return text, TONE_BY_RESULT_TYPE.get(result_type, "info")


def _describe_compensation(payload, node, attempt, event, stale_steps):
    ok = _text(payload.get("result_type")) in ("", ResultType.SUCCESS)
    reason = _text(payload.get("reason"))
    text = f"Node {node} compensation {'succeeded' if ok else 'failed'}"
    return (text + (f": {reason}" if reason else "")), "ok" if ok else "failed"


def _describe_checkpoint(payload, node, attempt, event, stale_steps):
    state = _text(payload.get("state"))
    return _join(f"Node {node} checkpointed", f"state {state}" if state else ""), "info"


def _describe_cancel(payload, node, attempt, event, stale_steps):
    epoch = payload.get("epoch")
    text = "Cancel requested" + (f" (epoch {epoch})" if epoch is not None else " (no epoch)")
    reason = _text(payload.get("reason"))
    return text + (f": {reason}" if reason else ""), "warning"


def _describe_escalation(payload, node, attempt, event, stale_steps):
    kind = _text(payload.get("kind")) or "escalation"
    severity = _text(payload.get("severity"))
    message = _text(payload.get("message"))
    text = f"Escalation raised by producer: {kind}" + (f" ({severity})" if severity else "")
    if node:
        text += f" on node {node}"
    return text + (f": {message}" if message else ""), "warning"


def _describe_parse_invalid(payload, node, attempt, event, stale_steps):
    error = _text(payload.get("parse_error_type")) or _text(payload.get("reason")) or "invalid"
    planner_attempt = payload.get("attempt")
    label = f" (attempt {planner_attempt})" if isinstance(planner_attempt, int) else ""
    return f"Planner output invalid{label}: {error}", "retryable"


def _describe_degraded(payload, node, attempt, event, stale_steps):
    attempts = payload.get("attempts")
    provider = "/".join(
        p for p in (_text(payload.get("provider")), _text(payload.get("model"))) if p
    )
    text = "Planner degraded"
    if isinstance(attempts, int):
        text += f" after {attempts} attempts"
    text += f": {_text(payload.get('reason')) or 'next_step_parse_failed'}"
    return text + (f" ({provider})" if provider else ""), "failed"


def _describe_job_finished(payload, node, attempt, event, stale_steps):
    status = _text(payload.get("status"))
    code = _text(payload.get("code"))
    reason = _text(payload.get("reason"))
    text = f"Job finished: {status}" + (f" ({code})" if code else "")
    tone = {"completed": "ok", "failed": "failed"}.get(status, "warning")
    return text + (f": {reason}" if reason else ""), tone


def _describe_span(payload, node, attempt, event, stale_steps):
    """An OpenTelemetry span: its name, the step replay made of it (or that it is the job's
    root), how long it took, and on error the same one-line reason the step shows."""
    span = spans.read_span(event)
    if span is None:
        return "Span (unreadable)", "info"
    kind = f" ({span.kind})" if span.kind in INFORMATIVE_SPAN_KINDS else ""
    text = f"Span {span.name}{kind}"
    if node:
        text += f" · step {node} attempt {attempt}"
    elif not span.parent_id:
        text += " · the job's root"
    duration = format_duration_ms((span.end - span.start).total_seconds() * 1000)
    text += f" · {'error' if span.error else 'done'} in {duration}"
    reason, _exception_type, _stack = spans.failure_text(span)
    if span.error and reason:
        text += f": {reason}"
    return text, "failed" if span.error else ("ok" if node else "info")


# Span kinds worth naming in a line (internal and unspecified say nothing).
INFORMATIVE_SPAN_KINDS = frozenset({"server", "client", "producer", "consumer"})


def _describe_log(payload, node, attempt, event, stale_steps):
    """An OpenTelemetry log record: its severity, event name and body (a preview), and the
    step it was logged in, if one; a record of no span here says so."""
    record = content.read_log(event)
    what = _join(record.severity, record.record.name) or "record"
    text = f"Log {what}"
    if node:
        text += f" · step {node} attempt {attempt}"
    elif record.span_id:
        text += f" · span {record.span_id}"
    body = record.record.body
    if body is not None and body != "":
        preview = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
        cut = len(preview) > LOG_PREVIEW_CHARS
        text += ": " + preview[:LOG_PREVIEW_CHARS] + ("…" if cut else "")
    severe = isinstance(payload.get("severity_number"), int) and payload["severity_number"] >= 17
    return text, "warning" if severe else "info"


LOG_PREVIEW_CHARS = 200


def _describe_other(payload, node, attempt, event, stale_steps):
    return f"Event {event.type}" + (f" on node {node}" if node else ""), "info"


def _provider_model(payload) -> str:
    return "/".join(p for p in (_text(payload.get("provider")), _text(payload.get("model"))) if p)


def _number(value) -> float | None:
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


_DESCRIBERS = {
    "job_started": _describe_job_started,
    "node_started": _describe_node_started,
    "node_finished": _describe_node_finished,
    "compensation_finished": _describe_compensation,
    "state_checkpointed": _describe_checkpoint,
    "cancel_requested": _describe_cancel,
    "escalation_raised": _describe_escalation,
    "graph.next_step.parse_invalid": _describe_parse_invalid,
    "graph.next_step.degraded": _describe_degraded,
    "job_finished": _describe_job_finished,
    "span": _describe_span,
    "log": _describe_log,
}


def line_item(line: NarrativeLine) -> dict:
    """A narrative line as the template shows it, in the display time zone."""
    local = timezone.localtime(line.at) if line.at else None
    return {
        "iso": local.isoformat() if local else "",
        "clock": local.strftime("%H:%M:%S.") + f"{local.microsecond // 1000:03d}" if local else "",
        "text": line.text,
        "css": f"line tone-{line.tone}" + (f" role-{line.role}" if line.role else ""),
        "href": "?" + step_query(line.node_id, line.attempt)
        if line.node_id and line.attempt
        else "",
        "role": line.role,
    }
