"""The whole secret corpus (tests/secret_corpus.py) sent through /api/v1/events and /v1/traces:
nothing of it reaches any jobs_* table or any page; ids carrying a secret are refused."""

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from jobs.models import Event, Job
from tests.factories import event, finished, started, user
from tests.integration.test_redaction_end_to_end import assert_pages_show_none, jobs_tables_text
from tests.otlp_spans import ROOT_ID, START, attrs, request, sid, span
from tests.secret_corpus import SECRET_OBJECT, SECRET_OBJECT_VALUES, SECRET_TEXTS

pytestmark = pytest.mark.django_db

JOB = "corpus-job"
OTLP_JOB = "corpus-otlp-job"
TEXTS = [text for _name, text, _secret in SECRET_TEXTS]
SECRETS = [secret for _name, _text, secret in SECRET_TEXTS] + SECRET_OBJECT_VALUES
BY_FIELD = {f"text_{index}": text for index, text in enumerate(TEXTS)}
ALL_LINES = "\n".join(TEXTS)


def corpus_events() -> list[dict]:
    return [
        event("job_started", JOB, 0, name="corpus", workflow="wf", metadata=BY_FIELD),
        started("n1", JOB, 1),
        finished(
            "n1",
            "permanent_failure",
            JOB,
            2,
            reason=ALL_LINES,
            error_type="internal",
            payload_results={**BY_FIELD, **SECRET_OBJECT},
            context={"actual_arguments": SECRET_OBJECT, "step_definition": {"env": BY_FIELD}},
            audit_trail=TEXTS,
        ),
        event(
            "graph.next_step.degraded",
            JOB,
            3,
            reason=ALL_LINES,
            raw_output_preview=ALL_LINES,
            validation_errors=TEXTS,
            attempts=3,
            provider="openai",
            model="m",
        ),
        event("escalation_raised", JOB, 4, kind="manual", message=ALL_LINES, severity="high"),
        event("custom.corpus", JOB, 5, **BY_FIELD, secrets=SECRET_OBJECT),
        event("job_finished", JOB, 6, status="failed", code="x", reason=ALL_LINES),
    ]


def corpus_trace() -> bytes:
    """A failed trace whose name, status message, attributes and span events carry the corpus."""
    texts = {f"corpus.text_{index}": text for index, text in enumerate(TEXTS)}
    job = attrs(traceviz__job_id=OTLP_JOB)
    spans = [
        span(name="run", span_id=ROOT_ID, parent=b"", attributes=job, end_ms=9000),
        span(
            name=TEXTS[0],
            span_id=sid(2),
            start_ms=10,
            end_ms=20,
            status=Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=ALL_LINES),
            attributes=attrs(**{key.replace(".", "__"): v for key, v in texts.items()})
            + attrs(input__value=ALL_LINES, corpus__object=SECRET_OBJECT_STRINGS),
            span_events=[
                Span.Event(
                    name="exception",
                    time_unix_nano=START + 15_000_000,
                    attributes=attrs(exception__type="Err", exception__message=text),
                )
                for text in TEXTS
            ],
        ),
    ]
    return request(*spans).SerializeToString()


# The key-named secrets as OTLP can carry them (a kvlist of strings).
SECRET_OBJECT_STRINGS = {
    key: value for key, value in SECRET_OBJECT.items() if isinstance(value, str)
}


@pytest.fixture
def sent(send, client, ingest_token):
    response = send(corpus_events())
    assert response.status_code == 200, response.json()
    response = client.post(
        "/v1/traces",
        corpus_trace(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
    )
    assert response.status_code == 200, response.content
    assert Job.objects.filter(job_id=OTLP_JOB).exists()


def test_corpus_reaches_no_jobs_table(sent):
    stored = jobs_tables_text()
    assert stored.count("[REDACTED]") > len(SECRETS)
    assert "sess-kept-visible" in stored
    assert [secret for secret in SECRETS if secret in stored] == []


def test_corpus_reaches_no_page(sent, client):
    client.force_login(user("corpus-engineer", "engineer", "support"))
    paths = ["/", "/?status=all", "/escalations/?status=all", "/dashboard/", "/api/v1/jobs"]
    for job in Job.objects.all():
        paths += [f"/jobs/{job.job_id}/", f"/jobs/{job.job_id}/events.json"]
        paths += [f"/api/v1/jobs/{job.job_id}"]
        paths += [f"/jobs/{job.job_id}/?step={s.node_id}:{s.attempt}" for s in job.steps.all()]
    assert_pages_show_none(client, paths, SECRETS)


def test_event_id_carrying_a_secret_is_refused_and_not_stored(send):
    secret_id = "retry-ghp_CorpusGithub0123456789abcdefABCDEF12"
    response = send([event("node_started", secret_id, 0, node_id="n1")])
    assert response.status_code == 400
    assert response.json()["errors"][0]["errors"][0]["field"] == "job_id"
    assert "secret" in response.json()["errors"][0]["errors"][0]["message"]
    assert "CorpusGithub0123" not in jobs_tables_text()
    assert not Event.objects.exists()


def test_otlp_job_id_carrying_a_secret_is_a_rejected_span(client, ingest_token):
    body = request(
        span(
            name="run",
            span_id=ROOT_ID,
            parent=b"",
            attributes=attrs(traceviz__job_id="job-AKIAZXCVBNMASDFGHJKL"),
        )
    ).SerializeToString()
    response = client.post(
        "/v1/traces",
        body,
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
    )
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 1
    assert "job_id" in answer.partial_success.error_message
    assert "secret" in answer.partial_success.error_message
    assert "AKIAZXCVBNMASDFGHJKL" not in jobs_tables_text()
    assert not Job.objects.exists()
