"""The secret-format corpus (issue 15): every format masked wherever a producer may put it,
every ordinary id and hash kept, and ids that carry a secret refused."""

import pytest

from jobs.contract.events import validate
from jobs.contract.redaction import MASK, redact, redact_payload, redact_text
from jobs.contract.secret_text import luhn_valid
from tests.secret_corpus import (
    CARD_NUMBERS,
    ORDINARY_NUMBERS,
    ORDINARY_TEXTS,
    SECRET_OBJECT,
    SECRET_OBJECT_VALUES,
    SECRET_TEXTS,
)


def test_corpus_has_more_than_forty_formats():
    assert len({name for name, _text, _secret in SECRET_TEXTS}) >= 45
    assert len(ORDINARY_TEXTS) >= 40


@pytest.mark.parametrize(("name", "text", "secret"), SECRET_TEXTS, ids=[s[0] for s in SECRET_TEXTS])
def test_secret_format_in_text_is_masked(name, text, secret):
    redacted = redact_text(text)
    assert secret not in redacted
    assert MASK in redacted


@pytest.mark.parametrize(("name", "text", "secret"), SECRET_TEXTS, ids=[s[0] for s in SECRET_TEXTS])
def test_secret_format_inside_a_longer_text_is_masked(name, text, secret):
    long_text = "context " * 40 + text + " trailing words" * 20
    assert secret not in redact_text(long_text)


@pytest.mark.parametrize("text", ORDINARY_TEXTS)
def test_ordinary_id_hash_or_text_survives(text):
    assert redact_text(text) == text
    assert redact_text(f"step failed: {text} (see log)") == f"step failed: {text} (see log)"


@pytest.mark.parametrize(("name", "text", "secret"), SECRET_TEXTS, ids=[s[0] for s in SECRET_TEXTS])
def test_secret_beside_an_id_or_timestamp_is_masked(name, text, secret):
    # Ids and timestamps skip the token scan only when they are the whole text.
    for shaped in ("otlp:5b8d0fd3a4c1e2f30a1b2c3d4e5f6a7b:", "2026-11-23T04:06:52.444166Z "):
        assert secret not in redact_text(shaped + text)


def test_values_under_secret_keys_are_masked_and_ids_kept():
    redacted = redact({"outer": SECRET_OBJECT})
    flat = repr(redacted)
    assert [value for value in SECRET_OBJECT_VALUES if value in flat] == []
    assert redacted["outer"]["session_id"] == "sess-kept-visible"
    assert redacted["outer"]["headers"][0] == ["Authorization", MASK]
    assert redacted["outer"]["har"] == [{"name": "Cookie", "value": MASK}]


def test_header_list_of_ordinary_headers_is_kept():
    headers = [["Accept", "application/json"], ["X-Request-Id", "req-42"]]
    assert redact({"headers": headers}) == {"headers": headers}


def test_json_object_inside_a_string_keeps_its_other_fields():
    redacted = redact_text('{"password": "inJsonPw123", "user": "bob"}')
    assert redacted == '{"password": "[REDACTED]", "user": "bob"}'


def test_url_credentials_keep_user_and_host():
    redacted = redact_text("amqp://worker:pa@ss9word@rabbit:5672/vhost")
    assert redacted == "amqp://worker:[REDACTED]@rabbit:5672/vhost"


def test_authorization_keeps_its_scheme_word():
    assert redact_text("Authorization: Token abc123def456") == "Authorization: Token " + MASK


def test_secret_in_every_otlp_part_is_masked():
    payload = {
        "name": "call sk-proj-SECRETsk0123456789abcdefXYZ",
        "status": {"code": "error", "message": "Authorization: Bearer tvzSecretBearer0123456789"},
        "attributes": {"http.request.header.cookie": ["sid=plainCookieValue17"]},
        "events": [{"name": "exception", "attributes": {"exception.message": SECRET_TEXTS[9][1]}}],
        "resource": {"db.connection_string": "redis://:p4ss/w0rd@cache.internal:6379/0"},
    }
    flat = repr(redact_payload(payload, 512))
    for secret in ("SECRETsk0123", "SecretBearer0123", "plainCookieValue17", "hunter2", "p4ss"):
        assert secret not in flat


@pytest.mark.parametrize(
    ("digits", "valid"),
    [("4111111111111111", True), ("4111111111111112", False), ("378282246310005", True)],
)
def test_luhn_check(digits, valid):
    assert luhn_valid(digits) is valid


@pytest.mark.parametrize(
    "field", ["job_id", "event_id", "type", "payload.node_id", "payload.correlation_id"]
)
def test_id_carrying_a_secret_is_refused_with_a_field_error(field):
    secret_id = "job-sk-proj-SECRETsk0123456789abcdefXYZ"
    item = {"type": "node_started", "job_id": "j1", "payload": {"node_id": "n1"}}
    if field.startswith("payload."):
        item["payload"][field.split(".", 1)[1]] = secret_id
    else:
        item[field] = secret_id
    event, errors = validate(item)
    assert event is None
    assert [error.field for error in errors] == [field]
    assert "secret" in errors[0].message


@pytest.mark.parametrize("text", ORDINARY_TEXTS[:12])
def test_ordinary_ids_are_accepted(text):
    event, errors = validate({"type": "node_started", "job_id": text, "payload": {"node_id": text}})
    assert errors == []
    assert event.job_id == text


@pytest.mark.parametrize("number", CARD_NUMBERS)
def test_a_card_number_sent_as_a_json_number_is_masked(number):
    redacted, masked = redact_payload({"card": number, "charge": {"pan": [number]}}, 512)
    assert redacted == {"card": MASK, "charge": {"pan": [MASK]}}
    assert masked == ("card", "charge.pan[0]")


@pytest.mark.parametrize("number", ORDINARY_NUMBERS + CARD_NUMBERS)
def test_a_number_under_an_id_key_or_not_a_card_is_kept(number):
    payload = {"order_id": number, "ids": [number]}
    if number not in CARD_NUMBERS:
        payload["amount"] = number
    assert redact_payload(payload, 512) == (payload, ())
