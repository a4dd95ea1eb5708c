"""The ingest and read API through Django's test client (docs/contract.md and
docs/architecture.md)."""

import gc
import gzip
import json
from unittest import mock

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import OperationalError, connection
from django.test.utils import CaptureQueriesContext
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate as validate_spec

from jobs.contract import bodies
from jobs.models import Escalation, EscalationEntry, Event, IngestToken, Job, Notification, Step
from jobs.web.openapi import openapi_document
from tests.factories import event, finished, started, store, user

pytestmark = pytest.mark.django_db

GOOD = [
    event("job_started", "j1", at=0, event_id="a0", name="release"),
    started("build", "j1", at=1) | {"event_id": "a1"},
    finished("build", "success", "j1", at=2, payload_results={"artifact": "x"})
    | {"event_id": "a2"},
]


def body(response) -> dict:
    return json.loads(response.content)


def rows(model) -> list[tuple]:
    return sorted(model.objects.values_list(), key=repr)


def snapshot() -> dict:
    return {
        m.__name__: rows(m) for m in (Job, Step, Escalation, EscalationEntry, Notification, Event)
    }


# --- status codes ---------------------------------------------------------------------------


def test_all_events_stored_is_a_200_with_counts(send):
    response = send(GOOD)
    assert response.status_code == 200
    assert body(response) == {
        "received": 3,
        "stored": 3,
        "duplicates": 0,
        "rejected": 0,
        "errors": [],
    }
    assert Event.objects.filter(job_id="j1").count() == 3


def test_single_json_object_is_one_event(send):
    response = send(GOOD[0])
    assert (response.status_code, body(response)["stored"]) == (200, 1)


def test_array_with_one_bad_item_is_a_207_and_the_good_ones_are_stored(send):
    bad = finished("deploy", "success", "j1", at=3, attempt=0) | {"event_id": "bad"}
    response = send([*GOOD[:2], bad, GOOD[2]])
    assert response.status_code == 207
    assert body(response) == {
        "received": 4,
        "stored": 3,
        "duplicates": 0,
        "rejected": 1,
        "errors": [
            {
                "index": 2,
                "errors": [
                    {"field": "payload.attempt", "message": "must be an integer from 1 to 1000000"}
                ],
            }
        ],
    }
    assert sorted(Event.objects.values_list("event_id", flat=True)) == ["a0", "a1", "a2"]


def test_every_item_rejected_is_a_400(send):
    response = send([{"type": "t"}, {"job_id": "j1"}])
    assert response.status_code == 400
    assert body(response)["rejected"] == 2
    assert Event.objects.count() == 0


def test_body_that_is_not_json_is_a_400(send):
    response = send(b"{nope")
    assert response.status_code == 400
    assert body(response)["error"].startswith("body is not JSON")


def test_empty_body_is_a_400_no_events_in_body(send):
    response = send(b"[]")
    assert (response.status_code, body(response)) == (400, {"error": "no events in body"})


def test_missing_token_is_a_401(client):
    response = client.post("/api/v1/events", json.dumps(GOOD), content_type="application/json")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="traceviz"'
    assert Event.objects.count() == 0


def test_wrong_token_is_a_401(send):
    response = send(GOOD, HTTP_AUTHORIZATION="Bearer tvz_not-a-real-token")
    assert (response.status_code, body(response)) == (401, {"error": "invalid or revoked token"})
    assert Event.objects.count() == 0


def test_revoked_token_is_a_401(send, ingest_token):
    call_command("revoke_ingest_token", "test-producer", stdout=None)
    response = send(GOOD)
    assert response.status_code == 401
    assert Event.objects.count() == 0


def test_non_bearer_authorization_is_a_401(send):
    assert send(GOOD, HTTP_AUTHORIZATION="Basic dXNlcjpwdw==").status_code == 401


class ExplodingInput:
    """A request stream that fails the test if anything reads it."""

    def read(self, *args):
        raise AssertionError("the body was read")

    readline = read


def test_declared_content_length_over_10_mb_is_a_413_without_reading_the_body(send):
    response = send(
        b"[]", CONTENT_LENGTH=str(100 * 1024 * 1024), **{"wsgi.input": ExplodingInput()}
    )
    assert response.status_code == 413
    assert body(response) == {
        "error": f"body of {100 * 1024 * 1024} bytes is over the limit of {10 * 1024 * 1024} bytes"
    }


def test_gzip_bomb_is_a_413(send):
    bomb = gzip.compress(b" " * (10 * 1024 * 1024 + 1))
    response = send(bomb, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413
    assert body(response) == {"error": f"body inflates past the limit of {10 * 1024 * 1024} bytes"}


def test_batch_of_10001_events_is_a_413(send):
    items = [{"type": "t", "job_id": "j1", "event_id": f"e{i}"} for i in range(10_001)]
    response = send(items)
    assert response.status_code == 413
    assert "10000" in body(response)["error"]
    assert Event.objects.count() == 0


def test_wrong_content_type_is_a_415(send):
    response = send(b"type=t", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415


def test_bad_gzip_is_a_400(send):
    response = send(b"not gzip at all", HTTP_CONTENT_ENCODING="gzip")
    assert (response.status_code, body(response)) == (400, {"error": "body is not valid gzip data"})


def test_get_on_the_ingest_endpoint_is_a_405(client):
    assert client.get("/api/v1/events").status_code == 405


# --- formats ----------------------------------------------------------------------------------


def test_ndjson_body_is_stored(send):
    response = send(GOOD, content_type="application/x-ndjson")
    assert (response.status_code, body(response)["stored"]) == (200, 3)
    assert Job.objects.get(job_id="j1").completed_node_ids == ["build"]


def test_ndjson_with_one_bad_line_is_a_207(send):
    lines = json.dumps(GOOD[0]).encode() + b"\nnot json\n" + json.dumps(GOOD[1]).encode()
    response = send(lines, content_type="application/x-ndjson")
    assert response.status_code == 207
    assert [e["index"] for e in body(response)["errors"]] == [1]
    assert Event.objects.count() == 2


def test_gzip_body_is_stored(send):
    response = send(gzip.compress(json.dumps(GOOD).encode()), HTTP_CONTENT_ENCODING="gzip")
    assert (response.status_code, body(response)["stored"]) == (200, 3)


# --- storage ----------------------------------------------------------------------------------


def test_same_batch_twice_changes_nothing(send):
    items = [
        *GOOD,
        finished(
            "upload", "permanent_failure", "j1", at=3, error_type="auth", reason="token expired"
        )
        | {"event_id": "a3"},
    ]
    send(items)
    before = snapshot()
    again = send(items)
    assert again.status_code == 200
    assert body(again) == {"received": 4, "stored": 0, "duplicates": 4, "rejected": 0, "errors": []}
    assert snapshot() == before
    assert Escalation.objects.get().kind == "user_action"


def test_events_without_event_id_dedupe_on_resend(send):
    items = [{"type": "node_finished", "job_id": "j9", "payload": {"node_id": "n1"}}]
    send(items)
    response = send(items)
    assert body(response)["duplicates"] == 1
    assert Event.objects.filter(job_id="j9").count() == 1


def test_repeat_within_one_batch_is_stored_once_and_counted_duplicate(send):
    response = send([GOOD[0], GOOD[0]])
    assert (body(response)["stored"], body(response)["duplicates"]) == (1, 1)


def test_each_stored_event_records_its_token(send, ingest_token):
    _other, other_raw = IngestToken.issue("other-producer")
    send(GOOD[:1])
    send(GOOD[1:], HTTP_AUTHORIZATION=f"Bearer {other_raw}")
    assert dict(Event.objects.values_list("event_id", "token__name")) == {
        "a0": "test-producer",
        "a1": "other-producer",
        "a2": "other-producer",
    }


def test_token_records_when_it_was_last_used(send):
    send(GOOD)
    assert IngestToken.objects.get(name="test-producer").last_used_at is not None


def every_stored_text() -> str:
    """Every row of every table, as text."""
    dumped = []
    with connection.cursor() as cursor:
        for model in apps.get_models(include_auto_created=True):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(model._meta.db_table)}")
            dumped.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(dumped)


def test_secrets_in_a_payload_are_stored_in_no_row(send):
    secrets = [
        "hunter2-VERY-secret",
        "sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm",
        "AKIAZZZZZZZZZZZZZZZZ",
        "opaque-api-key-value-77",
        "ghp_0123456789abcdefghijABCDEFGHIJ",
    ]
    send(
        [
            event(
                "job_started",
                "sec-1",
                at=0,
                metadata={"db": "postgres://u:hunter2-VERY-secret@h/d"},
            ),
            finished(
                "n1",
                "permanent_failure",
                "sec-1",
                at=1,
                error_type="auth",
                reason="call failed with key sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm",
                context={
                    "actual_arguments": {
                        "api_key": "opaque-api-key-value-77",
                        "aws": "AKIAZZZZZZZZZZZZZZZZ",
                    }
                },
                payload_results={"note": "token=ghp_0123456789abcdefghijABCDEFGHIJ"},
            ),
            event(
                "escalation_raised",
                "sec-1",
                at=2,
                kind="x",
                message="leaked sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm",
            ),
        ]
    )
    assert Event.objects.filter(job_id="sec-1").count() == 3
    assert Escalation.objects.filter(job__job_id="sec-1").count() == 2
    stored = every_stored_text()
    assert "[REDACTED]" in stored
    assert [secret for secret in secrets if secret in stored] == []


# --- database outages -------------------------------------------------------------------------


def test_database_error_on_ingest_is_a_503_with_retry_after(send):
    with mock.patch("jobs.ingest.store.store_batch", side_effect=OperationalError("db down")):
        response = send(GOOD)
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert body(response) == {"error": "database unavailable, retry later"}


def test_healthz_is_ok_with_a_database(client):
    response = client.get("/healthz")
    assert (response.status_code, body(response)) == (
        200,
        {"status": "ok", "database": "ok", "projection": {"dirty_jobs": 0, "lag_seconds": 0.0}},
    )


def test_healthz_is_a_503_with_retry_after_when_the_database_is_down(client):
    with mock.patch("jobs.web.api.connection.cursor", side_effect=OperationalError("down")):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert body(response)["status"] == "unavailable"


# --- read API ---------------------------------------------------------------------------------


def auth(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def make_jobs(count: int) -> None:
    store([event("job_started", f"job-{i:02d}", at=i) for i in range(count)])
    store([finished("n1", "permanent_failure", "job-01", at=5)])


def test_jobs_list_needs_a_token_or_a_login(client):
    assert client.get("/api/v1/jobs").status_code == 401


def test_jobs_list_accepts_a_logged_in_user(client):
    make_jobs(2)
    client.force_login(user("operator1", "operator"))
    response = client.get("/api/v1/jobs")
    assert response.status_code == 200
    assert [j["job_id"] for j in body(response)["jobs"]] == ["job-01", "job-00"]


def test_jobs_list_is_newest_first_with_a_token(client, ingest_token):
    make_jobs(3)
    response = client.get("/api/v1/jobs", **auth(ingest_token))
    assert [j["job_id"] for j in body(response)["jobs"]] == ["job-02", "job-01", "job-00"]
    assert body(response)["next_cursor"] is None


def test_jobs_list_filters_by_status(client, ingest_token):
    make_jobs(3)
    response = client.get("/api/v1/jobs?status=failed", **auth(ingest_token))
    assert [(j["job_id"], j["status"]) for j in body(response)["jobs"]] == [("job-01", "failed")]


def test_jobs_list_filters_by_several_statuses(client, ingest_token):
    make_jobs(3)
    response = client.get("/api/v1/jobs?status=failed,running", **auth(ingest_token))
    assert len(body(response)["jobs"]) == 3


def test_jobs_list_unknown_status_is_a_400(client, ingest_token):
    response = client.get("/api/v1/jobs?status=broken", **auth(ingest_token))
    assert (response.status_code, body(response)) == (
        400,
        {"error": "status: Select a valid choice. broken is not one of the available choices."},
    )


def test_jobs_list_keyset_pagination_visits_every_job_once(client, ingest_token):
    make_jobs(7)
    store([event("job_started", "same-ts-a", at=3), event("job_started", "same-ts-b", at=3)])
    seen, cursor, pages = [], None, 0
    while True:
        url = "/api/v1/jobs?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = body(client.get(url, **auth(ingest_token)))
        seen += [j["job_id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    expected = [j.job_id for j in Job.objects.order_by("-started_at", "-id")]
    assert (seen, pages) == (expected, 5)
    assert len(set(seen)) == 9


@pytest.mark.parametrize("cursor", ["garbage!", "bm90LWEtY3Vyc29y", ""])
def test_jobs_list_bad_cursor_is_a_400(client, ingest_token, cursor):
    make_jobs(1)
    response = client.get(f"/api/v1/jobs?cursor={cursor}x", **auth(ingest_token))
    assert (response.status_code, body(response)) == (
        400,
        {"error": "cursor: not a page link this list made"},
    )


@pytest.mark.parametrize("limit", ["0", "501", "ten"])
def test_jobs_list_bad_limit_is_a_400(client, ingest_token, limit):
    response = client.get(f"/api/v1/jobs?limit={limit}", **auth(ingest_token))
    assert response.status_code == 400


def detail_stream() -> list[dict]:
    return [
        event("job_started", "j1", at=0),
        finished("n1", "success", "j1", at=1, payload_results={"a": 1}),
        finished(
            "n2", "retryable_failure", "j1", at=2, reason="network timeout", error_type="auth"
        ),
    ]


def test_job_detail_lists_completed_nodes_in_completion_order(client, ingest_token):
    # n2 completes after n3 (its first attempt failed); n1's second success completes nothing.
    store(
        [
            event("job_started", "j1", at=0),
            finished("n1", job_id="j1", at=1),
            finished("n2", "retryable_failure", "j1", at=2),
            finished("n3", job_id="j1", at=3),
            finished("n2", job_id="j1", at=4, attempt=2),
            finished("n1", job_id="j1", at=5, attempt=2),
        ]
    )
    job = body(client.get("/api/v1/jobs/j1", **auth(ingest_token)))
    assert job["completed_node_ids"] == ["n1", "n3", "n2"]


@pytest.mark.speed_guard
def test_job_detail_queries_do_not_grow_with_its_steps(client, ingest_token):
    for job_id, steps in (("small", 2), ("big", 40)):
        store(
            [
                event("job_started", job_id, at=0),
                *(finished(f"n{i}", job_id=job_id, at=1 + i) for i in range(steps)),
            ]
        )
    counts = []
    for job_id in ("small", "big"):
        with CaptureQueriesContext(connection) as queries:
            job = body(client.get(f"/api/v1/jobs/{job_id}", **auth(ingest_token)))
        counts.append(len(queries.captured_queries))
        assert len(job["completed_node_ids"]) == len(job["steps"])
    assert counts[0] == counts[1]


def test_job_detail_has_the_documented_keys_and_values(client, ingest_token):
    store(detail_stream())
    response = client.get("/api/v1/jobs/j1", **auth(ingest_token))
    job = body(response)
    assert response.status_code == 200
    assert {
        "job_id",
        "status",
        "completed_node_ids",
        "cursor_node",
        "payload_results",
        "steps",
        "escalations",
    } <= set(job)
    assert (
        job["job_id"],
        job["status"],
        job["completed_node_ids"],
        job["cursor_node"],
        job["payload_results"],
    ) == ("j1", "paused:approval", ["n1"], "n1", {"a": 1})
    assert [
        {
            k: s[k]
            for k in (
                "node_id",
                "attempt",
                "result_type",
                "segment",
                "reason",
                "ignored_stale",
                "compensated",
            )
        }
        for s in job["steps"]
    ] == [
        {
            "node_id": "n1",
            "attempt": 1,
            "result_type": "success",
            "segment": "ok",
            "reason": "",
            "ignored_stale": False,
            "compensated": False,
        },
        {
            "node_id": "n2",
            "attempt": 1,
            "result_type": "retryable_failure",
            "segment": "retryable",
            "reason": "network timeout",
            "ignored_stale": False,
            "compensated": False,
        },
    ]
    (escalation,) = job["escalations"]
    assert {k: escalation[k] for k in ("kind", "status", "node_id")} == {
        "kind": "user_action",
        "status": "open",
        "node_id": "n2",
    }
    assert escalation["id"] == Escalation.objects.get().pk


def test_job_detail_of_an_unknown_job_is_a_404(client, ingest_token):
    response = client.get("/api/v1/jobs/nope", **auth(ingest_token))
    assert (response.status_code, body(response)) == (404, {"error": "no job 'nope'"})


def test_job_detail_needs_a_token_or_a_login(client):
    store(detail_stream())
    assert client.get("/api/v1/jobs/j1").status_code == 401


def test_job_detail_with_a_slash_in_the_job_id(client, ingest_token):
    store([event("job_started", "team/run-1", at=0)])
    assert body(client.get("/api/v1/jobs/team/run-1", **auth(ingest_token)))["job_id"] == (
        "team/run-1"
    )


def test_openapi_document_is_a_valid_openapi_3_document(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    validate_spec(body(response))


def schema_validator(name: str) -> OAS31Validator:
    return OAS31Validator(
        {"$ref": f"#/components/schemas/{name}", "components": openapi_document()["components"]}
    )


def test_job_detail_response_matches_its_openapi_schema(client, ingest_token):
    store(
        [
            *detail_stream(),
            event("escalation_raised", "j1", at=3, kind="x", message="m"),
            event("graph.next_step.degraded", "j1", at=4, attempts=2),
        ]
    )
    job = body(client.get("/api/v1/jobs/j1", **auth(ingest_token)))
    assert list(schema_validator("Job").iter_errors(job)) == []


def test_jobs_list_response_matches_its_openapi_schema(client, ingest_token):
    make_jobs(2)
    page = body(client.get("/api/v1/jobs?limit=1", **auth(ingest_token)))
    document = openapi_document()
    schema = document["paths"]["/api/v1/jobs"]["get"]["responses"]["200"]
    validator = OAS31Validator(
        {
            **schema["content"]["application/json"]["schema"],
            "components": document["components"],
        }
    )
    assert list(validator.iter_errors(page)) == []


def test_ingest_response_matches_its_openapi_schema(send):
    response = send([GOOD[0], {"type": "t"}])
    assert list(schema_validator("IngestResult").iter_errors(body(response))) == []


def test_schema_validator_rejects_a_job_missing_a_required_key(client, ingest_token):
    store(detail_stream())
    job = body(client.get("/api/v1/jobs/j1", **auth(ingest_token)))
    del job["steps"]
    assert [e.message for e in schema_validator("Job").iter_errors(job)] == [
        "'steps' is a required property"
    ]


def test_a_request_is_parsed_and_stored_without_the_cyclic_collector(send, collector_states):
    seen = collector_states(bodies, "parse_body")
    assert send(GOOD).status_code == 200
    assert seen == [False] and gc.isenabled()
