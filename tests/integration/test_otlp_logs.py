"""OTLP/HTTP log ingest, POST /v1/logs (docs/otlp.md): records become ``log`` events of their
trace's job; GenAI content records are their span's call's transcript whichever arrived first,
the others timed entries of their step, and a record whose span never comes is still shown on
the job. The request's edges are those of /v1/traces: tokens, limits, status bodies, metrics."""

import gzip
import json

import pytest
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse

from jobs.ingest import counters, parity
from jobs.models import Call, Counter, Event, Job, Step
from tests import factories
from tests.integration.test_otlp import rpc_status
from tests.integration.test_trace_growth import rows
from tests.otlp_spans import (
    ROOT_ID,
    TRACE_ID,
    attrs,
    log_record,
    logs_request,
    root,
    sid,
    span,
    store_logs,
    store_spans,
)

pytestmark = pytest.mark.django_db
JOB = TRACE_ID.hex()
STEP_ID, CHAT_ID = sid(7), sid(8)


def trace() -> list:
    chat = span(
        "chat",
        span_id=CHAT_ID,
        parent=STEP_ID,
        start_ms=1,
        end_ms=9,
        attributes=attrs(gen_ai__operation__name="chat", gen_ai__request__model="gpt-4o-mini"),
    )
    return [span("draft", span_id=STEP_ID, start_ms=0, end_ms=10), chat, root(end_ms=20)]


def records() -> list:
    return [
        log_record("gen_ai.user.message", {"content": "Where is 42?"}, span_id=CHAT_ID, at_ms=2),
        log_record(
            "gen_ai.choice",
            {"index": 0, "message": {"role": "assistant", "content": "Tomorrow."}},
            span_id=CHAT_ID,
            at_ms=8,
        ),
        log_record(body="cache miss", severity=13, span_id=CHAT_ID, at_ms=3),
    ]


def delivered(order: str) -> tuple:
    """Store the trace's spans and records in ``order``; after each request the rows are
    those of a replay of everything stored so far. Returns the rows."""
    spans, logs = trace(), records()
    deliveries = {
        "logs first": [("logs", logs), ("spans", spans)],
        "spans first": [("spans", spans), ("logs", logs)],
        "interleaved": [
            ("spans", spans[:1]),
            ("logs", logs[:1]),
            ("spans", spans[1:]),
            ("logs", logs[1:]),
        ],
    }[order]
    for kind, items in deliveries:
        (store_spans if kind == "spans" else store_logs)(*items)
        assert parity.differences(JOB) == []
    return rows()


@pytest.mark.parametrize("order", ["logs first", "spans first", "interleaved"])
def test_content_records_are_their_calls_transcript_in_any_arrival_order(order):
    rows_then = delivered(order)
    chat = Call.objects.get(name="chat")
    assert [(m["direction"], m["role"], m["content"]) for m in chat.messages] == [
        ("in", "user", "Where is 42?"),
        ("out", "assistant", "Tomorrow."),
    ]
    (draft,) = Step.objects.filter(node_id="draft")
    assert [(e["name"], e.get("severity"), e.get("body")) for e in draft.span["events"]] == [
        ("log", "WARN", "cache miss")
    ]
    for model in (Call, Step, Job, Event):
        model.objects.all().delete()
    assert delivered("spans first") == rows_then


def test_a_record_whose_span_never_comes_is_shown_on_its_job(client):
    store_spans(*trace())
    store_logs(log_record(body="webhook sent", span_id=sid(99), severity=17))

    assert Event.objects.filter(job_id=JOB, type="log").count() == 1
    client.force_login(factories.user("erin", "engineer"))
    page = client.get(f"/jobs/{JOB}/").content.decode()
    assert f"Log ERROR · span {sid(99).hex()}: webhook sent" in page


def test_a_record_in_a_step_links_to_it_in_the_narrative(client):
    store_spans(*trace())
    store_logs(log_record("app.lookup", "order found", span_id=CHAT_ID))

    client.force_login(factories.user("erin", "engineer"))
    page = client.get(f"/jobs/{JOB}/").content.decode()
    assert "Log INFO app.lookup · step draft attempt 1: order found" in page


@pytest.fixture
def post_logs(client, ingest_token):
    def post(body, content_type="application/json", token=None, **headers):
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {token or ingest_token}")
        return client.post("/v1/logs", body, content_type=content_type, **headers)

    return post


def json_logs(*records: dict) -> dict:
    return {"resourceLogs": [{"scopeLogs": [{"logRecords": list(records)}]}]}


def json_record(body: str, **fields) -> dict:
    return {
        "timeUnixNano": "1772442000001000000",
        "traceId": JOB,
        "spanId": CHAT_ID.hex(),
        "body": {"stringValue": body},
        **fields,
    }


def test_json_records_are_stored_with_an_export_logs_response(post_logs):
    response = post_logs(json_logs(json_record("hello")))

    assert (response.status_code, response["Content-Type"]) == (200, "application/json")
    assert response.json() == {}
    (event,) = Event.objects.filter(type="log")
    assert (event.job_id, event.payload["body"]) == (JOB, "hello")


def test_gzipped_protobuf_records_are_stored(post_logs):
    body = gzip.compress(logs_request(log_record("a", "hi")).SerializeToString())

    response = post_logs(body, content_type="application/x-protobuf", HTTP_CONTENT_ENCODING="gzip")

    assert response.status_code == 200
    answer = ExportLogsServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert Event.objects.filter(type="log").count() == 1


def test_unreadable_records_are_counted_in_partial_success(post_logs):
    response = post_logs(json_logs(json_record("kept"), json_record("lost", spanId="0102")))

    partial = response.json()["partialSuccess"]
    assert (response.status_code, int(partial["rejectedLogRecords"])) == (200, 1)
    assert partial["errorMessage"] == "log record span 0102: span_id must be 8 bytes, not all zero"
    assert [e.payload["body"] for e in Event.objects.filter(type="log")] == ["kept"]


def test_a_resent_request_stores_nothing_twice(post_logs):
    body = json_logs(json_record("once"))
    post_logs(body)
    post_logs(body)

    assert Event.objects.filter(type="log").count() == 1


def test_a_secret_in_a_record_is_masked_before_it_is_stored(post_logs):
    post_logs(json_logs(json_record("key AKIAZXCVBNMASDFGHJKL leaked")))

    (event,) = Event.objects.filter(type="log")
    assert "AKIAZXCVBNMASDFGHJKL" not in json.dumps(event.payload)


def test_undecodable_protobuf_is_a_400_with_a_status_body(post_logs):
    response = post_logs(b"\x0a\xff\xff\xff", content_type="application/x-protobuf")

    assert response.status_code == 400
    status = status_pb2.Status.FromString(response.content)
    assert (status.code, status.message) == (
        code_pb2.INVALID_ARGUMENT,
        "body is not a protobuf ExportLogsServiceRequest",
    )


def test_wrong_token_is_a_401(post_logs):
    response = post_logs(json_logs(json_record("x")), token="tvz_not-a-token")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="traceviz"'
    assert not Event.objects.exists()


def test_other_content_type_is_a_415(post_logs):
    response = post_logs(b"x", content_type="text/plain")

    assert response.status_code == 415
    assert rpc_status(response).message.startswith("Content-Type must be")


def test_body_over_the_limit_is_a_413(post_logs, settings):
    settings.TRACEVIZ_MAX_BODY_BYTES = 1024

    response = post_logs(json_logs(json_record("x" * 2000)))

    assert response.status_code == 413
    assert rpc_status(response).code == code_pb2.RESOURCE_EXHAUSTED


def test_the_rate_limit_is_the_tokens_across_traces_and_logs(post_logs, client, settings):
    settings.TRACEVIZ_INGEST_RATE_LIMIT = 1
    assert post_logs(json_logs(json_record("x"))).status_code == 200

    response = post_logs(json_logs(json_record("y")))

    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1


def test_logs_requests_records_and_rejections_are_in_the_ingest_metrics(post_logs):
    post_logs(json_logs(json_record("kept"), json_record("lost", spanId="0102")))
    post_logs(b"{", HTTP_AUTHORIZATION="Bearer tvz_nope")

    def value(name, **labels):
        row = Counter.objects.filter(name=name, labels=counters.labels_key(**labels)).first()
        return row.value if row else 0

    assert value(counters.REQUESTS, endpoint="logs", status="200") == 1
    assert value(counters.REQUESTS, endpoint="logs", status="401") == 1
    assert value(counters.LOG_RECORDS, outcome="accepted") == 1
    assert value(counters.LOG_RECORDS, outcome="rejected") == 1
    assert value(counters.EVENTS_INGESTED, type="log") == 1
    reason = "span_id must be N bytes, not all zero"
    assert value(counters.REJECTIONS, field="(log record)", reason=reason) == 1


def test_the_log_records_ingest_counter_is_exposed_on_metrics(post_logs, client):
    post_logs(json_logs(json_record("kept")))
    client.force_login(factories.user("sid", "operator", staff=True))

    text = client.get("/metrics").content.decode()

    assert 'traceviz_otlp_log_records_total{outcome="accepted"} 1' in text
    assert 'traceviz_ingest_requests_total{endpoint="logs",status="200"} 1' in text


def test_protobuf_json_resends_are_one_event(post_logs):
    request = logs_request(log_record("a", "same", span_id=ROOT_ID))
    post_logs(request.SerializeToString(), content_type="application/x-protobuf")
    document = json_format.MessageToDict(request)
    record = document["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    record["traceId"], record["spanId"] = JOB, ROOT_ID.hex()
    post_logs(document)

    assert Event.objects.filter(type="log").count() == 1


def test_the_step_panel_lists_its_log_records_beside_its_span_events(client):
    store_spans(*trace())
    store_logs(*records())

    client.force_login(factories.user("erin", "engineer"))
    panel = client.get(f"/jobs/{JOB}/?step=draft:1", HTTP_HX_REQUEST="true").content.decode()
    assert "<h3>Span events and log records</h3>" in panel
    assert '<span class="tag">log</span> WARN log <span class="pre">cache miss</span>' in panel
    # The content records are the chat call's transcript, not entries.
    assert "Where is 42?" in panel and "gen_ai.user.message" not in panel


def test_a_waiting_call_with_records_keeps_its_transcript_when_its_step_comes():
    """A live run exports a chat span before its step (its SDK says the step is in the same
    process): the chat waits as the job's call; when the step comes the call becomes the
    step's, its record rewritten, with the transcript its log records give it."""
    from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags

    draft, chat, _run = trace()
    draft.flags = chat.flags = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    store_spans(chat)
    asked, answered = (
        log_record("gen_ai.user.message", {"content": "Where is 42?"}, span_id=CHAT_ID, at_ms=-5),
        log_record(
            "gen_ai.choice", {"message": {"content": "Tomorrow."}}, span_id=CHAT_ID, at_ms=-4
        ),
    )
    store_logs(asked, answered)
    assert Call.objects.get(name="chat").node_id == ""
    store_spans(draft)

    assert parity.differences(JOB) == []
    call = Call.objects.get(name="chat")
    assert call.node_id == "draft"
    assert [m["content"] for m in call.messages] == ["Where is 42?", "Tomorrow."]
