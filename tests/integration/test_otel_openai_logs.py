"""OpenTelemetry's OpenAI instrumentation (opentelemetry-instrumentation-openai-v2) as it sends
message content by default: as OTLP log records, beside its spans. The OpenAI client runs
against a fake OpenAI API (an httpx transport, no network) and exports its traces to
/v1/traces and its logs to /v1/logs of a live traceviz; the records join their span's call as
its transcript (docs/otlp.md)."""

import httpx
import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.instrumentation._semconv import (
    _OpenTelemetrySemanticConventionStability as SemconvStability,
)
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

from jobs.models import Call, Event, Job
from tests.integration.test_otel_openai import fake_openai_api
from tests.integration.test_otel_producers import steps_of

pytestmark = pytest.mark.django_db(transaction=True)
CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"


@pytest.fixture
def instrumented(exporting, exporting_logs, monkeypatch):
    """``instrumented(**environment)``: the OpenAI client instrumented with these environment
    variables only (the instrumentation's defaults otherwise), exporting its spans and log
    records to the live server, and a tracer for the app's own spans."""
    instrumentors = []

    def make(**environment):
        for name in ("OTEL_SEMCONV_STABILITY_OPT_IN", CONTENT):
            monkeypatch.delenv(name, raising=False)
        for name, value in environment.items():
            monkeypatch.setenv(name, value)
        # The instrumentations read the opt-in once a process (another test's may have read it).
        monkeypatch.setattr(SemconvStability, "_initialized", False)
        monkeypatch.setattr(SemconvStability, "_OTEL_SEMCONV_STABILITY_SIGNAL_MAPPING", {})
        tracer_provider, logs = exporting("support-bot"), exporting_logs("support-bot")
        instrumentor = OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=tracer_provider, logger_provider=logs)
        instrumentors.append(instrumentor)
        client = openai.OpenAI(
            api_key="sk-test",
            http_client=httpx.Client(transport=httpx.MockTransport(fake_openai_api)),
        )
        return client, tracer_provider.get_tracer("support-bot")

    yield make
    for instrumentor in instrumentors:
        instrumentor.uninstrument()


def answer_ticket(client, tracer) -> str:
    """The support bot's run: a classify step whose call asks for a tool, a draft step whose
    call reads the tool's answer. Returns the trace id."""
    asked = [
        {"role": "system", "content": "You answer questions about orders."},
        {"role": "user", "content": "Where is order 42?"},
    ]
    with tracer.start_as_current_span("answer-ticket", context=Context()) as root:
        with tracer.start_as_current_span("classify"):
            request = client.chat.completions.create(model="gpt-4o-mini", messages=asked)
        prior = request.choices[0].message.model_dump(exclude_none=True)
        with tracer.start_as_current_span("draft"):
            tool_answer = {"role": "tool", "tool_call_id": "call_1", "content": "late"}
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[*asked, prior, tool_answer]
            )
    return format(root.get_span_context().trace_id, "032x")


def transcript(call: Call) -> list[tuple]:
    return [
        (m["direction"], m["role"], m["content"], [t.get("name") for t in m.get("tool_calls", [])])
        for m in call.messages
    ]


def test_openai_instrumentation_content_as_log_records_is_the_calls_transcript(instrumented):
    """Its defaults but content capture (OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=
    true): the spans carry no content, one log record per message carries it
    (gen_ai.system.message, gen_ai.user.message, ..., gen_ai.choice, with a body). Each call's
    transcript shows them, the tool call request as one, whichever of its span and its
    records came first (here the records: they are emitted while the span runs)."""
    client, tracer = instrumented(**{CONTENT: "true"})
    trace_id = answer_ticket(client, tracer)

    job = Job.objects.get(job_id=trace_id)
    assert (job.status, job.name) == ("completed", "answer-ticket")
    assert steps_of(job) == [("classify", 1, "success"), ("draft", 1, "success")]
    logs = Event.objects.filter(job_id=trace_id, type="log")
    assert sorted(e.payload["event_name"] for e in logs) == sorted(
        ["gen_ai.system.message", "gen_ai.user.message", "gen_ai.choice"] * 2
        + ["gen_ai.assistant.message", "gen_ai.tool.message"]
    )
    classify, draft = Call.objects.filter(job=job).order_by("position")
    assert (classify.node_id, classify.model, classify.input_tokens) == (
        "classify",
        "gpt-4o-mini-2024-07-18",
        120,
    )
    assert transcript(classify) == [
        ("in", "system", "You answer questions about orders.", []),
        ("in", "user", "Where is order 42?", []),
        ("out", "assistant", "", ["lookup_order"]),
    ]
    assert classify.messages[-1]["tool_calls"] == [
        {"id": "call_1", "name": "lookup_order", "arguments": '{"order": 42}'}
    ]
    assert transcript(draft) == [
        ("in", "system", "You answer questions about orders.", []),
        ("in", "user", "Where is order 42?", []),
        ("in", "assistant", "", ["lookup_order"]),
        ("in", "tool", "late", []),
        ("out", "assistant", "It ships tomorrow.", []),
    ]


def test_openai_instrumentation_latest_conventions_event_only_is_the_calls_transcript(
    instrumented,
):
    """The latest GenAI conventions with content as events only: one
    gen_ai.client.inference.operation.details record per call, the messages in its
    attributes, none on the span."""
    client, tracer = instrumented(
        OTEL_SEMCONV_STABILITY_OPT_IN="gen_ai_latest_experimental", **{CONTENT: "EVENT_ONLY"}
    )
    trace_id = answer_ticket(client, tracer)

    job = Job.objects.get(job_id=trace_id)
    logs = Event.objects.filter(job_id=trace_id, type="log")
    names = [event.payload["event_name"] for event in logs]
    assert names == ["gen_ai.client.inference.operation.details"] * 2
    classify, draft = Call.objects.filter(job=job).order_by("position")
    assert "gen_ai.input.messages" not in classify.detail["attributes"]
    assert transcript(classify)[-1] == ("out", "assistant", "", ["lookup_order"])
    assert transcript(draft)[-2:] == [
        ("in", "tool", "late", []),
        ("out", "assistant", "It ships tomorrow.", []),
    ]
