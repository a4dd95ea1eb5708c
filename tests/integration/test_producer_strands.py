"""A real Strands agent (strands-agents, its OpenAI model provider and its own OpenTelemetry
tracing with the default settings) in its own environment (tests/producers/strands), against a
fake OpenAI-compatible server, exporting to the live traceviz: Strands writes message content
as span events, which become the transcript of its calls (docs/otlp.md)."""

import pytest

from jobs.models import Call, Job, Step

pytestmark = pytest.mark.django_db(transaction=True)

TOOL_CALL = {"id": "call_1", "name": "lookup_order", "arguments": '{"order": 42}'}
TOOL_RESULT = "Order 42: packed, ships tomorrow from Lyon."


def transcript(call: Call) -> list[tuple]:
    return [
        (m["direction"], m["role"], m["content"], m.get("tool_calls", [])) for m in call.messages
    ]


def test_strands_agent_turn_with_a_tool_call_shows_its_transcript(run_producer):
    """The agent asks the model, which calls lookup_order, then answers: each model call
    shows what it read and wrote (the user prompt, the tool call request, the tool's result,
    the final answer), with its tokens; the tool call its arguments and result; and the span
    events read as transcript are not repeated as the steps' timed entries."""
    run = run_producer("strands")
    assert run["answer"] == "Order 42 ships tomorrow from Lyon."
    assert run["model_requests"] == 2

    job = Job.objects.get(job_id=run["trace_id"])
    assert (job.status, job.name, job.workflow) == (
        "completed",
        "invoke_agent Strands Agents",
        "strands-agents",
    )
    calls = {c.position: c for c in Call.objects.filter(job=job)}
    by_name = [(c.node_id, c.kind, c.name) for _, c in sorted(calls.items()) if c.position >= 0]
    assert by_name == [
        ("execute_event_loop_cycle", "span", "execute_event_loop_cycle"),
        ("execute_event_loop_cycle", "llm", "chat"),
        ("execute_event_loop_cycle", "tool", "execute_tool lookup_order"),
        ("execute_event_loop_cycle #2", "span", "execute_event_loop_cycle"),
        ("execute_event_loop_cycle #2", "llm", "chat"),
    ]
    asking, answering = calls[1], calls[4]
    assert transcript(asking) == [
        ("in", "system", "You answer questions about orders.", []),
        ("in", "user", "Where is order 42?", []),
        ("out", "assistant", "", [TOOL_CALL]),
    ]
    assert transcript(answering) == [
        ("in", "system", "You answer questions about orders.", []),
        ("in", "user", "Where is order 42?", []),
        ("in", "assistant", "", [TOOL_CALL]),
        ("in", "tool", TOOL_RESULT, []),
        ("out", "assistant", "Order 42 ships tomorrow from Lyon.", []),
    ]
    assert [(c.input_tokens, c.output_tokens) for c in (asking, answering)] == [
        (120, 10),
        (160, 12),
    ]
    assert (asking.model, answering.model) == ("gpt-4o-mini", "gpt-4o-mini")
    assert calls[2].tool == {
        "name": "lookup_order",
        "arguments": '{"order": 42}',
        "result": TOOL_RESULT,
    }
    # The first cycle fed the tool's result back: it shows among what the cycle wrote.
    assert transcript(calls[0])[-1] == ("out", "tool", TOOL_RESULT, [])
    for step in Step.objects.filter(job=job):
        assert not [e for e in step.span["events"] if e["name"].startswith("gen_ai.")]
    for call in calls.values():
        assert not [e for e in call.detail["events"] if e["name"].startswith("gen_ai.")]
