"""A real producer of the GenAI semantic conventions: the OpenAI client, instrumented by
OpenTelemetry's opentelemetry-instrumentation-openai-v2, against a fake OpenAI API (an httpx
transport, no network), exporting to a live traceviz over OTLP/HTTP span by span
(docs/otlp.md). The other producers are in test_otel_producers.py."""

import contextlib
import json
from typing import Any

import httpx
import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.instrumentation._semconv import (
    _OpenTelemetrySemanticConventionStability as SemconvStability,
)
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

from jobs.models import Call, Job
from tests.integration.test_otel_producers import escalation_kinds, steps_of

pytestmark = pytest.mark.django_db(transaction=True)


def fake_openai_api(request: httpx.Request) -> httpx.Response:
    """OpenAI's chat completions: a tool call for the first question, 503 for "refund?" (the
    client retries it twice, then raises), else an answer."""
    messages = json.loads(request.content)["messages"]
    if messages[-1]["content"] == "refund?":
        return httpx.Response(503, json={"error": {"message": "upstream overloaded"}})
    reply: dict[str, Any] = {"role": "assistant", "content": "It ships tomorrow."}
    if messages[-1]["role"] == "user" and messages[-1]["content"].startswith("Where"):
        call = {"name": "lookup_order", "arguments": '{"order": 42}'}
        reply = {"role": "assistant", "content": None}
        reply["tool_calls"] = [{"id": "call_1", "type": "function", "function": call}]
    return httpx.Response(
        200,
        json={
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "finish_reason": "stop", "message": reply}],
            "usage": {"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128},
        },
    )


def test_openai_client_calls_with_a_tool_and_a_handled_outage_are_told_truthfully(
    exporting, monkeypatch
):
    """A support bot's steps call OpenAI through the official client, instrumented by
    opentelemetry-instrumentation-openai-v2 with message content on its spans: each call is
    its step's, with the model that answered, tokens, cost and the transcript, its tool call
    request shown as one (not as JSON text); an outage the step caught fails the call, not
    the job."""
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    # The instrumentations read the opt-in once a process (another test's may have read it).
    monkeypatch.setattr(SemconvStability, "_initialized", False)
    monkeypatch.setattr(SemconvStability, "_OTEL_SEMCONV_STABILITY_SIGNAL_MAPPING", {})
    provider = exporting("support-bot")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    client = openai.OpenAI(
        api_key="sk-test", http_client=httpx.Client(transport=httpx.MockTransport(fake_openai_api))
    )
    tracer = provider.get_tracer("support-bot")
    asked = [{"role": "user", "content": "Where is order 42?"}]
    try:
        with tracer.start_as_current_span("answer-ticket", context=Context()) as root:
            trace_id = format(root.get_span_context().trace_id, "032x")
            with tracer.start_as_current_span("classify"):
                request = client.chat.completions.create(model="gpt-4o-mini", messages=asked)
            with tracer.start_as_current_span("lookup_order"):
                tool_answer = {"role": "tool", "tool_call_id": "call_1", "content": "late"}
            with tracer.start_as_current_span("draft"):
                with contextlib.suppress(openai.InternalServerError):  # no refund offered
                    client.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": "refund?"}]
                    )
                prior = request.choices[0].message.model_dump(exclude_none=True)
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=[*asked, prior, tool_answer]
                )
    finally:
        instrumentor.uninstrument()

    job = Job.objects.get(job_id=trace_id)
    assert (job.status, job.name, job.workflow) == ("completed", "answer-ticket", "support-bot")
    assert steps_of(job) == [
        ("classify", 1, "success"),
        ("lookup_order", 1, "success"),
        ("draft", 1, "success"),
    ]
    assert (job.provider, job.model) == ("openai", "gpt-4o-mini-2024-07-18")
    # Two answered calls (the outage's has no usage); genai-prices: $0.15 / $0.60 per MTok.
    assert (job.input_tokens, job.output_tokens) == (240, 16)
    assert float(job.cost) == pytest.approx(2 * (120 * 0.15 + 8 * 0.60) / 1e6)
    classify, outage, draft = Call.objects.filter(job=job).order_by("position")
    assert (classify.node_id, classify.kind, classify.model) == (
        "classify",
        "llm",
        "gpt-4o-mini-2024-07-18",
    )
    assert classify.messages[-1]["tool_calls"] == [
        {"id": "call_1", "name": "lookup_order", "arguments": '{"order": 42}'}
    ]
    assert (outage.node_id, outage.status, outage.reason) == (
        "draft",
        "error",
        "Error code: 503 - upstream overloaded",
    )
    assert [(m["direction"], m["role"], m["content"]) for m in draft.messages] == [
        ("in", "user", "Where is order 42?"),
        ("in", "assistant", ""),
        ("in", "tool", "late"),
        ("out", "assistant", "It ships tomorrow."),
    ]
    assert draft.messages[1]["tool_calls"][0]["name"] == "lookup_order"
    assert escalation_kinds(job) == []
