"""The job page for real workloads, in a real browser: a 10,000-step failed job (root failure
open and on screen, header lists collapsed, find within the job), a running job that updates
itself and stops polling when it finishes, and the export that imports again. Screenshots land
in test-artifacts/ for a human to look at; the load figure is printed, never asserted."""

import json
import time
from io import StringIO

import pytest
from django.core.management import call_command

from jobs.models import Event, Job
from tests import factories
from tests.browser.conftest import ARTIFACTS, axe_violations, log_in, screenshot
from tests.factories import event, finished, started
from tests.integration.test_big_job_page import big_failed_job

pytestmark = pytest.mark.django_db(transaction=True)
BIG_STEPS = 10_000


def view_shot(page, name: str) -> None:
    """A screenshot of what is on screen (a 10,000-step page in full is 100,000 px tall)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


def navigation_timing(page) -> dict:
    return page.evaluate(
        """() => { const t = performance.getEntriesByType('navigation')[0];
             return {ready: t.domContentLoadedEventEnd, load: t.loadEventEnd,
                     server: t.responseEnd - t.requestStart, bytes: t.transferSize}; }"""
    )


def in_viewport(page, selector: str) -> bool:
    return page.eval_on_selector(
        selector,
        """element => { const box = element.getBoundingClientRect();
             // Scrolled to the top, an element can sit a fraction of a pixel above it.
             return box.top > -1 && box.top < window.innerHeight && box.height > 0; }""",
    )


def visible_in_list(page, selector: str) -> bool:
    """The row is inside the step list's own scroll box as it is scrolled now."""
    return page.eval_on_selector(
        selector,
        """element => { const list = element.closest('.steps').getBoundingClientRect();
             const row = element.getBoundingClientRect();
             return row.top >= list.top && row.bottom <= list.bottom; }""",
    )


@pytest.fixture
def big_job(transactional_db):
    started_at = time.perf_counter()
    big_failed_job("big-10k", steps=BIG_STEPS)
    print(f"\n{BIG_STEPS} steps stored in {time.perf_counter() - started_at:.1f} s")
    factories.user("eng", "engineer")


def test_big_failed_job_opens_on_its_root_failure(page, live_server, big_job):
    log_in(page, live_server, "eng", "/jobs/big-10k/")
    page.reload()  # timed without the login redirect
    timing = navigation_timing(page)
    print(
        f"10,000-step job page: response {timing['server']:.0f} ms, DOMContentLoaded "
        f"{timing['ready']:.0f} ms, load {timing['load']:.0f} ms, {timing['bytes'] / 1024:.0f} KiB"
    )
    # The root failure's panel is open and in view beside the list, its row marked and shown.
    assert page.locator("#step-panel").get_attribute("data-step-key") == "publish:1"
    assert "tool publish_v2 is not registered" in page.locator("#step-panel").inner_text()
    root_row = "#step-list a[data-step-key='publish:1']"
    assert page.get_attribute(root_row, "aria-current") == "true"
    assert visible_in_list(page, root_row)
    # Long header lists are a count, closed; the waterfall is reached within two screens.
    summary = page.locator("header .long-list summary").inner_text()
    assert summary.startswith(f"{BIG_STEPS - 2} completed nodes")
    assert page.locator("header details.long-list[open]").count() == 0
    waterfall_top = page.eval_on_selector("#waterfall", "e => e.getBoundingClientRect().top")
    assert waterfall_top < 2 * 900, waterfall_top
    view_shot(page, "big-job-root-failure")
    assert axe_violations(page, "#steps") == []

    # Reading the step list, the panel is beside it; a row far down the list opens its panel
    # there, without the page moving away from the list.
    page.eval_on_selector("#steps", "e => e.scrollIntoView({block: 'start'})")
    page.click("#step-list a[data-step-key='flaky:2']")
    page.wait_for_selector("#step-panel[data-step-key='flaky:2']")
    assert in_viewport(page, "#step-panel") and in_viewport(page, "#steps")
    view_shot(page, "big-job-list-and-panel")

    # Jump to root failure from the header (an htmx move) lands on the root failure's panel.
    page.evaluate("() => window.scrollTo(0, 0)")
    page.click("a.jump-root")
    page.wait_for_selector("#step-panel[data-step-key='publish:1']")
    page.wait_for_function("() => window.scrollY > 0")
    assert in_viewport(page, "#step-panel")
    assert "step=publish:1" in page.url


def test_find_within_a_big_job(page, live_server, big_job):
    log_in(page, live_server, "eng", "/jobs/big-10k/")
    page.fill("#f-step-node", "node-0123")
    page.wait_for_selector(".filter-count")
    page.wait_for_function(
        "() => document.querySelectorAll('#step-list [data-step-link]').length === 1"
    )
    assert page.locator("#step-list [data-step-link]").get_attribute("data-step-key") == (
        "node-0123:1"
    )
    assert "node=node-0123" in page.url
    page.fill("#f-step-node", "")
    page.check("input[name=retried]")
    page.wait_for_function(
        "() => [...document.querySelectorAll('#step-list [data-step-link]')]"
        ".map(a => a.dataset.stepKey).join() === 'flaky:2'"
    )
    assert "1 of 10000 attempts match" in page.locator(".filter-count").inner_text()
    page.click("#step-list a[data-step-key='flaky:2']")
    page.wait_for_selector("#step-panel[data-step-key='flaky:2']")
    assert "retried=1" in page.url and "step=flaky" in page.url
    page.reload()  # the address keeps the filter and the panel
    assert page.locator("#step-list [data-step-link]").count() == 1
    assert page.locator("#step-panel").get_attribute("data-step-key") == "flaky:2"
    view_shot(page, "big-job-find-retried")


def test_deep_link_on_a_phone_scrolls_to_the_panel(browser, live_server, big_job):
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.set_default_timeout(15_000)
    log_in(page, live_server, "eng", "/jobs/big-10k/?step=node-5000:1")
    page.wait_for_timeout(300)
    assert page.locator("#step-panel").get_attribute("data-step-key") == "node-5000:1"
    assert in_viewport(page, "#step-panel")
    view_shot(page, "big-job-phone-deep-link")
    context.close()


@pytest.fixture
def running_job(transactional_db):
    factories.store(
        [
            event("job_started", "live-1", 0, workflow="etl"),
            started("fetch", "live-1", 1),
            finished("fetch", "success", "live-1", 2),
            started("transform", "live-1", 3),
            finished("transform", "retryable_failure", "live-1", 4, reason="db busy"),
            started("transform", "live-1", 5, attempt=2),
        ]
    )
    factories.user("eng", "engineer")


def test_running_job_page_updates_itself_and_stops_when_finished(page, live_server, running_job):
    polls: list[int] = []
    page.on(
        "response",
        lambda response: polls.append(response.status) if "/live" in response.url else None,
    )
    log_in(page, live_server, "eng", "/jobs/live-1/")
    assert "Live: this page updates" in page.locator("#job-live").inner_text()
    page.click("#step-list a[data-step-key='transform:1']")
    page.wait_for_selector("#step-panel[data-step-key='transform:1']")
    page.evaluate("() => window.scrollTo(0, 200)")
    scroll_before = page.evaluate("() => window.scrollY")

    factories.store(
        [
            finished("transform", "success", "live-1", 6, attempt=2),
            started("load", "live-1", 7),
        ]
    )
    page.wait_for_selector("#step-list a[data-step-key='load:1']", timeout=10_000)
    # The reader's step and place stay: panel, marker and scroll position.
    assert page.locator("#step-panel").get_attribute("data-step-key") == "transform:1"
    assert page.get_attribute("#step-list a[data-step-key='transform:1']", "aria-current") == (
        "true"
    )
    assert abs(page.evaluate("() => window.scrollY") - scroll_before) < 5
    assert page.locator("#waterfall .wf-row").count() == 3
    # Every part events change is fresh: the panel's attempts, the restart preview, the story.
    assert "running" not in page.locator("#step-panel ol.attempts").inner_text()
    assert "load" in page.locator("#job-overview .resume").inner_text()
    assert "Node load started (attempt 1)" in page.locator("#narrative").inner_text()
    screenshot(page, "live-job-updated")

    factories.store(
        [
            finished("load", "success", "live-1", 8),
            event("job_finished", "live-1", 9, status="completed"),
        ]
    )
    page.wait_for_selector("#job-head [data-status='completed']", timeout=10_000)
    assert "live updates stopped" in page.locator("#job-live").inner_text()
    assert 286 in polls
    stopped_at = len(polls)
    page.wait_for_timeout(4_000)
    assert len(polls) == stopped_at  # no poll after the job finished
    screenshot(page, "live-job-finished")


def test_live_update_keeps_what_the_reader_unfolded_in_the_header(page, live_server):
    nodes = [f"n{index}" for index in range(10)]
    factories.store(
        [event("job_started", "live-2", 0, workflow="etl")]
        + [
            item
            for i, n in enumerate(nodes)
            for item in (started(n, "live-2", 1 + i), finished(n, "success", "live-2", 1.5 + i))
        ]
        + [started("last", "live-2", 20)]
    )
    factories.user("eng", "engineer")
    log_in(page, live_server, "eng", "/jobs/live-2/")
    completed = page.locator("#job-head details.long-list")
    assert completed.get_attribute("open") is None
    page.click("#job-head details.long-list > summary")
    page.evaluate("() => { document.querySelector('#job-head').dataset.before = 'poll'; }")

    factories.store([finished("last", "success", "live-2", 21)])
    page.wait_for_selector("#job-head:not([data-before])", timeout=10_000)  # a poll replaced it
    assert "11 completed nodes" in completed.inner_text()
    assert completed.get_attribute("open") is not None  # still unfolded as the reader left it


def test_exported_events_import_again(page, live_server, tmp_path, running_job):
    log_in(page, live_server, "eng", "/jobs/live-1/")
    with page.expect_download() as download_info:
        page.click("text=NDJSON")
    path = tmp_path / "live-1.ndjson"
    download_info.value.save_as(path)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 6 and all("seq" not in item for item in lines)

    Job.objects.filter(job_id="live-1").delete()
    Event.objects.filter(job_id="live-1").delete()
    out = StringIO()
    call_command("import_events", str(path), stdout=out, stderr=StringIO())
    assert json.loads(out.getvalue())["stored"] == 6
    page.goto(f"{live_server.url}/jobs/live-1/")
    assert page.locator("#step-list [data-step-link]").count() == 3
    assert "transform" in page.locator("#step-list").inner_text()


def test_the_header_shows_metadata_folded_and_filters_the_list_on_a_value(page, live_server):
    command = "pytest -n 2 -m 'not postgres' --maxfail=1 " + "tests/integration/ " * 20
    metadata = {
        "git_sha": "4f2c9e1b7d",
        "branch": "release/2026.03",
        "pr": 1843,
        "ci": True,
        "runner": "<b>gh-runner-7</b>",
        "command": command,
        "region": "eu-west-1",
        "service.version": "1.4.2",
        "deployment.environment": "prod",
        "team": "payments",
    }
    factories.store(
        [
            event("job_started", "meta-1", 0, workflow="release", metadata=metadata),
            finished("build", "success", "meta-1", 1),
            event("job_finished", "meta-1", 2, status="completed"),
            event("job_started", "meta-2", 3, workflow="release", metadata={"git_sha": "0000"}),
        ]
    )
    factories.user("eng", "engineer")
    log_in(page, live_server, "eng", "/jobs/meta-1/")
    facts = page.locator("#job-head dl.metadata").first
    assert "4f2c9e1b7d" in facts.inner_text()
    assert "<b>gh-runner-7</b>" in facts.inner_text()  # shown as text, not markup
    # Ten keys: eight inline by name, two more behind a count; the long command folded.
    assert page.locator("#job-head .metadata-more > summary").inner_text() == "2 more keys"
    long_value = page.locator("#job-head details.long-value")
    assert long_value.get_attribute("open") is None
    assert command not in page.locator("#job-head").inner_text()
    screenshot(page, "job-header-metadata")
    long_value.locator("summary").click()
    assert command.strip() in long_value.inner_text()
    page.locator("#job-head .metadata-more > summary").click()
    assert "payments" in page.locator("#job-head .metadata-more").inner_text()
    screenshot(page, "job-header-metadata-unfolded")
    assert axe_violations(page, "#job-head") == []

    page.click("#job-head a.meta-filter[href*='git_sha']")
    page.wait_for_selector("#job-table [data-job-id='meta-1']")
    assert page.locator("#job-table [data-job-id]").count() == 1
    chip = page.locator("#job-table .chip").first
    assert chip.inner_text().startswith("Metadata: git_sha = 4f2c9e1b7d")
    screenshot(page, "jobs-list-metadata-filter")
