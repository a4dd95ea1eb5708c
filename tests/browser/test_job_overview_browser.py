"""A 5,000-node job at a glance, in a real browser: the root failure in the middle of the job
is in view on load (waterfall row, step list row and panel), a click on the overview strip
moves the waterfall and the step list there, "Jump to root failure" brings them back, and a
subtree collapses. Screenshots land in test-artifacts/ for a human to look at."""

import pytest

from tests import factories
from tests.browser.conftest import ARTIFACTS, axe_violations, log_in
from tests.integration.test_job_overview import RETRIED, ROOT, wide_job

pytestmark = pytest.mark.django_db(transaction=True)


def view_shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def inside_scroll_box(page, selector: str, box: str) -> bool:
    """The element is on screen inside its scrolling container ``box`` as it is scrolled now."""
    return page.eval_on_selector(
        selector,
        f"""element => {{ const box = element.closest('{box}').getBoundingClientRect();
             const row = element.getBoundingClientRect();
             return row.height > 0 && row.top >= box.top && row.bottom <= box.bottom; }}""",
    )


@pytest.fixture
def wide(transactional_db):
    wide_job()
    factories.user("eng", "engineer")


def test_the_root_failure_of_a_5000_node_job_is_in_view_on_load(page, live_server, wide):
    log_in(page, live_server, "eng", "/jobs/wide/")
    page.eval_on_selector("#waterfall", "e => e.scrollIntoView({block: 'start'})")
    root_row = "#waterfall .wf-row.selected"
    assert page.locator(root_row + " code").inner_text() == ROOT
    assert inside_scroll_box(page, root_row, "ol.wf")
    assert inside_scroll_box(page, f"#step-list a[data-step-key='{ROOT}:1']", ".steps")
    assert page.locator("#step-panel").get_attribute("data-step-key") == f"{ROOT}:1"
    assert page.locator(".ov-strip .ov-cell").count() == 200
    assert page.locator(".ov-strip .ov-failed.in-view").count() == 1
    view_shot(page, "overview-root-failure-in-view")
    assert axe_violations(page, "#waterfall") == []


def test_a_click_on_the_strip_moves_the_waterfall_and_the_step_list(page, live_server, wide):
    log_in(page, live_server, "eng", "/jobs/wide/")
    page.eval_on_selector("#waterfall", "e => e.scrollIntoView({block: 'start'})")
    outline_before = page.eval_on_selector(".ov-window", "e => e.style.left")
    page.click(".ov-strip .ov-retried")
    page.wait_for_selector(f"#step-panel[data-step-key='{RETRIED}:2']")
    assert f"step={RETRIED}:2" in page.url
    assert page.locator("#waterfall .wf-row.selected code").inner_text() == RETRIED
    assert inside_scroll_box(page, "#waterfall .wf-row.selected", "ol.wf")
    assert inside_scroll_box(page, f"#step-list a[data-step-key='{RETRIED}:2']", ".steps")
    assert page.locator(".ov-strip .ov-retried.in-view").count() == 1
    assert page.eval_on_selector(".ov-window", "e => e.style.left") != outline_before
    view_shot(page, "overview-strip-click-moved")

    # Jump to root failure brings the waterfall, the list and the panel back.
    page.evaluate("() => window.scrollTo(0, 0)")
    page.click("a.jump-root")
    page.wait_for_selector(f"#step-panel[data-step-key='{ROOT}:1']")
    assert page.locator("#waterfall .wf-row.selected code").inner_text() == ROOT
    assert f"step={ROOT}:1" in page.url

    # The back button restores the page the strip click made.
    page.go_back()
    page.wait_for_selector(f"#step-panel[data-step-key='{RETRIED}:2']")


def test_a_subtree_collapses_and_opens_again(page, live_server, wide):
    log_in(page, live_server, "eng", "/jobs/wide/?step=batch-00:1")
    page.click("#waterfall .wf-row.selected .wf-toggle")
    page.wait_for_selector("#waterfall .wf-hidden")
    assert "+49 hidden" in page.locator("#waterfall .wf-row.selected").inner_text()
    rows = page.locator("#waterfall .wf-row code").all_inner_texts()
    assert rows[:2] == ["batch-00", "batch-01"]
    assert "collapse=batch-00" in page.url
    view_shot(page, "overview-subtree-collapsed")
    page.click("#waterfall .wf-row.selected .wf-toggle")
    page.wait_for_function(
        "() => document.querySelectorAll('#waterfall .wf-row code')[1].textContent"
        " === 'batch-00-item-01'"
    )
