"""Real agent frameworks' jobs in a real browser (tests/producers, each in its own environment):
an OpenAI Agents run's page (its agent and tools as steps, a retried model call as one card,
the run that raised), and a Strands model call's transcript read from its span events.
Screenshots land in test-artifacts/."""

from urllib.parse import quote

import pytest

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.producers]


def job_url(run: dict, name: str, step: str) -> str:
    return f"/jobs/{run['runs'][name]['trace_id']}/?step={quote(step)}"


def test_an_openai_agents_runs_pages_tell_its_story(page, live_server, run_producer):
    run = run_producer("openai_agents")
    factories.user("eng", "engineer")

    log_in(page, live_server, "eng", job_url(run, "two_tools", "weather_agent:1"))
    waterfall = page.locator(".waterfall").inner_text()
    for node in ("weather_agent", "get_weather", "get_time"):
        assert node in waterfall
    panel = page.locator("#step-panel")
    panel.locator(".call").first.wait_for()
    assert "101 → 11 tokens" in panel.inner_text()
    assert "306 in, 36 out" in page.locator(".job-head").inner_text()
    page.set_viewport_size({"width": 1280, "height": 2000})
    screenshot(page, "openai-agents-run")

    page.goto(f"{live_server.url}{job_url(run, 'two_tools', 'get_weather:1')}")
    tool = page.locator("#step-panel .call", has_text="get_weather")
    assert '"city": "Paris"' in tool.inner_text() and "Sunny, 21C in Paris" in tool.inner_text()
    assert "properties" not in tool.inner_text()  # the tool's schema is not its arguments
    assert "Input and output" not in page.locator("#step-panel").inner_text()  # not twice
    screenshot(page, "openai-agents-tool-card")

    page.goto(f"{live_server.url}{job_url(run, 'retried', 'weather_agent:1')}")
    retried = page.locator("#step-panel .call", has_text="attempt 2")
    assert "retried attempt 1" in retried.inner_text()
    assert "Error code: 500" in retried.inner_text()
    assert page.locator("#step-panel .call.call-failed").count() == 0
    retried.scroll_into_view_if_needed()
    screenshot(page, "openai-agents-retried-call")

    page.goto(f"{live_server.url}{job_url(run, 'raises', 'weather_agent:1')}")
    head = page.locator(".job-head").inner_text()
    assert "failed" in head
    assert "Max turns exceeded" in page.locator("#step-panel").inner_text()
    screenshot(page, "openai-agents-raised")
    assert axe_violations(page, "#step-panel") == []


def test_a_strands_model_calls_transcript_reads_its_span_events(page, live_server, run_producer):
    run = run_producer("strands")
    factories.user("eng", "engineer")

    log_in(page, live_server, "eng", job_url(run, "two_tools", "chat #3:1"))
    chat = page.locator("#step-panel .call", has_text="chat")
    chat.first.wait_for()
    transcript = chat.locator(".transcript").inner_text()
    for text in ("What's the weather and time in Paris?", "Sunny, 21C in Paris", "14:05 in Paris"):
        assert text in transcript
    assert "It is sunny and 21C in Paris, local time 14:05." in transcript
    assert chat.locator(".tool-call").first.inner_text() == 'calls get_weather {"city": "Paris"}'
    assert "103 → 13 tokens" in chat.inner_text()
    assert "gen_ai.user.message" not in page.locator("#step-panel").inner_text()
    # Strands' agent repeats the run's total: the header counts it once.
    assert "306 in, 36 out" in page.locator(".job-head").inner_text()
    page.set_viewport_size({"width": 1280, "height": 2400})
    screenshot(page, "strands-agent-transcript")
    assert axe_violations(page, "#step-panel") == []
