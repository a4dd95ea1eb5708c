"""The failure records as a user meets them in a browser: the jobs list filtered on failed
jobs and searched by reason, the jobs waiting to retry, and /failures/. Screenshots are saved
in test-artifacts/ to be looked at."""

import os

import pytest

from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot
from tests.factories import recent_event as item

os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def failures(transactional_db):
    """Jobs that fail in every way a failure record knows: timeouts, a missing bucket, a
    job-level quota failure, a planner that degraded on another provider, a retry that
    recovered, and a job paused between attempts."""
    items = []
    for index in range(3):
        job_id, ago = f"sync-{index}", 50 - index * 5
        items += [
            item("job_started", job_id, ago, workflow="sync", provider="openai", model="gpt-4.1"),
            item("node_started", job_id, ago - 0.2, node_id="fetch", attempt=1),
            item(
                "node_finished",
                job_id,
                ago - 0.5,
                node_id="fetch",
                attempt=1,
                result_type="permanent_failure",
                failure_code="adapter_timeout",
                reason=f"upstream Timeout after {30 + index}s",
            ),
        ]
    items += [
        item("job_started", "upload-1", 30, workflow="backup", provider="openai"),
        item(
            "node_finished",
            "upload-1",
            29,
            node_id="upload",
            attempt=1,
            result_type="permanent_failure",
            failure_code="tool_not_found",
            reason="Bucket not found: nightly-backups",
        ),
        item("job_started", "quota-1", 25, workflow="report", provider="openai"),
        item("node_finished", "quota-1", 24, node_id="render", attempt=1),
        item("job_finished", "quota-1", 23, status="failed", reason="quota exceeded"),
        item("job_started", "plan-1", 20, workflow="plan", provider="openai", model="gpt-4.1"),
        item(
            "graph.next_step.degraded",
            "plan-1",
            19,
            attempts=2,
            reason="next_step_parse_failed",
            provider="anthropic",
            model="claude-x",
        ),
        item("job_started", "retry-1", 15, workflow="sync", provider="openai"),
        item(
            "node_finished",
            "retry-1",
            14,
            node_id="fetch",
            attempt=1,
            result_type="retryable_failure",
            reason="upstream Timeout after 10s",
        ),
        item("node_finished", "retry-1", 13, node_id="fetch", attempt=2),
        item("job_finished", "retry-1", 12, status="completed"),
        item("job_started", "wait-1", 0.4, workflow="sync", provider="openai"),
        item(
            "node_finished",
            "wait-1",
            0.1,
            node_id="fetch",
            attempt=6,
            result_type="retryable_failure",
            reason="503 from upstream",
        ),
    ]
    factories.store(items)
    factories.user("olga", "operator")


def rows(page) -> list[str]:
    return page.locator("tr[data-job-id]").evaluate_all("rows => rows.map(r => r.dataset.jobId)")


def test_failed_jobs_list_names_every_kind_of_failure(page, live_server, failures):
    log_in(page, live_server, "olga", "/?status=failed")
    assert sorted(rows(page)) == ["plan-1", "quota-1", "sync-0", "sync-1", "sync-2", "upload-1"]
    quota = page.locator('tr[data-job-id="quota-1"] [data-job-failure]').inner_text()
    assert quota == "job: quota exceeded"
    plan = page.locator('tr[data-job-id="plan-1"] [data-job-failure]').inner_text()
    assert plan == "planner: next_step_parse_failed (2 attempts, anthropic/claude-x)"
    assert axe_violations(page, "#job-table") == []
    screenshot(page, "failure-words-jobs-list-failed")


def test_reason_search_finds_words_by_their_start(page, live_server, failures):
    log_in(page, live_server, "olga", "/?show=all&reason=time")
    # "time" finds the Timeouts, the recovered attempt's job among them; not the bucket.
    assert sorted(rows(page)) == ["retry-1", "sync-0", "sync-1", "sync-2"]
    assert "a word starting with each word you type" in page.locator("#reason-how").inner_text()
    # The completed job says which failure found it: its recovered attempt.
    matched = page.locator('tr[data-job-id="retry-1"] [data-matched-failure="recovered"]')
    assert matched.inner_text() == "recovered: fetch:1 · upstream Timeout after 10s"
    assert page.locator('tr[data-job-id="sync-0"] [data-matched-failure]').count() == 0
    page.goto(f"{live_server.url}/?show=all&reason=bucket+not+found")
    assert rows(page) == ["upload-1"]
    page.goto(f"{live_server.url}/?show=all&reason=quota")
    assert rows(page) == ["quota-1"]
    page.goto(f"{live_server.url}/?show=all&reason=time")
    screenshot(page, "failure-words-jobs-list-reason-search")


def test_a_job_waiting_to_retry_says_when_its_next_attempt_is_due(page, live_server, failures):
    log_in(page, live_server, "olga", "/?waiting=on")
    assert rows(page) == ["wait-1"]
    words = page.locator('tr[data-job-id="wait-1"] [data-next-attempt]').inner_text()
    assert words.startswith("waiting to retry · next attempt ")
    screenshot(page, "failure-words-jobs-list-waiting")
    page.click('a.job-link:text("wait-1")')
    page.wait_for_load_state("networkidle")
    fact = page.locator("[data-next-attempt]").inner_text()
    assert "attempt 6 failed retryably" in fact
    screenshot(page, "failure-words-job-waiting")


def test_failures_page_groups_every_kind_of_failure(page, live_server, failures):
    log_in(page, live_server, "olga", "/failures/")
    text = page.locator("main").inner_text()
    for reason in ("quota exceeded", "next_step_parse_failed", "Bucket not found"):
        assert reason in text
    screenshot(page, "failure-words-failures-page")


def test_failures_page_names_the_provider_that_failed(page, live_server, failures):
    # plan-1 started on openai and its planner degraded on anthropic.
    log_in(page, live_server, "olga", "/failures/?provider=anthropic")
    listed = page.locator("#group-table").inner_text()
    assert "next_step_parse_failed" in listed and "Timeout" not in listed
    page.click("a:has-text('planner degraded')")
    page.wait_for_load_state("networkidle")
    assert page.locator('[data-label="Failed on"]').all_inner_texts() == ["anthropic / claude-x"]
    assert "anthropic/claude-x" in page.locator("main").inner_text()
    assert axe_violations(page, "main") == []
    screenshot(page, "failure-words-group-failed-on")
