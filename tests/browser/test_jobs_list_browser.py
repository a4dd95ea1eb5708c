"""The jobs list in a real browser: the live refresh leaves the rows where the reader has them
and offers the new jobs instead; active filters are chips that remove themselves."""

import os
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.utils import timezone

from tests import factories
from tests.browser.conftest import log_in, screenshot

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
pytestmark = pytest.mark.django_db(transaction=True)


def failed_job(job_id: str, minutes_ago: float, provider: str = "openai") -> None:
    at = timezone.now() - timedelta(minutes=minutes_ago)
    stamp = at.isoformat().replace("+00:00", "Z")
    factories.store(
        [
            {
                "type": "job_started",
                "job_id": job_id,
                "ts": stamp,
                "payload": {"workflow": "billing", "provider": provider, "model": "m1"},
            },
            {
                "type": "node_finished",
                "job_id": job_id,
                "ts": stamp,
                "payload": {
                    "node_id": "fetch",
                    "attempt": 1,
                    "result_type": "permanent_failure",
                    "error_type": "PermanentError",
                    "reason": "upstream timed out",
                },
            },
        ]
    )


@pytest.fixture
def three_jobs(transactional_db):
    for index in range(3):
        failed_job(f"job-{index}", 30 - index)
    factories.user("olga", "operator")


def row_ids(page) -> list[str]:
    return page.locator("tr[data-job-id]").evaluate_all("rows => rows.map(r => r.dataset.jobId)")


def test_live_refresh_keeps_rows_in_place_and_offers_new_jobs(page, live_server, three_jobs):
    log_in(page, live_server, "olga", "/")
    assert row_ids(page) == ["job-2", "job-1", "job-0"]
    failed_job("job-new", 1)
    page.wait_for_selector("[data-new-jobs]", timeout=15_000)
    assert row_ids(page) == ["job-2", "job-1", "job-0"]
    assert page.locator("[data-new-jobs]").inner_text() == "1 new job — show"
    screenshot(page, "jobs-list-new-jobs")
    page.click("[data-new-jobs]")
    page.wait_for_function(
        "() => document.querySelector('tr[data-job-id]').dataset.jobId === 'job-new'"
    )
    assert page.locator("[data-new-jobs]").count() == 0


def test_filter_chip_removes_its_filter(page, live_server, three_jobs):
    failed_job("other", 5, provider="acme")
    log_in(page, live_server, "olga", "/?status=failed&provider=openai&range=24h")
    assert "other" not in row_ids(page)
    assert page.locator("[data-result-count]").inner_text() == "3 jobs"
    screenshot(page, "jobs-list-chips")
    page.click('a[aria-label="Remove filter Provider: openai"]')
    page.wait_for_function("() => !location.search.includes('provider')")
    assert parse_qs(urlsplit(page.url).query) == {"status": ["failed"], "range": ["24h"]}
    page.wait_for_function("() => document.querySelectorAll('tr[data-job-id]').length === 4")
    assert page.locator("[data-result-count]").inner_text() == "4 jobs"
    # A whole page: the form no longer holds the removed filter either.
    assert page.input_value("#id_provider") == ""
