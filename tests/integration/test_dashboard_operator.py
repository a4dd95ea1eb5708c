"""Dashboard panels for the operator's questions (issue 14): which provider/model is failing,
and jobs counted once by their final root failure's error type."""

from datetime import timedelta

import pytest

from jobs.dashboard import charts, provider_health
from jobs.dashboard.window import Window
from tests.factories import BASE_TS, event, finished, store
from tests.integration.test_dashboard import assert_links_match_list

pytestmark = pytest.mark.django_db


@pytest.fixture
def window():
    return Window("custom", BASE_TS, BASE_TS + timedelta(hours=3), "hour")


def job(job_id: str, at: float, status_event: dict | None, **labels) -> list[dict]:
    return [event("job_started", job_id, at, **labels), *([status_event] if status_event else [])]


def test_failure_rate_per_provider_model_ranks_the_degraded_one_first(window):
    openai = {"provider": "openai", "model": "gpt-x"}
    acme = {"provider": "acme", "model": "m1"}
    items = []
    for index in range(4):
        failed = index < 3
        outcome = finished(
            "n1",
            "permanent_failure" if failed else "success",
            f"acme-{index}",
            at=index * 60 + 1,
            error_type="PermanentError",
        )
        items += job(f"acme-{index}", index * 60, outcome, **acme)
    for index in range(5):
        failed = index == 0
        outcome = finished(
            "n1",
            "permanent_failure" if failed else "success",
            f"oa-{index}",
            at=index * 60 + 1,
            error_type="logic",
        )
        items += job(f"oa-{index}", index * 60, outcome, **openai)
    store(items)
    rows = provider_health.failure_rates(window)
    assert [(r["provider"], r["failed"], r["jobs"]) for r in rows] == [
        ("acme", 3, 4),
        ("openai", 1, 5),
    ]
    figure = provider_health.panel(window)
    assert figure["data"][0]["y"] == ["acme/m1", "openai/gpt-x"]
    assert figure["data"][0]["x"] == [0.75, 0.2]
    assert_links_match_list(figure)


def test_a_bar_without_provider_or_model_lists_only_those_jobs(window):
    failed = {"status": "failed", "reason": "x"}
    store(
        job("bare-1", 0, event("job_finished", "bare-1", 1, **failed))
        + job("bare-2", 60, event("job_finished", "bare-2", 61, status="completed"))
        + job("no-model", 120, event("job_finished", "no-model", 121, **failed), provider="acme")
        + job("full", 180, event("job_finished", "full", 181, **failed), provider="acme", model="m")
    )
    figure = provider_health.panel(window)
    assert sorted(figure["data"][0]["y"]) == ["(none)", "acme", "acme/m"]
    # Each bar opens exactly its failed jobs: "(none)" is not the unfiltered list.
    assert_links_match_list(figure)


def test_error_type_panel_counts_each_job_once_by_its_root_failure(window):
    store(
        [
            event("job_started", "j1", 0),
            finished("n1", "retryable_failure", "j1", at=1, error_type="network"),
            finished("n1", "retryable_failure", "j1", at=2, attempt=2, error_type="network"),
            finished("n1", "permanent_failure", "j1", at=3, attempt=3, error_type="PermanentError"),
        ]
    )
    figure = charts.failures_by_error_type(window)
    cells = {
        (error_type, t["name"]): jobs
        for t in figure["data"]
        for error_type, jobs in zip(t["y"], t["x"], strict=True)
    }
    assert cells == {("PermanentError", "failed"): 1}
    assert_links_match_list(figure)


def test_dashboard_page_has_the_provider_panel(client, window):
    from tests import factories

    client.force_login(factories.user("olga", "operator"))
    html = client.get("/dashboard/").content.decode()
    assert "Failure rate by provider/model" in html
    assert 'id="provider-failure-rate"' in html or 'data-empty="provider-failure-rate"' in html
