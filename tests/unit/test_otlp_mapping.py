"""OpenTelemetry spans as traceviz events (docs/otlp.md): what ingest keeps of a span
(jobs/contract/otlp.py) and what replay makes of a job's spans (jobs/replay/spans.py). Pure,
no database; the real libraries end to end are in tests/integration/test_otel_producers.py."""

import base64
import json

import pytest
from google.protobuf import json_format
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

from jobs.contract import otlp
from jobs.contract.bodies import BodyError
from jobs.contract.events import Event, validate
from jobs.replay import walk
from jobs.replay.spans import read_span
from tests.otlp_spans import (
    CHILD_ID,
    ERROR,
    ROOT_ID,
    START,
    TRACE_ID,
    attrs,
    exception_event,
    gen_ai_chat_span,
    llm_span,
    request,
    root,
    sid,
    span,
)


def items_of(one_span: Span, resource=None) -> list[dict]:
    [mapped] = otlp.map_request(request(one_span, resource=resource))
    assert not mapped.error, mapped.error
    return mapped.items


def replayed(*spans: Span, resource=None):
    """The job state replay builds from these spans, mapped as POST /v1/traces maps them."""
    traces = otlp.to_batch(request(*spans, resource=resource), max_events=10_000)
    assert traces.rejections == []
    return walk.build(event for _, event in traces.batch.events)


def steps_of(state) -> list[tuple]:
    return [(s.node_id, s.attempt, s.result_type) for s in state.steps]


# --- what ingest keeps of a span ---------------------------------------------------------------


def test_span_is_stored_whole_as_one_span_event():
    [item] = items_of(
        span(
            status=ERROR,
            attributes=attrs(http__method="GET"),
            span_events=[exception_event("ValueError", "nope")],
            kind=Span.SpanKind.SPAN_KIND_CLIENT,
        ),
        resource=attrs(service__name="billing"),
    )
    assert item["type"] == "span"
    assert item["event_id"] == f"otlp:{TRACE_ID.hex()}:{CHILD_ID.hex()}"
    assert item["ts"] == "2026-03-02T09:00:00.000000Z"
    payload = item["payload"]
    assert (payload["trace_id"], payload["span_id"], payload["parent_span_id"]) == (
        TRACE_ID.hex(),
        CHILD_ID.hex(),
        ROOT_ID.hex(),
    )
    assert (payload["name"], payload["kind"], payload["end"]) == (
        "fetch",
        "client",
        "2026-03-02T09:00:01.500000Z",
    )
    assert payload["status"] == {"code": "error", "message": "boom"}
    assert payload["attributes"] == {"http.method": "GET"}
    assert payload["resource"] == {"service.name": "billing"}
    assert payload["events"][0]["attributes"]["exception.type"] == "ValueError"


def test_job_is_the_trace_id_without_a_job_id_attribute():
    assert items_of(span())[0]["job_id"] == TRACE_ID.hex()


def test_span_job_id_attribute_wins_over_the_resource_one():
    [item] = items_of(
        span(attributes=attrs(traceviz__job_id="from-span")),
        resource=attrs(traceviz__job_id="from-resource"),
    )
    assert item["job_id"] == "from-span"


def test_spans_of_a_trace_join_the_job_another_span_of_it_names():
    traces = otlp.to_batch(
        request(root(attributes=attrs(traceviz__job_id="run-42")), span()), max_events=100
    )
    assert {event.job_id for _, event in traces.batch.events} == {"run-42"}


def test_overlong_name_and_job_id_are_cut_with_a_marker_not_rejected():
    traces = otlp.to_batch(
        request(span(name="n" * 270, attributes=attrs(traceviz__job_id="j" * 300))),
        max_events=100,
    )
    assert traces.rejections == []
    [(_, stored)] = traces.batch.events
    assert len(stored.job_id) == len(stored.payload["name"]) == 200
    assert stored.payload["name"].endswith("… [+83 chars]")


def test_input_is_cut_at_64_kib_and_other_attributes_share_16_kib():
    big = "x" * 100_000
    [item] = items_of(span(attributes=attrs(input__value=big, notes=big, small="kept")))
    kept = item["payload"]["attributes"]
    assert len(kept["input.value"].encode()) <= otlp.MAX_VALUE_BYTES
    assert "[truncated" in kept["input.value"]
    assert kept["small"] == "kept"
    assert len(json.dumps({k: v for k, v in kept.items() if k != "input.value"})) < 17_000
    assert item["payload"]["dropped"]["cut"] == ["input.value", "notes"]


def test_planner_span_events_become_planner_events_of_the_job():
    planner = Span.Event(
        name="graph.next_step.degraded",
        time_unix_nano=START + 5_000_000,
        attributes=attrs(provider="anthropic", model="claude-x", attempts="2", reason="bad json"),
    )
    items = items_of(span(span_events=[planner]))
    assert [item["type"] for item in items] == ["span", "graph.next_step.degraded"]
    assert items[1]["payload"] == {
        "provider": "anthropic",
        "model": "claude-x",
        "attempts": 2,
        "reason": "bad json",
    }
    assert items[1]["ts"] == "2026-03-02T09:00:00.005000Z"


def test_a_spans_events_and_the_planner_events_made_of_it_name_its_trace():
    planner = Span.Event(
        name="graph.next_step.degraded",
        time_unix_nano=START + 5_000_000,
        attributes=attrs(provider="anthropic", model="claude-x"),
    )
    traces = otlp.to_batch(request(span(span_events=[planner])), max_events=10)
    stored = [event for _index, event in traces.batch.events]
    assert [event.type for event in stored] == ["span", "graph.next_step.degraded"]
    assert [otlp.trace_of(event) for event in stored] == [TRACE_ID.hex()] * 2
    for event_id in ("e1", "otlp:not-a-trace-id:eee19b7ec3c1b173:0"):
        sent = Event("graph.next_step.degraded", "j1", event_id, None, None, {})
        assert otlp.trace_of(sent) is None


def test_end_before_start_is_read_as_ending_at_once():
    [item] = items_of(span(start_ms=10, end_ms=5))
    assert item["payload"]["end"] == item["ts"]


def test_missing_span_id_rejects_the_span():
    [mapped] = otlp.map_request(request(span(span_id=b"")))
    assert mapped.error == "span_id must be 8 bytes, not all zero"


def test_rejected_span_is_counted_and_the_others_kept():
    good = root()
    bad = span(name="bad", span_id=bytes(8))
    traces = otlp.to_batch(request(good, bad), max_events=100)
    assert (traces.span_count, traces.rejected_spans) == (2, 1)
    assert [event.type for _, event in traces.batch.events] == ["span"]
    assert traces.error_message == (
        "span 0000000000000000 'bad': span_id must be 8 bytes, not all zero"
    )


def test_request_mapping_to_too_many_events_is_refused():
    with pytest.raises(BodyError) as refused:
        otlp.to_batch(request(span(), root(), span(span_id=sid(9))), max_events=2)
    assert refused.value.status == 413
    assert "maps to 3 events; the limit is 2 events" in refused.value.message


# --- what replay makes of a job's spans -------------------------------------------------------


def test_root_span_is_the_job_and_other_spans_are_steps():
    state = replayed(
        root(end_ms=3000),
        span(name="fetch", start_ms=100, end_ms=900),
        resource=attrs(service__name="billing", service__version="1.2"),
    )
    assert steps_of(state) == [("fetch", 1, "success")]
    assert (state.attributes["name"], state.attributes["workflow"]) == ("run", "billing")
    assert state.metadata == {"service.version": "1.2", "otel.trace_id": TRACE_ID.hex()}
    assert (state.status, state.finished_at.isoformat()) == (
        "completed",
        "2026-03-02T09:00:03+00:00",
    )


def test_failed_root_fails_the_job_with_a_one_line_reason():
    state = replayed(
        root(
            status=Status(
                code=Status.StatusCode.STATUS_CODE_ERROR,
                message="ValueError('card declined')Traceback (most recent call last):\n  x",
            )
        )
    )
    assert (state.status, state.finish_reason) == ("failed", "ValueError('card declined')")


def test_step_reason_is_one_line_with_the_stack_and_exception_type_apart():
    state = replayed(
        root(status=ERROR),
        span(
            status=ERROR,
            span_events=[
                exception_event(
                    "ConnectionError", "timeout talking to crm\nsecond line", "Traceback ..."
                )
            ],
        ),
    )
    [step] = state.steps
    assert step.reason == "ConnectionError: timeout talking to crm"
    assert (step.exception_type, step.stack) == ("ConnectionError", "Traceback ...")
    assert step.error_type == ""  # classified at the source only (the run-status contract)


def test_default_service_name_is_not_a_workflow():
    state = replayed(root(), resource=attrs(service__name="unknown_service:python"))
    assert "workflow" not in state.attributes


def test_trace_without_its_root_uses_the_earliest_local_root():
    flags = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK | (
        SpanFlags.SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
    )
    state = replayed(
        span(name="entry", span_id=sid(1), parent=sid(99), end_ms=2000, flags=flags),
        span(name="work", span_id=sid(2), parent=sid(1), start_ms=10, end_ms=20),
    )
    assert state.attributes["name"] == "entry"
    assert steps_of(state) == [("work", 1, "success")]


def test_spans_whose_parent_is_in_their_own_process_wait_for_the_root():
    """A run still going: its SDK exported the steps that ended, and says their parent is a
    span of the same process (it ends, and is exported, last). No local root stands in."""
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    [item] = items_of(span(name="plan", span_id=sid(1), end_ms=10, flags=local))
    assert item["payload"]["local_parent"] is True
    assert "remote_parent" not in item["payload"]  # a flag that is false is left out
    state = replayed(
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=10, flags=local),
        span(name="act", span_id=sid(2), start_ms=20, end_ms=30, flags=local),
    )
    assert state.status == "running"
    assert "name" not in state.attributes
    assert steps_of(state) == [("plan", 1, "success"), ("act", 1, "success")]
    assert state.findings == []
    # Without the flag (an SDK that does not say), the earliest span stands in for the root.
    assert replayed(span(name="plan", span_id=sid(1), end_ms=10)).attributes["name"] == "plan"


def test_retried_siblings_are_attempts_and_the_last_failure_is_permanent():
    state = replayed(
        root(status=ERROR, end_ms=5000),
        span(name="flaky", span_id=sid(1), status=ERROR, start_ms=0, end_ms=10),
        span(name="flaky", span_id=sid(2), status=ERROR, start_ms=20, end_ms=30),
        span(name="flaky", span_id=sid(3), status=ERROR, start_ms=40, end_ms=50),
    )
    assert steps_of(state) == [
        ("flaky", 1, "retryable_failure"),
        ("flaky", 2, "retryable_failure"),
        ("flaky", 3, "permanent_failure"),
    ]
    assert state.status == "failed"
    assert state.findings == []  # inferred failures are no contract breach


def test_sibling_after_a_success_is_a_new_iteration():
    state = replayed(
        root(),
        span(name="poll", span_id=sid(1), start_ms=0, end_ms=10),
        span(name="poll", span_id=sid(2), start_ms=20, end_ms=30),
        span(name="poll", span_id=sid(3), status=ERROR, start_ms=40, end_ms=50),
        span(name="poll", span_id=sid(4), start_ms=60, end_ms=70),
    )
    assert steps_of(state) == [
        ("poll", 1, "success"),
        ("poll #2", 1, "success"),
        ("poll #3", 1, "retryable_failure"),
        ("poll #3", 2, "success"),
    ]


def test_same_name_under_different_parents_never_shares_a_step():
    state = replayed(
        root(),
        span(name="a", span_id=sid(1), start_ms=0, end_ms=50),
        span(name="b", span_id=sid(2), start_ms=60, end_ms=100),
        span(name="fetch", span_id=sid(3), parent=sid(1), start_ms=10, end_ms=20),
        span(name="fetch", span_id=sid(4), parent=sid(2), start_ms=70, end_ms=80),
    )
    assert sorted((s.node_id, s.attempt) for s in state.steps) == [
        ("a", 1),
        ("b", 1),
        ("fetch", 1),
        ("fetch #2", 1),
    ]
    fetch2 = state.step("fetch #2", 1)
    assert fetch2.parent_span_id == sid(2).hex()  # nested under its own parent step


def test_failure_the_parent_step_handled_is_drawn_failed_but_fails_nothing():
    state = replayed(
        root(),
        span(name="use_tool", span_id=sid(1), start_ms=0, end_ms=100),
        span(name="lookup", span_id=sid(2), parent=sid(1), status=ERROR, start_ms=10, end_ms=20),
    )
    lookup = state.step("lookup", 1)
    assert (lookup.segment, lookup.handled) == ("failed", True)
    assert state.failing_node_ids == []
    assert state.status == "completed"


def test_explicit_traceviz_attributes_beat_inferred_values():
    state = replayed(
        root(),
        span(
            name="charge",
            status=ERROR,
            attributes=attrs(
                traceviz__node_id="pay",
                traceviz__attempt=3,
                traceviz__result_type="retryable_failure",
                traceviz__reason="card issuer unavailable",
                traceviz__error_type="network",
                traceviz__failure_code="provider_retryable",
                traceviz__payload_results='{"amount": 12}',
            ),
        ),
    )
    [step] = state.steps
    assert (step.node_id, step.attempt, step.result_type, step.reason) == (
        "pay",
        3,
        "retryable_failure",
        "card issuer unavailable",
    )
    assert (step.error_type, step.failure_code, step.payload_results) == (
        "network",
        "provider_retryable",
        {"amount": 12},
    )
    assert not step.inferred


def test_llm_spans_inside_a_step_are_its_calls_with_tokens_cost_and_transcript():
    state = replayed(
        root(end_ms=500),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=100),
        llm_span(sid(2), sid(1), "gpt-4o-mini", 10),
    )
    assert steps_of(state) == [("plan", 1, "success")]
    [call] = state.calls
    assert (call.kind, call.node_id, call.attempt) == ("llm", "plan", 1)
    assert (call.provider, call.model, call.input_tokens, call.output_tokens) == (
        "openai",
        "gpt-4o-mini",
        1000,
        500,
    )
    assert call.cost == pytest.approx(0.00045)  # genai-prices: $0.15 and $0.60 per MTok
    assert [(m["direction"], m["role"], m["content"]) for m in call.messages] == [
        ("in", "user", "plan the release"),
        ("out", "assistant", "1. build 2. upload"),
    ]


def test_gen_ai_tool_call_parts_are_tool_calls_and_tool_responses_are_text():
    """The GenAI conventions' message parts: a tool call request reads as OpenInference's
    flattened one (id, name, arguments as JSON text), a tool's response as its text."""
    asked = [{"role": "user", "parts": [{"type": "text", "content": "Where is order 42?"}]}]
    answered = [
        *asked,
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "late"}]},
    ]
    requested = [
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Checking."},
                {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"order": 42}},
            ],
        }
    ]
    state = replayed(
        root(end_ms=500),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=100),
        gen_ai_chat_span(sid(2), sid(1), 10, asked, requested),
        gen_ai_chat_span(sid(3), sid(1), 30, answered),
    )
    first, second = state.calls
    assert first.messages == [
        {"direction": "in", "role": "user", "content": "Where is order 42?"},
        {
            "direction": "out",
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [{"id": "c1", "name": "lookup", "arguments": '{"order": 42}'}],
        },
    ]
    assert [(m["role"], m["content"]) for m in second.messages] == [
        ("user", "Where is order 42?"),
        ("tool", "late"),
    ]


def test_job_provider_and_model_are_the_planners_first_llm_call():
    state = replayed(
        root(end_ms=900),
        span(name="research", span_id=sid(1), start_ms=0, end_ms=100),
        llm_span(sid(2), sid(1), "gpt-4o", 10),
        span(name="planner", span_id=sid(3), start_ms=200, end_ms=300),
        llm_span(sid(4), sid(3), "gpt-4o-mini", 210),
        llm_span(sid(5), sid(3), "gpt-4.1", 220),
    )
    assert (state.attributes["provider"], state.attributes["model"]) == ("openai", "gpt-4o-mini")


def test_marked_span_with_no_step_above_it_is_a_step_and_its_own_call():
    state = replayed(root(), llm_span(sid(1), ROOT_ID, "gpt-4o-mini", 10))
    assert steps_of(state) == [("ChatOpenAI", 1, "success")]
    assert [(c.node_id, c.model) for c in state.calls] == [("ChatOpenAI", "gpt-4o-mini")]


def test_producer_root_waits_for_the_last_consumer_run():
    producer = root(name="apply_async/charge", kind=Span.SpanKind.SPAN_KIND_PRODUCER, end_ms=1)

    def run(n, state, retries=None):
        pairs = {"celery__task_name": "charge", "celery__state": state}
        if retries is not None:
            pairs["celery__retries"] = str(retries)
        return span(
            name="run/charge",
            span_id=sid(n),
            parent=ROOT_ID if n == 1 else sid(n - 1),
            kind=Span.SpanKind.SPAN_KIND_CONSUMER,
            start_ms=10 * n,
            end_ms=10 * n + 5,
            status=ERROR if state == "FAILURE" else None,
            attributes=attrs(**pairs),
        )

    retrying = replayed(producer, run(1, "RETRY"), run(2, "RETRY", 1))
    assert retrying.status == "paused:transient"  # waiting for its next run: never terminal
    assert retrying.finished_at is None
    assert steps_of(retrying) == [
        ("charge", 1, "retryable_failure"),
        ("charge", 2, "retryable_failure"),
    ]
    failed = replayed(producer, run(1, "RETRY"), run(2, "RETRY", 1), run(3, "FAILURE", 2))
    assert (failed.status, steps_of(failed)[-1]) == ("failed", ("charge", 3, "permanent_failure"))


def test_span_events_links_and_other_attributes_are_kept_on_the_step():
    checkpoint = Span.Event(
        name="cache.miss", time_unix_nano=START + 1_000, attributes=attrs(k="v")
    )
    link = Span.Link(trace_id=bytes.fromhex("aa" * 16), span_id=sid(7))
    state = replayed(
        root(),
        span(attributes=attrs(db__system="postgresql"), span_events=[checkpoint], links=[link]),
    )
    [step] = state.steps
    assert step.span["attributes"] == {"db.system": "postgresql"}
    assert [(e["name"], e["attributes"]) for e in step.span["events"]] == [
        ("cache.miss", {"k": "v"})
    ]
    assert step.span["links"] == [{"trace_id": "aa" * 16, "span_id": sid(7).hex()}]


def test_spans_in_any_arrival_order_tell_the_same_story():
    spans = [
        root(status=ERROR, end_ms=900),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=100),
        llm_span(sid(2), sid(1), "gpt-4o-mini", 10),
        span(name="flaky", span_id=sid(3), status=ERROR, start_ms=200, end_ms=210),
        span(name="flaky", span_id=sid(4), status=ERROR, start_ms=220, end_ms=230),
    ]
    forward = replayed(*spans)
    backward = replayed(*reversed(spans))
    assert steps_of(forward) == steps_of(backward)
    assert (forward.status, forward.calls) == (backward.status, backward.calls)


def test_json_body_reads_ids_as_hex():
    document = json_format.MessageToDict(request(span()))
    scope_span = document["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    for key in ("traceId", "spanId", "parentSpanId"):
        scope_span[key] = base64.b64decode(scope_span[key]).hex()
    decoded = otlp.decode_request(json.dumps(document).encode(), otlp.JSON)
    [decoded_span] = decoded.resource_spans[0].scope_spans[0].spans
    assert (decoded_span.trace_id, decoded_span.span_id) == (TRACE_ID, CHILD_ID)
    assert decoded_span.parent_span_id == ROOT_ID


def test_json_body_accepts_snake_case_field_names_and_link_ids():
    body = {
        "resource_spans": [
            {
                "scope_spans": [
                    {
                        "spans": [
                            {
                                "trace_id": TRACE_ID.hex(),
                                "span_id": CHILD_ID.hex(),
                                "name": "n",
                                "start_time_unix_nano": str(START),
                                "end_time_unix_nano": str(START + 1),
                                "links": [{"trace_id": TRACE_ID.hex(), "span_id": ROOT_ID.hex()}],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    decoded = otlp.decode_request(json.dumps(body).encode(), otlp.JSON)
    [decoded_span] = decoded.resource_spans[0].scope_spans[0].spans
    assert decoded_span.span_id == CHILD_ID
    assert decoded_span.links[0].span_id == ROOT_ID


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{", "body is not JSON"),
        (b"[]", "body must be a JSON ExportTraceServiceRequest object"),
        (b'{"resourceSpans": 3}', "body is not an OTLP/JSON ExportTraceServiceRequest"),
        (
            b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
            "resourceSpans[0].scopeSpans[0].spans[0].traceId is not hex",
        ),
    ],
)
def test_undecodable_json_is_a_400(body, message):
    with pytest.raises(BodyError) as refused:
        otlp.decode_request(body, otlp.JSON)
    assert refused.value.status == 400
    assert refused.value.message.startswith(message)


def test_undecodable_protobuf_is_a_400():
    with pytest.raises(BodyError) as refused:
        otlp.decode_request(b"\xff\xff\xff", otlp.PROTOBUF)
    assert refused.value.status == 400


def test_other_content_type_is_a_415():
    with pytest.raises(BodyError) as refused:
        otlp.decode_request(b"", "text/plain")
    assert refused.value.status == 415


def test_parent_ids_that_go_round_in_a_circle_still_replay():
    state = replayed(
        span(name="a", span_id=sid(1), parent=sid(2)),
        span(name="b", span_id=sid(2), parent=sid(1), start_ms=5),
        span(name="c", span_id=sid(3), parent=sid(3), start_ms=6),
    )
    assert state.attributes["name"] == "c"  # the one that names itself: no parent, the root
    assert sorted(s.node_id for s in state.steps) == ["a", "b"]


def test_a_plain_span_is_stored_without_what_holds_nothing():
    """An unspecified kind, an unset status without a message, no attributes, span events or
    links, an empty resource and scope and parent flags that are false are left out of the
    stored payload (bench/storage.py: the span event row is the largest of what a span costs),
    and replay reads the span as if they were there."""
    [item] = items_of(span(name="work", span_id=sid(2), parent=sid(1), end_ms=10))
    assert set(item["payload"]) == {"trace_id", "span_id", "parent_span_id", "name", "end"}
    event, _errors = validate(item)
    view = read_span(event)
    assert (view.remote_parent, view.local_parent, view.kind) == (False, False, "unspecified")
    assert (view.status_code, view.status_message, view.events, view.links) == ("unset", "", [], [])
    assert (view.attrs, view.resource, view.scope) == ({}, {}, {})
