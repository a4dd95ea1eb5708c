"""What ingest masked, as a reader sees it: the step panel of an event step names the masked
paths under its status, the span part of a trace step names them beside the span's attributes.
Screenshots land in test-artifacts/."""

import pytest

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot
from tests.otlp_spans import TRACE_ID, attrs, root, sid, span, store_spans

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def masked_job(transactional_db):
    factories.store(
        [
            factories.event("job_started", "checkout-7", 0, name="checkout", workflow="shop"),
            factories.started("charge", "checkout-7", 1),
            factories.finished(
                "charge",
                "retryable_failure",
                "checkout-7",
                2,
                reason="gateway said 401 for Authorization: Bearer tvzBrowserBearer0123456789",
                payload_results={
                    "password": "hunter2pw",
                    "tests_passed": 1843,
                    "tokenizer": "o200k",
                },
                context={"actual_arguments": {"headers": [["Accept", "*/*"], ["Cookie", "sid=1"]]}},
            ),
        ]
    )
    store_spans(
        root(name="agent", end_ms=900),
        span(
            name="call_api",
            span_id=sid(2),
            start_ms=10,
            end_ms=400,
            attributes=attrs(
                http__request__header__authorization="Bearer tvzBrowserBearer0123456789",
                http__request__method="POST",
                passenger_count=2,
            ),
        ),
    )
    factories.user("eng", "engineer")


def test_step_panel_says_which_paths_were_masked_at_ingest(page, live_server, masked_job):
    log_in(page, live_server, "eng", "/jobs/checkout-7/?step=charge:1")
    note = page.locator("#step-panel .masked-note")
    note.wait_for()
    assert note.inner_text().startswith(
        "masked at ingest: reason, payload_results.password, context.actual_arguments.headers[1]"
    )
    panel = page.locator("#step-panel").inner_text()
    assert "tvzBrowserBearer" not in panel and "hunter2pw" not in panel
    assert '"tests_passed": 1843' in panel and '"tokenizer": "o200k"' in panel
    assert axe_violations(page, "#step-panel") == []
    screenshot(page, "masked-step-panel")


def test_span_part_of_a_trace_step_says_which_attributes_were_masked(page, live_server, masked_job):
    log_in(page, live_server, "eng", f"/jobs/{TRACE_ID.hex()}/?step=call_api:1")
    notes = page.locator("#step-panel .masked-note")
    notes.first.wait_for()
    assert notes.count() == 1
    assert notes.inner_text().startswith(
        "masked at ingest: attributes.http.request.header.authorization"
    )
    span_attributes = page.locator("#step-panel details").filter(
        has=page.locator("summary", has_text="Span attributes")
    )
    span_attributes.locator("summary").click()
    attributes = span_attributes.locator("pre").inner_text()
    assert '"http.request.header.authorization": "[REDACTED]"' in attributes
    assert '"passenger_count": 2' in attributes
    assert axe_violations(page, "#step-panel") == []
    screenshot(page, "masked-span-panel")
