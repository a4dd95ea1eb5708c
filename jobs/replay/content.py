"""Where producers put a span's content (docs/otlp.md, "Where content is read from"): a call's
messages, and a tool's arguments and result. Pure.

A call's transcript comes in three slots, the system instructions, the messages it read and
those it wrote, each taken from the first of three places that has it:
1. the span's attributes (OpenInference's ``llm.*_messages``, ``gen_ai.input.messages`` /
   ``gen_ai.output.messages`` / ``gen_ai.system_instructions``; ``calls.transcript_slots``);
2. the span's events: the older GenAI event form (``gen_ai.system.message``,
   ``gen_ai.user.message``, ``gen_ai.assistant.message``, ``gen_ai.tool.message``,
   ``gen_ai.choice``, their content in attributes or a body), as Strands writes them by default,
   and the newer one (``gen_ai.client.inference.operation.details`` carrying the message
   attributes);
3. the OTLP log records posted to ``/v1/logs`` for the span, in the same two forms, as
   OpenTelemetry's OpenAI instrumentation sends them by default.

A tool call's arguments and result come from its attributes, else from the same events and
records (``gen_ai.tool.message`` / ``gen_ai.choice`` on a tool span, a ``tool_call`` /
``tool_call_response`` part). The content events a call's transcript or tool reads are not
repeated as timed entries of its step (the stored span keeps them); the other log records of
a span are timed entries of its step.
"""

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from jobs.contract.events import Event
from jobs.replay import calls

DETAILS = "gen_ai.client.inference.operation.details"
SYSTEM_MESSAGE = "gen_ai.system.message"
ROLE_BY_EVENT = {
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE = "gen_ai.choice"
CONTENT_EVENTS = frozenset({DETAILS, SYSTEM_MESSAGE, CHOICE, *ROLE_BY_EVENT})
LOG = "log"


@dataclass(frozen=True, slots=True)
class Record:
    """A span event or a log record, as content reads it: its (event) name, attributes and
    body (a log record's; None for a span event), and when it happened."""

    name: str
    attributes: dict[str, Any]
    body: Any = None
    ts: str = ""

    @property
    def fields(self) -> dict[str, Any]:
        """The record's attributes with its body's fields over them (a text body: content)."""
        if isinstance(self.body, dict):
            return {**self.attributes, **self.body}
        if isinstance(self.body, str) and self.body:
            return {**self.attributes, "content": self.body}
        return self.attributes

    @property
    def is_content(self) -> bool:
        return self.name in CONTENT_EVENTS


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A stored ``log`` event, read defensively (any producer may send one)."""

    event_id: str
    span_id: str
    order: tuple
    record: Record
    severity: str
    payload: dict[str, Any]

    def entry(self) -> dict[str, Any]:
        """The record as a timed entry of its step, beside the span's events."""
        entry: dict[str, Any] = {
            "name": self.record.name or "log",
            "ts": self.record.ts,
            "attributes": self.record.attributes,
            "log": True,
        }
        if self.severity:
            entry["severity"] = self.severity
        if self.record.body is not None:
            entry["body"] = self.record.body
        return entry


def span_records(span_events: Iterable[dict[str, Any]]) -> list[Record]:
    """A span's stored events as records."""
    return [
        Record(_text(e.get("name")), _dict(e.get("attributes")), None, _text(e.get("ts")))
        for e in span_events
    ]


def read_log(event: Event) -> LogRecord:
    """A ``log`` event's record; its name is its event name, else its ``event.name``."""
    payload = event.payload
    attrs = _dict(payload.get("attributes"))
    name = _text(payload.get("event_name")) or _text(attrs.get("event.name"))
    # Stored events always have a time (ingest gives a record without one its receive time).
    ts = event.ts.isoformat(timespec="microseconds").replace("+00:00", "Z") if event.ts else ""
    nanos = payload.get("time_unix_nano")
    order = (ts, nanos if isinstance(nanos, int) else 0, event.event_id)
    severity = _text(payload.get("severity_text")) or _severity_name(payload.get("severity_number"))
    return LogRecord(
        event_id=event.event_id,
        span_id=_text(payload.get("span_id")),
        order=order,
        record=Record(name, attrs, payload.get("body"), ts),
        severity=severity,
        payload=payload,
    )


def logs_by_span(log_events: Iterable[Event]) -> dict[str, list[LogRecord]]:
    """Log records by the span they name ("" for none), each span's in time order."""
    by_span: dict[str, list[LogRecord]] = {}
    for event in log_events:
        log = read_log(event)
        by_span.setdefault(log.span_id, []).append(log)
    for logs in by_span.values():
        logs.sort(key=lambda log: log.order)
    return by_span


def _severity_name(number: Any) -> str:
    """OpenTelemetry's short name of a severity number (9: INFO, 17: ERROR...)."""
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= 24:
        return ""
    name = ("TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL")[(number - 1) // 4]
    step = (number - 1) % 4
    return name if step == 0 else f"{name}{step + 1}"


# --- the transcript -----------------------------------------------------------------------


def transcript(
    attrs: dict[str, Any], span_events: list[Record], logs: list[Record]
) -> list[dict[str, Any]]:
    """A call's messages, oldest first: each slot from the first place that has it (the
    span's attributes, its events, its log records)."""
    sources = [calls.transcript_slots(attrs), event_slots(span_events), event_slots(logs)]
    chosen = calls.Slots()
    for slot in ("system", "input", "output"):
        setattr(chosen, slot, next((s for s in (getattr(x, slot) for x in sources) if s), []))
    return chosen.messages


def event_slots(records: list[Record]) -> calls.Slots:
    """The messages GenAI content events or log records carry, in their order."""
    slots = calls.Slots()
    for record in records:
        fields = record.fields
        if record.name == DETAILS or (
            not record.name and any(key in fields for key in calls.GEN_AI_MESSAGE_KEYS)
        ):
            slots.extend(calls.gen_ai_slots(fields))
        elif record.name == SYSTEM_MESSAGE:
            slots.system.append(message("in", "system", fields))
        elif record.name in ROLE_BY_EVENT:
            role = _text(fields.get("role")) or ROLE_BY_EVENT[record.name]
            slots.input.append(message("in", role, fields))
        elif record.name == CHOICE:
            reply = fields.get("message")
            choice = {**fields, **reply} if isinstance(reply, dict) else {**fields}
            if not isinstance(reply, dict):
                choice["content"] = reply if reply is not None else fields.get("content")
            slots.output.append(message("out", _text(choice.get("role")) or "assistant", choice))
            if (result := fields.get("tool.result")) is not None:
                # Strands' event loop cycle: the tool results the cycle fed back to the model.
                slots.output.append(message("out", "tool", {"content": result}))
    return slots


def message(direction: str, role: str, fields: dict[str, Any]) -> dict[str, Any]:
    """One message of an event's ``fields``: its content (text, or content parts and blocks:
    text, tool call requests, tool results) and its tool call requests (OpenAI's
    ``tool_calls``, a ``tool_call`` part, a Bedrock ``toolUse`` block)."""
    built = calls.gen_ai_message({"role": role, "parts": fields.get("content", "")}, direction)
    requests = [_openai_tool_call(call) for call in _list(fields.get("tool_calls"))]
    requests = [request for request in requests if request]
    if requests:
        built["tool_calls"] = [*built.get("tool_calls", []), *requests]
    if reason := _text(fields.get("finish_reason")):
        built["finish_reason"] = reason
    return built


def _openai_tool_call(call: Any) -> dict[str, str]:
    """An OpenAI ``tool_calls`` entry ({id, type, function: {name, arguments}}) as a request."""
    if not isinstance(call, dict):
        return {}
    function = _dict(call.get("function"))
    return calls.tool_call_request({"id": call.get("id"), **function})


# --- tools --------------------------------------------------------------------------------


def tool(
    tool_fields: dict[str, Any] | None, span_events: list[Record], logs: list[Record]
) -> dict[str, Any] | None:
    """A tool call's {name, arguments, result}: its attributes', the missing ones from its
    content events or log records (None: it names no tool)."""
    if tool_fields is None:
        return None
    found = dict(tool_fields)
    for record in [*span_events, *logs]:
        fields = record.fields
        if record.name == "gen_ai.tool.message" and "arguments" not in found:
            if (arguments := fields.get("content")) is not None:
                found["arguments"] = arguments
        elif record.name == CHOICE and "result" not in found:
            if (result := fields.get("message", fields.get("content"))) is not None:
                found["result"] = calls.parts_text(result)
        elif record.name == DETAILS:
            _tool_parts(found, calls.gen_ai_slots(fields))
    return found


def _tool_parts(found: dict[str, Any], slots: calls.Slots) -> None:
    """Arguments from a ``tool_call`` part, a result from a ``tool_call_response`` part."""
    for item in slots.input:
        for request in item.get("tool_calls", []):
            if "arguments" in request:
                found.setdefault("arguments", request["arguments"])
    for item in slots.output:
        if item.get("role") == "tool" and "result" not in found:
            found["result"] = item.get("content", "")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    if isinstance(value, str) and value.startswith("["):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    return value if isinstance(value, list) else []


# --- a call's record ----------------------------------------------------------------------


def call_record(
    span: Any,
    step: Any,
    position: int,
    failure: tuple[str, str, str],
    logs: list[LogRecord],
    total: bool = False,
) -> calls.CallRecord:
    """``calls.call_record`` with the content its span's events and its GenAI content log
    records ``logs`` carry: the transcript, a tool's arguments and result; the content events
    read are left out of the call's timed entries. ``total``: its usage is a run's total."""
    record = calls.call_record(span, step, position, failure, total)
    events = span_records(span.events)
    from_logs = [log.record for log in logs]
    detail = {
        **record.detail,
        "events": [e for e in record.detail["events"] if e.get("name") not in CONTENT_EVENTS],
    }
    if calls.kind_of(span) == "tool":
        tool_fields = tool(record.tool, events, from_logs)
        return replace(record, tool=tool_fields, detail=detail)
    messages = transcript(span.attrs, events, from_logs)
    return replace(record, messages=messages, detail=detail)


def step_entries(
    ordered: list[Any], logs: dict[str, list[LogRecord]], is_call
) -> tuple[dict[str, list[LogRecord]], dict[str, list[dict[str, Any]]]]:
    """Where a trace's log records go: by call span id, the GenAI content records a call's
    transcript reads (``is_call(span)``: the span is a call); by step span id, the others, as
    timed entries of the step they were logged in (a call's: its step's). A record whose span
    is not here, or is the job's root, is on the job only (its narrative)."""
    content: dict[str, list[LogRecord]] = {}
    entries: dict[str, list[dict[str, Any]]] = {}
    for span in ordered:
        for log in logs.get(span.span_id, ()):
            if log.record.is_content and is_call(span):
                content.setdefault(span.span_id, []).append(log)
                continue
            step = span if span.is_step else span.step_parent
            if step is not None:
                entries.setdefault(step.span_id, []).append(log.entry())
    return content, entries


# --- the step panel -----------------------------------------------------------------------

# Attributes a step's display keeps apart (the rest are shown as the span's attributes).
SHOWN_APART = frozenset({"input.value", "input.mime_type", "output.value", "output.mime_type"})


def step_details(span: Any, logs: list[dict[str, Any]], is_call: bool) -> dict[str, Any]:
    """What the step panel shows of a step's span beside the step's own fields: its events
    but the exception and (``is_call``: its call's transcript shows them) the content events,
    with the log records logged in it (``logs``: entries of ``step_entries``) in time order."""
    hidden = {"exception", *(CONTENT_EVENTS if is_call else ())}
    events = [
        {"name": e.get("name"), "ts": e.get("ts"), "attributes": _dict(e.get("attributes"))}
        for e in span.events
        if e.get("name") not in hidden
    ]
    if logs:
        events = sorted([*events, *logs], key=lambda e: str(e.get("ts") or ""))
    details: dict[str, Any] = {
        "name": span.name,
        "kind": span.kind,
        "status": span.status_code,
        "attributes": {k: v for k, v in span.attrs.items() if k not in SHOWN_APART},
        "events": events,
        "links": [
            {"trace_id": link.get("trace_id"), "span_id": link.get("span_id")}
            for link in span.links
        ],
    }
    for side in ("input", "output"):
        if (value := span.attrs.get(f"{side}.value")) is not None:
            details[side] = {"value": value, "mime_type": span.text(f"{side}.mime_type") or ""}
    if span.dropped:
        details["dropped"] = span.dropped
    return details
