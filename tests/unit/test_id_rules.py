"""Ids are never refused for looking like data (docs/contract.md, "Ids"): only what breaks an id
(control characters, '.' and '..' segments: tests/unit/test_hostile_input.py) or a credential in
an unambiguous token format is refused. OTLP trace and span ids never are, whatever their value."""

import random

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from jobs.contract import events, ids, otlp
from jobs.contract.secret_text import luhn_valid
from tests.otlp_spans import START
from tests.secret_corpus import JWT, PEM_PKCS8

# Ids that look like data redaction masks in free text; as ids they name things.
ORDINARY_IDS = [
    "4111111111111111",  # the shape of a card number, passes the Luhn check
    "5555555555554444",
    "378282246310005",
    "order-4111111111111111",
    "4111-1111-1111-1111",
    "dXNlcjpzM2NyM3RQYXNz",  # base64 of "user:s3cr3tPass"
    "ZXhhbXBsZQ==",
    "session:1234",
    "token:42",
    "password_reset:991",
    "tests_passed-1843",
    "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    "3f786850e387550fdab836ed7e6dc881de23001b",
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
]
# Credentials in a format nothing else has: refused, since an id is shown as sent.
TOKEN_IDS = [
    "push-ghp_CorpusGithub0123456789abcdefABCDEF12",
    "job-sk-proj-SECRETsk0123456789abcdefXYZ",
    "job-AKIAZXCVBNMASDFGHJKL",
    JWT,
    PEM_PKCS8.replace("\n", " "),
    "postgres://admin:hunter2SecretPw@db.internal:5432/app",
    "glpat-CorpusGitlab0123456789ab",
]
ID_FIELDS = ["job_id", "event_id", "payload.node_id", "payload.correlation_id", "payload.retry_of"]


def item_with(field: str, value: str) -> dict:
    item = {"type": "node_started", "job_id": "j1", "payload": {"node_id": "n1"}}
    if field.startswith("payload."):
        item["payload"][field.removeprefix("payload.")] = value
    else:
        item[field] = value
    return item


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize("value", ORDINARY_IDS)
def test_id_that_looks_like_data_is_an_ordinary_id(field, value):
    event, errors = events.validate(item_with(field, value))
    assert errors == []
    name = field.removeprefix("payload.")
    assert (event.payload[name] if field.startswith("payload.") else getattr(event, name)) == value


@pytest.mark.parametrize("value", TOKEN_IDS)
def test_id_carrying_a_token_format_is_refused(value):
    event, errors = events.validate(item_with("job_id", value))
    assert event is None
    assert [error.field for error in errors] == ["job_id"]
    assert "secret" in errors[0].message


def decimal_hex(rng: random.Random, digits: int) -> str:
    """A random id of ``digits`` hex digits made of 0-9 only, half of them passing Luhn: the
    ids the card-number rule used to refuse."""
    body = f"{rng.randrange(1, 10 ** (digits - 1)):0{digits - 1}d}"
    passing = next(digit for digit in "0123456789" if luhn_valid(body + digit))
    return body + (passing if rng.random() < 0.5 else str((int(passing) + 1) % 10))


def random_ids(rng: random.Random, count: int) -> list[tuple[str, str, str]]:
    """(trace id, span id, parent span id): random hex, and as many made of digits only."""
    ids = []
    for index in range(count):
        if index % 2:
            ids.append((decimal_hex(rng, 32), decimal_hex(rng, 16), decimal_hex(rng, 16)))
        else:
            ids.append((rng.randbytes(16).hex(), rng.randbytes(8).hex(), rng.randbytes(8).hex()))
    return ids


def test_otlp_trace_and_span_ids_are_never_refused_for_their_value():
    ids = [("4111111111111111" * 2, "4111111111111111", "5555555555554444")]
    ids += random_ids(random.Random(32), 3000)
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    for trace_id, span_id, parent_id in ids:
        spans.append(
            Span(
                trace_id=bytes.fromhex(trace_id),
                span_id=bytes.fromhex(span_id),
                parent_span_id=bytes.fromhex(parent_id),
                name="step",
                start_time_unix_nano=START,
                end_time_unix_nano=START + 1_000_000,
            )
        )
    traces = otlp.to_batch(request, max_events=10_000)
    assert traces.rejections == []
    stored = [event for _index, event in traces.batch.events]
    assert [(e.job_id, e.payload["span_id"], e.payload["parent_span_id"]) for e in stored] == ids
    assert [e.event_id for e in stored] == [f"otlp:{t}:{s}" for t, s, _p in ids]


def test_a_large_sample_of_random_otlp_ids_is_accepted_as_ids():
    # About 17 in a million random span ids are 16 decimal digits that pass the Luhn check with
    # a card issuer's prefix: the card-number rule refused a few of these.
    rng = random.Random(60_000)
    refused = []
    for _ in range(200_000):
        trace_id, span_id = rng.randbytes(16).hex(), rng.randbytes(8).hex()
        for value in (f"otlp:{trace_id}:{span_id}", span_id):
            if ids.id_problem(value):
                refused.append(value)
    assert refused == []
