"""The jobs list sorted from its column headers in a real browser, and the mini-bar of a long
job showing its late failure. Screenshots land in test-artifacts/ for a human to look at."""

import pytest

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot
from tests.factories import event, finished
from tests.integration.test_jobs_sorting import job

pytestmark = pytest.mark.django_db(transaction=True)


def listed(page) -> list[str]:
    return page.locator("table.jobs tbody tr").evaluate_all(
        "rows => rows.map(row => row.dataset.jobId)"
    )


@pytest.fixture
def jobs(transactional_db):
    job("a", 1, steps=3, length=50)
    job("b", 2, steps=9, failures=2, attempts=4, length=5)
    job("c", 3, steps=1, failures=1, attempts=2, length=500)
    items = [event("job_started", "long", 4, workflow="etl")]
    for index in range(1200):
        result = "permanent_failure" if index == 1190 else "success"
        items.append(finished(f"n{index}", result, "long", 4 + index * 0.01, reason="dup key"))
    factories.store(items)
    factories.user("olga", "operator")


def test_headers_sort_the_list_and_a_late_failure_shows_in_the_mini_bar(page, live_server, jobs):
    log_in(page, live_server, "olga", "/?show=all")
    assert listed(page) == ["long", "c", "b", "a"]
    label = page.locator("tr[data-job-id='long'] .strip").get_attribute("aria-label")
    assert label == "Steps: 1,200 steps, 32 a cell: 1,199 ok, 1 failed"
    assert page.locator("tr[data-job-id='long'] .strip .cell.seg-failed").count() == 1
    page.click("th a.sort:text('Duration')")
    page.wait_for_url("**sort=-duration**")
    page.wait_for_function(
        "() => [...document.querySelectorAll('table.jobs tbody tr')]"
        ".map(r => r.dataset.jobId).join() === 'c,a,long,b'"
    )
    assert "by duration, largest first" in page.locator(".result-note").inner_text()
    screenshot(page, "jobs-list-sorted-by-duration")
    page.click("th a.sort:text('Duration')")
    page.wait_for_url("**sort=duration**")
    page.wait_for_function(
        "() => [...document.querySelectorAll('table.jobs tbody tr')]"
        ".map(r => r.dataset.jobId).join() === 'b,long,a,c'"
    )
    page.click("th a.sort:text('Failed attempts')")
    page.wait_for_url("**sort=-failures**")
    page.wait_for_function(
        "() => document.querySelector('table.jobs tbody tr').dataset.jobId === 'b'"
    )
    assert page.locator("th[aria-sort='descending']").inner_text().startswith("Failed attempts")
    assert axe_violations(page, "#job-table") == []
