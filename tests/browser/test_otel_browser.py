"""A job from OpenTelemetry spans in a real browser: the step panel of an LLM call shows the
calls with their transcript, tokens and cost, a failed tool step, and the stack trace folded
away from the one-line reason. Screenshots land in test-artifacts/."""

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot
from tests.otlp_spans import (
    ERROR,
    TRACE_ID,
    attrs,
    exception_event,
    gen_ai_chat_span,
    llm_span,
    root,
    sid,
    span,
    store_spans,
)

pytestmark = pytest.mark.django_db(transaction=True)

# A GenAI-conventions reply asking for a tool (opentelemetry-instrumentation-openai-v2's).
TOOL_CALL_REQUEST = {
    "role": "assistant",
    "parts": [{"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"order": 42}}],
}


@pytest.fixture
def agent_trace(transactional_db):
    store_spans(
        root(name="LangGraph", end_ms=2000, status=ERROR),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=400),
        llm_span(sid(2), sid(1), "gpt-4o-mini", 10),
        gen_ai_chat_span(
            sid(6),
            sid(1),
            100,
            [{"role": "user", "parts": [{"type": "text", "content": "order 42?"}]}],
            [TOOL_CALL_REQUEST],
        ),
        span(name="use_tool", span_id=sid(3), start_ms=500, end_ms=900),
        span(
            name="lookup",
            span_id=sid(4),
            parent=sid(3),
            start_ms=510,
            end_ms=520,
            status=ERROR,
            attributes=attrs(openinference__span__kind="TOOL", tool__name="lookup"),
            span_events=[
                exception_event(
                    "ValueError", "lookup service down: 503", "Traceback (most recent call last):"
                )
            ],
        ),
        span(
            name="charge",
            span_id=sid(5),
            start_ms=1000,
            end_ms=1500,
            status=ERROR,
            span_events=[
                exception_event(
                    "ConnectionError",
                    "gateway timeout",
                    'Traceback (most recent call last):\n  File "pay.py", line 9, in charge',
                )
            ],
        ),
        resource=attrs(service__name="support-agent"),
    )
    factories.user("eng", "engineer")


def test_llm_call_step_panel_shows_the_transcript_tokens_and_cost(page, live_server, agent_trace):
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/?step=plan:1")
    panel = page.locator("#step-panel")
    panel.locator(".call").first.wait_for()
    text = panel.inner_text()
    assert "plan the release" in text and "1. build 2. upload" in text
    assert "1000 → 500 tokens" in text
    assert "$0.00045" in text
    assert "openai/gpt-4o-mini" in text
    header = page.locator(".job-head").inner_text()
    assert "1000 in, 500 out" in header and "$0.00045" in header
    screenshot(page, "otel-llm-call-panel")
    assert axe_violations(page, "#step-panel") == []


def test_a_gen_ai_tool_call_request_shows_as_a_tool_call(page, live_server, agent_trace):
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/?step=plan:1")
    panel = page.locator("#step-panel")
    request = panel.locator(".call").nth(1).locator(".tool-call")
    assert request.inner_text() == 'calls lookup {"order": 42}'
    assert "tool_call" not in panel.inner_text()  # not the part's JSON
    request.scroll_into_view_if_needed()
    screenshot(page, "otel-gen-ai-tool-call")


def test_failed_step_shows_one_line_reason_and_folds_its_stack(page, live_server, agent_trace):
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/?step=charge:1")
    panel = page.locator("#step-panel")
    assert panel.locator(".reason-full").inner_text() == "ConnectionError: gateway timeout"
    stack = panel.locator("details.stack")
    assert stack.locator("summary").inner_text() == "Stack trace (ConnectionError)"
    assert not stack.locator("pre").is_visible()
    stack.locator("summary").click()
    assert 'File "pay.py", line 9' in stack.locator("pre").inner_text()
    screenshot(page, "otel-failed-step-panel")


def test_handled_tool_failure_shows_as_a_failed_tool_step_of_a_successful_step(
    page, live_server, agent_trace
):
    """The tool's execution is a step of its own, nested in use_tool's: failed, handled (the
    step above it succeeded), its failed call in its panel."""
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/?step=lookup:1")
    panel = page.locator("#step-panel")
    call = panel.locator(".call.call-failed")
    assert "lookup" in call.inner_text()
    assert "ValueError: lookup service down: 503" in call.inner_text()
    page.goto(f"{live_server.url}/jobs/{TRACE_ID.hex()}/?step=use_tool:1")
    assert "Result type success" in page.locator("#step-panel").inner_text()


@pytest.fixture
def rehomed_trace(transactional_db):
    """A run whose children arrived before its root, which alone names the job."""
    for child in (
        span(name="fetch", span_id=sid(1), start_ms=0, end_ms=400),
        span(name="upload", span_id=sid(2), start_ms=500, end_ms=900, status=ERROR),
    ):
        store_spans(child, resource=attrs(service__name="release-bot"))
    store_spans(
        root(name="release", end_ms=1000, attributes=attrs(traceviz__job_id="release-42")),
        resource=attrs(service__name="release-bot"),
    )
    factories.user("eng", "engineer")


def test_a_deep_link_made_of_the_trace_id_opens_the_named_job(page, live_server, rehomed_trace):
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/?step=upload:1")
    assert page.url == f"{live_server.url}/jobs/release-42/?step=upload:1"
    assert "release-42" in page.locator(".job-head").inner_text()
    assert "upload" in page.locator("#step-panel").inner_text()
    steps = page.locator("#step-list [data-step-key]")
    assert [steps.nth(i).get_attribute("data-step-key") for i in range(steps.count())] == [
        "fetch:1",
        "upload:1",
    ]
    screenshot(page, "otel-trace-id-redirects-to-named-job")


def test_a_running_traces_page_moves_to_the_named_job_when_its_name_arrives(page, live_server):
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    store_spans(span(name="fetch", span_id=sid(1), start_ms=0, end_ms=400, flags=local))
    factories.user("eng", "engineer")
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/")
    assert "Live: this page updates" in page.locator("#job-live").inner_text()
    store_spans(span(name="upload", span_id=sid(2), start_ms=500, end_ms=900, flags=local))
    store_spans(root(name="release", end_ms=1000, attributes=attrs(traceviz__job_id="release-42")))
    page.wait_for_url(f"{live_server.url}/jobs/release-42/", timeout=10_000)
    assert "release-42" in page.locator(".job-head").inner_text()
    assert page.locator("#step-list [data-step-key]").count() == 2
    screenshot(page, "otel-running-trace-page-moves-to-named-job")
