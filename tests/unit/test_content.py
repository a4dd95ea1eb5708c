"""Content where producers put it (jobs/replay/content.py): a call's transcript and a tool's
arguments and result from span attributes, span events (Strands, the GenAI event forms) and
OTLP log records, and the other log records as timed entries of their step. Pure: spans and
records go through the OTLP mapping into events, and replay reads them."""

import json

from jobs.contract import otlp, otlp_logs
from jobs.replay import growth, spans, walk
from tests.otlp_spans import (
    CHILD_ID,
    ROOT_ID,
    attrs,
    log_record,
    logs_request,
    request,
    root,
    sid,
    span,
)

JOB = "5b8efff798038103d269b633813fc60c"
STEP_ID = sid(7)
TOOL_USE = {"toolUse": {"toolUseId": "call_1", "name": "lookup_order", "input": {"order": 42}}}
TOOL_RESULT = {
    "toolResult": {"toolUseId": "call_1", "status": "success", "content": [{"text": "late"}]}
}
TOOL_CALL = {"id": "call_1", "name": "lookup_order", "arguments": '{"order": 42}'}


def events_of(*spans_, logs=()):
    events = [event for _, event in otlp.to_batch(request(*spans_), 10_000).batch.events]
    if logs:
        events += [e for _, e in otlp_logs.to_batch(logs_request(*logs), 10_000).batch.events]
    return events


def span_event(name, at_ms=1, **pairs):
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    return Span.Event(name=name, time_unix_nano=otlp_start(at_ms), attributes=attrs(**pairs))


def otlp_start(at_ms):
    from tests.otlp_spans import START

    return START + at_ms * 1_000_000


def chat(span_events=(), span_id=CHILD_ID, parent=STEP_ID, **pairs):
    pairs = {"gen_ai__operation__name": "chat", "gen_ai__request__model": "gpt-4o-mini", **pairs}
    return span(
        "chat",
        span_id=span_id,
        parent=parent,
        start_ms=1,
        end_ms=9,
        attributes=attrs(**pairs),
        span_events=span_events,
    )


def step():
    return span("answer", span_id=STEP_ID, parent=ROOT_ID, start_ms=0, end_ms=10)


def replayed(*spans_, logs=()):
    return walk.build(events_of(root(end_ms=20), step(), *spans_, logs=logs))


def call_named(state, name):
    return next(call for call in state.calls if call.name == name)


def messages(call):
    return [
        (m["direction"], m["role"], m["content"], m.get("tool_calls", [])) for m in call.messages
    ]


def test_strands_span_events_are_the_chat_calls_transcript():
    """Strands' default (the older GenAI event form): content blocks as JSON text in a
    ``content`` or ``message`` attribute; a toolUse block is a tool call request, a toolResult
    block the tool's answer."""
    state = replayed(
        chat(
            [
                span_event("gen_ai.system.message", content=json.dumps([{"text": "Be brief."}])),
                span_event("gen_ai.user.message", content=json.dumps([{"text": "Where is 42?"}])),
                span_event("gen_ai.assistant.message", content=json.dumps([TOOL_USE])),
                span_event("gen_ai.tool.message", content=json.dumps([TOOL_RESULT])),
                span_event(
                    "gen_ai.choice",
                    finish_reason="end_turn",
                    message=json.dumps([{"text": "It ships tomorrow."}]),
                ),
            ]
        )
    )
    call = call_named(state, "chat")
    assert messages(call) == [
        ("in", "system", "Be brief.", []),
        ("in", "user", "Where is 42?", []),
        ("in", "assistant", "", [TOOL_CALL]),
        ("in", "tool", "late", []),
        ("out", "assistant", "It ships tomorrow.", []),
    ]
    assert call.messages[-1]["finish_reason"] == "end_turn"
    assert call.detail["events"] == []


def test_tool_span_events_give_the_tool_calls_arguments_and_result():
    tool = span(
        "execute_tool lookup_order",
        span_id=sid(9),
        parent=STEP_ID,
        start_ms=2,
        end_ms=3,
        attributes=attrs(gen_ai__operation__name="execute_tool", gen_ai__tool__name="lookup_order"),
        span_events=[
            span_event("gen_ai.tool.message", role="tool", content='{"order": 42}', id="call_1"),
            span_event("gen_ai.choice", message=json.dumps([{"text": "late"}]), id="call_1"),
        ],
    )
    call = call_named(replayed(tool), "execute_tool lookup_order")
    assert call.tool == {"name": "lookup_order", "arguments": '{"order": 42}', "result": "late"}
    assert call.messages == []


def test_the_newer_operation_details_event_is_the_transcript():
    asked = [{"role": "user", "parts": [{"type": "text", "content": "Where is 42?"}]}]
    answered = [{"role": "assistant", "parts": [{"type": "text", "content": "Tomorrow."}]}]
    details = "gen_ai.client.inference.operation.details"
    state = replayed(
        chat(
            [
                span_event(details, gen_ai__input__messages=json.dumps(asked)),
                span_event(details, gen_ai__output__messages=json.dumps(answered)),
            ]
        )
    )
    assert messages(call_named(state, "chat")) == [
        ("in", "user", "Where is 42?", []),
        ("out", "assistant", "Tomorrow.", []),
    ]


def test_attributes_win_over_events_slot_by_slot():
    """What the span's attributes say is not repeated from its events; a part only its events
    carry (here the answer) is read from them."""
    asked = [{"role": "user", "parts": [{"type": "text", "content": "from the attribute"}]}]
    state = replayed(
        chat(
            [
                span_event("gen_ai.user.message", content="from the event"),
                span_event("gen_ai.choice", message="answered"),
            ],
            gen_ai__input__messages=json.dumps(asked),
        )
    )
    assert messages(call_named(state, "chat")) == [
        ("in", "user", "from the attribute", []),
        ("out", "assistant", "answered", []),
    ]


def test_a_calls_content_events_are_not_repeated_as_its_steps_timed_entries():
    """A chat span with no step above it is a step of its own and its own call: its content
    events are its transcript, its other events stay timed entries of the step."""
    lone = chat(
        [
            span_event("gen_ai.user.message", content="Where is 42?"),
            span_event("retry", at_ms=2, attempt="2"),
            span_event("gen_ai.choice", message="Tomorrow."),
        ],
        parent=ROOT_ID,
    )
    state = walk.build(events_of(root(end_ms=20), lone))
    (only,) = state.steps
    assert [e["name"] for e in only.span["events"]] == ["retry"]
    assert len(call_named(state, "chat").messages) == 2


def test_log_records_are_the_transcript_of_their_spans_call():
    """OpenAI's instrumentation with content on: one record per message, the content in the
    body; the tool call requests in OpenAI's form."""
    tool_calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "lookup_order", "arguments": '{"order": 42}'},
        }
    ]
    system = {"gen_ai__system": "openai"}
    logs = [
        log_record("gen_ai.user.message", {"content": "Where is 42?"}, attributes=attrs(**system)),
        log_record("gen_ai.assistant.message", {"tool_calls": tool_calls}, at_ms=2),
        log_record("gen_ai.tool.message", {"content": "late", "id": "call_1"}, at_ms=3),
        log_record(
            "gen_ai.choice",
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "Ok"},
            },
            at_ms=4,
        ),
    ]
    state = replayed(chat(), logs=reversed(logs))
    assert messages(call_named(state, "chat")) == [
        ("in", "user", "Where is 42?", []),
        ("in", "assistant", "", [TOOL_CALL]),
        ("in", "tool", "late", []),
        ("out", "assistant", "Ok", []),
    ]
    (answer,) = state.steps
    assert answer.span["events"] == []


def test_other_log_records_are_timed_entries_of_the_step_they_were_logged_in():
    logs = [
        log_record(body="cache miss for order 42", severity=13, at_ms=5),
        log_record("app.lookup", {"order": 42}, span_id=STEP_ID, at_ms=6),
    ]
    (answer,) = replayed(chat(), logs=logs).steps
    assert answer.span["events"] == [
        {
            "name": "log",
            "ts": "2026-03-02T09:00:00.005000Z",
            "attributes": {},
            "log": True,
            "severity": "WARN",
            "body": "cache miss for order 42",
        },
        {
            "name": "app.lookup",
            "ts": "2026-03-02T09:00:00.006000Z",
            "attributes": {},
            "log": True,
            "severity": "INFO",
            "body": {"order": 42},
        },
    ]


def test_log_records_whose_span_has_not_come_wait_for_it():
    """Their span's id is kept with the trace: when it comes, the trace is expanded whole (its
    records read with it), not grown onto the stored spans."""
    early = log_record("gen_ai.user.message", {"content": "hi"}, span_id=sid(99))
    events = events_of(root(end_ms=20), step(), logs=[early])
    expansion = spans.expand(JOB, [e for e in events if e.type == "span"], events[2:])
    assert expansion.orphan_logs == [sid(99).hex()]
    summary = growth.summarize(expansion)
    assert summary.log_spans == [sid(99).hex()]
    fold = walk.Fold.of(events)
    later = events_of(chat(span_id=sid(99)))
    assert growth.Growth.start(JOB, fold.snapshot(), later) is None
    other = events_of(chat(span_id=sid(98)))
    assert growth.Growth.start(JOB, fold.snapshot(), other) is not None
