"""Secrets sent through the ingest API never reach the database or a page (docs/architecture.md):
a corpus of secret shapes in every free-text and object field the contract has, then a scan of
every jobs_* table's text and of every page's HTML."""

import json

import pytest
from django.core.management import call_command
from django.db import connection

from jobs.contract.events import MAX_REASON_BYTES, TRUNCATION_MARKER, truncate_text
from jobs.ingest import parity
from jobs.models import Escalation, Event, Job, Step
from tests.factories import event, finished, started, user
from tests.otlp_spans import attrs, request, root, sid, span

pytestmark = pytest.mark.django_db

JOB = "redact-job"
# (what the producer sends, the part that must never be stored or shown)
SECRET_TEXTS = [
    ("Authorization: Bearer tvzSecretBearer0123456789abcdef", "tvzSecretBearer0123456789abcdef"),
    ("upstream said Basic dXNlcjpzZWNyZXRwYXNzd29yZA==", "dXNlcjpzZWNyZXRwYXNzd29yZA"),
    ("called with sk-proj-SECRETsk0123456789abcdefXYZ", "SECRETsk0123456789abcdefXYZ"),
    ("anthropic sk-ant-api03-SecretAnt0123456789abcd", "SecretAnt0123456789abcd"),
    ("aws key AKIAZXCVBNMASDFGHJKL in env", "AKIAZXCVBNMASDFGHJKL"),
    ("dsn postgres://admin:hunter2SecretPw@db.internal:5432/app", "hunter2SecretPw"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Pl",
        "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9Pl",
    ),
    ("retry with token=tokSecretValue77&page=2", "tokSecretValue77"),
    ("config password: 'quotedSecretPw9'", "quotedSecretPw9"),
    ("gh ghp_SecretGithub0123456789abcdefABCDEF", "SecretGithub0123456789abcdefABCDEF"),
    ("slack xoxb-1234567890-SecretSlackTok", "SecretSlackTok"),
]
# Values under JSON keys named like a secret: masked whatever they look like.
SECRET_OBJECT = {
    "password": "plainPasswordValue1",
    "api_key": "plainApiKeyValue42",
    "client_secret": "plainClientSecret7",
    "Authorization": "Token plainHeaderToken3",
    "nested": {"db": {"PASSWD": "plainNestedPasswd5"}, "list": [{"access_key": "plainAccess9"}]},
    "session_id": "sess-kept-visible",  # an identifier, not a secret: kept
}
SECRET_VALUES = [secret for _text, secret in SECRET_TEXTS] + [
    "plainPasswordValue1",
    "plainApiKeyValue42",
    "plainClientSecret7",
    "plainHeaderToken3",
    "plainNestedPasswd5",
    "plainAccess9",
]
# One line each: an Authorization header is masked to the end of its line.
ALL_TEXT = "\n".join(text for text, _secret in SECRET_TEXTS)


def secret_events() -> list[dict]:
    """Every field that carries producer text or objects, each holding the whole corpus."""
    return [
        event(
            "job_started",
            JOB,
            0,
            name="redaction run",
            workflow="wf",
            metadata={"note": ALL_TEXT, **SECRET_OBJECT},
        ),
        started("n1", JOB, 1),
        finished(
            "n1",
            "permanent_failure",
            JOB,
            2,
            reason=ALL_TEXT,
            error_type="internal",
            payload_results={"output": ALL_TEXT, **SECRET_OBJECT},
            context={
                "actual_arguments": {"cmd": ALL_TEXT, **SECRET_OBJECT},
                "expected_arguments": SECRET_OBJECT,
                "step_definition": {"env": SECRET_OBJECT},
            },
            audit_trail=[ALL_TEXT, SECRET_OBJECT],
        ),
        started("n2", JOB, 3),
        finished("n2", "retryable_failure", JOB, 4, reason=ALL_TEXT, error_type="auth"),
        event(
            "graph.next_step.degraded",
            JOB,
            5,
            reason=ALL_TEXT,
            raw_output_preview=ALL_TEXT,
            validation_errors=[ALL_TEXT],
            attempts=3,
            provider="openai",
            model="m",
        ),
        event(
            "escalation_raised",
            JOB,
            6,
            kind="manual",
            message=ALL_TEXT,
            severity="high",
            node_id="n1",
        ),
        event("cancel_requested", JOB, 7, reason=ALL_TEXT),
        event("custom.unknown_type", JOB, 8, text=ALL_TEXT, **SECRET_OBJECT),
        event("job_finished", JOB, 9, status="failed", code="x", reason=ALL_TEXT),
    ]


def jobs_tables_text() -> str:
    """Every row of every jobs_* table, as one string."""
    chunks = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            if not table.startswith("jobs_"):
                continue
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            chunks.extend(
                json.dumps(row, default=str, ensure_ascii=False) for row in cursor.fetchall()
            )
    return "\n".join(chunks)


@pytest.fixture
def sent(send, settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    response = send(secret_events())
    assert response.status_code == 200, response.json()
    return response


def test_no_secret_reaches_any_jobs_table(sent):
    stored = jobs_tables_text()
    assert "[REDACTED]" in stored
    assert "sess-kept-visible" in stored  # redaction kept what is not a secret
    assert "postgres://admin:[REDACTED]@db.internal" in stored
    leaked = [secret for secret in SECRET_VALUES if secret in stored]
    assert leaked == []


def assert_pages_show_none(client, paths: list[str], secrets) -> None:
    """Every path answers 200 and none of ``secrets`` is in it; with every escalation's page."""
    escalations = Escalation.objects.values_list("pk", flat=True)
    paths = paths + [f"/escalations/{pk}/" for pk in escalations]
    assert len(paths) > 12
    for path in paths:
        response = client.get(path)
        assert response.status_code == 200, path
        page = response.content.decode()
        assert [secret for secret in secrets if secret in page] == [], path


def test_no_secret_reaches_any_page(sent, client):
    client.force_login(user("redaction-engineer", "engineer", "support"))
    job = Job.objects.get(job_id=JOB)
    paths = [
        "/",
        "/?status=all",
        "/escalations/",
        "/escalations/?status=all",
        "/dashboard/",
        f"/jobs/{JOB}/",
        f"/jobs/{JOB}/events.json",
        f"/jobs/{JOB}/events.ndjson",
        f"/api/v1/jobs/{JOB}",
        "/api/v1/jobs",
    ]
    paths += [f"/jobs/{JOB}/?step={step.node_id}:{step.attempt}" for step in job.steps.all()]
    assert_pages_show_none(client, paths, SECRET_VALUES)
    assert "[REDACTED]" in client.get(f"/jobs/{JOB}/?step=n1:1").content.decode()


# --- what was masked, said; redaction before truncation; keys that are secrets -----------------


def test_step_panel_and_api_say_which_paths_were_masked(sent, client, ingest_token):
    client.force_login(user("masked-engineer", "engineer"))
    panel = client.get(f"/jobs/{JOB}/?step=n1:1").content.decode()
    assert "masked at ingest: <code>reason</code>, <code>payload_results.output</code>" in panel
    assert "<code>payload_results.password</code>" in panel
    answer = client.get(f"/api/v1/jobs/{JOB}", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    masked = {step["node_id"]: step["masked"] for step in answer.json()["steps"]}
    assert masked["n2"] == ["reason"]
    assert masked["n1"][:3] == ["reason", "payload_results.output", "payload_results.password"]
    assert "context.actual_arguments.nested.list[0].access_key" in masked["n1"]
    assert [value for value in SECRET_VALUES if value in json.dumps(masked)] == []
    stored = Event.objects.get(job_id=JOB, type="node_finished", payload__node_id="n2")
    assert stored.masked == ["reason"]


def test_rebuilt_steps_keep_their_masked_paths(sent):
    before = dict(Step.objects.values_list("node_id", "masked"))
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert dict(Step.objects.values_list("node_id", "masked")) == before
    assert parity.differences(JOB) == []


def test_secret_straddling_the_64_kib_cut_of_a_reason_is_stored_masked_whole(send):
    token, tail = "ghp_" + "StraddleGithub0123456789abcdefABCDEF", " " + "y" * 2000
    marker = len(TRUNCATION_MARKER.format(dropped=70_000).encode())
    filler = "x" * (MAX_REASON_BYTES - marker - len(" ghp_Straddle"))
    reason = f"{filler} {token}{tail}"
    # Cut first, the reason would keep "ghp_Straddle": too short to be read as a token.
    assert truncate_text(reason).startswith(f"{filler} ghp_Straddle…")
    response = send([finished("n1", "permanent_failure", "cut-job", 1, reason=reason)])
    assert response.status_code == 200
    stored = Event.objects.get(job_id="cut-job").payload["reason"]
    assert stored.startswith(f"{filler} [REDACTED]") and "[truncated" in stored
    assert "ghp_" not in jobs_tables_text() and "StraddleGithub" not in jobs_tables_text()


def test_json_key_that_is_a_secret_is_stored_masked(send):
    token = "ghp_" + "KeyGithub0123456789abcdefABCDEFGH12"
    response = send([finished("n1", "success", "key-job", 1, payload_results={token: "repo"})])
    assert response.status_code == 200
    step = Job.objects.get(job_id="key-job").steps.get()
    assert step.payload_results == {"[REDACTED]": "repo"}
    assert step.masked == ["payload_results.[REDACTED]"]
    assert "KeyGithub" not in jobs_tables_text()


def test_trace_step_says_in_its_span_part_what_was_masked(client, ingest_token):
    spans = [
        root(attributes=attrs(traceviz__job_id="masked-trace")),
        span(
            name="call-api",
            span_id=sid(2),
            attributes=attrs(http__request__header__authorization="Bearer tvzSecretBearer0123"),
        ),
    ]
    response = client.post(
        "/v1/traces",
        request(*spans).SerializeToString(),
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
    )
    assert response.status_code == 200
    client.force_login(user("span-engineer", "engineer"))
    panel = client.get("/jobs/masked-trace/?step=call-api:1").content.decode()
    assert "masked at ingest: <code>attributes.http.request.header.authorization</code>" in panel
    assert panel.index("masked at ingest") > panel.index("Attempts of call-api")
    assert "tvzSecretBearer0123" not in panel
