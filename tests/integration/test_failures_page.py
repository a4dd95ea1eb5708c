"""The failure groups pages (GET /failures/, /failures/<fingerprint>/), the jobs list's group
filter and the job page's group note."""

import re
from datetime import UTC, timedelta

import pytest
from django.http import QueryDict
from django.utils import timezone
from django.utils.http import urlencode

from jobs.dashboard import failure_groups as read
from jobs.dashboard.window import parse_window
from jobs.models import FailureGroup
from tests import factories
from tests.factories import BASE_TS, event, finished, started

pytestmark = pytest.mark.django_db


def minutes_ago(minutes: float) -> float:
    """Seconds after the factories' base time that are ``minutes`` before now."""
    return (timezone.now() - BASE_TS).total_seconds() - minutes * 60


def failed_job(job_id: str, minutes: float, node="fetch", reason=None, **labels) -> None:
    at = minutes_ago(minutes)
    labels = labels or {"provider": "openai", "model": "gpt-x"}
    factories.store(
        [
            event("job_started", job_id, at, workflow="billing", **labels),
            started(node, job_id, at=at + 1),
            finished(
                node,
                "permanent_failure",
                job_id,
                at=at + 2,
                reason=reason or f"upstream timed out after {len(job_id)}0s",
                failure_code="adapter_timeout",
            ),
        ]
    )


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


def test_list_shows_groups_of_the_window_with_counts_trend_and_providers(operator):
    failed_job("a1", 30)
    failed_job("a22", 90, provider="anthropic", model="claude-x")
    failed_job("b1", 60, node="charge", reason="card declined")
    failed_job("old", 60 * 24 * 3)  # outside the default 24 hours
    response = operator.get("/failures/")
    assert response.status_code == 200
    rows = response.context["rows"]
    assert [(r["row"].group.node_id, r["row"].steps_in_window) for r in rows] == [
        ("fetch", 2),
        ("charge", 1),
    ]
    fetch = rows[0]["row"]
    assert fetch.group.job_count == 3  # all stored jobs, the old one too
    assert {who.label for who in fetch.involved} == {"openai/gpt-x", "anthropic/claude-x"}
    assert sum(fetch.trend) == 2 and fetch.sparkline.count("M") == 2
    html = response.content.decode()
    assert f'href="/?show=all&amp;group={fetch.group.fingerprint}"' in html
    assert "upstream timed out after &lt;n&gt;s" in html


def test_seven_day_range_includes_older_failures(operator):
    failed_job("old", 60 * 24 * 3)
    response = operator.get("/failures/?range=7d")
    assert [r["row"].steps_in_window for r in response.context["rows"]] == [1]


def test_seven_day_range_has_a_bar_per_day_from_utc_midnight_and_counts_each_day_exactly(
    operator,
):
    now = timezone.now()
    # The preset starts on the UTC midnight before now - 7 d: its first day bar is whole.
    start = (now - timedelta(days=7)).astimezone(UTC)
    start = start.replace(hour=0, minute=0, second=0, microsecond=0)

    def minutes_before(moment) -> float:
        return (now - moment).total_seconds() / 60

    in_range = (minutes_before(start + timedelta(minutes=30)), 60 * 24 * 3, 5)
    failed_job("too-old", minutes_before(start - timedelta(minutes=30)))
    for job_id, minutes in zip(("first-day", "middle", "today"), in_range, strict=True):
        failed_job(job_id, minutes)
    response = operator.get("/failures/?range=7d")
    [item] = response.context["rows"]
    row = item["row"]
    assert (row.steps_in_window, row.per, len(row.trend)) == (3, "day", 8)

    def bar(minutes: float) -> int:
        at = now - timedelta(minutes=minutes)
        return (at.astimezone(UTC).date() - start.date()).days

    expected = [0] * 8
    for minutes in in_range:
        expected[bar(minutes)] += 1
    assert expected[0] == 1 and row.trend == expected
    assert "failures over the range, per day" in response.content.decode()


def test_custom_range_of_whole_days_reads_only_day_rows_and_counts_each_day(operator):
    now = timezone.now()
    today = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    since, until = today - timedelta(days=3), today  # three whole UTC days, no partial hour
    for job_id, at in (("d1", since + timedelta(hours=1)), ("d3a", until - timedelta(hours=2))):
        failed_job(job_id, (now - at).total_seconds() / 60)
    failed_job("d3b", (now - (until - timedelta(minutes=1))).total_seconds() / 60)
    failed_job("after", (now - (until + timedelta(minutes=1))).total_seconds() / 60)
    query = urlencode({"range": "custom", "since": since.isoformat(), "until": until.isoformat()})
    window, errors = parse_window(QueryDict(query), now)
    assert errors == [] and (window.start, window.end) == (since, until)
    span = read.span_of(window)
    assert (span.by_day, span.whole_from, span.whole_to) == (True, since.date(), until.date())
    [row] = read.rows_for(window, [FailureGroup.objects.get()])
    assert (row.trend, row.per) == ([1, 0, 2], "day")


def test_seven_day_range_agrees_with_the_hour_rows(operator):
    for index in range(12):
        failed_job(f"j{index}", 60 * (13 * index + 1), node=f"n{index % 3}x")
    week = {
        item["row"].group.pk: item["row"]
        for item in operator.get("/failures/?range=7d").context["rows"]
    }
    window, _ = parse_window(QueryDict("range=7d"), timezone.now())
    for group_id, row in week.items():
        hourly = read.trend_figure(window, FailureGroup.objects.get(pk=group_id))
        assert row.steps_in_window == sum(sum(series["y"]) for series in hourly["data"])


def test_provider_filter_ignores_case(operator):
    failed_job("a1", 30)
    failed_job("a2", 30, provider="anthropic", model="claude-x")
    response = operator.get("/failures/?provider=OpenAI")
    assert [r["row"].steps_in_window for r in response.context["rows"]] == [1]


def test_unknown_range_falls_back_with_a_message(operator):
    failed_job("a1", 30)
    response = operator.get("/failures/?range=forever")
    assert response.status_code == 200
    assert "Unknown range" in response.content.decode()


@pytest.mark.speed_guard
def test_list_query_count_does_not_grow_with_groups(operator, django_assert_num_queries):
    failed_job("a1", 30)
    operator.get("/failures/")
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        operator.get("/failures/")
    for index in range(8):
        failed_job(f"n{index}", 20, node=f"node{index}x")
    with django_assert_num_queries(len(one.captured_queries)):
        response = operator.get("/failures/")
    assert len(response.context["rows"]) == 9


def test_group_page_lists_its_jobs_trend_and_example(operator):
    failed_job("a1", 30)
    failed_job("a22", 90, provider="anthropic", model="claude-x")
    group = FailureGroup.objects.get()
    response = operator.get(f"/failures/{group.fingerprint}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert [item.job.job_id for item in response.context["jobs"]] == ["a22", "a1"]
    assert 'href="/jobs/a1/?step=fetch:1"' in html
    assert 'data-chart="failure-trend"' in html
    trend = response.context["trend"]
    assert sorted(trace["name"] for trace in trend["data"]) == [
        "anthropic/claude-x",
        "openai/gpt-x",
    ]
    assert sum(sum(trace["y"]) for trace in trend["data"]) == 2


def test_unknown_group_is_a_404(operator):
    assert operator.get("/failures/0123456789abcdef0123/").status_code == 404
    assert operator.get("/failures/%3Cscript%3E/").status_code == 404


def test_failures_pages_need_a_login(client):
    response = client.get("/failures/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_jobs_list_group_filter_lists_the_group_jobs_whatever_their_status(operator):
    failed_job("a1", 30)
    failed_job("a2", 40)
    failed_job("b1", 60, node="charge", reason="card declined")
    group = FailureGroup.objects.get(node_id="fetch")
    response = operator.get(f"/?show=all&group={group.fingerprint}")
    assert {row.job.job_id for row in response.context["rows"]} == {"a1", "a2"}


def test_jobs_list_rejects_a_malformed_group_with_a_message(operator):
    response = operator.get("/?group=not-hex!")
    assert response.status_code == 200
    assert "Failure group" in response.content.decode()


def test_job_page_header_and_step_panel_name_the_group(operator):
    failed_job("a1", 30)
    failed_job("a2", 40)
    group = FailureGroup.objects.get()
    html = operator.get("/jobs/a1/?step=fetch:1").content.decode()
    notes = re.findall(r'data-failure-group="(\w+)"[^>]*>.*?seen in (\d+) jobs since', html, re.S)
    assert notes == [(group.fingerprint, "2"), (group.fingerprint, "2")]
    assert f'href="/failures/{group.fingerprint}/"' in html
