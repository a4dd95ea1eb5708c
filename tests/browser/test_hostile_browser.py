"""Hostile producer text in a real browser (issue 7): reasons, node ids, job ids, workflow names
and payload keys carrying markup and script, very long strings, right-to-left overrides and
emoji. Every page shows them as text: no dialog fires and nothing logs a console error (the
``page`` fixture fails the test on either)."""

from urllib.parse import quote

import pytest
from playwright.sync_api import expect

from jobs.models import Escalation
from tests import factories
from tests.browser.conftest import log_in
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "<script>alert('xss-script')</script>"
IMG = '"><img src=x onerror="alert(\'xss-img\')">'
SVG = "<svg/onload=alert('xss-svg')>"
RTL = "\u202eevil.exe\u202c"
EMOJI = "🔥💥🧨 job ünïcödé"
LONG = "A" * 5000
# A right-to-left override is refused in an id (a look-alike), so only free text carries it.
JOB = f"job-{IMG}-{EMOJI}"
NODE = f"node{SVG}{EMOJI}"
WORKFLOW = f"wf {SCRIPT} {RTL}"
REASON = f"{SCRIPT} {IMG} {SVG} {RTL} {EMOJI} {LONG}"


@pytest.fixture
def hostile(transactional_db):
    factories.store(
        [
            event(
                "job_started",
                JOB,
                0,
                workflow=WORKFLOW,
                name=f"name {IMG}",
                provider=SVG,
                model=EMOJI,
                metadata={SCRIPT: IMG},
            ),
            started(NODE, JOB, 1),
            finished(
                NODE,
                "retryable_failure",
                JOB,
                2,
                reason=REASON,
                error_type="auth",
                failure_code=f"code{SVG}",
                payload_results={IMG: SCRIPT, "k": LONG},
                context={"actual_arguments": {SCRIPT: RTL}},
                audit_trail=[IMG, {SVG: EMOJI}],
            ),
            started("n2", JOB, 3),
            finished("n2", "permanent_failure", JOB, 4, reason=REASON),
            event(
                "escalation_raised",
                JOB,
                5,
                node_id=NODE,
                severity="high",
                kind=f"k{SCRIPT}",
                message=REASON,
            ),
            event(
                "graph.next_step.degraded",
                JOB,
                6,
                provider=SVG,
                model=IMG,
                attempts=3,
                reason=REASON,
                raw_output_preview=SCRIPT,
            ),
        ]
    )
    factories.user("eve-support", "support", "engineer")
    return Escalation.objects.filter(job__job_id=JOB).order_by("pk")


def visit(page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    # The markup arrived as text: no element the producer wrote exists in the DOM.
    assert page.locator("img[src=x]").count() == 0, url
    assert page.locator("svg[onload]").count() == 0, url
    executable_with_payload = page.evaluate(
        "() => [...document.scripts].filter(s => !s.type || s.type.includes('javascript'))"
        ".some(s => s.text.includes('xss-'))"
    )
    assert executable_with_payload is False, url


def test_every_page_shows_hostile_text_as_text(page, live_server, hostile):
    log_in(page, live_server, "eve-support")
    base = live_server.url
    visit(page, f"{base}/?status=all")
    assert SCRIPT in page.inner_text("body") or "xss-script" in page.inner_text("body")

    job_link = page.locator("a[href^='/jobs/']").first
    job_link.click()
    page.wait_for_load_state("networkidle")
    visit(page, page.url)
    assert NODE in page.inner_text("body")

    page.locator("[data-step-link]").first.click()  # the panel swaps in over htmx
    expect(page.locator("#step-panel")).to_contain_text("xss-script")
    visit(page, f"{base}/jobs/{quote(JOB, safe='')}/?step={quote(NODE, safe='')}:1")
    expect(page.locator("#step-panel")).to_contain_text(RTL)

    visit(page, f"{base}/escalations/?status=all")
    assert "xss-script" in page.inner_text("body")
    for escalation in hostile:
        visit(page, f"{base}/escalations/{escalation.pk}/")
    visit(page, f"{base}/dashboard/")
    assert page.watch.dialogs == []
