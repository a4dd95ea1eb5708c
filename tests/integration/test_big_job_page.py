"""The job page on a big job: the header's long lists collapse, the root failure's panel is
open by default with its row on screen (no "Show more" clicks), and the steps can be found
by node name, segment and attempt > 1, on the server (query parameters, HTMX fragment)."""

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Job
from jobs.web import job_page
from tests import factories
from tests.factories import event, finished, started
from tests.otlp_spans import llm_span, root, sid, span, store_spans

pytestmark = pytest.mark.django_db

STEPS = 700  # more than three windows of 200 rows


def big_failed_job(job_id: str = "big-1", steps: int = STEPS) -> None:
    """``steps`` - 1 successful nodes, a node that retried once, then the root failure last."""
    items = [event("job_started", job_id, 0, provider="anthropic", model="claude-x")]
    for i in range(steps - 3):
        items.append(started(f"node-{i:04d}", job_id, i))
        items.append(finished(f"node-{i:04d}", "success", job_id, i + 0.5))
    at = steps
    items += [
        started("flaky", job_id, at, attempt=1),
        finished("flaky", "retryable_failure", job_id, at + 0.2, attempt=1, reason="timeout"),
        started("flaky", job_id, at + 1, attempt=2),
        finished("flaky", "success", job_id, at + 1.2, attempt=2),
        started("publish", job_id, at + 2),
        finished(
            "publish",
            "permanent_failure",
            job_id,
            at + 3,
            failure_code="tool_not_found",
            error_type="PermanentError",
            reason="tool publish_v2 is not registered",
        ),
    ]
    factories.store(items)


def listed_keys(body: str) -> list[str]:
    """The step keys of the step list rows in a page or fragment, in order."""
    return re.findall(r'data-step-link data-step-key="([^"]+)"', body)


@pytest.fixture
def engineer(client):
    client.force_login(factories.user("erin", "engineer"))
    return client


@pytest.fixture
def big_job(db):
    big_failed_job()


def test_root_failure_panel_is_open_by_default_with_its_row_in_the_list(engineer, big_job):
    response = engineer.get("/jobs/big-1/")
    assert response.status_code == 200
    assert response.context["step_key"] == "publish:1"
    keys = [row["key"] for row in response.context["step_rows"]]
    assert "publish:1" in keys
    body = response.content.decode()
    assert 'data-step-key="publish:1" aria-current="true"' in body
    assert "Show earlier steps" in body
    assert "tool publish_v2 is not registered" in body


def test_header_jumps_to_the_root_failure_and_shows_its_reason(engineer, big_job):
    body = engineer.get("/jobs/big-1/").content.decode()
    assert 'class="jump-root" href="?step=publish:1#step-panel" hx-get="?step=publish:1"' in body
    assert 'class="pre job-reason">tool publish_v2 is not registered' in body


def test_long_header_lists_collapse_to_a_count(engineer, big_job):
    body = engineer.get("/jobs/big-1/").content.decode()
    completed = STEPS - 2  # all but the root failure and flaky's failed first attempt
    assert f"<summary>{completed} completed nodes: <code>node-0000</code> …" in body
    assert f"{completed} completed nodes</summary>" in body  # the restart preview's skip list
    assert body.count("<code>node-0001</code>") == 0  # not one element per node


def test_a_deep_link_opens_the_window_around_that_step(engineer, big_job):
    response = engineer.get("/jobs/big-1/?step=node-0450:1")
    keys = [row["key"] for row in response.context["step_rows"]]
    assert keys[0] == "node-0430:1" and "node-0450:1" in keys
    before = response.context["steps_before"]
    assert before["remaining"] == 430
    fragment = engineer.get(before["fragment"], HTTP_HX_REQUEST="true")
    rows = listed_keys(fragment.content.decode())
    assert rows[0] == "node-0230:1" and rows[-1] == "node-0429:1"
    assert "<html" not in fragment.content.decode()
    assert "Show earlier steps (230 before)" in fragment.content.decode()


def test_a_small_job_opens_its_list_at_the_top(engineer):
    big_failed_job("small-1", steps=20)
    response = engineer.get("/jobs/small-1/")
    assert response.context["step_rows"][0]["key"] == "node-0000:1"
    assert response.context["steps_before"] == {}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("node=NODE-031", [f"node-031{i}:1" for i in range(10)]),
        ("segment=failed", ["publish:1"]),
        ("segment=retryable", ["flaky:1"]),
        ("retried=1", ["flaky:2"]),
        ("node=flaky&retried=1", ["flaky:2"]),
        ("node=nothing-like-this", []),
    ],
)
def test_find_within_a_job_filters_the_step_list(engineer, big_job, query, expected):
    response = engineer.get(f"/jobs/big-1/?{query}")
    assert [row["key"] for row in response.context["step_rows"]] == expected
    assert response.context["listed_count"] == len(expected)
    assert f"{len(expected)} of {STEPS} attempts match" in response.content.decode()


def test_find_answers_the_step_list_fragment_to_htmx(engineer, big_job):
    response = engineer.get(
        "/jobs/big-1/?segment=retryable", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="step-results"
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="step-results">')
    assert 'data-step-key="flaky:1"' in body
    assert 'id="job-head"' not in body and 'id="narrative"' not in body
    # The waterfall follows the filter, out of band: the one node with a matching step.
    assert '<section id="waterfall" class="card waterfall"' in body
    assert 'hx-swap-oob="true"' in body.split('id="waterfall"')[1].split(">")[0]
    assert re.findall(
        r'<li class="wf-row[^"]*"[^>]*>\s*<span class="wf-label">.*?<code[^>]*>([^<]+)', body
    ) == ["flaky"]
    assert "HX-Request" in response["Vary"]


def test_find_keeps_its_filter_on_show_more(engineer, big_job):
    response = engineer.get("/jobs/big-1/?node=node-0&step=node-0000:1")
    more = response.context["steps_more"]
    assert "node=node-0" in more["fragment"] and "step=node-0000%3A1" in more["fragment"]
    fragment = engineer.get(more["fragment"], HTTP_HX_REQUEST="true")
    keys = listed_keys(fragment.content.decode())
    assert keys[0] == "node-0200:1" and all(key.startswith("node-0") for key in keys)


def test_find_with_an_unknown_segment_is_a_400_with_the_reason(engineer, big_job):
    response = engineer.get("/jobs/big-1/?segment=purple")
    assert response.status_code == 400
    assert "Select a valid choice" in response.content.decode()


def test_planner_output_and_validation_errors_show_as_stored(engineer):
    factories.store(
        [
            event("job_started", "plan-1", 0, provider="anthropic", model="claude-x"),
            event(
                "graph.next_step.parse_invalid",
                "plan-1",
                1,
                attempt=1,
                cycle=3,
                provider="anthropic",
                model="claude-x",
                parse_error_type="json_decode",
                validation_errors=["Expecting ',' delimiter: line 1 column 22"],
                raw_output_preview="Sure! plan: api_key=sk-demo1234567890abcdefgh",
            ),
            event(
                "graph.next_step.degraded",
                "plan-1",
                2,
                attempts=1,
                reason="next_step_parse_failed",
                provider="anthropic",
                model="claude-x",
            ),
        ]
    )
    body = engineer.get("/jobs/plan-1/").content.decode()
    assert "Planner output that failed validation" in body
    assert "Expecting &#x27;,&#x27; delimiter: line 1 column 22" in body
    assert "Sure! plan: api_key=" in body
    assert "sk-demo1234567890abcdefgh" not in body  # redacted on ingest, shown as stored


@pytest.mark.speed_guard
def test_job_page_queries_do_not_grow_with_its_steps(engineer, django_assert_num_queries):
    big_failed_job("small-1", steps=5)
    big_failed_job("mid-1", steps=150)  # 300 events: more than the narrative's first window
    big_failed_job("large-1", steps=400)
    engineer.get("/jobs/small-1/")  # the session and the user's groups, as on every page
    with CaptureQueriesContext(connection) as small:
        engineer.get("/jobs/small-1/")
    with CaptureQueriesContext(connection) as mid:
        engineer.get("/jobs/mid-1/")
    with django_assert_num_queries(len(mid.captured_queries)):
        response = engineer.get("/jobs/large-1/")
    assert response.context["root_key"] == "publish:1"
    # Session, user, roles, job, steps, the root failure's attempts with its group, the
    # narrative's events, retry chain, escalations, alert indicator. The root failure is read
    # off the steps; its raw events off the narrative's events when they are all of the job's,
    # and its calls are not read when none of those is a span; else two more queries. One more:
    # the job's dirty mark (events not shown yet), one indexed read of a row.
    assert (len(small.captured_queries), len(mid.captured_queries)) == (11, 13)


def test_a_span_jobs_page_with_every_event_in_hand_still_shows_its_calls(engineer):
    store_spans(
        root(name="LangGraph", end_ms=2000),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=400),
        llm_span(sid(2), sid(1), "gpt-4o-mini", 10),
    )
    job = Job.objects.get()
    page = engineer.get(f"/jobs/{job.job_id}/?step=plan:1")
    assert job.event_count < job_page.ROWS_WINDOW  # the narrative window holds every event
    calls = page.context["otel"]["calls"]
    assert [item["call"].model for item in calls] == ["gpt-4o-mini"]
    assert page.context["otel"]["usage"]["llm_calls"] == 1


def test_root_failure_is_the_same_read_off_the_rows_or_by_its_own_query(engineer):
    factories.store(
        [
            event("job_started", "pay-1", 0),
            started("pay", "pay-1", 1, attempt=1),
            finished("pay", "permanent_failure", "pay-1", 2, attempt=1, reason="declined"),
            started("pay", "pay-1", 3, attempt=2),
            finished("pay", "permanent_failure", "pay-1", 4, attempt=2, reason="declined"),
            started("ship", "pay-1", 5),
            finished("ship", "success", "pay-1", 6),
        ]
    )
    job = Job.objects.get(job_id="pay-1")
    assert job_page._root_failure(job).step_key == "pay:2"
    default = engineer.get("/jobs/pay-1/")
    deep = engineer.get("/jobs/pay-1/?step=ship:1")
    for response in (default, deep):
        assert response.context["root_key"] == "pay:2"
        assert response.context["root_query"] == "step=pay:2"
        assert response.context["root_group"].node_id == "pay"
    assert default.context["step_key"] == "pay:2" and deep.context["step_key"] == "ship:1"


@pytest.mark.parametrize("steps", [5, 150])  # the narrative's first window holds all events, or not
def test_the_panel_shows_the_same_raw_events_on_the_page_and_in_its_fragment(engineer, steps):
    big_failed_job("raw-1", steps=steps)
    page = engineer.get("/jobs/raw-1/?step=flaky:2")
    fragment = engineer.get("/jobs/raw-1/?step=flaky:2", HTTP_HX_REQUEST="true")
    assert page.context["raw_events"] == fragment.context["raw_events"]
    raw = page.context["raw_events"]
    assert [event["type"] for event in raw] == ["node_started", "node_finished"]
    assert '"result_type": "success"' in raw[1]["json"]
