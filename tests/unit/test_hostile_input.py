"""Hostile input to the parsers (issue 7): any bytes in, either parsed events with field-level
errors or a ``BodyError`` out, never another exception. Pure: no database, no HTTP."""

import gzip
import json
import zlib

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from jobs.contract import bodies, events, otlp
from jobs.contract.bodies import BodyError, ParsedBatch
from jobs.replay import walk

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CONTENT_TYPES = (
    "application/json",
    "application/x-ndjson",
    "application/json; charset=utf-8",
    "text/plain",
    "",
    None,
)
TYPES = [*sorted(events.TYPE_RANK), "custom.thing", ""]
PAYLOAD_NAMES = sorted({name for fields in events.PAYLOAD_FIELDS.values() for name in fields})

# JSON-ish values: what a JSON decoder can return, plus the text that hurts (NUL, surrogates,
# right-to-left overrides, markup) and numbers at the edges.
nasty_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "\x00",
            "\ud800",
            "\u202e",
            "<script>alert(1)</script>",
            "x" * 300,
            "🧨",
            "1e999",
            "2026-03-02T09:00:00Z",
            "2026-02-30T25:61:61+99:99",
        ]
    ),
)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 1, 2**62, 2**63, 10**12, 10**12 + 1, 1_000_001, 0.5]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, nasty_text)
json_values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.one_of(nasty_text, st.sampled_from(PAYLOAD_NAMES)), children, max_size=4
        )
    ),
    max_leaves=20,
)
# Items shaped like events, so the validators past the envelope get exercised too.
event_like = st.fixed_dictionaries(
    {
        "type": st.one_of(st.sampled_from(TYPES), json_values),
        "job_id": st.one_of(nasty_text, json_values),
    },
    optional={
        "event_id": st.one_of(nasty_text, json_values),
        "ts": st.one_of(nasty_text, json_values),
        "seq": st.one_of(numbers, json_values),
        "payload": st.one_of(
            st.dictionaries(st.sampled_from(PAYLOAD_NAMES), json_values, max_size=6), json_values
        ),
        "extra": json_values,
    },
)


def assert_well_formed(batch: ParsedBatch) -> None:
    """A parse result: valid events by index, the rest as field errors of plain strings."""
    indexes = [index for index, _ in batch.events] + [error["index"] for error in batch.errors]
    assert sorted(indexes) == list(range(batch.total))
    for _index, event in batch.events:
        assert isinstance(event, events.Event)
        assert isinstance(event.job_id, str) and 1 <= len(event.job_id) <= events.MAX_ID_CHARS
        assert isinstance(event.event_id, str) and 1 <= len(event.event_id) <= 200
        assert isinstance(event.payload, dict)
    for error in batch.errors:
        assert error["errors"], error
        for problem in error["errors"]:
            assert set(problem) == {"field", "message"}
            assert isinstance(problem["field"], str) and isinstance(problem["message"], str)


def parse_or_refuse(body: bytes, content_type: str | None) -> ParsedBatch | BodyError:
    try:
        batch = bodies.parse_body(body, content_type, max_events=50)
    except BodyError as error:
        assert error.status in (400, 413, 415), error.status
        assert isinstance(error.message, str) and error.message
        return error
    assert_well_formed(batch)
    return batch


def outcome(result: ParsedBatch | BodyError):
    """Comparable form of a parse result, for the determinism checks."""
    if isinstance(result, BodyError):
        return ("refused", result.status, result.message)
    return ([(i, e.event_id) for i, e in result.events], result.errors)


@FUZZ
@given(body=st.binary(max_size=2000), content_type=st.sampled_from(CONTENT_TYPES))
@example(body=b'{"type": "t", "job_id": "\\u0000"}', content_type="application/json")
@example(body=b'[{"type": "t", "job_id": "\\ud800"}]', content_type="application/json")
@example(body=b"[" * 100_000, content_type="application/json")
@example(body=b"\xef\xbb\xbf{}\n\xff\n[]", content_type="application/x-ndjson")
@example(body=b'{"type": "t", "job_id": "j", "seq": 1e400}', content_type="application/json")
def test_any_bytes_parse_to_events_and_field_errors_or_a_body_error(body, content_type):
    first = parse_or_refuse(body, content_type)
    assert outcome(parse_or_refuse(body, content_type)) == outcome(first)


@FUZZ
@given(
    document=st.one_of(json_values, event_like, st.lists(event_like, max_size=5)),
    content_type=st.sampled_from(["application/json", "application/x-ndjson"]),
)
def test_any_json_value_parses_to_events_and_field_errors_or_a_body_error(document, content_type):
    if content_type == "application/x-ndjson" and isinstance(document, list):
        body = "\n".join(json.dumps(item) for item in document).encode("utf-8", "surrogatepass")
    else:
        body = json.dumps(document).encode("utf-8", "surrogatepass")
    first = parse_or_refuse(body, content_type)
    assert outcome(parse_or_refuse(body, content_type)) == outcome(first)


@FUZZ
@given(items=st.lists(event_like, min_size=1, max_size=6))
def test_event_shaped_items_get_one_verdict_each(items):
    batch = bodies.parse_items(items, max_events=50)
    assert_well_formed(batch)
    assert batch.total == len(items)


@FUZZ
@given(body=st.binary(max_size=500), encoding=st.sampled_from(["gzip", "deflate", "br", " GZIP "]))
@example(body=gzip.compress(b"x" * 5000), encoding="gzip")
@example(body=zlib.compress(b"{}")[:-3], encoding="deflate")
def test_any_bytes_decompress_or_refuse(body, encoding):
    try:
        out = bodies.decompress(body, encoding, limit=1024)
    except BodyError as error:
        assert error.status in (400, 413, 415)
    else:
        assert len(out) <= 1024


# --- OTLP ---------------------------------------------------------------------------------------


def decode_and_map(body: bytes, content_type: str) -> otlp.OtlpBatch | BodyError:
    try:
        traces = otlp.to_batch(otlp.decode_request(body, content_type), max_events=100)
    except BodyError as error:
        assert error.status in (400, 413, 415)
        return error
    assert_well_formed(traces.batch)
    assert traces.rejected_spans <= traces.span_count
    assert all(isinstance(message, str) for message in traces.rejections)
    replay_every_job(traces.batch)
    return traces


def replay_every_job(batch: ParsedBatch) -> None:
    """Replay (the span expansion included) copes with whatever the batch holds."""
    by_job: dict[str, list[events.Event]] = {}
    for _index, event in batch.events:
        by_job.setdefault(event.job_id, []).append(event)
    for job_events in by_job.values():
        state = walk.build(job_events)
        assert state.event_count >= 1


any_values = st.recursive(
    st.one_of(
        st.builds(lambda s: AnyValue(string_value=s), nasty_text.filter(lambda s: s != "\ud800")),
        st.builds(lambda i: AnyValue(int_value=i), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda f: AnyValue(double_value=f), st.floats()),
        st.builds(lambda b: AnyValue(bool_value=b), st.booleans()),
        st.builds(lambda b: AnyValue(bytes_value=b), st.binary(max_size=20)),
        st.just(AnyValue()),
    ),
    lambda children: (
        st.builds(
            lambda vs: AnyValue(array_value=ArrayValue(values=vs)), st.lists(children, max_size=3)
        )
        | st.builds(
            lambda kvs: AnyValue(
                kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs])
            ),
            st.lists(st.tuples(st.text(max_size=8), children), max_size=3),
        )
    ),
    max_leaves=8,
)
ATTRIBUTE_KEYS = [
    otlp.PREFIX + name
    for name in (
        "job_id",
        "node_id",
        "attempt",
        "reason",
        "result_type",
        "failure_code",
        "error_type",
        "step_index",
        "epoch",
        "continue_on_error",
        "payload_results",
        "context",
        "workflow",
    )
] + ["service.name", "error.type", "exception.message"]
attribute_lists = st.lists(
    st.builds(
        lambda k, v: KeyValue(key=k, value=v),
        st.one_of(st.sampled_from(ATTRIBUTE_KEYS), st.text(max_size=10)),
        any_values,
    ),
    max_size=6,
)
spans = st.builds(
    lambda trace_id, span_id, parent, name, start, length, attributes, code, message, flags: Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=max(0, min(start + length, 2**64 - 1)),
        attributes=attributes,
        status=Status(code=code, message=message),
        flags=flags,
    ),
    st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20)),
    st.one_of(st.binary(min_size=8, max_size=8), st.binary(max_size=10)),
    st.one_of(st.just(b""), st.binary(min_size=8, max_size=8), st.binary(max_size=10)),
    nasty_text.filter(lambda s: s != "\ud800"),
    st.integers(0, 2**63),
    st.integers(-(2**40), 2**40),
    attribute_lists,
    st.integers(0, 2),
    st.text(max_size=20),
    st.integers(0, 2**32 - 1),
)


def export_request(resource_attributes, span_list) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    request.resource_spans.append(ResourceSpans(scope_spans=[ScopeSpans(spans=span_list)]))
    request.resource_spans[0].resource.attributes.extend(resource_attributes)
    return request


@FUZZ
@given(body=st.binary(max_size=2000), content_type=st.sampled_from(otlp.CONTENT_TYPES))
@example(body=b"\x0a\x02\x0a\x00" * 3, content_type=otlp.PROTOBUF)
@example(
    body=b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz"}]}]}]}',
    content_type=otlp.JSON,
)
@example(body=b'{"resourceSpans": "no"}', content_type=otlp.JSON)
def test_any_bytes_decode_to_an_otlp_batch_or_a_body_error(body, content_type):
    decode_and_map(body, content_type)


@FUZZ
@given(
    resource_attributes=attribute_lists,
    span_list=st.lists(spans, max_size=4),
    as_json=st.booleans(),
)
def test_any_export_request_maps_to_events_or_span_rejections(
    resource_attributes, span_list, as_json
):
    request = export_request(resource_attributes, span_list)
    if as_json:
        body = json_format.MessageToJson(request).encode("utf-8")
        decode_and_map(body, otlp.JSON)
    else:
        result = decode_and_map(request.SerializeToString(), otlp.PROTOBUF)
        assert isinstance(result, otlp.OtlpBatch)
        assert result.span_count == len(span_list)


@FUZZ
@given(
    document=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {
                "resourceSpans": st.lists(
                    st.fixed_dictionaries(
                        {
                            "scopeSpans": st.lists(
                                st.fixed_dictionaries(
                                    {
                                        "spans": st.lists(
                                            st.dictionaries(
                                                st.sampled_from(
                                                    [
                                                        "traceId",
                                                        "spanId",
                                                        "parentSpanId",
                                                        "name",
                                                        "startTimeUnixNano",
                                                        "endTimeUnixNano",
                                                        "attributes",
                                                        "status",
                                                        "links",
                                                        "kind",
                                                    ]
                                                ),
                                                json_values,
                                                max_size=6,
                                            ),
                                            max_size=3,
                                        )
                                    }
                                ),
                                max_size=2,
                            )
                        }
                    ),
                    max_size=2,
                )
            }
        ),
    )
)
def test_any_json_document_decodes_to_an_otlp_batch_or_a_body_error(document):
    decode_and_map(json.dumps(document).encode("utf-8", "surrogatepass"), otlp.JSON)


# --- span events sent straight to the event API ---------------------------------------------------

SPAN_IDS = st.sampled_from(["a" * 16, "b" * 16, "c" * 16, "d" * 16])
SPAN_KEYS = [
    "traceviz.node_id",
    "traceviz.attempt",
    "traceviz.result_type",
    "traceviz.payload_results",
    "celery.task_name",
    "celery.state",
    "celery.retries",
    "openinference.span.kind",
    "llm.model_name",
    "llm.token_count.prompt",
    "llm.input_messages.0.message.content",
    "gen_ai.input.messages",
    "metadata",
]
span_payloads = st.fixed_dictionaries(
    {
        "trace_id": st.just("f" * 32),
        "span_id": SPAN_IDS,
        "end": st.sampled_from(["2026-03-02T09:00:01Z", "2026-03-02T08:00:00Z"]),
    },
    optional={
        "parent_span_id": SPAN_IDS,
        "name": nasty_text,
        "kind": st.sampled_from(["internal", "producer", "consumer"]),
        "status": json_values,
        "attributes": st.dictionaries(st.sampled_from(SPAN_KEYS), json_values, max_size=5),
        "events": json_values,
        "links": json_values,
        "resource": json_values,
    },
)


@FUZZ
@given(payloads=st.lists(span_payloads, min_size=1, max_size=5))
def test_any_span_events_replay(payloads):
    items = [
        {"type": "span", "job_id": "spans", "ts": "2026-03-02T09:00:00Z", "payload": payload}
        for payload in payloads
    ]
    batch = bodies.parse_items(items, max_events=100)
    replay_every_job(batch)


# --- issue 15: ids, nesting, calendar edges -----------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_id", "bad\njob"),
        ("job_id", "tab\tjob"),
        ("job_id", "cr\rjob"),
        ("job_id", "."),
        ("job_id", ".."),
        ("job_id", "a/../b"),
        ("job_id", "./a"),
        ("job_id", "line\u2028sep"),
        ("event_id", "e\x1b[31m"),
        ("type", "node\nstarted"),
        ("payload.node_id", "n\n1"),
        ("payload.node_id", ".."),
    ],
)
def test_bad_id_is_refused_with_a_field_error(field, value):
    item = {"type": "node_started", "job_id": "j1", "payload": {"node_id": "n1"}}
    if field.startswith("payload."):
        item["payload"][field.removeprefix("payload.")] = value
    else:
        item[field] = value
    event, errors = events.validate(item)
    assert event is None
    assert [error.field for error in errors] == [field]


@pytest.mark.parametrize("value", ["a.b", "v1.2.3", "...", "a/b/c", "job..1", "ünïcode-id"])
def test_ids_with_dots_inside_segments_are_kept(value):
    event, errors = events.validate(
        {"type": "node_started", "job_id": value, "payload": {"node_id": value}}
    )
    assert errors == []
    assert event.job_id == value


def nested(depth: int):
    value: object = "leaf"
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


def test_payload_nested_past_the_limit_is_refused_not_a_recursion_error():
    limit = events.MAX_PAYLOAD_DEPTH
    _ok, errors = events.validate({"type": "x", "job_id": "j", "payload": {"v": nested(limit - 1)}})
    assert errors == []
    for depth in (limit, 470, 5000):
        event, errors = events.validate(
            {"type": "x", "job_id": "j", "payload": {"v": nested(depth)}}
        )
        assert event is None
        assert errors[0].field == "payload"
        assert "nest" in errors[0].message


def test_deep_json_body_is_a_body_error_or_field_error_never_a_crash():
    depth = 3000
    payload = '{"v": ' + "[" * depth + '"leaf"' + "]" * depth + "}"
    body = ('{"type": "x", "job_id": "j", "payload": ' + payload + "}").encode()
    try:
        batch = bodies.parse_body(body, "application/json", 10)
    except BodyError as error:
        assert error.status == 400
    else:
        assert batch.events == []
        assert batch.errors


def deep_otlp_json(depth: int) -> bytes:
    """An OTLP/JSON request whose one span carries an attribute nested ``depth`` kvlists deep."""
    value = '{"stringValue": "leaf"}'
    for _ in range(depth):
        value = '{"kvlistValue": {"values": [{"key": "k", "value": ' + value + "}]}}"
    span = (
        '{"traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", '
        '"name": "s", "startTimeUnixNano": "1772442000000000000", '
        '"endTimeUnixNano": "1772442001000000000", '
        '"attributes": [{"key": "deep", "value": ' + value + "}]}"
    )
    return ('{"resourceSpans": [{"scopeSpans": [{"spans": [' + span + "]}]}]}").encode()


@pytest.mark.parametrize("depth", [32, 70, 400, 5000])
def test_deep_otlp_attribute_is_a_400_never_a_recursion_error(depth):
    """The protobuf decoder stops at 100 nested messages (three per kvlist level)."""
    with pytest.raises(BodyError) as raised:
        otlp.decode_request(deep_otlp_json(depth), otlp.JSON)
    assert raised.value.status == 400


def test_otlp_attribute_as_deep_as_the_decoder_allows_stays_within_the_event_limit():
    result = otlp.to_batch(otlp.decode_request(deep_otlp_json(31), otlp.JSON), 100)
    assert result.rejected_spans == 0
    (_index, event), *_ = result.batch.events
    assert events.nesting_depth(event.payload) <= events.MAX_PAYLOAD_DEPTH


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("9999-12-31T23:59:59-23:59", "must be an RFC 3339 timestamp with an offset"),
        ("0001-01-01T00:00:00+23:59", "must be an RFC 3339 timestamp with an offset"),
        ("9999-12-31T23:59:59Z", events.TS_RANGE_MESSAGE),
        ("9000-01-01T00:00:00Z", events.TS_RANGE_MESSAGE),
        ("1969-12-31T23:59:59Z", events.TS_RANGE_MESSAGE),
    ],
)
def test_timestamp_at_the_calendar_edge_is_a_field_error(value, message):
    event, errors = events.validate({"type": "x", "job_id": "j", "ts": value})
    assert event is None
    assert errors == [events.FieldError("ts", message)]


def test_span_end_at_the_calendar_edge_is_kept():
    assert events.parse_timestamp("9999-12-31T23:59:59Z").year == 9999
    assert events.parse_timestamp("9999-12-31T23:59:59-23:59") is None


def test_multi_member_gzip_is_inflated_whole():
    body = gzip.compress(b'[{"type": "x", ') + gzip.compress(b'"job_id": "j"}]')
    assert bodies.decompress(body, "gzip", 10_000) == b'[{"type": "x", "job_id": "j"}]'


def test_multi_member_gzip_still_counts_the_limit_over_all_members():
    body = gzip.compress(b"a" * 600) + gzip.compress(b"b" * 600)
    with pytest.raises(BodyError) as raised:
        bodies.decompress(body, "gzip", 1000)
    assert raised.value.status == 413


def test_gzip_member_followed_by_garbage_is_a_400():
    with pytest.raises(BodyError) as raised:
        bodies.decompress(gzip.compress(b"[]") + b"garbage!", "gzip", 1000)
    assert raised.value.status == 400
