"""The jobs list sorted by start, duration, steps, attempts and failures (docs/pages.md):
keyset pages that carry the sort, headers that toggle it, a clear error for a bad one, and a
query count that does not grow with the page."""

import pytest

from jobs.models import Job
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db


def job(job_id: str, at: float, steps: int, failures: int = 0, attempts: int = 1, length=1.0):
    """A finished job started ``at`` seconds in, of ``steps`` nodes (the first ``failures`` of
    them failing once, retryably, before they succeed), its last node retried up to
    ``attempts``, lasting ``length`` seconds."""
    items = [event("job_started", job_id, at, workflow="etl")]
    for index in range(steps):
        node = f"n{index}"
        items.append(started(node, job_id, at))
        if index < failures:
            items.append(finished(node, "retryable_failure", job_id, at, reason="503"))
            items.append(started(node, job_id, at, attempt=2))
            items.append(finished(node, "success", job_id, at, attempt=2))
        else:
            items.append(finished(node, "success", job_id, at))
    for attempt in range(2, attempts + 1):
        items.append(started(f"n{steps - 1}", job_id, at, attempt=attempt))
    items.append(event("job_finished", job_id, at + length, status="completed"))
    factories.store(items)


def ids(response) -> list[str]:
    return [row.job.job_id for row in response.context["rows"]]


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


@pytest.fixture
def jobs(db):
    job("a", 1, steps=3, failures=0, length=50)
    job("b", 2, steps=9, failures=2, attempts=4, length=5)
    job("c", 3, steps=1, failures=1, attempts=2, length=500)
    job("d", 4, steps=5, failures=0, length=0.5)


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("", ["d", "c", "b", "a"]),
        ("-started", ["d", "c", "b", "a"]),
        ("started", ["a", "b", "c", "d"]),
        ("-duration", ["c", "a", "b", "d"]),
        ("duration", ["d", "b", "a", "c"]),
        ("-steps", ["b", "d", "a", "c"]),
        ("-attempts", ["b", "c", "d", "a"]),
        ("-failures", ["b", "c", "d", "a"]),
        ("failures", ["a", "d", "c", "b"]),
    ],
)
def test_the_list_sorts_by_each_key(operator, jobs, sort, expected):
    response = operator.get(f"/?show=all&sort={sort}")
    assert response.status_code == 200
    assert ids(response) == expected


def test_sort_keys_are_kept_on_the_job_rows(jobs):
    b = Job.objects.get(job_id="b")
    assert (b.step_count, b.max_attempt, b.failed_steps, b.duration_ms) == (14, 4, 2, 5000)


def test_sorted_pages_follow_on_with_a_cursor_that_carries_the_sort(operator, jobs, settings):
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 2
    first = operator.get("/?show=all&sort=-duration")
    assert ids(first) == ["c", "a"]
    next_url = first.context["next_page_url"]
    assert "sort=-duration" in next_url and "after=" in next_url and "cursor=" not in next_url
    # A job inserted between the pages takes its place in the order: the next page starts
    # right after the last row shown (a, 50 s), so nothing is shown twice or skipped.
    job("e", 5, steps=1, length=20)
    second = operator.get("/" + next_url)
    assert ids(second) == ["e", "b"]


def test_a_cursor_of_another_sort_is_a_clear_error(operator, jobs, settings):
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 2
    next_url = operator.get("/?show=all&sort=-steps").context["next_page_url"]
    after = next_url.split("after=")[1].split("&")[0]
    response = operator.get(f"/?show=all&sort=-duration&after={after}")
    assert "not a page link this list made for sort -duration" in response.content.decode()
    assert ids(response) == ["c", "a"]


def test_an_unknown_sort_says_which_sorts_exist(operator, jobs):
    response = operator.get("/?show=all&sort=colour")
    body = response.content.decode()
    assert (
        "sort &#x27;colour&#x27; is not one of started, duration, steps, attempts, failures" in body
    )
    assert ids(response) == ["d", "c", "b", "a"]


def test_headers_sort_descending_first_then_ascending_and_keep_the_filters(operator, jobs):
    response = operator.get("/?show=all&workflow=etl")
    links = response.context["sort_links"]
    assert links["duration"]["href"] == "?show=all&workflow=etl&sort=-duration"
    assert links["started"]["aria_sort"] == "descending"
    sorted_response = operator.get("/" + links["duration"]["href"])
    again = sorted_response.context["sort_links"]["duration"]
    assert again["href"] == "?show=all&workflow=etl&sort=duration"
    assert again["aria_sort"] == "descending"
    body = sorted_response.content.decode()
    assert 'aria-sort="descending"' in body and "by duration, largest first" in body


def test_a_sorted_list_answers_its_table_to_htmx(operator, jobs):
    response = operator.get("/?show=all&sort=steps", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="job-table"')
    assert 'hx-get="/?show=all&amp;sort=steps" hx-trigger="every 5s"' in body
    assert "HX-Request" in response["Vary"]


@pytest.mark.speed_guard
def test_a_sorted_list_query_count_does_not_grow_with_page_size(
    operator, jobs, settings, django_assert_num_queries
):
    for n in range(12):
        job(f"more-{n}", 10 + n, steps=2, failures=n % 2)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    settings.TRACEVIZ_JOBS_PAGE_SIZE = 3
    with CaptureQueriesContext(connection) as small:
        operator.get("/?show=all&sort=-failures")
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 15
    with django_assert_num_queries(len(small)):
        response = operator.get("/?show=all&sort=-failures")
    assert len(response.context["rows"]) == 15
