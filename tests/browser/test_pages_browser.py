"""The trace viewer in a real browser: login, filters, step panel, deep links, history,
escaping, accessibility. Screenshots land in test-artifacts/ for a human to look at."""

import json
from pathlib import Path

import pytest

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
HOSTILE = "<script>alert(1)</script> and <img src=x onerror=alert(1)>"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def jobs_data(transactional_db):
    """The example streams (release-42: upload retryable then permanent) plus a job whose
    reason is hostile markup and a completed job that must stay out of the failed filter."""
    for path in sorted(EXAMPLES.glob("*.ndjson")):
        factories.store([json.loads(line) for line in path.read_text().splitlines() if line])
    factories.store(
        [
            factories.event("job_started", "evil-1", 0, workflow="mail-digest", name="digest"),
            factories.started("collect", "evil-1", 1),
            factories.finished(
                "collect",
                "permanent_failure",
                "evil-1",
                2,
                reason=HOSTILE,
                failure_code="tool_not_found",
            ),
            factories.event("job_started", "ok-1", 0, workflow="publish-release"),
            factories.started("build", "ok-1", 1),
            factories.finished("build", "success", "ok-1", 2),
            factories.event("job_finished", "ok-1", 3, status="completed"),
        ]
    )
    factories.user("eng", "engineer")


def panel_text(page) -> str:
    return page.locator("#step-panel").inner_text()


def test_login_then_filter_list_to_failed_jobs(page, live_server, jobs_data):
    log_in(page, live_server, "eng")
    assert page.locator("h1").inner_text() == "Jobs"
    page.check("input[name=show][value=all]")
    page.wait_for_selector("tr[data-job-id='ok-1']")
    page.click(".more-filters > summary")
    page.check("input[name=status][value=failed]")
    page.wait_for_function(
        "() => !document.querySelector(\"#job-table tr[data-status='paused:approval']\")"
    )
    statuses = page.locator("#job-table tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.status)"
    )
    assert statuses and set(statuses) == {"failed"}
    assert "status=failed" in page.url
    page.reload()  # the filter lives in the URL
    assert page.locator("input[name=status][value=failed]").is_checked()
    assert page.locator("#job-table tbody tr").count() == len(statuses)
    screenshot(page, "jobs-list")
    assert axe_violations(page) == []


def test_open_job_and_read_a_retryable_step_in_the_panel(page, live_server, jobs_data):
    log_in(page, live_server, "eng")
    page.click("a.job-link:text-is('release-42')")
    page.wait_for_selector("#step-list")
    page.click("#step-list [data-step-key='upload:1']")
    page.wait_for_selector("#step-panel[data-step-key='upload:1']")
    text = panel_text(page)
    assert "upload: network timeout after 30s" in text
    assert "retryable" in text
    assert page.url.endswith("?step=upload:1")
    screenshot(page, "job-page-panel")
    assert axe_violations(page) == []
    assert axe_violations(page, "#step-panel") == []


def test_deep_link_opens_its_panel_and_back_restores_the_previous_one(page, live_server, jobs_data):
    log_in(page, live_server, "eng", "/jobs/release-42/?step=upload:2")
    assert "404 bucket releases-eu not found" in panel_text(page)
    page.click("#step-list [data-step-key='build:1']")
    page.wait_for_selector("#step-panel[data-step-key='build:1']")
    assert "dist/app.tar.gz" in panel_text(page)
    page.go_back()
    page.wait_for_selector("#step-panel[data-step-key='upload:2']")
    assert "404 bucket releases-eu not found" in panel_text(page)
    assert page.url.endswith("?step=upload:2")


def test_keyboard_j_k_and_enter_open_a_step(page, live_server, jobs_data):
    log_in(page, live_server, "eng", "/jobs/release-42/")
    # The root failure (upload:2) is selected by default: k moves up from it, j back down.
    page.locator("body").press("k")
    page.keyboard.press("k")
    page.keyboard.press("j")
    focused = page.evaluate("() => document.activeElement.dataset.stepKey")
    assert focused == "upload:1"
    page.keyboard.press("Enter")
    page.wait_for_selector("#step-panel[data-step-key='upload:1']")
    # The list's marker follows the panel once htmx has settled the swap (traceviz.js).
    page.wait_for_selector("#step-list [aria-current='true'][data-step-key='upload:1']")
    assert page.locator("#step-list [aria-current='true']").count() == 1


def test_hostile_reason_is_shown_as_text_and_never_runs(page, live_server, jobs_data):
    log_in(page, live_server, "eng", "/?show=all")
    row = page.locator("tr[data-job-id='evil-1']")
    assert HOSTILE in row.inner_text()
    page.goto(f"{live_server.url}/jobs/evil-1/?step=collect:1")
    assert HOSTILE in panel_text(page)
    assert page.locator("#step-panel img").count() == 0
    assert page.locator("#main script").count() == 0
    page.wait_for_timeout(300)  # give an injected handler its chance to fire (it must not)
    assert page.watch.dialogs == []


def test_job_page_and_empty_panel_have_no_serious_accessibility_violations(
    page, live_server, jobs_data
):
    log_in(page, live_server, "eng", "/jobs/fanout-7/")
    screenshot(page, "job-page")
    assert axe_violations(page) == []


def test_narrow_screen_list_is_usable(page, live_server, jobs_data):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "eng", "/?show=all")
    screenshot(page, "jobs-list-390")
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390
    page.goto(f"{live_server.url}/jobs/release-42/?step=upload:2")
    screenshot(page, "job-page-390")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
