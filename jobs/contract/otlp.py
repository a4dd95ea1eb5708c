"""OpenTelemetry traces as traceviz events (OTLP/HTTP ``POST /v1/traces``; docs/otlp.md).

Pure: bytes and decoded ``ExportTraceServiceRequest`` messages in, event dicts, a
``ParsedBatch`` and per-span errors out; no models, no HTTP. Each span becomes one ``span`` event
that keeps the whole span (name, kind, times, status, attributes, span events, links, resource),
bounded, with its start as the event's ts: what it means (the job, a step or a call inside a
step, which attempt, which result) depends on the rest of the trace, so replay decides it
(``jobs.replay.spans``), in any arrival order, and ``rebuild_projections`` applies a changed
mapping to the stored spans. Span events named like the planner's events (the planner contract) also
become planner events of the job, so counters, the dashboard and alerts see them as if they had
been sent to ``/api/v1/events``.

The job id is what one request shows: ``traceviz.job_id`` on the span, its resource or another
span of the trace in the request, else the trace id. A trace named in a later request than some
of its spans is made one job by ingest (``jobs.ingest.aliases``, which ``trace_of`` tells which
trace an event belongs to).

Event ids are derived from the trace and span ids, so a resent export request stores nothing
twice. A span is never rejected for a long string: names and ids are cut with a marker,
inputs and outputs at 64 KiB each, the remaining attributes at 16 KiB per span. A span that
cannot be read at all (bad ids or times), or holds a number replay reads past the contract's
bound for it (``events.SPAN_NUMBER_BOUNDS``), is rejected and counted in the response's
``partial_success`` with the reason; the other spans are stored.
"""

import base64
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

from jobs.contract import bodies, events
from jobs.contract.bodies import BodyError, ParsedBatch
from jobs.contract.redaction import bounded_paths, redact_into, redacted

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)
MAX_ERRORS_IN_MESSAGE = 10
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Span.flags bits 8 and 9: the parent's is_remote is known, and true (a service's entry span);
# known and false: the parent is a span of the same process, which its SDK exports too.
KNOWN_PARENT = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
REMOTE_PARENT = KNOWN_PARENT | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
PREFIX = "traceviz."
# A span's event id: "otlp:<trace id>:<span id>"; a planner event made of its span event i
# adds ":<i>".
EVENT_ID_PREFIX = "otlp"
TRACE_ID = events.hex_id(32)  # a trace id as ingest writes it: 32 lowercase hex digits
JOB_ID_KEY = PREFIX + "job_id"
KIND_NAMES = {
    Span.SpanKind.SPAN_KIND_INTERNAL: "internal",
    Span.SpanKind.SPAN_KIND_SERVER: "server",
    Span.SpanKind.SPAN_KIND_CLIENT: "client",
    Span.SpanKind.SPAN_KIND_PRODUCER: "producer",
    Span.SpanKind.SPAN_KIND_CONSUMER: "consumer",
}
STATUS_NAMES = {
    Status.StatusCode.STATUS_CODE_OK: "ok",
    Status.StatusCode.STATUS_CODE_ERROR: "error",
}

# Bounds (docs/otlp.md). Inputs, outputs, messages and stack traces are cut at
# MAX_VALUE_BYTES each; every other attribute of a span shares MAX_ATTRIBUTES_BYTES.
MAX_VALUE_BYTES = 64 * 1024
MAX_ATTRIBUTES_BYTES = 16 * 1024
MAX_SPAN_EVENTS = 256
MAX_LINKS = 64
# Attributes that carry what a call read and wrote (OpenInference and gen_ai conventions).
VALUE_KEY_PREFIXES = (
    "input.",
    "output.",
    "llm.input_messages.",
    "llm.output_messages.",
    "llm.prompts",
    "llm.invocation_parameters",
    "llm.prompt_template.",
    "llm.tools.",
    "gen_ai.input.",
    "gen_ai.output.",
    "gen_ai.prompt",
    "gen_ai.completion",
    "gen_ai.system_instructions",
    "gen_ai.tool.",
    "tool.parameters",
    "tool.json_schema",
    "tool_call.",
    "retrieval.documents.",
    "reranker.",
    "embedding.embeddings.",
    "message.",
    "exception.",
)


@dataclass(slots=True)
class OtlpBatch:
    """Valid events of the accepted spans, and one message per rejected span."""

    batch: ParsedBatch
    span_count: int
    rejections: list[str]

    @property
    def rejected_spans(self) -> int:
        return len(self.rejections)

    @property
    def error_message(self) -> str:
        return rejections_message(self.rejections)


def rejections_message(rejections: list[str]) -> str:
    """A partial_success's error message: the first ten rejections, then "and N more"."""
    shown = rejections[:MAX_ERRORS_IN_MESSAGE]
    more = len(rejections) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


class Unreadable(Exception):
    """A span that cannot be read at all; the message says which field."""


# --- decoding -----------------------------------------------------------------------------


def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """An export request from an OTLP/HTTP body (binary protobuf or OTLP/JSON).

    Raises ``BodyError``: 415 for another content type, 400 for a body that does not decode.
    """
    return decode_message(body, content_type, ExportTraceServiceRequest(), hex_ids_as_base64)


def decode_message(
    body: bytes,
    content_type: str,
    message: Message,
    hex_ids: Callable[[dict[str, Any]], dict[str, Any]],
) -> Message:
    """``message`` (an empty export request) read from an OTLP/HTTP body; ``hex_ids`` rewrites
    its OTLP/JSON document's hex ids for protobuf's JSON parser. Raises ``BodyError``."""
    name = message.DESCRIPTOR.name
    if content_type == PROTOBUF:
        try:
            message.ParseFromString(body)
        except (DecodeError, RecursionError):
            raise BodyError(400, f"body is not a protobuf {name}") from None
        return message
    if content_type == JSON:
        try:
            document = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise BodyError(400, f"body is not JSON: {error}") from None
        if not isinstance(document, dict):
            raise BodyError(400, f"body must be a JSON {name} object")
        if bodies.RISKY_ESCAPE.search(body) and _has_lone_surrogate(document):
            # protobuf's parser fails on these with a SystemError, not a ParseError.
            raise BodyError(400, "body is not valid Unicode text: it holds a lone surrogate")
        try:
            json_format.ParseDict(hex_ids(document), message, ignore_unknown_fields=True)
        except (json_format.ParseError, RecursionError) as error:
            raise BodyError(400, f"body is not an OTLP/JSON {name}: {error}") from None
        return message
    raise unsupported_content_type(content_type)


def _has_lone_surrogate(document: Any) -> bool:
    try:
        json.dumps(document, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def unsupported_content_type(content_type: str) -> BodyError:
    got = f", got {content_type!r}" if content_type else ""
    return BodyError(415, f"Content-Type must be {PROTOBUF} or {JSON}{got}")


ID_KEYS = frozenset({"traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id"})


def hex_ids_as_base64(document: dict[str, Any]) -> dict[str, Any]:
    """OTLP/JSON carries trace and span ids as hex, protobuf's JSON mapping reads bytes as
    base64: rewrite the ids of spans and their links so ``json_format`` reads the right bytes.
    Returns a new document; raises ``BodyError`` (400) for an id that is not hex, and for a
    resource, scope or span that is not an object (protobuf's JSON parser, told to ignore
    unknown fields, would read a string there as an empty message and drop it silently)."""
    resource_spans = []
    for r_index, resource in enumerate(list_of(document, "resourceSpans", "resource_spans")):
        require_object(resource, f"resourceSpans[{r_index}]")
        scope_spans = []
        for s_index, scope in enumerate(list_of(resource, "scopeSpans", "scope_spans")):
            require_object(scope, f"resourceSpans[{r_index}].scopeSpans[{s_index}]")
            spans = []
            for index, span in enumerate(list_of(scope, "spans")):
                path = f"resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]"
                require_object(span, path)
                span = ids_rewritten(span, path)
                if links := list_of(span, "links"):
                    span["links"] = [
                        ids_rewritten(link, f"{path}.links[{i}]")
                        if isinstance(link, dict)
                        else link
                        for i, link in enumerate(links)
                    ]
                spans.append(span)
            scope_spans.append(with_list(scope, ("spans",), spans))
        resource_spans.append(with_list(resource, ("scopeSpans", "scope_spans"), scope_spans))
    return with_list(document, ("resourceSpans", "resource_spans"), resource_spans)


def require_object(item: Any, path: str) -> None:
    if not isinstance(item, dict):
        raise BodyError(400, f"{path} must be an object")


def list_of(container: Any, *names: str) -> list[Any]:
    for name in names:
        value = container.get(name) if isinstance(container, dict) else None
        if isinstance(value, list):
            return value
    return []


def with_list(container: Any, names: tuple[str, ...], value: list[Any]) -> Any:
    """``container`` with its list under the first of ``names`` present replaced by ``value``."""
    if not isinstance(container, dict):
        return container
    for name in names:
        if isinstance(container.get(name), list):
            return {**container, name: value}
    return container


def ids_rewritten(item: dict[str, Any], path: str) -> dict[str, Any]:
    rewritten = dict(item)
    for key in sorted(ID_KEYS & item.keys()):
        value = item[key]
        if not isinstance(value, str):
            raise BodyError(400, f"{path}.{key} must be a hex string")
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raise BodyError(
                400, f"{path}.{key} is not hex: OTLP/JSON ids are hex strings"
            ) from None
        rewritten[key] = base64.b64encode(raw).decode("ascii")
    return rewritten


# --- mapping ------------------------------------------------------------------------------


@dataclass(slots=True)
class MappedSpan:
    """A span's event dicts and, for each, the paths redaction masked in its payload; or why
    the span is unreadable."""

    label: str
    items: list[dict[str, Any]] = field(default_factory=list)
    masked: list[tuple[str, ...]] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource's attributes as sent (``traceviz.job_id`` is read from them) and as its spans
    store them: redacted, then bounded; with the paths masked."""

    attributes: dict[str, Any]
    stored: dict[str, Any]
    masked: tuple[str, ...]

    @classmethod
    def of(cls, key_values: list[KeyValue]) -> "Resource":
        sent = attributes(key_values)
        clean, masked = redacted(sent, "resource")
        return cls(sent, bounded_attributes(clean, {}), masked)


def map_request(request: ExportTraceServiceRequest) -> list[MappedSpan]:
    """Every span of the request, in order, with its event dicts or why it is unreadable."""
    job_ids = _job_ids_by_trace(request)
    mapped = []
    for resource_spans in request.resource_spans:
        resource = Resource.of(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = {"name": scope_spans.scope.name, "version": scope_spans.scope.version}
            for span in scope_spans.spans:
                label = _label(span)
                try:
                    items, masked = span_items(span, resource, scope, job_ids)
                except Unreadable as error:
                    mapped.append(MappedSpan(label, error=str(error)))
                else:
                    mapped.append(MappedSpan(label, items=items, masked=masked))
    return mapped


def _job_ids_by_trace(request: ExportTraceServiceRequest) -> dict[bytes, str]:
    """traceviz.job_id by trace, from any span of the trace in this request (span attribute
    first, then its resource's): spans of a trace that do not set it join the same job."""
    found: dict[bytes, str] = {}
    for resource_spans in request.resource_spans:
        resource_job = string_value(resource_spans.resource.attributes, JOB_ID_KEY)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                job_id = string_value(span.attributes, JOB_ID_KEY) or resource_job
                if job_id:
                    found.setdefault(span.trace_id, job_id)
    return found


def string_value(key_values, key: str) -> str | None:
    value = next((kv.value for kv in key_values if kv.key == key), None)
    if value is not None and value.WhichOneof("value") == "string_value":
        return value.string_value or None
    return None


def to_batch(request: ExportTraceServiceRequest, max_events: int) -> OtlpBatch:
    """Map and validate a request; a span whose events do not validate is rejected whole.

    Raises ``BodyError`` (413) when the request maps to more than ``max_events`` events.
    """
    mapped = map_request(request)
    event_total = sum(len(span.items) for span in mapped)
    if event_total > max_events:
        raise BodyError(
            413,
            f"request of {len(mapped)} spans maps to {event_total} events; the limit is "
            f"{max_events} events per request",
        )
    batch = ParsedBatch(redacted=True)
    rejections = []
    for span in mapped:
        valid: list[events.Event] = []
        problems: list[str] = []
        for item, masked in zip(span.items, span.masked, strict=True):
            event, errors = events.validate(item)
            if event is None:
                problems.extend(f"{e.field}: {e.message}" for e in errors)
            else:
                valid.append(replace(event, masked=masked) if masked else event)
        error = span.error or "; ".join(dict.fromkeys(problems))
        if error:
            rejections.append(f"{span.label}: {error}")
            continue
        batch.events.extend(enumerate(valid, start=len(batch.events)))
    return OtlpBatch(batch=batch, span_count=len(mapped), rejections=rejections)


def _label(span: Span) -> str:
    span_id = span.span_id.hex() or "(no span id)"
    name = cut(span.name, 60)
    return f"span {span_id} {name!r}" if name else f"span {span_id}"


def span_items(
    span: Span,
    resource: Resource,
    scope: dict[str, str],
    job_ids: dict[bytes, str] | None = None,
) -> tuple[list[dict[str, Any]], list[tuple[str, ...]]]:
    """The event dicts of one span: its ``span`` event, and a planner event for each span event
    named like one (the planner contract); and for each, the paths redaction masked in its payload.
    Every text is redacted before it is bounded, so a secret straddling a cut is masked whole.
    Raises ``Unreadable``."""
    trace_id = required_id(span.trace_id, 16, "trace_id")
    span_id = required_id(span.span_id, 8, "span_id")
    if not span.start_time_unix_nano:
        raise Unreadable("start_time_unix_nano is required")
    started = nanos_timestamp(span.start_time_unix_nano, "start_time_unix_nano")
    # A span that claims to end before it starts ended, as far as anyone can tell, at once.
    ended = nanos_timestamp(
        max(span.end_time_unix_nano, span.start_time_unix_nano), "end_time_unix_nano"
    )
    dropped: dict[str, Any] = {}
    attrs = attributes(span.attributes)
    masked: list[str] = []
    clean_attrs = redact_into(attrs, "attributes", masked)
    # Stored as sent, but for what holds nothing: a flag that is false, an unspecified kind, an
    # unset status with no message, no attributes, no span events, no links, an empty resource
    # or scope are left out (replay reads them so), which a span event row is the smaller by.
    payload: dict[str, Any] = {"trace_id": trace_id, "span_id": span_id}
    if span.parent_span_id:
        payload["parent_span_id"] = required_id(span.parent_span_id, 8, "parent_span_id")
        if span.flags & REMOTE_PARENT == REMOTE_PARENT:
            payload["remote_parent"] = True
        elif span.flags & REMOTE_PARENT == KNOWN_PARENT:
            payload["local_parent"] = True
    payload["name"] = cut(redact_into(span.name, "name", masked), events.MAX_ID_CHARS)
    if span.kind in KIND_NAMES:
        payload["kind"] = KIND_NAMES[span.kind]
    payload["end"] = ended
    status: dict[str, str] = {"code": STATUS_NAMES.get(span.status.code, "unset")}
    if span.status.message:
        status["message"] = cut_bytes(
            redact_into(span.status.message, "status.message", masked), MAX_VALUE_BYTES
        )
    if status != {"code": "unset"}:
        payload["status"] = status
    if clean_attrs:
        payload["attributes"] = bounded_attributes(clean_attrs, dropped)
    span_events = [
        _span_event(event, f"events[{index}]", dropped, masked)
        for index, event in enumerate(span.events[-MAX_SPAN_EVENTS:])
    ]
    if span_events:
        payload["events"] = span_events
    if links := [
        _link(link, f"links[{index}]", dropped, masked)
        for index, link in enumerate(span.links[:MAX_LINKS])
    ]:
        payload["links"] = links
    if resource.stored:
        payload["resource"] = resource.stored
    if named_scope := {
        name: cut(redact_into(value, f"scope.{name}", masked), events.MAX_ID_CHARS)
        for name, value in scope.items()
        if value
    }:
        payload["scope"] = named_scope
    masked.extend(resource.masked)
    counts = {
        "attributes": span.dropped_attributes_count,
        "events": span.dropped_events_count + max(len(span.events) - MAX_SPAN_EVENTS, 0),
        "links": span.dropped_links_count + max(len(span.links) - MAX_LINKS, 0),
    }
    dropped |= {name: count for name, count in counts.items() if count}
    if dropped:
        payload["dropped"] = dropped
    job = job_id(trace_id, attrs, resource.attributes, found=(job_ids or {}).get(span.trace_id))
    prefix = f"{EVENT_ID_PREFIX}:{trace_id}:{span_id}"
    items = [item("span", job, prefix, started, payload)]
    item_masks = [bounded_paths(masked)]
    for index, event in enumerate(span_events):
        if event["name"] in events.PLANNER_TYPES:
            planner = _planner_payload(event["attributes"])
            items.append(item(event["name"], job, f"{prefix}:{index}", event["ts"], planner))
            item_masks.append(_fields_masked(planner, f"events[{index}].attributes.", masked))
    return items, item_masks


def _fields_masked(payload: dict[str, Any], prefix: str, masked: list[str]) -> tuple[str, ...]:
    """The fields of ``payload`` (a planner event's, from its span event's attributes) whose
    attribute under ``prefix`` was masked."""
    return tuple(
        name
        for name in payload
        if any(path == prefix + name or path.startswith(f"{prefix}{name}.") for path in masked)
    )


def trace_of(event: events.Event) -> str | None:
    """The trace an event this mapping made belongs to: a ``span`` or ``log`` event's trace id,
    and for a planner event made of a span's event its span's (its id is the span's event id and
    the span event's index); None for any other event. Ingest keeps a trace's events in one job
    whatever job id each request gave them (``jobs.ingest.aliases``)."""
    if event.type in ("span", "log"):
        trace_id = event.payload.get("trace_id")
        return trace_id if isinstance(trace_id, str) and trace_id else None
    if event.type in events.PLANNER_TYPES:
        parts = event.event_id.split(":")
        if len(parts) == 4 and parts[0] == EVENT_ID_PREFIX and TRACE_ID(parts[1]) is None:
            return parts[1]
    return None


def item(event_type: str, job: str, event_id: str, ts: str | None, payload: dict) -> dict[str, Any]:
    """An event dict of the contract (``ts`` None: the time it is received)."""
    event = {"type": event_type, "job_id": job, "event_id": event_id, "payload": payload}
    return event if ts is None else {**event, "ts": ts}


def job_id(trace_id: str, *attribute_sets: dict[str, Any], found: str | None = None) -> str:
    """The job an OpenTelemetry item (a span, a log record) of trace ``trace_id`` belongs to:
    ``traceviz.job_id`` in the first of ``attribute_sets`` that has one (the item's own
    attributes, then its resource's), else ``found`` (another item of the trace in the same
    request named it), else the trace id ("" when the item has none); cut with a marker when
    too long. Spans and log records share it, so a trace's records follow its spans."""
    candidates = [attrs.get(JOB_ID_KEY) for attrs in attribute_sets]
    for candidate in (*candidates, found):
        if isinstance(candidate, str) and candidate:
            return cut(candidate, events.MAX_ID_CHARS)
    return trace_id


def _planner_payload(attrs: dict[str, Any]) -> dict[str, Any]:
    """The planner event's payload from its span event's attributes: the fields the planner contract
    names, in the types the contract wants (anything else is dropped; the span keeps it)."""
    payload: dict[str, Any] = {}
    for name, check in events.PLANNER_FIELDS.items():
        value = attrs.get(name)
        if isinstance(value, str) and check.json_schema.get("type") == "integer":
            value = events.attribute_int(value)
        if isinstance(value, str) and check.json_schema.get("type") == "array":
            value = _json_list(value)
        if isinstance(value, str) and "maxLength" in check.json_schema:
            value = cut(value, check.json_schema["maxLength"])
        if value is not None and check(value) is None:
            payload[name] = value
    return payload


def _json_list(value: str) -> list | None:
    try:
        loaded = json.loads(value)
    except ValueError:
        return None
    return loaded if isinstance(loaded, list) else None


def _span_event(
    event: Span.Event, path: str, dropped: dict[str, Any], masked: list[str]
) -> dict[str, Any]:
    clean = redact_into(attributes(event.attributes), f"{path}.attributes", masked)
    return {
        "name": cut(redact_into(event.name, f"{path}.name", masked), events.MAX_ID_CHARS),
        "ts": nanos_timestamp(event.time_unix_nano, "events.time_unix_nano"),
        "attributes": bounded_attributes(clean, dropped),
    }


def _link(link: Span.Link, path: str, dropped: dict[str, Any], masked: list[str]) -> dict[str, Any]:
    clean = redact_into(attributes(link.attributes), f"{path}.attributes", masked)
    return {
        "trace_id": link.trace_id.hex(),
        "span_id": link.span_id.hex(),
        "attributes": bounded_attributes(clean, dropped),
    }


def required_id(raw: bytes, size: int, name: str) -> str:
    if len(raw) != size or not any(raw):
        raise Unreadable(f"{name} must be {size} bytes, not all zero")
    return raw.hex()


def nanos_timestamp(nanos: int, name: str) -> str:
    try:
        moment = EPOCH + timedelta(microseconds=nanos // 1000)
    except OverflowError:
        raise Unreadable(f"{name} is out of range") from None
    if moment.year > 9999 or not nanos:
        raise Unreadable(f"{name} is out of range")
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


# --- bounds -------------------------------------------------------------------------------


# Names and ids are cut with the contract's marker, which counts in their length.
cut = events.cut


def cut_bytes(value: str, max_bytes: int) -> str:
    return events.truncate_text(value, max_bytes)


def is_value_key(key: str) -> bool:
    return key.startswith(VALUE_KEY_PREFIXES)


def bounded_attributes(attrs: dict[str, Any], dropped: dict[str, Any]) -> dict[str, Any]:
    """Attributes within DESIGN section 3b's bounds: each input/output value at most 64 KiB,
    the others together at most 16 KiB (what does not fit is cut or left out, and its key is
    listed in ``dropped["cut"]``). Attributes that fit whole are kept as sent, in their order."""
    if _fit_whole(attrs):
        return attrs
    kept: dict[str, Any] = {}
    budget = MAX_ATTRIBUTES_BYTES
    sized = []
    for key, raw in attrs.items():
        value = json_safe(raw)
        name = cut(key, events.MAX_ID_CHARS)
        if is_value_key(key):
            kept[name] = bounded_value(value, MAX_VALUE_BYTES, dropped, key)
        else:
            size = _json_size(value) + len(name)
            sized.append((size, name, value))
    # The smallest first: the budget keeps as many attributes as it can whole.
    for size, name, value in sorted(sized, key=lambda item: (item[0], item[1])):
        if size <= budget:
            kept[name] = value
            budget -= size
        elif isinstance(value, str) and budget > 200:
            kept[name] = events.truncate_text(value, budget - len(name) - 100)
            budget = 0
            dropped.setdefault("cut", []).append(name)
        else:
            dropped.setdefault("cut", []).append(name)
    return kept


def _fit_whole(attrs: dict[str, Any]) -> bool:
    """Whether ``bounded_attributes`` keeps every attribute as it is: all of them together fit
    the shared budget as JSON (so each fits its own bound), no key is too long, and no value
    holds what ``json_safe`` changes (a non-finite float; nested values are left to the
    attribute-by-attribute way)."""
    for key, value in attrs.items():
        kind = type(value)
        if len(key) > events.MAX_ID_CHARS or not (
            kind is str
            or kind is int
            or kind is bool
            or value is None
            or (kind is float and math.isfinite(value))
        ):
            return False
    return _json_size(attrs) <= MAX_ATTRIBUTES_BYTES


def _json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (as it is stored)."""
    try:
        return len(orjson.dumps(value))
    except orjson.JSONEncodeError:  # an integer past 64 bits
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def bounded_value(value: Any, limit: int, dropped: dict[str, Any], key: str) -> Any:
    if isinstance(value, str):
        cut_value = events.truncate_text(value, limit)
        if cut_value != value:
            dropped.setdefault("cut", []).append(key)
        return cut_value
    text = json.dumps(value, ensure_ascii=False)
    if len(text.encode("utf-8")) <= limit:
        return value
    dropped.setdefault("cut", []).append(key)
    return events.truncate_text(text, limit)


def json_safe(value: Any) -> Any:
    """An attribute value JSON can store: non-finite floats become text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [json_safe(item) for item in value]
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    return value


# --- attributes ---------------------------------------------------------------------------


def attributes(key_values: list[KeyValue]) -> dict[str, Any]:
    """Attributes as plain values (a later duplicate key wins, as in the OTel SDK)."""
    return {kv.key: any_value(kv.value) for kv in key_values}


def any_value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [any_value(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")  # as OTLP/JSON writes bytes
    if kind is None:
        return None
    return getattr(value, kind)
