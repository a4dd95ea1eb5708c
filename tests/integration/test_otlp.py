"""OTLP/HTTP trace ingest, POST /v1/traces: the real OpenTelemetry SDK and exporter against a
live server, and the edges of the OTLP/HTTP specification through the test client."""

import base64
import gc
import gzip
import json

import pytest
from django.db import OperationalError
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from jobs.contract import otlp
from jobs.models import Event, IngestToken, Job, Step

TRACE_ID = "5b8efff798038103d269b633813fc60c"
ROOT_ID = "eee19b7ec3c1b174"
CHILD_ID = "eee19b7ec3c1b173"
START = 1_772_442_000_000_000_000


def record_failing_trace() -> list:
    """A job run with a succeeding step and a step that raises, recorded by the OTel SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "billing-agent", "traceviz.job_id": "otel-run-1"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("billing")
    # The error escapes the run: the root span fails too (caught inside it, it was handled).
    # From an empty context: a span an earlier test left current in this thread would be the
    # run's parent, in this process, and the run would wait for it as its root.
    with pytest.raises(ValueError), tracer.start_as_current_span("run", context=Context()):
        with tracer.start_as_current_span(
            "fetch_invoice", attributes={"traceviz.node_id": "fetch"}
        ):
            pass
        with tracer.start_as_current_span(
            "charge",
            attributes={
                "traceviz.attempt": 2,
                "traceviz.failure_code": "provider_terminal",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-x",
            },
        ):
            raise ValueError("card declined")
    provider.shutdown()
    return list(memory.get_finished_spans())


def exporter(url: str, token: str) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=f"{url}/v1/traces",
        headers={"Authorization": f"Bearer {token}"},
        compression=Compression.Gzip,
        timeout=10,
    )


@pytest.mark.django_db(transaction=True)
def test_sdk_exporter_trace_becomes_a_failed_job(live_server, client):
    _token, raw = IngestToken.issue("otel-producer")
    spans = record_failing_trace()

    assert exporter(live_server.url, raw).export(spans) == SpanExportResult.SUCCESS

    job = Job.objects.get(job_id="otel-run-1")
    assert (job.status, job.finish_reason) == ("failed", "ValueError: card declined")
    assert (job.workflow, job.name, job.provider, job.model) == (
        "billing-agent",
        "run",
        "openai",
        "gpt-x",
    )
    # The root span is the job, not a step.
    steps = {step.node_id: step for step in Step.objects.filter(job=job)}
    assert {node: (s.attempt, s.segment, s.result_type) for node, s in steps.items()} == {
        "fetch": (1, "ok", "success"),
        "charge": (2, "failed", "permanent_failure"),
    }
    charge = steps["charge"]
    assert (charge.reason, charge.exception_type) == ("ValueError: card declined", "ValueError")
    assert "Traceback" in charge.stack
    assert charge.failure_code == "provider_terminal"
    assert charge.parent_span_id == ""  # no step above it
    assert charge.duration_ms is not None and charge.duration_ms >= 0
    response = client.get("/api/v1/jobs/otel-run-1", HTTP_AUTHORIZATION=f"Bearer {raw}")
    body = response.json()
    assert body["status"] == "failed"
    assert body["failing_node_id"] == "charge"
    assert body["failing_reason"] == "ValueError: card declined"
    assert body["completed_node_ids"] == ["fetch"]
    assert {s["node_id"]: s["segment"] for s in body["steps"]} == {
        "fetch": "ok",
        "charge": "failed",
    }


@pytest.mark.django_db(transaction=True)
def test_sdk_exporter_resend_stores_nothing_twice(live_server):
    _token, raw = IngestToken.issue("otel-producer")
    spans = record_failing_trace()
    sender = exporter(live_server.url, raw)

    assert sender.export(spans) == SpanExportResult.SUCCESS
    stored = Event.objects.count()
    assert sender.export(spans) == SpanExportResult.SUCCESS

    # One event per span; replay makes the job (the root) and its two steps of them.
    assert Event.objects.count() == stored == 3
    assert Step.objects.count() == 2


# --- the specification's edges, through the test client ------------------------------------


def otlp_json(*spans: dict, resource: dict | None = None) -> dict:
    """An OTLP/JSON ExportTraceServiceRequest, ids as hex as the specification writes them."""
    attributes = [{"key": k, "value": {"stringValue": v}} for k, v in (resource or {}).items()]
    return {
        "resourceSpans": [
            {"resource": {"attributes": attributes}, "scopeSpans": [{"spans": list(spans)}]}
        ]
    }


def json_span(
    name: str, span_id: str, parent: str = "", *, error: str | None = None, **attributes
) -> dict:
    span = {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(START),
        "endTimeUnixNano": str(START + 250_000_000),
        "attributes": [
            {"key": key.replace("__", "."), "value": _json_value(value)}
            for key, value in attributes.items()
        ],
    }
    if error is not None:
        span["status"] = {"code": 2, "message": error}
    return span


def _json_value(value) -> dict:
    if isinstance(value, int):
        return {"intValue": str(value)}
    return {"stringValue": value}


@pytest.fixture
def post_traces(client, ingest_token):
    def post(body: bytes | dict, content_type="application/json", token=None, **headers):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {token or ingest_token}")
        return client.post("/v1/traces", body, content_type=content_type, **headers)

    return post


def rpc_status(response) -> status_pb2.Status:
    if response["Content-Type"] == "application/x-protobuf":
        return status_pb2.Status.FromString(response.content)
    return json_format.Parse(response.content, status_pb2.Status())


def test_json_trace_with_hex_ids_is_stored(post_traces):
    body = otlp_json(
        json_span("plan", ROOT_ID, error="fetch failed"),
        json_span("fetch", CHILD_ID, ROOT_ID, error="HTTP 404", traceviz__node_id="n1"),
        resource={"service.name": "crm-sync"},
    )
    response = post_traces(body)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {}
    job = Job.objects.get(job_id=TRACE_ID)
    assert (job.status, job.workflow, job.failing_node_id, job.failing_reason) == (
        "failed",
        "crm-sync",
        "n1",
        "HTTP 404",
    )
    step = Step.objects.get(job=job, node_id="n1")
    assert (step.trace_span_id, step.parent_span_id) == (CHILD_ID, "")
    assert step.duration_ms == 250
    assert Event.objects.filter(event_id=f"otlp:{TRACE_ID}:{CHILD_ID}", type="span").exists()


def test_gzip_json_body_is_inflated(post_traces):
    body = gzip.compress(json.dumps(otlp_json(json_span("plan", ROOT_ID))).encode())

    response = post_traces(body, HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 200
    assert Job.objects.get(job_id=TRACE_ID).name == "plan"


def test_protobuf_request_gets_a_protobuf_response(post_traces):
    message = json_format.ParseDict(
        {
            "resourceSpans": [
                {
                    "scopeSpans": [
                        {
                            "spans": [
                                {
                                    "traceId": base64.b64encode(bytes.fromhex(TRACE_ID)).decode(),
                                    "spanId": base64.b64encode(bytes.fromhex(ROOT_ID)).decode(),
                                    "name": "plan",
                                    "startTimeUnixNano": str(START),
                                    "endTimeUnixNano": str(START),
                                }
                            ]
                        }
                    ]
                }
            ]
        },
        ExportTraceServiceRequest(),
    )

    response = post_traces(message.SerializeToString(), content_type="application/x-protobuf")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-protobuf"
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert Job.objects.get(job_id=TRACE_ID).name == "plan"


def test_unmappable_span_is_counted_in_partial_success(post_traces):
    body = otlp_json(
        json_span("plan", ROOT_ID),
        json_span("fetch", CHILD_ID, ROOT_ID),
        json_span("ghost", "0000000000000000", ROOT_ID),
    )
    response = post_traces(body)

    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1
    assert partial["errorMessage"] == (
        "span 0000000000000000 'ghost': span_id must be 8 bytes, not all zero"
    )
    assert list(Step.objects.values_list("node_id", flat=True)) == ["fetch"]


def test_protobuf_partial_success_carries_the_count(post_traces):
    request = json_format.ParseDict(
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"name": "no ids"}]}]}]},
        ExportTraceServiceRequest(),
    )

    response = post_traces(request.SerializeToString(), content_type="application/x-protobuf")

    answer = ExportTraceServiceResponse.FromString(response.content)
    assert (response.status_code, answer.partial_success.rejected_spans) == (200, 1)
    assert "trace_id must be 16 bytes" in answer.partial_success.error_message
    assert not Event.objects.exists()


def test_undecodable_protobuf_is_a_400_with_a_status_body(post_traces):
    response = post_traces(b"\x0a\xff\xff\xff", content_type="application/x-protobuf")

    assert response.status_code == 400
    assert response["Content-Type"] == "application/x-protobuf"
    status = rpc_status(response)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message == "body is not a protobuf ExportTraceServiceRequest"


def test_json_with_base64_ids_is_a_400(post_traces):
    span = json_span("plan", ROOT_ID)
    span["traceId"] = base64.b64encode(bytes.fromhex(TRACE_ID)).decode()

    response = post_traces(otlp_json(span))

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "traceId is not hex" in rpc_status(response).message


def test_wrong_token_is_a_401(post_traces):
    response = post_traces(otlp_json(json_span("plan", ROOT_ID)), token="tvz_not-a-token")

    assert response.status_code == 401
    assert rpc_status(response).code == code_pb2.UNAUTHENTICATED
    assert response["WWW-Authenticate"] == 'Bearer realm="traceviz"'
    assert not Event.objects.exists()


def test_missing_token_is_a_401(client, db):
    response = client.post("/v1/traces", b"", content_type="application/x-protobuf")

    assert response.status_code == 401
    assert rpc_status(response).message.startswith("missing bearer token")


def test_other_content_type_is_a_415(post_traces):
    response = post_traces(b"plan", content_type="text/plain")

    assert response.status_code == 415
    assert response["Content-Type"] == "application/json"
    assert rpc_status(response).message == (
        "Content-Type must be application/x-protobuf or application/json, got 'text/plain'"
    )


def test_body_over_the_limit_is_a_413(post_traces, settings):
    settings.TRACEVIZ_MAX_BODY_BYTES = 1024
    body = otlp_json(json_span("x" * 2000, ROOT_ID))

    response = post_traces(body)

    assert response.status_code == 413
    assert rpc_status(response).code == code_pb2.RESOURCE_EXHAUSTED


def test_gzip_bomb_is_a_413(post_traces, settings):
    settings.TRACEVIZ_MAX_BODY_BYTES = 1024
    body = gzip.compress(b"\x00" * 100_000)

    response = post_traces(
        body, content_type="application/x-protobuf", HTTP_CONTENT_ENCODING="gzip"
    )

    assert response.status_code == 413
    assert "inflates past the limit of 1024 bytes" in rpc_status(response).message


def test_too_many_spans_is_a_413(post_traces, settings):
    settings.TRACEVIZ_MAX_BATCH_EVENTS = 1
    body = otlp_json(json_span("a", ROOT_ID), json_span("b", CHILD_ID, ROOT_ID))

    response = post_traces(body)

    assert response.status_code == 413
    assert "the limit is 1 events per request" in rpc_status(response).message


def test_database_outage_is_a_503_with_retry_after(post_traces, monkeypatch):
    def unavailable(raw):
        raise OperationalError("connection refused")

    monkeypatch.setattr(IngestToken, "authenticate", staticmethod(unavailable))

    response = post_traces(b"", content_type="application/x-protobuf")

    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert rpc_status(response).code == code_pb2.UNAVAILABLE


def test_get_is_a_405(client, ingest_token):
    response = client.get("/v1/traces", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")

    assert response.status_code == 405
    assert response["Allow"] == "POST"


def test_stored_events_record_the_token(post_traces, ingest_token):
    post_traces(otlp_json(json_span("plan", ROOT_ID)))

    tokens = {event.token.name for event in Event.objects.select_related("token")}
    assert tokens == {"test-producer"}


def test_over_the_token_rate_limit_is_a_429_with_retry_after(post_traces, settings):
    settings.TRACEVIZ_INGEST_RATE_LIMIT = 1
    body = otlp_json(json_span("plan", ROOT_ID))
    assert post_traces(body).status_code == 200

    response = post_traces(body)

    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert rpc_status(response).code == code_pb2.RESOURCE_EXHAUSTED


def test_traces_requests_spans_and_rejections_are_in_the_ingest_metrics(post_traces):
    from jobs.ingest import counters
    from jobs.models import Counter

    post_traces(otlp_json(json_span("plan", ROOT_ID), json_span("ghost", "0" * 16, ROOT_ID)))
    post_traces(b"{", HTTP_AUTHORIZATION="Bearer tvz_nope")

    def value(name, **labels):
        row = Counter.objects.filter(name=name, labels=counters.labels_key(**labels)).first()
        return row.value if row else 0

    assert value(counters.REQUESTS, endpoint="traces", status="200") == 1
    assert value(counters.REQUESTS, endpoint="traces", status="401") == 1
    assert value(counters.SPANS, outcome="accepted") == 1
    assert value(counters.SPANS, outcome="rejected") == 1
    assert (
        value(counters.REJECTIONS, field="(span)", reason="span_id must be N bytes, not all zero")
        == 1
    )
    assert value(counters.REJECTIONS, field="(request)", reason="401 invalid or revoked token") == 1


def test_a_trace_is_decoded_and_stored_without_the_cyclic_collector(post_traces, collector_states):
    seen = collector_states(otlp, "to_batch")
    assert post_traces(otlp_json(json_span("plan", ROOT_ID))).status_code == 200
    assert seen == [False] and gc.isenabled()
    assert Job.objects.filter(job_id=TRACE_ID).exists()
