"""The event contract v1 at the parser level (docs/contract.md): every bad input of the issue."""

import gzip
import json
import zlib

import pytest

from jobs.contract import bodies, events
from jobs.contract.bodies import BodyError

NDJSON = "application/x-ndjson"
JSON = "application/json"


def node_finished(**payload) -> dict:
    return {"type": "node_finished", "job_id": "j1", "payload": {"node_id": "n1", **payload}}


def errors_of(item) -> list[dict]:
    event, errors = events.validate(item)
    assert event is None
    return [error.as_dict() for error in errors]


def body_error(body: bytes, content_type: str = JSON, max_events: int = 10_000) -> BodyError:
    with pytest.raises(BodyError) as caught:
        bodies.parse_body(body, content_type, max_events)
    return caught.value


# --- whole bodies ---------------------------------------------------------------------------


def test_body_that_is_not_json_is_a_400():
    error = body_error(b"{not json")
    assert (error.status, error.message.startswith("body is not JSON")) == (400, True)


@pytest.mark.parametrize("body", [b"5", b'"text"', b"null", b"true"])
def test_json_that_is_not_an_object_or_array_is_a_400(body):
    error = body_error(body)
    assert (error.status, error.message) == (
        400,
        "body must be a JSON object or an array of objects",
    )


@pytest.mark.parametrize(("body", "content_type"), [(b"[]", JSON), (b"\n\n", NDJSON)])
def test_empty_batch_is_a_400_no_events_in_body(body, content_type):
    error = body_error(body, content_type)
    assert (error.status, error.message) == (400, "no events in body")


def test_array_item_that_is_not_an_object_is_that_items_error_only():
    batch = bodies.parse_body(b'[5, {"type": "t", "job_id": "j1"}]', JSON, 10)
    assert [index for index, _ in batch.events] == [1]
    assert batch.errors == [
        {"index": 0, "errors": [{"field": "(item)", "message": "must be a JSON object"}]}
    ]


def test_unsupported_content_type_is_a_415():
    error = body_error(b"{}", "text/plain")
    assert error.status == 415
    assert "'text/plain'" in error.message


def test_invalid_utf8_in_a_json_body_rejects_the_whole_body():
    error = body_error(b'{"type": "t", "job_id": "j\xff1"}')
    assert (error.status, error.message) == (400, "body is not JSON: not valid UTF-8 at byte 26")


def test_invalid_utf8_in_one_ndjson_line_is_that_items_error_only():
    body = b'{"type": "t", "job_id": "j1"}\n{"type": "t", "job_id": "j\xff2"}\n'
    batch = bodies.parse_body(body, NDJSON, 10)
    assert [(index, event.job_id) for index, event in batch.events] == [(0, "j1")]
    assert batch.errors == [
        {
            "index": 1,
            "errors": [{"field": "(line)", "message": "not JSON: not valid UTF-8 at byte 26"}],
        }
    ]


def test_ndjson_line_that_is_not_json_is_that_items_error_only():
    batch = bodies.parse_body(b'{"type": "t", "job_id": "j1"}\nnope\n', NDJSON, 10)
    assert len(batch.events) == 1
    assert batch.errors[0]["index"] == 1
    assert batch.errors[0]["errors"][0]["field"] == "(line)"


def test_batch_of_10001_events_is_a_413_naming_the_limit():
    items = [{"type": "t", "job_id": "j1"}] * 10_001
    error = body_error(json.dumps(items).encode())
    assert error.status == 413
    assert error.message == "batch has 10001 events; the limit is 10000 events per request"


def test_batch_of_exactly_10000_events_is_accepted():
    items = [{"type": "t", "job_id": "j1", "event_id": f"e{i}"} for i in range(10_000)]
    assert len(bodies.parse_body(json.dumps(items).encode(), JSON, 10_000).events) == 10_000


# --- compressed bodies ----------------------------------------------------------------------


def test_gzip_body_is_decompressed():
    assert bodies.decompress(gzip.compress(b'{"a": 1}'), "gzip", 1024) == b'{"a": 1}'


def test_deflate_body_is_decompressed():
    assert bodies.decompress(zlib.compress(b'{"a": 1}'), "deflate", 1024) == b'{"a": 1}'


def test_gzip_that_inflates_past_the_limit_is_a_413():
    bomb = gzip.compress(b" " * 50_000)
    with pytest.raises(BodyError) as caught:
        bodies.decompress(bomb, "gzip", 1024)
    assert (caught.value.status, caught.value.message) == (
        413,
        "body inflates past the limit of 1024 bytes",
    )


def test_gzip_that_inflates_to_exactly_the_limit_is_accepted():
    assert len(bodies.decompress(gzip.compress(b" " * 1024), "gzip", 1024)) == 1024


def test_body_that_is_not_gzip_is_a_400():
    with pytest.raises(BodyError) as caught:
        bodies.decompress(b"plain text", "gzip", 1024)
    assert (caught.value.status, caught.value.message) == (400, "body is not valid gzip data")


def test_truncated_gzip_is_a_400():
    with pytest.raises(BodyError) as caught:
        bodies.decompress(gzip.compress(b'{"a": 1}' * 100)[:-8], "gzip", 10_000)
    assert caught.value.status == 400


def test_unknown_content_encoding_is_a_415():
    with pytest.raises(BodyError) as caught:
        bodies.decompress(b"x", "br", 1024)
    assert caught.value.status == 415


# --- envelope -------------------------------------------------------------------------------


@pytest.mark.parametrize("missing", ["type", "job_id"])
def test_missing_type_or_job_id_is_a_field_error(missing):
    item = {"type": "t", "job_id": "j1"}
    del item[missing]
    assert errors_of(item) == [{"field": missing, "message": "required"}]


def test_job_id_over_200_characters_is_a_field_error():
    assert errors_of({"type": "t", "job_id": "j" * 201}) == [
        {"field": "job_id", "message": "must be a string of 1 to 200 characters"}
    ]


@pytest.mark.parametrize(
    "ts",
    [
        "2026-03-02T09:00:00",
        "yesterday",
        "2026-13-02T09:00:00Z",
        "2026-03-02",
        1772442000,
        "2026-03-02T09:00:60Z",
        # RFC 3339 digits are ASCII: no other script's, in the fraction either.
        "2026-03-02T09:00:00.\u0665Z",
        "\u0662026-03-02T09:00:00Z",
    ],
)
def test_ts_that_is_not_rfc3339_is_a_field_error(ts):
    assert errors_of({"type": "t", "job_id": "j1", "ts": ts}) == [
        {"field": "ts", "message": "must be an RFC 3339 timestamp with an offset"}
    ]


def test_rfc3339_ts_with_offset_is_converted_to_utc():
    event, _ = events.validate({"type": "t", "job_id": "j1", "ts": "2026-03-02T10:00:00.5+01:00"})
    assert event.ts.isoformat() == "2026-03-02T09:00:00.500000+00:00"


@pytest.mark.parametrize(
    ("ts", "utc"),
    [
        ("2026-03-02t09:00:00z", "2026-03-02T09:00:00+00:00"),
        ("2026-03-02 09:00:00.123456789Z", "2026-03-02T09:00:00.123456+00:00"),
        ("9999-12-31T23:59:59-23:59", None),  # past the calendar in UTC: refused, not a 500
    ],
)
def test_rfc3339_ts_forms_read_as_utc(ts, utc):
    parsed = events.parse_timestamp(ts)
    assert (parsed.isoformat() if parsed else None) == utc


def test_negative_seq_is_a_field_error():
    assert errors_of({"type": "t", "job_id": "j1", "seq": -1}) == [
        {"field": "seq", "message": "must be an integer >= 0"}
    ]


def test_payload_that_is_not_an_object_is_a_field_error():
    assert errors_of({"type": "t", "job_id": "j1", "payload": [1]}) == [
        {"field": "payload", "message": "must be an object"}
    ]


# --- payload fields -------------------------------------------------------------------------


@pytest.mark.parametrize("event_type", ["node_started", "node_finished", "compensation_finished"])
def test_node_event_without_node_id_is_a_field_error(event_type):
    assert errors_of({"type": event_type, "job_id": "j1", "payload": {}}) == [
        {"field": "payload.node_id", "message": "required"}
    ]


@pytest.mark.parametrize("attempt", [0, "two", 10**30, 1.5, True, -1])
def test_attempt_outside_1_to_1000000_is_a_field_error(attempt):
    assert errors_of(node_finished(attempt=attempt)) == [
        {"field": "payload.attempt", "message": "must be an integer from 1 to 1000000"}
    ]


@pytest.mark.parametrize(
    "event_type",
    ["job_started", "cancel_requested", "job_finished", "state_checkpointed", "span", "custom.x"],
)
@pytest.mark.parametrize("attempt", [2**62, True, 0, "2"])
def test_attempt_is_checked_on_every_event_type(event_type, attempt):
    item = {"type": event_type, "job_id": "j1", "payload": {"attempt": attempt}}
    errors = errors_of(item)
    assert {"field": "payload.attempt", "message": "must be an integer from 1 to 1000000"} in (
        errors
    )


@pytest.mark.parametrize("event_type", ["job_started", "cancel_requested", "custom.x"])
def test_attempt_within_bounds_orders_any_event_type(event_type):
    item = {"type": event_type, "job_id": "j1", "payload": {"attempt": 1_000_000}}
    event, errors = events.validate(item)
    assert (errors, event.attempt) == ([], 1_000_000)


def test_the_contract_bounds_are_those_its_checks_apply():
    checks = events.PAYLOAD_FIELDS["node_finished"]
    assert checks["attempt"].json_schema["maximum"] == events.MAX_ATTEMPT == 1_000_000
    assert checks["step_index"].json_schema["maximum"] == events.MAX_STEP_INDEX == 10_000_000
    assert checks["duration_ms"].json_schema["maximum"] == events.MAX_DURATION_MS == 10**12
    assert events.PAYLOAD_FIELDS["job_started"]["attempt"] is checks["attempt"]


@pytest.mark.parametrize("duration_ms", [-1, "5", None, float("inf"), 10**12 + 1])
def test_duration_ms_negative_or_not_a_number_is_a_field_error(duration_ms):
    assert errors_of(node_finished(duration_ms=duration_ms)) == [
        {"field": "payload.duration_ms", "message": "must be a number from 0 to 1e+12"}
    ]


@pytest.mark.parametrize("duration_ms", [0, 12, 12.5])
def test_duration_ms_integer_or_not_is_accepted(duration_ms):
    event, errors = events.validate(node_finished(duration_ms=duration_ms))
    assert (errors, event.payload["duration_ms"]) == ([], duration_ms)


def test_unknown_result_type_is_a_field_error():
    assert errors_of(node_finished(result_type="partial_success")) == [
        {
            "field": "payload.result_type",
            "message": "must be one of success, retryable_failure, permanent_failure, "
            "compensatable_failure",
        }
    ]


def test_step_index_over_bound_is_a_field_error():
    assert errors_of(node_finished(step_index=10_000_001)) == [
        {"field": "payload.step_index", "message": "must be an integer from 0 to 10000000"}
    ]


def test_context_arguments_must_be_objects():
    assert errors_of(node_finished(context={"actual_arguments": "x"})) == [
        {"field": "payload.context.actual_arguments", "message": "must be an object"}
    ]


def test_nul_character_in_any_text_is_a_field_error():
    assert errors_of(node_finished(reason="bad\x00reason")) == [
        {"field": "payload.reason", "message": "must not contain NUL characters"}
    ]


def test_nul_byte_inside_a_json_body_string_is_not_json():
    error = body_error(b'{"type": "t", "job_id": "j\x001"}')
    assert error.status == 400
    assert error.message.startswith("body is not JSON: Invalid control character")


def test_lone_surrogate_in_json_is_a_field_error():
    batch = bodies.parse_body(
        b'{"type": "t", "job_id": "j1", "payload": {"note": "\\ud800"}}', JSON, 10
    )
    assert batch.events == []
    assert batch.errors == [
        {
            "index": 0,
            "errors": [
                {"field": "payload.note", "message": "must be valid Unicode text (lone surrogate)"}
            ],
        }
    ]


def test_surrogate_pair_in_json_is_accepted():
    batch = bodies.parse_body(
        b'{"type": "t", "job_id": "j1", "payload": {"note": "\\ud83d\\ude00"}}', JSON, 10
    )
    assert batch.events[0][1].payload == {"note": "\U0001f600"}


def test_reason_over_64_kib_is_truncated_with_a_visible_marker():
    event, errors = events.validate(node_finished(reason="x" * 70_000))
    reason = events.bounded_long_text(event.payload)["reason"]
    assert errors == []
    assert len(reason.encode("utf-8")) <= 64 * 1024
    assert reason.startswith("x" * 60_000)
    assert reason.endswith(f"… [truncated {70_000 - reason.index('…')} bytes]")


def test_validation_keeps_long_text_whole_for_redaction_to_read():
    event, errors = events.validate(node_finished(reason="x" * 70_000))
    assert errors == []
    assert event.payload["reason"] == "x" * 70_000


def test_reason_of_exactly_64_kib_is_kept_whole():
    event, _ = events.validate(node_finished(reason="x" * 64 * 1024))
    assert events.bounded_long_text(event.payload)["reason"] == "x" * 64 * 1024


def test_truncation_never_splits_a_multibyte_character():
    truncated = events.truncate_text("é" * 40_000)
    assert truncated.encode("utf-8").decode("utf-8") == truncated
    assert set(truncated.split("…")[0]) == {"é"}


# --- identity, determinism, openness --------------------------------------------------------


def test_default_event_id_is_the_hash_of_the_event_as_sent():
    item = node_finished(reason="x" * 70_000)
    event, _ = events.validate(item)
    assert event.event_id == events.default_event_id(item)
    assert event.event_id.startswith("sha256:")


def test_same_item_gets_the_same_default_event_id():
    first, _ = events.validate(node_finished(reason="boom"))
    again, _ = events.validate(json.loads(json.dumps(node_finished(reason="boom"))))
    assert first.event_id == again.event_id


def test_default_event_id_ignores_key_order():
    a = {"type": "t", "job_id": "j1", "payload": {"x": 1, "y": 2}}
    b = {"payload": {"y": 2, "x": 1}, "job_id": "j1", "type": "t"}
    assert events.validate(a)[0].event_id == events.validate(b)[0].event_id


def test_different_items_get_different_default_event_ids():
    first, _ = events.validate(node_finished(reason="boom"))
    other, _ = events.validate(node_finished(reason="boom!"))
    assert first.event_id != other.event_id


def test_explicit_event_id_is_kept():
    event, _ = events.validate({"type": "t", "job_id": "j1", "event_id": "e-1"})
    assert event.event_id == "e-1"


def test_same_bad_input_always_gets_the_same_messages():
    item = {
        "type": "node_finished",
        "job_id": "",
        "ts": "now",
        "seq": -2,
        "payload": {
            "attempt": 0,
            "duration_ms": "x",
            "result_type": "meh",
            "a": "\x00",
            "b": "\x00",
        },
    }
    first = errors_of(item)
    assert [errors_of(json.loads(json.dumps(item))) for _ in range(3)] == [first] * 3
    assert first == [
        {"field": "payload.a", "message": "must not contain NUL characters"},
        {"field": "payload.b", "message": "must not contain NUL characters"},
    ]


def test_all_field_errors_of_an_item_come_in_a_fixed_order():
    item = {
        "type": "node_finished",
        "job_id": "",
        "ts": "now",
        "seq": -2,
        "payload": {"attempt": 0, "duration_ms": "x", "result_type": "meh"},
    }
    assert [error["field"] for error in errors_of(item)] == [
        "job_id",
        "ts",
        "seq",
        "payload.node_id",
        "payload.attempt",
        "payload.duration_ms",
        "payload.result_type",
    ]


def test_unknown_event_type_is_kept_with_its_payload():
    event, errors = events.validate({"type": "custom.thing", "job_id": "j1", "payload": {"k": 1}})
    assert errors == []
    assert (event.type, event.payload) == ("custom.thing", {"k": 1})


def test_unknown_payload_keys_are_kept():
    event, errors = events.validate(node_finished(vendor_field={"nested": [1, 2]}))
    assert errors == []
    assert event.payload["vendor_field"] == {"nested": [1, 2]}


def test_missing_payload_defaults_to_empty_object():
    event, _ = events.validate({"type": "t", "job_id": "j1"})
    assert (event.payload, event.ts, event.seq) == ({}, None, None)


def test_attempt_defaults_to_one():
    event, _ = events.validate(node_finished())
    assert event.attempt == 1


def test_one_bad_item_leaves_the_others_valid():
    items = [node_finished(), node_finished(attempt=0), {"type": "t", "job_id": "j2"}]
    batch = bodies.parse_items(items, 10)
    assert [index for index, _ in batch.events] == [0, 2]
    assert [error["index"] for error in batch.errors] == [1]
    assert batch.total == 3


def test_order_key_sorts_by_ts_seq_type_rank_attempt_event_id():
    from datetime import UTC, datetime

    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    keys = [
        events.order_key(t1, None, "job_started", 1, "a"),
        events.order_key(t0, 1, "job_started", 1, "a"),
        events.order_key(t0, None, "job_finished", 1, "a"),
        events.order_key(t0, None, "node_finished", 2, "a"),
        events.order_key(t0, None, "node_finished", 1, "b"),
        events.order_key(t0, None, "node_finished", 1, "a"),
        events.order_key(t0, None, "something_else", 1, "a"),
    ]
    assert sorted(range(len(keys)), key=keys.__getitem__) == [5, 4, 3, 2, 6, 1, 0]


def test_number_too_large_for_a_double_rejects_the_json_body():
    error = body_error(b'{"type": "t", "job_id": "j1", "payload": {"x": 1e400}}')
    assert (error.status, error.message) == (400, "body is not JSON: number 1e400 is out of range")


def test_number_too_large_for_a_double_is_that_ndjson_lines_error_only():
    body = b'{"type": "t", "job_id": "j1"}\n{"type": "t", "job_id": "j2", "payload": {"x": -1e999}}'
    batch = bodies.parse_body(body, NDJSON, 10)
    assert len(batch.events) == 1
    assert batch.errors == [
        {
            "index": 1,
            "errors": [{"field": "(line)", "message": "not JSON: number -1e999 is out of range"}],
        }
    ]


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_finite_literals_are_not_json(literal):
    error = body_error(b'{"type": "t", "job_id": "j1", "payload": {"x": ' + literal + b"}}")
    assert (error.status, error.message) == (
        400,
        f"body is not JSON: {literal.decode()} is not valid JSON",
    )


@pytest.mark.parametrize(
    ("depth", "readable"), [(1, True), (64, True), (65, False), (500, False), (100_000, False)]
)
def test_json_text_is_read_only_within_the_payload_depth(depth, readable):
    text = '{"a":' * (depth - 1) + "[1]" + "}" * (depth - 1)
    value = events.loads_within_depth(text)
    assert (value is not None) == readable
    if readable:
        assert events.nesting_depth(value) == depth


@pytest.mark.parametrize("text", ["{not json", "", "[" * 10])
def test_text_that_is_not_json_reads_as_none(text):
    assert events.loads_within_depth(text) is None
