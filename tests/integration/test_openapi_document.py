"""The OpenAPI document against the API it describes (issue 11): real answers of every JSON
endpoint validate against the served document at their documented status, with no key more or
less; the limits it states follow settings; it is a valid OpenAPI 3.1 document."""

import json
import re

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper
from jsonschema import Draft202012Validator
from openapi_spec_validator import OpenAPIV31SpecValidator

from jobs.contract.schema import event_schema
from tests.factories import event, finished, started, store

pytestmark = pytest.mark.django_db


def served_document(client) -> dict:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def documented_errors(document: dict, path: str, method: str, response) -> list[str]:
    """Why ``response`` does not match what ``document`` says of ``method path`` at its status
    (an undocumented status is itself an error); empty when it matches."""
    answers = document["paths"][path][method]["responses"]
    if str(response.status_code) not in answers:
        return [f"status {response.status_code} is not documented"]
    schema = answers[str(response.status_code)]["content"]["application/json"]["schema"]
    validator = Draft202012Validator(
        {**schema, "components": document["components"]},
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )
    return [error.message for error in validator.iter_errors(json.loads(response.content))]


def auth(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def store_a_rich_job() -> None:
    """A job whose answer has every kind of value: nulls and strings, steps with and without
    times, a finding, escalations from replay and from the producer."""
    store(
        [
            event("job_started", "j1", at=0, name="release", retry_of="j0"),
            started("n1", "j1", at=1, step_index=0, trace_span_id="s1"),
            finished("n1", "success", "j1", at=2, payload_results={"a": [1, None]}, duration_ms=5),
            finished("n2", "retryable_failure", "j1", at=3, reason="timeout", error_type="auth"),
            event("escalation_raised", "j1", at=4, kind="x", message="m", severity="high"),
        ]
    )
    store([event("job_started", "j2", at=5)])


def test_jobs_list_answer_matches_the_document(client, ingest_token):
    store_a_rich_job()
    document = served_document(client)
    for url in ("/api/v1/jobs", "/api/v1/jobs?limit=1"):
        response = client.get(url, **auth(ingest_token))
        assert response.status_code == 200
        assert documented_errors(document, "/api/v1/jobs", "get", response) == []


def test_job_detail_answer_matches_the_document(client, ingest_token):
    store_a_rich_job()
    response = client.get("/api/v1/jobs/j1", **auth(ingest_token))
    job = json.loads(response.content)
    assert (len(job["steps"]), len(job["escalations"]), len(job["findings"])) == (2, 2, 1)
    path = "/api/v1/jobs/{job_id}"
    assert documented_errors(served_document(client), path, "get", response) == []


@pytest.mark.parametrize(
    ("url", "status"),
    [("/api/v1/jobs/nope", 404), ("/api/v1/jobs?limit=0", 400), ("/api/v1/jobs?cursor=x", 400)],
)
def test_read_api_refusals_match_the_document(client, ingest_token, url, status):
    response = client.get(url, **auth(ingest_token))
    assert response.status_code == status
    path = "/api/v1/jobs/{job_id}" if "/jobs/" in url else "/api/v1/jobs"
    assert documented_errors(served_document(client), path, "get", response) == []


GOOD = event("job_started", "j1", at=0)
BAD = finished("n1", "success", "j1", at=1, attempt=0)


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ([GOOD], 200),
        ([GOOD, BAD], 207),
        ([BAD, {"job_id": "j1"}], 400),
        ("{not json", 400),
        ("[]", 400),
    ],
)
def test_ingest_answers_match_the_document(client, send, body, status):
    response = send(body)
    assert response.status_code == status
    assert documented_errors(served_document(client), "/api/v1/events", "post", response) == []


def at_bound(fragment: dict, high: bool):
    """A value the schema fragment allows, at its upper or lower bound."""
    if "const" in fragment:
        return fragment["const"]
    if "enum" in fragment:
        return fragment["enum"][-1 if high else 0]
    kind = fragment.get("type")
    if kind in ("integer", "number"):
        return fragment["maximum" if high else "minimum"]
    if fragment.get("format") == "date-time":
        return "9999-12-31T23:59:59Z" if high else "0001-01-01T00:00:00Z"
    if hex_digits := re.fullmatch(r"\^\[0-9a-f\]\{(\d+)\}\$", fragment.get("pattern", "")):
        return ("f" if high else "0") * int(hex_digits.group(1))
    if kind == "array" and "items" in fragment:  # a bounded list: its bound of bounded items
        size = fragment.get("maxItems", 1) if high else fragment.get("minItems", 0)
        return [at_bound(fragment["items"], high)] * size
    if kind == "string":  # free text has no upper bound: a long line stands in for it
        return "x" * (fragment.get("maxLength", 1000) if high else fragment.get("minLength", 0))
    return {"object": {}, "array": [], "boolean": high}.get(kind, "any value")


def test_an_event_at_every_documented_bound_is_stored(client, send):
    """What the coverage phase of schemathesis would send one request at a time: every bound
    of every field of every known type, in one batch, all stored. Each event gets a trace of
    its own (still at the bound's digit but for the last): events of one trace go to the job
    that named it first, where two events at the same bound would share an event id."""
    document = served_document(client)
    known_types = document["components"]["schemas"]["Event"]["oneOf"][:-1]
    batch = []
    for index, (branch, high) in enumerate(
        (branch, high) for branch in known_types for high in (False, True)
    ):
        envelope = branch["properties"]
        payload = {
            name: at_bound(fragment, high)
            for name, fragment in envelope["payload"]["properties"].items()
        }
        if "trace_id" in payload:
            payload["trace_id"] = payload["trace_id"][:-1] + f"{index % 15 + 1:x}"
        batch.append(
            {
                "type": at_bound(envelope["type"], high),
                "job_id": f"bounds-{branch['title']}-{high}",
                "event_id": at_bound(envelope["event_id"], high),
                "seq": at_bound(envelope["seq"], high),
                "payload": payload,
            }
        )
    response = send(batch)
    assert json.loads(response.content) == {
        "received": len(batch),
        "stored": len(batch),
        "duplicates": 0,
        "rejected": 0,
        "errors": [],
    }
    assert documented_errors(document, "/api/v1/events", "post", response) == []


def test_ingest_refusals_without_a_token_or_over_the_limit_match_the_document(
    client, send, settings
):
    settings.TRACEVIZ_MAX_BATCH_EVENTS = 1
    document = served_document(client)
    for response, status in [
        (send([GOOD], HTTP_AUTHORIZATION="Bearer nope"), 401),
        (send([GOOD, GOOD]), 413),
        (send([GOOD], content_type="text/plain"), 415),
    ]:
        assert response.status_code == status
        assert documented_errors(document, "/api/v1/events", "post", response) == []


def test_health_answers_match_the_document(client, monkeypatch):
    document = served_document(client)
    healthy = client.get("/healthz")

    def refuse(self, *args, **kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr(BaseDatabaseWrapper, "cursor", refuse)
    unhealthy = client.get("/healthz")
    assert (healthy.status_code, unhealthy.status_code) == (200, 503)
    assert documented_errors(document, "/healthz", "get", healthy) == []
    assert documented_errors(document, "/healthz", "get", unhealthy) == []


def test_a_key_the_document_lacks_or_a_missing_key_fails_validation(client, ingest_token):
    """The document is exact, so the tests above fail when a view and its schema disagree."""
    store_a_rich_job()
    document = served_document(client)
    response = client.get("/api/v1/jobs/j1", **auth(ingest_token))
    job = json.loads(response.content)
    extra_key = {**job, "steps": [{**job["steps"][0], "surprise": 1}]}
    missing_key = {key: value for key, value in job.items() if key != "cursor_node"}
    validator = Draft202012Validator(
        {"$ref": "#/components/schemas/Job", "components": document["components"]}
    )
    assert [error.message for error in validator.iter_errors(extra_key)] == [
        "Additional properties are not allowed ('surprise' was unexpected)"
    ]
    assert [error.message for error in validator.iter_errors(missing_key)] == [
        "'cursor_node' is a required property"
    ]


def test_the_event_schema_is_the_contracts(client):
    assert served_document(client)["components"]["schemas"]["Event"] == event_schema()


def test_the_limits_the_document_states_follow_settings(client, ingest_token, settings):
    settings.TRACEVIZ_MAX_BATCH_EVENTS = 7
    settings.TRACEVIZ_MAX_BODY_BYTES = 2048
    settings.TRACEVIZ_API_MAX_PAGE_SIZE = 30
    paths = served_document(client)["paths"]
    ingest = paths["/api/v1/events"]["post"]
    batch = ingest["requestBody"]["content"]["application/json"]["schema"]["oneOf"][1]
    limit = next(p for p in paths["/api/v1/jobs"]["get"]["parameters"] if p["name"] == "limit")
    assert batch["maxItems"] == 7
    assert ingest["responses"]["413"]["description"] == (
        "body over 2,048 bytes (after decompression) or over 7 events"
    )
    assert (
        paths["/v1/traces"]["post"]["responses"]["413"]["description"]
        == (ingest["responses"]["413"]["description"])
    )
    assert limit["schema"]["maximum"] == 30
    refused = client.get("/api/v1/jobs?limit=31", **auth(ingest_token))
    assert json.loads(refused.content) == {"error": "limit must be from 1 to 30"}


def test_the_document_is_a_valid_openapi_3_1_document(client):
    document = served_document(client)
    assert document["openapi"] == "3.1.0"
    OpenAPIV31SpecValidator(document).validate()


def test_compare_answers_match_the_document(client, ingest_token):
    from datetime import UTC, datetime

    from jobs.management.demo import etl_run
    from tests.integration.test_compare import store_trace

    store(etl_run("etl-1", datetime(2026, 3, 1, tzinfo=UTC), "v12"))
    store(etl_run("etl-2", datetime(2026, 3, 2, tzinfo=UTC), "v13"))
    a, b = store_trace("a" * 32, "gpt-4o"), store_trace("b" * 32, "gpt-4o-mini")
    document = served_document(client)
    for query, status in (
        ("a=etl-2", 200),
        ("a=etl-2&b=etl-1", 200),
        (f"a={a}&b={b}", 200),
        (f"a={b}&b={a}", 200),
        ("b=etl-1", 400),
        ("a=etl-1", 404),
        ("a=etl-2&b=nope", 404),
    ):
        response = client.get(f"/api/v1/compare?{query}", **auth(ingest_token))
        assert response.status_code == status, query
        assert documented_errors(document, "/api/v1/compare", "get", response) == [], query
