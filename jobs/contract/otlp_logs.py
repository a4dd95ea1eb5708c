"""OpenTelemetry log records as traceviz events (OTLP/HTTP ``POST /v1/logs``; docs/otlp.md).

Pure: bytes and decoded ``ExportLogsServiceRequest`` messages in, event dicts, a ``ParsedBatch``
and per-record errors out. Each log record becomes one ``log`` event of the job its trace
belongs to, decided by ``otlp.job_id`` as for spans (``traceviz.job_id`` on the record, its
resource or another record of the trace in the request, else the trace id), so a trace's records
and spans always land in one job. The event keeps the record, bounded like a span: its time,
severity, body, attributes, event name, trace and span ids, resource and scope, redacted before
it is bounded (the paths masked are recorded, as a span's are). What a record
means (a message of its span's LLM call, a timed entry of its step) depends on a span that may
arrive before or after it, so replay decides (``jobs.replay.content``).

A record has no id of its own: its event id is a hash of the record with its resource and
scope, so a resent export stores nothing twice. A record that cannot be read at all (a trace
or span id of the wrong size, a time out of range) is rejected and counted in the response's
``partial_success``, and so is one with neither a trace id nor ``traceviz.job_id``: no job could
show it. The other records of the request are stored.
"""

import hashlib
from dataclasses import dataclass, replace
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from jobs.contract import events, otlp
from jobs.contract.bodies import BodyError, ParsedBatch
from jobs.contract.otlp import Unreadable
from jobs.contract.redaction import bounded_paths, redact_into

LOG = "log"
NO_JOB = (
    "has no trace id and no traceviz.job_id: no job to show it on (log inside a span, or set "
    "traceviz.job_id on the record or its resource)"
)


@dataclass(slots=True)
class LogsBatch:
    """Valid events of the accepted records, and one message per rejected record."""

    batch: ParsedBatch
    record_count: int
    rejections: list[str]

    @property
    def rejected_records(self) -> int:
        return len(self.rejections)

    @property
    def error_message(self) -> str:
        return otlp.rejections_message(self.rejections)


def decode_request(body: bytes, content_type: str) -> ExportLogsServiceRequest:
    """An export request from an OTLP/HTTP body (binary protobuf or OTLP/JSON).

    Raises ``BodyError``: 415 for another content type, 400 for a body that does not decode.
    """
    return otlp.decode_message(body, content_type, ExportLogsServiceRequest(), hex_ids_as_base64)


def hex_ids_as_base64(document: dict[str, Any]) -> dict[str, Any]:
    """``otlp.hex_ids_as_base64`` for logs: the trace and span ids of each record, as hex in
    OTLP/JSON, rewritten as the base64 protobuf's JSON mapping reads. Raises ``BodyError``
    (400) for an id that is not hex and for a resource, scope or record that is not an object."""
    resource_logs = []
    for r_index, resource in enumerate(otlp.list_of(document, "resourceLogs", "resource_logs")):
        otlp.require_object(resource, f"resourceLogs[{r_index}]")
        scope_logs = []
        for s_index, scope in enumerate(otlp.list_of(resource, "scopeLogs", "scope_logs")):
            path = f"resourceLogs[{r_index}].scopeLogs[{s_index}]"
            otlp.require_object(scope, path)
            records = []
            for index, record in enumerate(otlp.list_of(scope, "logRecords", "log_records")):
                otlp.require_object(record, f"{path}.logRecords[{index}]")
                records.append(otlp.ids_rewritten(record, f"{path}.logRecords[{index}]"))
            scope_logs.append(otlp.with_list(scope, ("logRecords", "log_records"), records))
        resource_logs.append(otlp.with_list(resource, ("scopeLogs", "scope_logs"), scope_logs))
    return otlp.with_list(document, ("resourceLogs", "resource_logs"), resource_logs)


@dataclass(slots=True)
class MappedRecord:
    label: str
    item: dict[str, Any] | None = None
    error: str = ""
    # The paths redaction masked in the item's payload.
    masked: tuple[str, ...] = ()


def map_request(request: ExportLogsServiceRequest) -> list[MappedRecord]:
    """Every record of the request, in order, with its event dict or why it is unreadable."""
    job_ids = _job_ids_by_trace(request)
    mapped = []
    for resource_logs in request.resource_logs:
        resource = otlp.Resource.of(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            scope = {"name": scope_logs.scope.name, "version": scope_logs.scope.version}
            for index, record in enumerate(scope_logs.log_records):
                label = _label(record, index)
                try:
                    item, masked = record_item(
                        record, resource_logs, scope_logs, (resource, scope), job_ids
                    )
                except Unreadable as error:
                    mapped.append(MappedRecord(label, error=str(error)))
                else:
                    mapped.append(MappedRecord(label, item=item, masked=masked))
    return mapped


def _job_ids_by_trace(request: ExportLogsServiceRequest) -> dict[bytes, str]:
    """traceviz.job_id by trace, from any record of the trace in this request (the record's
    attribute first, then its resource's), as spans do."""
    found: dict[bytes, str] = {}
    for resource_logs in request.resource_logs:
        resource_job = otlp.string_value(resource_logs.resource.attributes, otlp.JOB_ID_KEY)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                job = otlp.string_value(record.attributes, otlp.JOB_ID_KEY) or resource_job
                if job and record.trace_id:
                    found.setdefault(record.trace_id, job)
    return found


def _label(record: LogRecord, index: int) -> str:
    name = otlp.cut(record.event_name, 60)
    where = f"span {record.span_id.hex()}" if record.span_id else f"#{index}"
    return f"log record {where} {name!r}" if name else f"log record {where}"


def record_item(
    record: LogRecord,
    resource_logs: ResourceLogs,
    scope_logs: ScopeLogs,
    context: tuple[otlp.Resource, dict[str, str]],
    job_ids: dict[bytes, str] | None = None,
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The event dict of one log record, and the paths redaction masked in its payload (every
    text is redacted before it is bounded, as a span's). ``context``: its resource and its
    scope. Raises ``Unreadable``."""
    resource, scope = context
    payload: dict[str, Any] = {}
    trace_id = otlp.required_id(record.trace_id, 16, "trace_id") if record.trace_id else ""
    if trace_id:
        payload["trace_id"] = trace_id
    if record.span_id:
        payload["span_id"] = otlp.required_id(record.span_id, 8, "span_id")
    nanos = record.time_unix_nano or record.observed_time_unix_nano
    ts = otlp.nanos_timestamp(nanos, "time_unix_nano") if nanos else None
    if nanos:
        payload["time_unix_nano"] = nanos
    dropped: dict[str, Any] = {}
    attrs = otlp.attributes(record.attributes)
    masked: list[str] = []
    clean_attrs = redact_into(attrs, "attributes", masked)
    if record.severity_text:
        payload["severity_text"] = otlp.cut(record.severity_text, events.MAX_ID_CHARS)
    if 0 < record.severity_number <= 24:
        payload["severity_number"] = record.severity_number
    if record.event_name:
        payload["event_name"] = otlp.cut(record.event_name, events.MAX_ID_CHARS)
    if record.HasField("body"):
        body = redact_into(otlp.json_safe(otlp.any_value(record.body)), "body", masked)
        payload["body"] = otlp.bounded_value(body, otlp.MAX_VALUE_BYTES, dropped, "body")
    payload |= {
        "attributes": otlp.bounded_attributes(clean_attrs, dropped),
        "resource": resource.stored,
        "scope": {k: otlp.cut(v, events.MAX_ID_CHARS) for k, v in scope.items() if v},
    }
    if record.dropped_attributes_count:
        dropped["attributes"] = record.dropped_attributes_count
    if dropped:
        payload["dropped"] = dropped
    found = (job_ids or {}).get(record.trace_id)
    job = otlp.job_id(trace_id, attrs, resource.attributes, found=found)
    if not job:
        raise Unreadable(NO_JOB)
    digest = hashlib.sha256()
    for part in (resource_logs.resource, scope_logs.scope, record):
        digest.update(part.SerializeToString(deterministic=True))
    event_id = f"otlp-log:{trace_id or 'no-trace'}:{digest.hexdigest()[:32]}"
    item = otlp.item(LOG, job, event_id, ts, payload)
    return item, bounded_paths([*masked, *resource.masked])


def to_batch(request: ExportLogsServiceRequest, max_events: int) -> LogsBatch:
    """Map and validate a request; a record whose event does not validate is rejected.

    Raises ``BodyError`` (413) when the request has more than ``max_events`` records.
    """
    mapped = map_request(request)
    if len(mapped) > max_events:
        raise BodyError(
            413, f"request has {len(mapped)} log records; the limit is {max_events} per request"
        )
    batch = ParsedBatch(redacted=True)
    rejections = []
    for record in mapped:
        error = record.error
        if record.item is not None:
            event, errors = events.validate(record.item)
            if event is not None:
                batch.events.append((len(batch.events), replace(event, masked=record.masked)))
                continue
            error = "; ".join(dict.fromkeys(f"{e.field}: {e.message}" for e in errors))
        rejections.append(f"{record.label}: {error}")
    return LogsBatch(batch=batch, record_count=len(mapped), rejections=rejections)
