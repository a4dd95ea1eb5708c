"""OTLP spans built with the protobuf classes, as an instrumented producer exports them: the
mapping's unit tests, the dashboard's and the browser's share them."""

import json

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

TRACE_ID = bytes.fromhex("5b8efff798038103d269b633813fc60c")
ROOT_ID = bytes.fromhex("eee19b7ec3c1b174")
CHILD_ID = bytes.fromhex("eee19b7ec3c1b173")
START = 1_772_442_000_000_000_000  # 2026-03-02T09:00:00Z in nanoseconds


def value(python_value) -> AnyValue:
    if isinstance(python_value, bool):
        return AnyValue(bool_value=python_value)
    if isinstance(python_value, int):
        return AnyValue(int_value=python_value)
    if isinstance(python_value, float):
        return AnyValue(double_value=python_value)
    if isinstance(python_value, dict):
        return AnyValue(
            kvlist_value=KeyValueList(
                values=[KeyValue(key=k, value=value(v)) for k, v in python_value.items()]
            )
        )
    if isinstance(python_value, list):
        return AnyValue(array_value=ArrayValue(values=[value(item) for item in python_value]))
    return AnyValue(string_value=python_value)


def attrs(**pairs) -> list[KeyValue]:
    return [KeyValue(key=key.replace("__", "."), value=value(v)) for key, v in pairs.items()]


def span(
    name="fetch",
    span_id=CHILD_ID,
    parent=ROOT_ID,
    start_ms=0,
    end_ms=1500,
    status=None,
    attributes=None,
    span_events=(),
    **fields,
) -> Span:
    built = Span(
        trace_id=TRACE_ID,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=START + start_ms * 1_000_000,
        end_time_unix_nano=START + end_ms * 1_000_000,
        attributes=attributes or [],
        events=list(span_events),
        **fields,
    )
    if status is not None:
        built.status.CopyFrom(status)
    return built


def request(*spans: Span, resource=None) -> ExportTraceServiceRequest:
    message = ExportTraceServiceRequest()
    resource_spans = message.resource_spans.add()
    resource_spans.resource.attributes.extend(resource or [])
    resource_spans.scope_spans.add().spans.extend(spans)
    return message


def exception_event(exc_type: str, message: str, stack: str = "") -> Span.Event:
    pairs = {"exception__type": exc_type, "exception__message": message}
    if stack:
        pairs["exception__stacktrace"] = stack
    return Span.Event(name="exception", time_unix_nano=START, attributes=attrs(**pairs))


ERROR = Status(code=Status.StatusCode.STATUS_CODE_ERROR, message="boom")
OK = Status(code=Status.StatusCode.STATUS_CODE_OK)


def sid(n: int) -> bytes:
    return n.to_bytes(8, "big")


def root(**fields) -> Span:
    return span(name=fields.pop("name", "run"), span_id=ROOT_ID, parent=b"", **fields)


def llm_span(span_id, parent, model, start_ms, **extra) -> Span:
    return span(
        name="ChatOpenAI",
        span_id=span_id,
        parent=parent,
        start_ms=start_ms,
        end_ms=start_ms + 5,
        attributes=attrs(
            openinference__span__kind="LLM",
            llm__provider="openai",
            llm__model_name=model,
            llm__token_count__prompt=1000,
            llm__token_count__completion=500,
            llm__input_messages__0__message__role="user",
            llm__input_messages__0__message__content="plan the release",
            llm__output_messages__0__message__role="assistant",
            llm__output_messages__0__message__content="1. build 2. upload",
            **extra,
        ),
    )


def gen_ai_chat_span(span_id, parent, start_ms, asked: list, answered: list | None = None) -> Span:
    """A chat completion as OpenTelemetry's OpenAI instrumentation writes it with its content
    on the span: the GenAI conventions' messages (``{role, parts}``) as JSON text."""
    pairs = {"gen_ai__operation__name": "chat", "gen_ai__input__messages": json.dumps(asked)}
    if answered is not None:
        pairs["gen_ai__output__messages"] = json.dumps(answered)
    return span(
        name="chat gpt-4o-mini",
        span_id=span_id,
        parent=parent,
        start_ms=start_ms,
        end_ms=start_ms + 10,
        attributes=attrs(**pairs),
    )


def store_spans(*spans: Span, resource=None):
    """Store spans as POST /v1/traces does (mapping, then the ingest path); returns the result."""
    from jobs.contract import otlp
    from jobs.ingest.store import store_batch

    traces = otlp.to_batch(request(*spans, resource=resource), max_events=10_000)
    assert traces.rejections == [], traces.rejections
    return store_batch(traces.batch)


# --- log records (POST /v1/logs) --------------------------------------------------------------


def log_record(
    event_name="",
    body=None,
    span_id=CHILD_ID,
    trace_id=TRACE_ID,
    at_ms=1,
    severity=9,
    attributes=None,
):
    """A log record as an OpenTelemetry SDK exports it, logged inside span ``span_id``."""
    from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

    record = LogRecord(
        time_unix_nano=START + at_ms * 1_000_000,
        observed_time_unix_nano=START + at_ms * 1_000_000,
        severity_number=severity,
        event_name=event_name,
        trace_id=trace_id,
        span_id=span_id,
        attributes=attributes or [],
    )
    if body is not None:
        record.body.CopyFrom(value(body))
    return record


def logs_request(*records, resource=None):
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest

    message = ExportLogsServiceRequest()
    resource_logs = message.resource_logs.add()
    resource_logs.resource.attributes.extend(resource or [])
    resource_logs.scope_logs.add().log_records.extend(records)
    return message


def store_logs(*records, resource=None):
    """Store log records as POST /v1/logs does; returns the result."""
    from jobs.contract import otlp_logs
    from jobs.ingest.store import store_batch

    logs = otlp_logs.to_batch(logs_request(*records, resource=resource), max_events=10_000)
    assert logs.rejections == [], logs.rejections
    return store_batch(logs.batch)
