"""OTLP spans as traceviz events (jobs/otlp.py): pure, no database."""

import base64
import json

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

from jobs.contract import otlp
from jobs.contract.bodies import BodyError
from jobs.replay import walk

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


def items_of(one_span: Span, resource=None) -> list[dict]:
    [mapped] = otlp.map_request(request(one_span, resource=resource))
    assert not mapped.errors, mapped.errors
    return mapped.items


def by_type(items: list[dict]) -> dict[str, dict]:
    return {item["type"]: item for item in items}


def exception_event(exc_type: str, message: str) -> Span.Event:
    return Span.Event(
        name="exception",
        time_unix_nano=START,
        attributes=attrs(exception__type=exc_type, exception__message=message),
    )


def test_span_becomes_node_started_and_node_finished_with_span_ids():
    items = by_type(items_of(span()))
    assert set(items) == {"node_started", "node_finished"}
    started, finished = items["node_started"], items["node_finished"]
    assert started["event_id"] == f"otlp:{TRACE_ID.hex()}:{CHILD_ID.hex()}:started"
    assert finished["event_id"] == f"otlp:{TRACE_ID.hex()}:{CHILD_ID.hex()}:finished"
    assert started["ts"] == "2026-03-02T09:00:00.000000Z"
    assert finished["ts"] == "2026-03-02T09:00:01.500000Z"
    assert finished["payload"]["duration_ms"] == 1500
    assert finished["payload"]["trace_span_id"] == CHILD_ID.hex()
    assert finished["payload"]["parent_span_id"] == ROOT_ID.hex()
    assert started["payload"] == {
        "node_id": "fetch",
        "attempt": 1,
        "trace_span_id": CHILD_ID.hex(),
        "parent_span_id": ROOT_ID.hex(),
        "trace_id": TRACE_ID.hex(),
    }


def test_job_is_the_trace_id_without_a_job_id_attribute():
    assert {item["job_id"] for item in items_of(span())} == {TRACE_ID.hex()}


def test_span_job_id_attribute_wins_over_the_resource_one():
    items = items_of(
        span(attributes=attrs(traceviz__job_id="run-7")), resource=attrs(traceviz__job_id="run-1")
    )
    assert {item["job_id"] for item in items} == {"run-7"}


def test_resource_job_id_attribute_names_the_job():
    items = items_of(span(), resource=attrs(traceviz__job_id="run-1"))
    assert {item["job_id"] for item in items} == {"run-1"}


def test_node_id_and_attempt_come_from_traceviz_attributes():
    finished = by_type(
        items_of(span(attributes=attrs(traceviz__node_id="n1", traceviz__attempt=3)))
    )["node_finished"]
    assert (finished["payload"]["node_id"], finished["payload"]["attempt"]) == ("n1", 3)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (Status.StatusCode.STATUS_CODE_UNSET, "success"),
        (Status.StatusCode.STATUS_CODE_OK, "success"),
        (Status.StatusCode.STATUS_CODE_ERROR, "permanent_failure"),
    ],
)
def test_span_status_decides_the_result_type(code, expected):
    finished = by_type(items_of(span(status=Status(code=code))))["node_finished"]
    assert finished["payload"]["result_type"] == expected


def test_result_type_attribute_wins_over_the_status():
    finished = by_type(
        items_of(
            span(
                status=Status(code=Status.StatusCode.STATUS_CODE_ERROR),
                attributes=attrs(traceviz__result_type="retryable_failure"),
            )
        )
    )["node_finished"]
    assert finished["payload"]["result_type"] == "retryable_failure"


def test_reason_is_the_status_message():
    error = Status(code=Status.StatusCode.STATUS_CODE_ERROR, message="upstream said 404")
    finished = by_type(
        items_of(span(status=error, span_events=[exception_event("KeyError", "x")]))
    )["node_finished"]
    assert finished["payload"]["reason"] == "upstream said 404"


def test_reason_falls_back_to_the_last_exception_event():
    error = Status(code=Status.StatusCode.STATUS_CODE_ERROR)
    events = [
        exception_event("KeyError", "first"),
        exception_event("TimeoutError", "read timed out"),
    ]
    finished = by_type(items_of(span(status=error, span_events=events)))["node_finished"]
    assert finished["payload"]["reason"] == "TimeoutError: read timed out"


def test_failure_code_error_type_and_gen_ai_provider_model_are_kept():
    finished = by_type(
        items_of(
            span(
                attributes=attrs(
                    traceviz__failure_code="adapter_timeout",
                    traceviz__error_type="network",
                    gen_ai__system="openai",
                    gen_ai__request__model="gpt-x",
                )
            )
        )
    )["node_finished"]
    payload = finished["payload"]
    assert (payload["failure_code"], payload["error_type"]) == ("adapter_timeout", "network")
    assert (payload["provider"], payload["model"]) == ("openai", "gpt-x")


def test_gen_ai_provider_name_and_response_model_win_over_older_attributes():
    items = by_type(
        items_of(
            span(
                attributes=attrs(
                    gen_ai__system="old",
                    gen_ai__provider__name="anthropic",
                    gen_ai__request__model="asked",
                    gen_ai__response__model="answered",
                )
            )
        )
    )
    assert items["job_started"]["payload"] == {"provider": "anthropic", "model": "answered"}


def test_root_span_starts_the_job_with_resource_workflow_and_its_name():
    items = by_type(
        items_of(
            span(name="plan-run", span_id=ROOT_ID, parent=b""),
            resource=attrs(service__name="billing-agent"),
        )
    )
    job_started = items["job_started"]
    assert job_started["event_id"] == f"otlp:{TRACE_ID.hex()}:{ROOT_ID.hex()}:job_started"
    assert job_started["ts"] == items["node_started"]["ts"]
    assert job_started["payload"] == {"name": "plan-run", "workflow": "billing-agent"}
    assert "parent_span_id" not in items["node_started"]["payload"]


def test_default_service_name_is_not_a_workflow():
    items = by_type(
        items_of(
            span(name="r", span_id=ROOT_ID, parent=b""),
            resource=attrs(service__name="unknown_service:python"),
        )
    )
    assert items["job_started"]["payload"] == {"name": "r"}


def test_span_under_a_remote_parent_starts_the_job():
    remote = (
        SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
        | SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
    )
    items = by_type(items_of(span(flags=remote), resource=attrs(service__name="worker")))
    assert items["job_started"]["payload"] == {"name": "fetch", "workflow": "worker"}


def test_child_span_without_job_attributes_does_not_start_the_job():
    items = by_type(items_of(span(), resource=attrs(service__name="billing-agent")))
    assert "job_started" not in items


def test_payload_results_come_from_a_json_string_or_key_value_list():
    as_text = by_type(items_of(span(attributes=attrs(traceviz__payload_results='{"a": 1}'))))
    as_kvlist = by_type(items_of(span(attributes=attrs(traceviz__payload_results={"a": 1}))))
    assert as_text["node_finished"]["payload"]["payload_results"] == {"a": 1}
    assert as_kvlist["node_finished"]["payload"]["payload_results"] == {"a": 1}


MUST_BE_OBJECT = "attribute traceviz.payload_results must be a JSON object"


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        (attrs(traceviz__attempt="2"), "attribute traceviz.attempt must be an integer"),
        (attrs(traceviz__node_id=5), "attribute traceviz.node_id must be a string"),
        (attrs(traceviz__step_index=1.5), "attribute traceviz.step_index must be an integer"),
        (
            attrs(traceviz__continue_on_error="yes"),
            "attribute traceviz.continue_on_error must be a boolean",
        ),
        (attrs(traceviz__payload_results="[1]"), MUST_BE_OBJECT),
        (attrs(traceviz__payload_results={"x": float("nan")}), MUST_BE_OBJECT),
    ],
)
def test_attribute_of_the_wrong_type_rejects_the_span(attributes, message):
    [mapped] = otlp.map_request(request(span(attributes=attributes)))
    assert mapped.items == []
    assert mapped.errors[0].startswith(message)


def test_overlong_span_name_is_reported_once():
    traces = otlp.to_batch(request(span(name="n" * 201)), max_events=100)
    assert traces.error_message == (
        f"span {CHILD_ID.hex()} '{'n' * 201}': "
        "payload.node_id: must be a string of 1 to 200 characters"
    )


def test_end_before_start_rejects_the_span():
    [mapped] = otlp.map_request(request(span(start_ms=10, end_ms=5)))
    assert mapped.errors == ["end_time_unix_nano is before start_time_unix_nano"]


def test_missing_span_id_rejects_the_span():
    [mapped] = otlp.map_request(request(span(span_id=b"")))
    assert mapped.errors == ["span_id must be 8 bytes, not all zero"]


def test_rejected_span_is_counted_and_the_others_kept():
    good = span(name="good", span_id=ROOT_ID, parent=b"")
    bad_type = span(name="bad", attributes=attrs(traceviz__attempt="x"))
    bad_value = span(
        name="worse", span_id=bytes(7) + b"\x01", attributes=attrs(traceviz__result_type="exploded")
    )
    traces = otlp.to_batch(request(good, bad_type, bad_value), max_events=100)
    assert traces.span_count == 3
    assert traces.rejected_spans == 2
    assert [event.type for _, event in traces.batch.events] == [
        "job_started",
        "node_started",
        "node_finished",
    ]
    assert [index for index, _ in traces.batch.events] == [0, 1, 2]
    assert traces.error_message == (
        f"span {CHILD_ID.hex()} 'bad': attribute traceviz.attempt must be an integer; "
        "span 0000000000000001 'worse': payload.result_type: must be one of "
        "success, retryable_failure, permanent_failure, compensatable_failure"
    )


def test_request_mapping_to_too_many_events_is_refused():
    with pytest.raises(BodyError) as refused:
        otlp.to_batch(request(span(), span(span_id=ROOT_ID, parent=b"")), max_events=4)
    assert refused.value.status == 413
    assert "maps to 5 events; the limit is 4 events" in refused.value.message


def test_mapped_events_replay_into_steps_with_segments():
    error = Status(code=Status.StatusCode.STATUS_CODE_ERROR, message="boom")
    traces = otlp.to_batch(
        request(
            span(name="run", span_id=ROOT_ID, parent=b"", end_ms=3000),
            span(name="fetch", status=error, start_ms=100, end_ms=900),
        ),
        max_events=100,
    )
    state = walk.build(event for _, event in traces.batch.events)
    assert [(s.node_id, s.segment.value, s.reason) for s in state.steps] == [
        ("run", "ok", ""),
        ("fetch", "failed", "boom"),
    ]
    assert state.attributes["name"] == "run"


def test_json_body_reads_ids_as_hex():
    document = json_format.MessageToDict(request(span()))
    scope_span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for key in ("traceId", "spanId", "parentSpanId"):
        scope_span[key] = base64.b64decode(scope_span[key]).hex()
    decoded = otlp.decode_request(json.dumps(document).encode(), otlp.JSON)
    [decoded_span] = decoded.resource_spans[0].scope_spans[0].spans
    assert (decoded_span.trace_id, decoded_span.span_id) == (TRACE_ID, CHILD_ID)
    assert decoded_span.parent_span_id == ROOT_ID


def test_json_body_accepts_snake_case_field_names_and_link_ids():
    body = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE_ID.hex(),
                                "span_id": CHILD_ID.hex(),
                                "name": "n",
                                "start_time_unix_nano": str(START),
                                "end_time_unix_nano": str(START + 1),
                                "links": [{"trace_id": TRACE_ID.hex(), "span_id": ROOT_ID.hex()}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    decoded = otlp.decode_request(json.dumps(body).encode(), otlp.JSON)
    [decoded_span] = decoded.resource_spans[0].scope_spans[0].spans
    assert decoded_span.span_id == CHILD_ID
    assert decoded_span.links[0].span_id == ROOT_ID


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "body is not JSON"),
        (b"[]", "body must be a JSON ExportTraceServiceRequest object"),
        (b'{"resourceSpans": 3}', "body is not an OTLP/JSON ExportTraceServiceRequest"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "resourceSpans[0].scopeSpans[0].spans[0].traceId is not hex",
        ),
    ],
)
def test_undecodable_json_is_a_400(body, message):
    with pytest.raises(BodyError) as refused:
        otlp.decode_request(body, otlp.JSON)
    assert refused.value.status == 400
    assert refused.value.message.startswith(message)


def test_undecodable_protobuf_is_a_400():
    with pytest.raises(BodyError) as refused:
        otlp.decode_request(b"\xff\xff\xff", otlp.PROTOBUF)
    assert refused.value.status == 400


def test_other_content_type_is_a_415():
    with pytest.raises(BodyError) as refused:
        otlp.decode_request(b"", "text/plain")
    assert refused.value.status == 415
