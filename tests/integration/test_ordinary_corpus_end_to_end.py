"""The whole ordinary corpus (tests/ordinary_corpus.py) sent through /api/v1/events and, as span
attributes, through /v1/traces: every key and value comes back unchanged from the event rows,
the projections and the read API; no jobs_* table and no page shows a mask; no event and no step
says it masked anything. Ids made of digits that pass the Luhn check are stored and readable."""

import html
import json

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from jobs.models import Event, Job, Step
from tests.factories import event, finished, started, user
from tests.integration.test_redaction_end_to_end import jobs_tables_text
from tests.ordinary_corpus import ORDINARY_SECTIONS
from tests.otlp_spans import START, attrs, request, root, sid, span

pytestmark = pytest.mark.django_db

JOB = "ordinary-job"
OTLP_JOB = "ordinary-otlp-job"
MASK = "[REDACTED]"


def corpus_events() -> list[dict]:
    return [
        event("job_started", JOB, 0, name="ordinary", workflow="wf", metadata=ORDINARY_SECTIONS),
        started("n1", JOB, 1),
        finished(
            "n1",
            "success",
            JOB,
            2,
            payload_results=ORDINARY_SECTIONS,
            context={"actual_arguments": ORDINARY_SECTIONS},
            audit_trail=[ORDINARY_SECTIONS],
        ),
        event("custom.ordinary", JOB, 3, **ORDINARY_SECTIONS),
        event("job_finished", JOB, 4, status="completed"),
    ]


def corpus_trace() -> bytes:
    """A root and one step span a corpus section, its keys and values as the span's attributes."""
    spans = [root(attributes=attrs(traceviz__job_id=OTLP_JOB), end_ms=9000)]
    spans += [
        span(
            name=name,
            span_id=sid(index + 2),
            start_ms=10 * index,
            end_ms=10 * index + 5,
            attributes=attrs(**section),
        )
        for index, (name, section) in enumerate(ORDINARY_SECTIONS.items())
    ]
    return request(*spans).SerializeToString()


def post_trace(client, ingest_token, body: bytes) -> ExportTraceServiceResponse:
    response = client.post(
        "/v1/traces",
        body,
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
    )
    assert response.status_code == 200, response.content
    return ExportTraceServiceResponse.FromString(response.content)


@pytest.fixture
def sent(send, client, ingest_token):
    response = send(corpus_events())
    assert response.status_code == 200, response.json()
    answer = post_trace(client, ingest_token, corpus_trace())
    assert answer.partial_success.rejected_spans == 0


def test_event_rows_hold_every_key_and_value_unchanged(sent):
    payloads = {row.type: row.payload for row in Event.objects.filter(job_id=JOB)}
    assert payloads["job_started"]["metadata"] == ORDINARY_SECTIONS
    assert payloads["node_finished"]["payload_results"] == ORDINARY_SECTIONS
    assert payloads["node_finished"]["context"] == {"actual_arguments": ORDINARY_SECTIONS}
    assert payloads["node_finished"]["audit_trail"] == [ORDINARY_SECTIONS]
    assert payloads["custom.ordinary"] == ORDINARY_SECTIONS
    spans = {row.payload["name"]: row.payload for row in Event.objects.filter(job_id=OTLP_JOB)}
    for name, section in ORDINARY_SECTIONS.items():
        assert spans[name]["attributes"] == section, name
        assert "dropped" not in spans[name]
    assert list(Event.objects.exclude(masked=[]).values_list("event_id", flat=True)) == []


def test_projections_and_the_read_api_give_it_back_unchanged(sent, client, ingest_token):
    job = Job.objects.get(job_id=JOB)
    assert job.payload_results == ORDINARY_SECTIONS
    assert job.metadata == ORDINARY_SECTIONS
    step = job.steps.get(node_id="n1")
    assert (step.payload_results, step.context) == (
        ORDINARY_SECTIONS,
        {"actual_arguments": ORDINARY_SECTIONS},
    )
    assert list(Step.objects.exclude(masked=[]).values_list("node_id", flat=True)) == []
    answer = client.get(f"/api/v1/jobs/{JOB}", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert answer.status_code == 200
    assert answer.json()["payload_results"] == ORDINARY_SECTIONS
    assert [s["masked"] for s in answer.json()["steps"]] == [[]]
    otlp_steps = Job.objects.get(job_id=OTLP_JOB).steps.all()
    shown = {s.span["name"]: s.span["attributes"] for s in otlp_steps if s.span}
    assert shown, "the trace's spans are steps"
    for name, attributes in shown.items():
        assert attributes == ORDINARY_SECTIONS[name], name


def test_no_table_and_no_page_shows_a_mask(sent, client):
    assert MASK not in jobs_tables_text()
    client.force_login(user("ordinary-engineer", "engineer"))
    paths = ["/", "/?status=all", "/dashboard/", "/api/v1/jobs"]
    for job in Job.objects.all():
        paths += [f"/jobs/{job.job_id}/", f"/jobs/{job.job_id}/events.json"]
        paths += [f"/api/v1/jobs/{job.job_id}"]
        paths += [f"/jobs/{job.job_id}/?step={s.node_id}:{s.attempt}" for s in job.steps.all()]
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, path
        assert MASK not in response.content.decode(), path
    panel = client.get(f"/jobs/{JOB}/?step=n1:1").content.decode()
    assert "masked at ingest" not in panel
    for section in ORDINARY_SECTIONS.values():
        for key in section:
            assert html.escape(json.dumps(key, ensure_ascii=False)) in panel, key


LUHN_JOB, LUHN_NODE, LUHN_EVENT = "4111111111111111", "5555555555554444", "378282246310005"


def test_ids_of_digits_that_pass_the_luhn_check_are_stored_and_readable(send, client, ingest_token):
    response = send(
        [
            event("job_started", LUHN_JOB, 0, correlation_id="6011000990139424"),
            started(LUHN_NODE, LUHN_JOB, 1),
            {**finished(LUHN_NODE, "success", LUHN_JOB, 2), "event_id": LUHN_EVENT},
        ]
    )
    assert response.json() == {
        "received": 3,
        "stored": 3,
        "duplicates": 0,
        "rejected": 0,
        "errors": [],
    }
    assert Event.objects.filter(job_id=LUHN_JOB, event_id=LUHN_EVENT).exists()
    answer = client.get(f"/api/v1/jobs/{LUHN_JOB}", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert answer.json()["completed_node_ids"] == [LUHN_NODE]
    assert answer.json()["correlation_id"] == "6011000990139424"
    client.force_login(user("luhn-operator", "operator"))
    page = client.get(f"/jobs/{LUHN_JOB}/?step={LUHN_NODE}:1")
    assert page.status_code == 200
    assert LUHN_NODE in page.content.decode()


def test_otlp_ids_of_digits_that_pass_the_luhn_check_are_stored_and_readable(client, ingest_token):
    trace_id, root_id, child_id = "4111111111111111" * 2, "5555555555554444", "4012888888881881"
    spans = [
        Span(
            trace_id=bytes.fromhex(trace_id),
            span_id=bytes.fromhex(span_id),
            parent_span_id=bytes.fromhex(parent),
            name=name,
            start_time_unix_nano=START + offset,
            end_time_unix_nano=START + offset + 1_000_000,
        )
        for span_id, parent, name, offset in (
            (root_id, "", "run", 0),
            (child_id, root_id, "fetch", 100),
        )
    ]
    answer = post_trace(client, ingest_token, request(*spans).SerializeToString())
    assert answer.partial_success.rejected_spans == 0
    job = client.get(f"/api/v1/jobs/{trace_id}", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert job.status_code == 200
    assert [(s["node_id"], s["trace_span_id"]) for s in job.json()["steps"]] == [
        ("fetch", child_id)
    ]
