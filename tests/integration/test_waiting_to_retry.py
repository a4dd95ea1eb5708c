"""A job paused between attempts says "waiting to retry" and, by the run-status contract's
backoff, when its next attempt is due: on the jobs list, the job page and in the read API."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from jobs.models import Job, NextAttempt, Step, next_attempts
from jobs.replay import backoff
from jobs.web.job_header import next_attempt_words
from tests import factories
from tests.factories import BASE_TS, event, finished, started, store

pytestmark = pytest.mark.django_db
# Attempt 7 failed retryably 10 s after BASE_TS: six retries made, so the next attempt is due
# 64 s later without jitter and 83.2 s later with full jitter.
FAILED_AT = BASE_TS + timedelta(seconds=10)
DUE_FROM = FAILED_AT + timedelta(seconds=64)
DUE_BY = FAILED_AT + timedelta(seconds=83.2)


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))


@pytest.fixture
def paused():
    store(
        [
            event("job_started", "w1", 0, provider="openai"),
            started("fetch", "w1", 9, attempt=7),
            finished("fetch", "retryable_failure", "w1", 10, attempt=7, reason="503 upstream"),
            # Another node's older retry that already succeeded is not what the job waits on.
            finished("load", "retryable_failure", "w1", 2, reason="Timeout"),
            finished("load", "success", "w1", 4, attempt=2),
            # A completed job next to it waits on nothing.
            event("job_started", "c1", 0),
            finished("fetch", "success", "c1", 1),
            event("job_finished", "c1", 2, status="completed"),
        ]
    )
    assert Job.objects.get(job_id="w1").status == "paused:transient"


def at(monkeypatch, seconds_after_failure: float) -> None:
    moment = FAILED_AT + timedelta(seconds=seconds_after_failure)
    monkeypatch.setattr(timezone, "now", lambda: moment)


def test_the_next_attempt_is_due_by_the_backoff_after_the_attempt_waited_on(paused):
    jobs = list(Job.objects.order_by("job_id"))
    due = next_attempts(jobs)
    waiting = Job.objects.get(job_id="w1")
    assert due == {waiting.pk: NextAttempt("fetch", 7, FAILED_AT, DUE_FROM, DUE_BY)}
    assert backoff.retry_window(FAILED_AT, 7) == (DUE_FROM, DUE_BY)


def test_words_before_inside_and_after_the_window():
    due = NextAttempt("fetch", 7, FAILED_AT, DUE_FROM, DUE_BY)
    before = next_attempt_words(due, FAILED_AT + timedelta(seconds=24))
    assert before == {
        "due": "next attempt due in 40 s",
        "window": "due between 09:01:14 and 09:01:33",
    }
    inside = next_attempt_words(due, FAILED_AT + timedelta(seconds=70))
    assert inside["due"] == "next attempt due by 09:01:33"
    late = next_attempt_words(due, DUE_BY + timedelta(minutes=3, seconds=5))
    assert late["due"] == "next attempt overdue by 3 min"
    assert next_attempt_words(None, FAILED_AT) == {"due": "", "window": ""}


def test_a_retry_that_started_leaves_nothing_to_wait_on(paused):
    store([started("fetch", "w1", 80, attempt=8)])
    job = Job.objects.get(job_id="w1")
    assert job.status != "paused:transient"
    assert next_attempts([job]) == {}
    assert not Step.objects.filter(job=job).awaiting_retry().exists()


def test_jobs_list_says_waiting_to_retry_and_when(paused, operator, client, monkeypatch):
    at(monkeypatch, 24)
    page = client.get(reverse("jobs:jobs"), {"show": "all"}).content.decode()
    row = re.search(r'<tr data-job-id="w1".*?</tr>', page, re.S).group(0)
    assert "waiting to retry · next attempt due in 40 s" in row
    assert 'title="due between 09:01:14 and 09:01:33, by the expected backoff"' in row
    completed = re.search(r'<tr data-job-id="c1".*?</tr>', page, re.S).group(0)
    assert "waiting to retry" not in completed
    at(monkeypatch, 83.2 + 185)
    page = client.get(reverse("jobs:jobs"), {"waiting": "on"}).content.decode()
    assert "waiting to retry · next attempt overdue by 3 min" in page


@pytest.mark.speed_guard
def test_the_lists_next_attempts_cost_one_query_whatever_the_number_of_paused_jobs(
    paused, operator, client, django_assert_max_num_queries
):
    store(
        [finished("fetch", "retryable_failure", f"more{i}", 3, reason="Timeout") for i in range(5)]
    )
    with django_assert_max_num_queries(12) as few:
        client.get(reverse("jobs:jobs"), {"waiting": "on"})
    waiting_queries = [q for q in few.captured_queries if "NOT (EXISTS" in q["sql"]]
    assert len(waiting_queries) == 1


def test_job_page_says_when_the_next_attempt_is_due(paused, operator, client, monkeypatch):
    at(monkeypatch, 70)
    page = client.get(reverse("jobs:job", args=["w1"])).content.decode()
    fact = re.search(r"<dd data-next-attempt>(.*?)</dd>", page, re.S).group(1)
    assert "waiting to retry · <strong>next attempt due by 09:01:33</strong>" in fact
    assert "due between 09:01:14 and 09:01:33" in fact
    assert "<code>fetch</code> attempt 7 failed retryably at 09:00:10" in fact
    assert "data-next-attempt" not in client.get(reverse("jobs:job", args=["c1"])).content.decode()


def test_read_api_carries_the_next_attempt(paused, operator, client):
    listed = {job["job_id"]: job for job in client.get("/api/v1/jobs").json()["jobs"]}
    expected = {
        "node_id": "fetch",
        "attempt": 7,
        "failed_at": "2026-03-02T09:00:10Z",
        "due_from": "2026-03-02T09:01:14Z",
        "due_by": "2026-03-02T09:01:33.200Z",
    }
    assert listed["w1"]["next_attempt"] == expected
    assert listed["c1"]["next_attempt"] is None
    assert client.get("/api/v1/jobs/w1").json()["next_attempt"] == expected
    assert client.get("/api/v1/jobs/c1").json()["next_attempt"] is None
