"""One failure record per failure, and one query behind the jobs list and the API: reason
search, the providers filter, status=failed and unknown parameters (docs/api.md)."""

import pytest

from jobs.ingest import failure_groups, parity
from jobs.models import Failure, Job
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))


def store_examples() -> None:
    factories.store(
        [
            event("job_started", "t1", 0, provider="openai", model="gpt-x"),
            started("fetch", "t1", 1),
            finished("fetch", "retryable_failure", "t1", 2, reason="upstream Timeout after 30s"),
            started("fetch", "t1", 3, attempt=2),
            finished("fetch", "success", "t1", 4, attempt=2),
            event("job_started", "b1", 0, provider="openai"),
            started("upload", "b1", 1),
            finished("upload", "permanent_failure", "b1", 2, reason="Bucket not found: x"),
            event("job_started", "q1", 0, provider="openai"),
            event("job_finished", "q1", 5, status="failed", reason="quota exceeded"),
            event("job_started", "p1", 0, provider="openai", model="gpt-x"),
            event(
                "graph.next_step.degraded",
                "p1",
                2,
                attempts=2,
                reason="next_step_parse_failed",
                provider="anthropic",
                model="claude-x",
            ),
        ]
    )


def listed(client, query: str) -> set[str]:
    response = client.get(f"/?show=all&{query}")
    return {row.job.job_id for row in response.context["rows"]}


def api(client, query: str):
    return client.get(f"/api/v1/jobs?{query}")


def test_every_failure_is_one_record_with_its_group(operator):
    store_examples()
    records = {
        (f.job.job_id, f.kind, f.node_id, f.attempt): f
        for f in Failure.objects.select_related("job")
    }
    assert set(records) == {
        ("t1", "step", "fetch", 1),
        ("b1", "step", "upload", 1),
        ("q1", "job", "", 0),
        ("p1", "planner", "", 0),
    }
    assert all(f.group_id is not None for f in records.values())
    assert records[("t1", "step", "fetch", 1)].recovered is True
    assert records[("b1", "step", "upload", 1)].recovered is False
    planner = records[("p1", "planner", "", 0)]
    assert (planner.provider, planner.model) == ("anthropic", "claude-x")
    assert records[("q1", "job", "", 0)].reason == "quota exceeded"
    assert failure_groups.differences() == []
    for job_id in ("t1", "b1", "q1", "p1"):
        assert parity.differences(job_id) == []


def test_the_failures_page_names_what_failed_when_no_node_did(operator, client):
    """A job-level failure's group and a planner degradation's are named for what failed, and
    their members counted as failures (not steps, which they are not)."""
    store_examples()
    page = client.get(
        "/failures/?range=custom&since=2026-03-02T00:00&until=2026-03-03T00:00&status=all"
    ).content.decode()
    assert "job ended failed" in page
    assert "planner degraded" in page
    assert "(no node)" not in page
    assert " step<" not in page and " steps<" not in page


def test_failures_that_ended_their_job_leave_out_the_recovered(operator):
    store_examples()
    ended = {f.job.job_id for f in Failure.objects.ended_their_job().select_related("job")}
    assert ended == {"b1", "q1", "p1"}


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        ("time", {"t1"}),
        ("TIMEOUT", {"t1"}),
        ("bucket not found", {"b1"}),
        ("found bucket", {"b1"}),
        ("quota", {"q1"}),
        ("next_step", {"p1"}),
        ("bucket timeout", set()),
        ("ucket", set()),
    ],
)
def test_reason_search_is_word_prefixes_anded_in_any_case(operator, client, words, expected):
    store_examples()
    assert listed(client, f"reason={words}") == expected
    response = api(client, f"reason={words}")
    assert {job["job_id"] for job in response.json()["jobs"]} == expected


def test_the_provider_filter_finds_the_provider_that_failed(operator, client):
    store_examples()
    assert listed(client, "provider=ANTHROPIC") == {"p1"}
    assert "p1" in listed(client, "provider=openai")


def test_status_failed_is_the_failed_family_on_the_page_and_the_api(operator, client):
    factories.store(
        [
            started("n1", "l1", 0),
            finished("n1", "permanent_failure", "l1", 1, error_type="logic", reason="bad"),
            event("job_finished", "f1", 1, status="failed", reason="x"),
        ]
    )
    assert Job.objects.get(job_id="l1").status == "failed:logic"
    assert listed(client, "status=failed") == {"l1", "f1"}
    assert {j["job_id"] for j in api(client, "status=failed").json()["jobs"]} == {"l1", "f1"}
    only_logic = api(client, "status=failed:logic").json()["jobs"]
    assert {j["job_id"] for j in only_logic} == {"l1"}
    # Beside a specific failed:* status, "failed" means itself.
    both = api(client, "status=failed,paused:transient").json()["jobs"]
    assert {j["job_id"] for j in both} == {"l1", "f1"}


def test_an_unknown_api_parameter_is_a_400_naming_it(operator, client):
    response = api(client, "workflow=x&wokflow=y")
    assert response.status_code == 400
    assert "unknown parameter wokflow" in response.json()["error"]


def test_the_api_takes_the_pages_filters(operator, client):
    factories.store(
        [
            event("job_started", "a1", 0, workflow="etl"),
            event("job_started", "a2", 0, workflow="crm"),
        ]
    )
    assert {j["job_id"] for j in api(client, "workflow=etl").json()["jobs"]} == {"a1"}


def test_retrying_now_is_an_attempt_after_the_first_running(operator, client):
    factories.store(
        [
            started("n1", "r1", 0),
            finished("n1", "retryable_failure", "r1", 1, reason="flaky"),
            started("n1", "r1", 2, attempt=2),
            started("n1", "w1", 0),
            finished("n1", "retryable_failure", "w1", 1, reason="flaky"),
        ]
    )
    assert Job.objects.get(job_id="w1").status == "paused:transient"
    assert listed(client, "retrying=on") == {"r1"}
    assert listed(client, "waiting=on") == {"w1"}


def test_reason_search_shows_the_failure_it_matched_marked_recovered(operator, client):
    """A completed job found by its recovered attempt's reason says why it is listed, on the
    page and in the API; a job whose first failure is the match shows it once."""
    store_examples()
    html = client.get("/?show=all&reason=timeout").content.decode()
    row = html.split('data-job-id="t1"', 1)[1].split("</tr>", 1)[0]
    assert '<span class="muted">—</span>' not in row
    assert 'data-matched-failure="recovered"' in row
    assert "recovered: fetch:1 · upstream Timeout after 30s" in row
    listed_jobs = api(client, "reason=timeout").json()["jobs"]
    assert [job["matched_failure"] for job in listed_jobs] == [
        {
            "kind": "step",
            "node_id": "fetch",
            "attempt": 1,
            "reason": "upstream Timeout after 30s",
            "recovered": True,
            "handled": False,
        }
    ]
    bucket = client.get("/?show=all&reason=bucket").content.decode()
    assert "data-matched-failure" not in bucket.split('data-job-id="b1"', 1)[1].split("</tr>")[0]
    assert api(client, "reason=bucket").json()["jobs"][0]["matched_failure"]["recovered"] is False
    planner = client.get("/?show=all&reason=next_step").content.decode()
    assert "data-matched-failure" not in planner.split('data-job-id="p1"', 1)[1].split("</tr>")[0]
    assert api(client, "").json()["jobs"][0]["matched_failure"] is None


def test_reason_search_reads_a_bounded_number_of_queries(
    operator, client, django_assert_num_queries
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    store_examples()
    with CaptureQueriesContext(connection) as one:
        client.get("/?show=all&reason=timeout")
    for index in range(5):
        factories.store(
            [
                started("fetch", f"x{index}", 1),
                finished("fetch", "retryable_failure", f"x{index}", 2, reason="Timeout"),
                finished("fetch", "success", f"x{index}", 3, attempt=2),
            ]
        )
    with django_assert_num_queries(len(one.captured_queries)):
        response = client.get("/?show=all&reason=timeout")
    assert len(response.context["rows"]) == 6
