"""A real Strands agent's job in a real browser (tests/producers/strands, in its own
environment): the content Strands writes as span events is the transcript of the calls in the
step panel. Screenshots land in test-artifacts/."""

import pytest

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_strands_agents_step_panel_shows_its_transcript(page, live_server, run_producer):
    run = run_producer("strands")
    factories.user("eng", "engineer")

    log_in(
        page, live_server, "eng", f"/jobs/{run['trace_id']}/?step=execute_event_loop_cycle+%232:1"
    )
    panel = page.locator("#step-panel")
    chat = panel.locator(".call", has_text="chat")
    chat.first.wait_for()
    transcript = chat.locator(".transcript").inner_text()
    for text in ("Where is order 42?", "Order 42: packed, ships tomorrow from Lyon."):
        assert text in transcript
    assert "Order 42 ships tomorrow from Lyon." in transcript
    assert chat.locator(".tool-call").first.inner_text() == 'calls lookup_order {"order": 42}'
    assert "160 → 12 tokens" in chat.inner_text()
    assert "gen_ai.user.message" not in panel.inner_text()  # read as transcript, not repeated
    # The panel scrolls within the window: a window tall enough shows the whole call.
    page.set_viewport_size({"width": 1280, "height": 2200})
    screenshot(page, "strands-agent-transcript")
    assert axe_violations(page, "#step-panel") == []
