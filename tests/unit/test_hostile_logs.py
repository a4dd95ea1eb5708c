"""Hostile OTLP log records (POST /v1/logs): any bytes, any export request and any record
decode to a batch of valid events and per-record rejections, or a body error; replay reads
whatever records a job holds, with spans of their trace or without, and never raises."""

import base64
import json
from dataclasses import replace
from datetime import UTC, datetime

from google.protobuf import json_format
from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from jobs.contract import otlp, otlp_logs
from jobs.contract.bodies import BodyError
from jobs.replay import walk
from tests.otlp_spans import TRACE_ID, request, root, sid, span
from tests.unit.test_hostile_input import (
    FUZZ,
    any_values,
    assert_well_formed,
    attribute_lists,
    nasty_text,
)

CONTENT_NAMES = [
    "gen_ai.system.message",
    "gen_ai.user.message",
    "gen_ai.assistant.message",
    "gen_ai.tool.message",
    "gen_ai.choice",
    "gen_ai.client.inference.operation.details",
]
records = st.builds(
    lambda trace_id, span_id, time, severity, name, body, attributes: _record(
        trace_id, span_id, time, severity, name, body, attributes
    ),
    st.one_of(st.just(TRACE_ID), st.just(b""), st.binary(max_size=20)),
    st.one_of(st.sampled_from([sid(1), sid(2), b""]), st.binary(max_size=10)),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**31 - 1),
    st.one_of(st.sampled_from(CONTENT_NAMES), nasty_text.filter(lambda s: s != "\ud800")),
    st.one_of(st.none(), any_values),
    attribute_lists,
)
RECEIVED = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
# Spans of the trace the records name: a root, a step and a chat call under it.
TRACE = [
    root(end_ms=20),
    span("step", span_id=sid(1), start_ms=0, end_ms=10),
    span("chat", span_id=sid(2), parent=sid(1), start_ms=1, end_ms=9),
]


def _record(trace_id, span_id, time, severity, name, body, attributes) -> LogRecord:
    record = LogRecord(
        trace_id=trace_id,
        span_id=span_id,
        time_unix_nano=time,
        severity_number=severity,
        event_name=name,
        attributes=attributes,
    )
    if body is not None:
        record.body.CopyFrom(body)
    return record


def decode_and_replay(body: bytes, content_type: str, with_spans: bool = False):
    try:
        logs = otlp_logs.to_batch(otlp_logs.decode_request(body, content_type), max_events=100)
    except BodyError as error:
        assert error.status in (400, 413, 415)
        return error
    assert_well_formed(logs.batch)
    assert logs.rejected_records <= logs.record_count
    assert all(isinstance(message, str) for message in logs.rejections)
    spans = [e for _, e in otlp.to_batch(request(*TRACE), 100).batch.events] if with_spans else []
    by_job: dict[str, list] = {}
    for _index, event in logs.batch.events:
        # As ingest stores it: a record without a time gets the time it was received.
        by_job.setdefault(event.job_id, []).append(replace(event, ts=event.ts or RECEIVED))
    for job_id, job_events in by_job.items():
        same_trace = [e for e in spans if e.job_id == job_id]
        state = walk.build(job_events + same_trace)
        assert state.event_count >= len(job_events)
    return logs


@FUZZ
@given(body=st.binary(max_size=2000), content_type=st.sampled_from(otlp.CONTENT_TYPES))
@example(
    body=b'{"resourceLogs": [{"scopeLogs": [{"logRecords": [{"spanId": "zz"}]}]}]}',
    content_type=otlp.JSON,
)
@example(body=b'{"resourceLogs": [{"scopeLogs": ["no"]}]}', content_type=otlp.JSON)
def test_any_bytes_decode_to_log_events_or_a_body_error(body, content_type):
    decode_and_replay(body, content_type)


@FUZZ
@given(
    resource_attributes=attribute_lists,
    record_list=st.lists(records, max_size=5),
    as_json=st.booleans(),
)
def test_any_log_records_are_events_or_rejections_and_replay_reads_them(
    resource_attributes, record_list, as_json
):
    message = ExportLogsServiceRequest()
    message.resource_logs.append(ResourceLogs(scope_logs=[ScopeLogs(log_records=record_list)]))
    message.resource_logs[0].resource.attributes.extend(resource_attributes)
    if as_json:
        document = json_format.MessageToDict(message)
        for resource in document.get("resourceLogs", []):
            for scope in resource.get("scopeLogs", []):
                for record in scope.get("logRecords", []):
                    for key in ("traceId", "spanId"):
                        if key in record:
                            record[key] = base64.b64decode(record[key]).hex()
        decode_and_replay(json.dumps(document).encode(), otlp.JSON, with_spans=True)
    else:
        result = decode_and_replay(message.SerializeToString(), otlp.PROTOBUF, with_spans=True)
        assert result.record_count == len(record_list)
