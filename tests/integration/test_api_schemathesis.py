"""The JSON API against its own OpenAPI document (issue 7): schemathesis generates requests from
/api/v1/openapi.json and sends them to a live server; no answer may be a 5xx, and every answer
must conform to the document (status code, content type, headers, body schema)."""

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from jobs.models import IngestToken
from jobs.web.openapi import openapi_document
from tests.factories import event, finished, started, store

# Invalid data is refused with these; 413 is the documented answer to a batch over the limit.
REFUSALS = [400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429]
CONFIG = schemathesis.config.SchemathesisConfig.from_dict(
    {
        "checks": {"negative_data_rejection": {"expected-statuses": REFUSALS}},
        "operations": [
            # An event can be schema-valid and still break a rule the schema cannot say (a
            # timestamp in year 0, a lone surrogate): the documented 400 with per-item errors.
            # No coverage phase here: it would send each bound of each event field as its own
            # request (~3,000 bodies, minutes on PostgreSQL). tests/unit/test_event_schema.py
            # checks those bounds against the contract field by field, and
            # test_openapi_document.py stores an event at every bound in one batch; the fuzzing
            # phase still sends generated events and checks every answer.
            {
                "include-operation-id": "ingestEvents",
                "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", 400]}},
                "phases": {"coverage": {"enabled": False}},
            },
            # The cursor is opaque: a string the API did not hand out is a 400 by design.
            # Unknown query parameters and headers are ignored by design (200), which the
            # negative-data check would count as accepting invalid data.
            {
                "include-operation-id": "listJobs",
                "checks": {
                    "positive_data_acceptance": {"expected-statuses": ["2xx", 400]},
                    "negative_data_rejection": {"enabled": False},
                },
            },
        ],
    }
)
schema = schemathesis.openapi.from_dict(openapi_document(), config=CONFIG)


@schemathesis.serializer("application/x-protobuf")
def protobuf_body(ctx, value):
    """Generated binary bodies go out as they are (the server must refuse what does not decode)."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


@schemathesis.serializer("application/x-ndjson")
def ndjson_body(ctx, value):
    return value.encode("utf-8") if isinstance(value, str) else json.dumps(value).encode()


@pytest.fixture
def api_token(transactional_db) -> str:
    token, raw = IngestToken.issue("schemathesis")
    IngestToken.objects.filter(pk=token.pk).update(rate_limit_per_minute=10**6)
    store(
        [
            event("job_started", "st-job", 0),
            started("n1", "st-job", 1),
            finished("n1", "retryable_failure", "st-job", 2, error_type="auth"),
        ]
    )
    return raw


@schema.parametrize()
@settings(
    max_examples=25,
    derandomize=True,  # the same examples on every CI run
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_api_conforms_to_its_openapi_document(case, live_server, api_token):
    response = case.call(base_url=live_server.url, headers={"Authorization": f"Bearer {api_token}"})
    assert response.status_code < 500, (case.method, case.path, response.text[:500])
    case.validate_response(response)
