"""OpenTelemetry traces as traceviz events (OTLP/HTTP ``POST /v1/traces``, issue 6).

Pure: bytes and decoded ``ExportTraceServiceRequest`` messages in, event dicts, a
``ParsedBatch`` and per-span errors out; no models, no HTTP. Every span becomes ordinary
events (a ``node_started`` at its start, a ``node_finished`` at its end, and a ``job_started``
where it carries job attributes), validated by ``events.validate`` like any producer's events,
so the ingest path, replay, escalations and pages need nothing OTLP-specific.

Event ids are derived from the trace and span ids, so a resent export request stores nothing
twice. A span that cannot be mapped (wrong attribute types, bad ids or times, a field the event
contract refuses) is rejected whole: none of its events are stored, and it is counted in the
response's ``partial_success``.
"""

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

from jobs.contract import bodies, events
from jobs.contract.bodies import BodyError, ParsedBatch

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
CONTENT_TYPES = (PROTOBUF, JSON)
PREFIX = "traceviz."
MAX_ERRORS_IN_MESSAGE = 10
NANOS_PER_MS = 1_000_000
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Span.flags bits 8 and 9: the parent's is_remote is known, and true (a service's entry span).
REMOTE_PARENT = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | (
    SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
)
# The OTel SDK's default service.name when the producer set none: not a workflow name.
UNKNOWN_SERVICE = "unknown_service"

# Where each job_started field comes from, first present attribute wins (span over resource).
JOB_SOURCES: dict[str, tuple[str, ...]] = {
    "name": ("traceviz.job_name",),
    "workflow": ("traceviz.workflow", "service.name"),
    "correlation_id": ("traceviz.correlation_id",),
    "session_id": ("traceviz.session_id", "session.id"),
    "provider": ("traceviz.provider", "gen_ai.provider.name", "gen_ai.system"),
    "model": ("traceviz.model", "gen_ai.response.model", "gen_ai.request.model"),
    "plan_hash": ("traceviz.plan_hash",),
    "retry_of": ("traceviz.retry_of",),
}
# Job fields a span other than the job's entry span may set: the others describe the whole
# run, and a child span's plan_hash is its own (a mismatch is a boundary violation).
CHILD_JOB_FIELDS = ("provider", "model")

# node_finished fields read from ``traceviz.<field>`` attributes, by the attribute type they need.
# (result_type, reason, node_id and attempt have fallbacks of their own, read separately.)
STRING_FIELDS = ("failure_code", "error_type", "tool", "source", "plan_hash", "state")
INT_FIELDS = ("step_index", "epoch", "step_epoch")
BOOL_FIELDS = ("continue_on_error",)
JSON_OBJECT_FIELDS = ("payload_results", "context")


class Unmappable(Exception):
    """A span that cannot become events; the message says which attribute or field."""


@dataclass(slots=True)
class SpanEvents:
    """The events one span maps to, or why it cannot be mapped (``errors`` non-empty)."""

    label: str
    items: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


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
        if not self.rejections:
            return ""
        shown = self.rejections[:MAX_ERRORS_IN_MESSAGE]
        more = len(self.rejections) - len(shown)
        return "; ".join(shown) + (f"; and {more} more" if more else "")


# --- decoding -----------------------------------------------------------------------------


def decode_request(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """An export request from an OTLP/HTTP body (binary protobuf or OTLP/JSON).

    Raises ``BodyError``: 415 for another content type, 400 for a body that does not decode.
    """
    request = ExportTraceServiceRequest()
    if content_type == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, RecursionError):
            raise BodyError(400, "body is not a protobuf ExportTraceServiceRequest") from None
        return request
    if content_type == JSON:
        try:
            document = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as error:
            raise BodyError(400, f"body is not JSON: {error}") from None
        if not isinstance(document, dict):
            raise BodyError(400, "body must be a JSON ExportTraceServiceRequest object")
        if bodies.RISKY_ESCAPE.search(body) and _has_lone_surrogate(document):
            # protobuf's parser fails on these with a SystemError, not a ParseError.
            raise BodyError(400, "body is not valid Unicode text: it holds a lone surrogate")
        try:
            json_format.ParseDict(hex_ids_as_base64(document), request, ignore_unknown_fields=True)
        except (json_format.ParseError, RecursionError) as error:
            message = f"body is not an OTLP/JSON ExportTraceServiceRequest: {error}"
            raise BodyError(400, message) from None
        return request
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
    for r_index, resource in enumerate(_list(document, "resourceSpans", "resource_spans")):
        _require_object(resource, f"resourceSpans[{r_index}]")
        scope_spans = []
        for s_index, scope in enumerate(_list(resource, "scopeSpans", "scope_spans")):
            _require_object(scope, f"resourceSpans[{r_index}].scopeSpans[{s_index}]")
            spans = []
            for index, span in enumerate(_list(scope, "spans")):
                path = f"resourceSpans[{r_index}].scopeSpans[{s_index}].spans[{index}]"
                _require_object(span, path)
                span = _ids_rewritten(span, path)
                if links := _list(span, "links"):
                    span["links"] = [
                        _ids_rewritten(link, f"{path}.links[{i}]")
                        if isinstance(link, dict)
                        else link
                        for i, link in enumerate(links)
                    ]
                spans.append(span)
            scope_spans.append(_with(scope, ("spans",), spans))
        resource_spans.append(_with(resource, ("scopeSpans", "scope_spans"), scope_spans))
    return _with(document, ("resourceSpans", "resource_spans"), resource_spans)


def _require_object(item: Any, path: str) -> None:
    if not isinstance(item, dict):
        raise BodyError(400, f"{path} must be an object")


def _list(container: Any, *names: str) -> list[Any]:
    for name in names:
        value = container.get(name) if isinstance(container, dict) else None
        if isinstance(value, list):
            return value
    return []


def _with(container: Any, names: tuple[str, ...], value: list[Any]) -> Any:
    """``container`` with its list under the first of ``names`` present replaced by ``value``."""
    if not isinstance(container, dict):
        return container
    for name in names:
        if isinstance(container.get(name), list):
            return {**container, name: value}
    return container


def _ids_rewritten(item: dict[str, Any], path: str) -> dict[str, Any]:
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


def map_request(request: ExportTraceServiceRequest) -> list[SpanEvents]:
    """Every span of the request, in order, with its event dicts or its errors."""
    mapped = []
    for resource_spans in request.resource_spans:
        resource_attrs = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                label = _label(span)
                try:
                    items = span_events(span, resource_attrs)
                except Unmappable as error:
                    mapped.append(SpanEvents(label, errors=[str(error)]))
                else:
                    mapped.append(SpanEvents(label, items=items))
    return mapped


def to_batch(request: ExportTraceServiceRequest, max_events: int) -> OtlpBatch:
    """Map and validate a request. A span whose events do not all validate is rejected whole.

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
    batch = ParsedBatch()
    rejections = []
    for span in mapped:
        valid = []
        for item in span.items:
            event, problems = events.validate(item)
            if event is None:
                # The span's events share most fields: say each problem once.
                span.errors.extend(
                    message
                    for message in (f"{e.field}: {e.message}" for e in problems)
                    if message not in span.errors
                )
            else:
                valid.append(event)
        if span.errors:
            rejections.append(f"{span.label}: " + "; ".join(span.errors))
            continue
        batch.events.extend(enumerate(valid, start=len(batch.events)))
    return OtlpBatch(batch=batch, span_count=len(mapped), rejections=rejections)


def _label(span: Span) -> str:
    span_id = span.span_id.hex() or "(no span id)"
    return f"span {span_id} {span.name!r}" if span.name else f"span {span_id}"


def span_events(span: Span, resource_attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """The event dicts of one span (not yet validated); raises ``Unmappable``."""
    trace_id = _span_id(span.trace_id, 16, "trace_id")
    span_id = _span_id(span.span_id, 8, "span_id")
    parent_span_id = span.parent_span_id.hex()
    if parent_span_id and len(span.parent_span_id) != 8:
        raise Unmappable("parent_span_id must be 8 bytes")
    own_attrs = attributes(span.attributes)
    attrs = {**resource_attrs, **own_attrs}
    if not span.start_time_unix_nano:
        raise Unmappable("start_time_unix_nano is required")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise Unmappable("end_time_unix_nano is before start_time_unix_nano")
    started_at = _timestamp(span.start_time_unix_nano, "start_time_unix_nano")
    finished_at = _timestamp(span.end_time_unix_nano, "end_time_unix_nano")

    job_id = _string(attrs, "traceviz.job_id") or trace_id
    node_id = _string(attrs, "traceviz.node_id") or span.name
    attempt = _int(attrs, "traceviz.attempt")
    ids = {"trace_span_id": span_id, "trace_id": trace_id}
    if parent_span_id:
        ids["parent_span_id"] = parent_span_id
    node = {"node_id": node_id, "attempt": 1 if attempt is None else attempt, **ids}

    finished = {**node, "result_type": _result_type(span, attrs)}
    reason = _string(attrs, "traceviz.reason") or span.status.message or _exception_reason(span)
    if reason:
        finished["reason"] = reason
    finished["duration_ms"] = (span.end_time_unix_nano - span.start_time_unix_nano) / NANOS_PER_MS
    for name in STRING_FIELDS:
        _put(finished, name, _string(attrs, PREFIX + name))
    for name in INT_FIELDS:
        _put(finished, name, _int(attrs, PREFIX + name))
    for name in BOOL_FIELDS:
        _put(finished, name, _bool(attrs, PREFIX + name))
    for name in JSON_OBJECT_FIELDS:
        _put(finished, name, _json_object(attrs, PREFIX + name))
    job = _job_fields(span, resource_attrs, own_attrs, entry=_is_entry(span))
    for name in CHILD_JOB_FIELDS:
        _put(finished, name, job.get(name))

    prefix = f"otlp:{trace_id}:{span_id}"
    items = []
    if job:
        items.append(_event("job_started", job_id, f"{prefix}:job_started", started_at, job))
    items.append(_event("node_started", job_id, f"{prefix}:started", started_at, node))
    items.append(_event("node_finished", job_id, f"{prefix}:finished", finished_at, finished))
    return items


def _event(event_type: str, job_id: str, event_id: str, ts: str, payload: dict) -> dict[str, Any]:
    return {
        "type": event_type,
        "job_id": job_id,
        "event_id": event_id,
        "ts": ts,
        "payload": payload,
    }


def _put(payload: dict[str, Any], name: str, value: Any) -> None:
    if value is not None and value != "":
        payload[name] = value


def _is_entry(span: Span) -> bool:
    """A root span, or the first span of this service under a remote parent."""
    return not span.parent_span_id or span.flags & REMOTE_PARENT == REMOTE_PARENT


def _job_fields(
    span: Span, resource_attrs: dict[str, Any], own_attrs: dict[str, Any], *, entry: bool
) -> dict[str, str]:
    """The job_started payload this span carries: empty when it has nothing to say.

    An entry span (root, or under a remote parent) describes the whole job, with resource
    attributes and its name as the job name; another span only the provider/model it set.
    """
    if entry:
        attrs = {**resource_attrs, **own_attrs}
        names = tuple(JOB_SOURCES)
    else:
        attrs = own_attrs
        names = CHILD_JOB_FIELDS
    job = {}
    for name in names:
        for key in JOB_SOURCES[name]:
            value = _string(attrs, key)
            if value and not (key == "service.name" and value.startswith(UNKNOWN_SERVICE)):
                job[name] = value
                break
    if entry and "name" not in job and span.name:
        job["name"] = span.name
    return job


def _result_type(span: Span, attrs: dict[str, Any]) -> str:
    explicit = _string(attrs, "traceviz.result_type")
    if explicit:
        return explicit
    if span.status.code == Status.StatusCode.STATUS_CODE_ERROR:
        return "permanent_failure"
    return "success"


def _exception_reason(span: Span) -> str:
    """``type: message`` of the span's last ``exception`` event (OTel semantic conventions)."""
    for span_event in reversed(span.events):
        if span_event.name != "exception":
            continue
        event_attrs = attributes(span_event.attributes)
        parts = [
            value
            for value in (event_attrs.get("exception.type"), event_attrs.get("exception.message"))
            if isinstance(value, str) and value
        ]
        return ": ".join(parts)
    return ""


def _span_id(raw: bytes, size: int, name: str) -> str:
    if len(raw) != size or not any(raw):
        raise Unmappable(f"{name} must be {size} bytes, not all zero")
    return raw.hex()


def _timestamp(nanos: int, name: str) -> str:
    try:
        moment = EPOCH + timedelta(microseconds=nanos // 1000)
    except OverflowError:
        raise Unmappable(f"{name} is out of range") from None
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


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


def _string(attrs: dict[str, Any], key: str) -> str | None:
    value = attrs.get(key)
    if value is not None and not isinstance(value, str):
        raise Unmappable(f"attribute {key} must be a string")
    return value


def _int(attrs: dict[str, Any], key: str) -> int | None:
    value = attrs.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise Unmappable(f"attribute {key} must be an integer")
    return value


def _bool(attrs: dict[str, Any], key: str) -> bool | None:
    value = attrs.get(key)
    if value is not None and not isinstance(value, bool):
        raise Unmappable(f"attribute {key} must be a boolean")
    return value


def _json_object(attrs: dict[str, Any], key: str) -> dict[str, Any] | None:
    """An object from a key-value list attribute, or from a string holding a JSON object (the
    OTel SDKs only set primitive attributes)."""
    value = attrs.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value, parse_constant=_not_json)
        except (ValueError, RecursionError):
            value = None
    try:
        # Payloads are stored as JSON: NaN and infinities from double attributes are refused.
        json.dumps(value, allow_nan=False)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    raise Unmappable(f"attribute {key} must be a JSON object (as a string or a key-value list)")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
