"""A running job's page polls for news: the poll answers the header, waterfall and step list
out of band (keeping the reader's step, filter and rows) and stops, with htmx's 286, once the
job stops expecting events."""

import re

import pytest

from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db
LIVE = {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "job-live"}


@pytest.fixture
def engineer(client):
    client.force_login(factories.user("erin", "engineer"))
    return client


@pytest.fixture
def running_job(db):
    factories.store(
        [
            event("job_started", "run-1", 0),
            started("fetch", "run-1", 1),
            finished("fetch", "success", "run-1", 2),
            started("transform", "run-1", 3),
        ]
    )


def test_a_running_job_page_polls(engineer, running_job):
    body = engineer.get("/jobs/run-1/").content.decode()
    poller = re.search(r'<p id="job-live"[^>]*>', body).group(0)
    assert 'hx-get="/jobs/run-1/live"' in poller
    assert 'hx-trigger="every 3s"' in poller


def test_a_finished_job_page_does_not_poll(engineer, running_job):
    factories.store([event("job_finished", "run-1", 9, status="completed")])
    body = engineer.get("/jobs/run-1/").content.decode()
    assert 'id="job-live"' not in body and 'hx-trigger="every' not in body


def test_the_poll_answers_header_waterfall_and_steps_out_of_band(engineer, running_job):
    factories.store([finished("transform", "success", "run-1", 4), started("load", "run-1", 5)])
    response = engineer.get("/jobs/run-1/live?step=fetch:1", **LIVE)
    body = response.content.decode()
    assert response.status_code == 200
    assert "HX-Request" in response["Vary"]
    assert '<header id="job-head" class="job-head" hx-swap-oob="true">' in body
    assert re.search(r'<section id="waterfall" [^>]*hx-swap-oob="true">', body)
    assert '<div id="step-results" hx-swap-oob="true">' in body
    assert 'data-step-key="load:1"' in body  # the new step
    assert 'data-step-key="fetch:1" aria-current="true"' in body  # the reader's step stays
    assert re.search(r'<section id="step-panel" [^>]*data-step-key="fetch:1" hx-swap-oob', body)
    assert re.search(r'<div id="job-overview" [^>]*hx-swap-oob="true">', body)
    assert re.search(r'<section id="narrative" [^>]*hx-swap-oob="true">', body)
    assert "Node load started (attempt 1)" in body  # the narrative has the new events
    assert 'hx-trigger="every 3s"' in body


def test_the_poll_keeps_the_filter_and_the_rows_shown(engineer, running_job):
    response = engineer.get("/jobs/run-1/live?node=trans&first=0&rows=250", **LIVE)
    keys = re.findall(r'data-step-link data-step-key="([^"]+)"', response.content.decode())
    assert keys == ["transform:1"]


def test_a_big_job_polls_less_often(engineer, running_job):
    from jobs.models import Job

    Job.objects.filter(job_id="run-1").update(step_count=5_000)
    body = engineer.get("/jobs/run-1/").content.decode()
    assert 'hx-trigger="every 10s"' in body


def test_the_poll_stops_once_the_job_finishes(engineer, running_job):
    factories.store(
        [
            finished("transform", "success", "run-1", 4),
            event("job_finished", "run-1", 5, status="completed"),
        ]
    )
    response = engineer.get("/jobs/run-1/live", **LIVE)
    body = response.content.decode()
    assert response.status_code == 286  # htmx stops polling
    assert "hx-trigger" not in re.search(r'<p id="job-live"[^>]*>', body).group(0)
    assert "live updates stopped" in body
    assert 'data-status="completed"' in body  # the header shows the final status


def test_a_poll_of_a_page_loaded_before_the_live_url_is_sent_there(engineer, running_job):
    response = engineer.get("/jobs/run-1/?live=1&step=fetch:1", **LIVE)
    assert (response.status_code, response["Location"]) == (302, "/jobs/run-1/live?step=fetch:1")


def test_the_live_url_without_htmx_is_the_job_page(engineer, running_job):
    response = engineer.get("/jobs/run-1/live?step=fetch:1")
    assert (response.status_code, response["Location"]) == (302, "/jobs/run-1/?step=fetch:1")
