"""The operator's jobs list (issue 14): the failed family, time presets, result count,
removable chips, id prefix search, case-insensitive provider/model, job-level and planner
failures in "First failure", the window a drill-down applied, and a live refresh that keeps
the rows in place."""

import pytest
from django.utils import timezone

from jobs.ingest import database
from jobs.models import Job
from jobs.web.filters import decode_cursor
from tests import factories
from tests.factories import BASE_TS, event, finished

pytestmark = pytest.mark.django_db


def minutes_ago(minutes: float) -> float:
    return (timezone.now() - BASE_TS).total_seconds() - minutes * 60


def job(job_id: str, status_events: list[dict] | None = None, minutes: float = 10, **labels):
    at = minutes_ago(minutes)
    factories.store([event("job_started", job_id, at, **labels), *(status_events or [])])


def failing(job_id: str, error_type: str, minutes: float = 10, **labels) -> None:
    at = minutes_ago(minutes)
    job(
        job_id,
        [finished("n1", "permanent_failure", job_id, at + 1, error_type=error_type, reason="x")],
        minutes,
        **labels,
    )


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


def listed(response) -> list[str]:
    return [row.job.job_id for row in response.context["rows"]]


def test_status_failed_means_the_failed_family(operator):
    failing("plain", "PermanentError")
    failing("logic", "logic")
    failing("internal", "internal")
    failing("paused", "network")
    assert set(listed(operator.get("/?status=failed"))) == {"plain", "logic", "internal"}


def test_the_heading_says_which_jobs_the_list_starts_from(operator):
    job("done", [event("job_finished", "done", minutes_ago(9), status="completed")])
    failing("broken", "PermanentError")

    def heading(query: str) -> str:
        body = operator.get("/" + query).content.decode()
        return body.split('class="result-note"', 1)[1].split("</p>", 1)[0]

    assert "need attention" in heading("")
    completed = heading("?status=completed")
    assert "need attention" not in completed
    assert "status <strong>completed</strong>" in completed
    assert "<strong>failed</strong> or <strong>completed</strong>" in heading(
        "?status=failed&status=completed"
    )
    assert "All jobs" in heading("?show=all")
    assert "Lookup <strong>done</strong>" in heading("?q=done")


def test_a_specific_failed_status_is_only_itself(operator):
    failing("plain", "PermanentError")
    failing("logic", "logic")
    assert listed(operator.get("/?status=failed:logic")) == ["logic"]
    assert listed(operator.get("/?status=failed&status=failed:logic")) == ["logic", "plain"]


def test_time_presets_keep_jobs_started_within_them(operator):
    failing("recent", "PermanentError", minutes=30)
    failing("yesterday", "PermanentError", minutes=60 * 20)
    failing("last-week", "PermanentError", minutes=60 * 24 * 5)
    assert listed(operator.get("/?range=1h")) == ["recent"]
    assert listed(operator.get("/?range=24h")) == ["recent", "yesterday"]
    assert len(listed(operator.get("/?range=7d"))) == 3


def test_result_count_counts_every_match_not_the_page(operator, settings):
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 2
    for index in range(5):
        failing(f"j{index}", "PermanentError", minutes=10 + index)
    response = operator.get("/")
    assert len(listed(response)) == 2
    assert response.context["total"] == 5
    assert "<strong data-result-count>5 jobs</strong>" in response.content.decode()


def test_result_count_stops_at_the_cap(operator, settings, monkeypatch):
    from jobs.web import jobs_list

    monkeypatch.setattr(jobs_list, "COUNT_CAP", 3)
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 2
    for index in range(5):
        failing(f"j{index}", "PermanentError", minutes=10 + index)
    response = operator.get("/")
    assert (response.context["total"], response.context["total_more"]) == (3, True)
    assert "<strong data-result-count>3+ jobs</strong>" in response.content.decode()
    response = operator.get("/?reason=x&error_type=PermanentError")
    assert (response.context["total"], response.context["total_more"]) == (3, True)
    assert database.capped_count(Job.objects.filter(job_id__startswith="j"), 10) == 5


def test_job_id_prefix_finds_the_job(operator):
    job("release-42-eu", [finished("n1", "success", "release-42-eu", minutes_ago(9))])
    job("release-43")
    assert listed(operator.get("/?q=release-42")) == ["release-42-eu"]
    assert listed(operator.get("/?q=release-43")) == ["release-43"]


def test_provider_and_model_filters_ignore_case(operator):
    failing("a", "PermanentError", provider="OpenAI", model="GPT-4o")
    failing("b", "PermanentError", provider="anthropic", model="claude")
    assert listed(operator.get("/?provider=openai&model=gpt-4O")) == ["a"]


def test_active_filters_are_chips_that_remove_themselves(operator):
    failing("a", "PermanentError", provider="openai")
    response = operator.get("/?status=failed&provider=openai&range=24h")
    chips = {(chip.label, chip.value): chip.remove_url for chip in response.context["chips"]}
    assert chips[("Provider", "openai")] == "?status=failed&range=24h"
    assert chips[("Started within", "last 24 h")] == "?status=failed&provider=openai"
    status_url = chips[("Status", "failed (any: failed, failed:internal, failed:logic)")]
    assert status_url == "?provider=openai&range=24h"
    html = response.content.decode()
    assert 'aria-label="Remove filter Provider: openai"' in html


def test_first_failure_names_a_planner_failure(operator):
    at = minutes_ago(10)
    labels = {"provider": "acme", "model": "m1"}
    factories.store(
        [
            event("job_started", "planner", at, **labels),
            event("graph.next_step.parse_invalid", "planner", at + 1, attempt=1, **labels),
            event("graph.next_step.degraded", "planner", at + 2, attempts=2, **labels),
        ]
    )
    row = operator.get("/").context["rows"][0]
    assert row.job_failure == "planner: next_step_parse_failed (2 attempts, acme/m1)"


def test_first_failure_names_a_job_level_failure(operator):
    at = minutes_ago(10)
    factories.store(
        [
            event("job_started", "jl", at),
            event(
                "job_finished", "jl", at + 1, status="failed", code="quota", reason="over budget"
            ),
        ]
    )
    response = operator.get("/")
    assert Job.objects.get().status == "failed"
    assert response.context["rows"][0].job_failure == "job: quota: over budget"
    assert "job: quota: over budget" in response.content.decode()


def test_drill_down_window_is_shown(operator):
    failing("a", "PermanentError")
    response = operator.get("/?show=all&since=2026-11-01T10:00:00Z&until=2026-11-01T11:00:00Z")
    html = response.content.decode()
    assert "started from 2026-11-01 10:00:00 +00:00 before 2026-11-01 11:00:00 +00:00" in html


def test_live_refresh_keeps_the_rows_and_counts_new_jobs(operator):
    failing("first", "PermanentError", minutes=20)
    failing("second", "PermanentError", minutes=10)
    page = operator.get("/")
    refresh_url = page.context["refresh_url"]
    assert decode_cursor(refresh_url.split("anchor=")[1])[1] == Job.objects.get(job_id="second").pk
    failing("newer", "PermanentError", minutes=1)
    response = operator.get(refresh_url)
    assert listed(response) == ["second", "first"]
    assert response.context["new_jobs"] == 1
    assert response.context["refresh_url"] == refresh_url
    fragment = operator.get(refresh_url, HTTP_HX_REQUEST="true").content.decode()
    assert "<header" not in fragment
    assert "1 new job — show" in fragment
    assert fragment.index('data-job-id="second"') < fragment.index('data-job-id="first"')
    assert 'data-job-id="newer"' not in fragment
    assert listed(operator.get(response.context["newest_url"])) == ["newer", "second", "first"]


def test_a_bad_anchor_is_a_message_not_an_error(operator):
    response = operator.get("/?anchor=%%%")
    assert response.status_code == 200
    assert "not a refresh link this list made" in response.content.decode()
