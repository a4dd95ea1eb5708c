"""The dashboard's numbers against hand-counted fixtures, its links against the jobs list, and
the page itself (access, partial rendering, empty states)."""

import json
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.http import QueryDict

from jobs.dashboard import charts, headlines
from jobs.dashboard.window import Window, parse_window
from jobs.models import AlertRule, Job
from jobs.web.filters import JobFilterForm
from tests.factories import BASE_TS, event, finished, store, user

HOUR = 3600
OPENAI = {"provider": "openai", "model": "gpt-4.1"}
ANTHROPIC = {"provider": "anthropic", "model": "claude-x"}


def job_started(job_id, at, **payload):
    return event("job_started", job_id, at, name=job_id, workflow="wf", **payload)


def planner_event(kind, job_id, at, **payload):
    return event(f"graph.next_step.{kind}", job_id, at, **payload)


@pytest.fixture
def fixture_jobs(db):
    """Hand-counted (BASE_TS is 09:00 UTC; the window is 09:00-12:00, hourly buckets):

    09:00 j1 openai  n1 ok, n2 retryable (adapter_timeout, network), n2#2 ok  -> running
    09:10 j2 openai  n1 failed permanent (tool_not_found, logic)              -> failed:logic
    10:05 j3         n1 ok, n2 failed compensatable (provider_terminal,
                     PermanentError)                                           -> failed
    10:20 j4 anthr.  parse_invalid x2, degraded                                -> failed
    10:30 j5 anthr.  n1 ok                                                     -> running
    11:10 j6         n1 retryable (weird_code, auth)                           -> paused:approval
    08:00 j0         n1 ok, finished completed (previous period)
    """
    store(
        [
            job_started("j0", -HOUR),
            finished("n1", job_id="j0", at=-HOUR + 1, duration_ms=10),
            event("job_finished", "j0", -HOUR + 2, status="completed"),
            job_started("j1", 0, **OPENAI),
            finished("n1", job_id="j1", at=1, duration_ms=100),
            finished(
                "n2",
                "retryable_failure",
                job_id="j1",
                at=2,
                failure_code="adapter_timeout",
                error_type="network",
                duration_ms=50,
            ),
            finished("n2", job_id="j1", at=3, attempt=2, duration_ms=150),
            job_started("j2", 600, **OPENAI),
            finished(
                "n1",
                "permanent_failure",
                job_id="j2",
                at=601,
                failure_code="tool_not_found",
                error_type="logic",
                duration_ms=200,
            ),
            job_started("j3", HOUR + 300),
            finished("n1", job_id="j3", at=HOUR + 301, duration_ms=300),
            finished(
                "n2",
                "compensatable_failure",
                job_id="j3",
                at=HOUR + 302,
                failure_code="provider_terminal",
                error_type="PermanentError",
                duration_ms=250,
            ),
            job_started("j4", HOUR + 1200, **ANTHROPIC),
            planner_event("parse_invalid", "j4", HOUR + 1201, attempt=1, **ANTHROPIC),
            planner_event("parse_invalid", "j4", HOUR + 1202, attempt=2, **ANTHROPIC),
            planner_event("degraded", "j4", HOUR + 1203, attempts=2, **ANTHROPIC),
            job_started("j5", HOUR + 1800, **ANTHROPIC),
            finished("n1", job_id="j5", at=HOUR + 1801, duration_ms=400),
            job_started("j6", 2 * HOUR + 600),
            finished(
                "n1",
                "retryable_failure",
                job_id="j6",
                at=2 * HOUR + 601,
                failure_code="weird_code",
                error_type="auth",
                duration_ms=500,
            ),
        ]
    )


@pytest.fixture
def window():
    return Window("custom", BASE_TS, BASE_TS + timedelta(hours=3), "hour")


def trace(figure, name):
    return next(t for t in figure["data"] if t["name"] == name)


def by_x(figure_trace):
    return dict(zip(figure_trace["x"], figure_trace["y"], strict=True))


def list_count(url: str) -> int:
    """How many jobs the jobs list shows for a chart link (its own form and queryset)."""
    parts = urlsplit(url)
    assert parts.path == "/"
    form = JobFilterForm(QueryDict(parts.query))
    assert form.is_valid(), form.errors
    return Job.objects.matching(form.cleaned_data).count()


def assert_links_match_list(figure):
    """Every element's customdata is [URL, jobs]: that many jobs in the list it opens."""
    checked = 0
    for figure_trace in figure["data"]:
        for url, jobs, *_rest in figure_trace.get("customdata", []):
            assert list_count(url) == jobs, (figure_trace["name"], url)
            checked += 1
    assert checked


def test_step_results_count_steps_per_bucket_and_segment(fixture_jobs, window):
    figure = charts.step_results(window)
    assert by_x(trace(figure, "ok")) == {
        "2026-03-02T09:00:00": 2,
        "2026-03-02T10:00:00": 2,
    }
    assert by_x(trace(figure, "retryable")) == {
        "2026-03-02T09:00:00": 1,
        "2026-03-02T11:00:00": 1,
    }
    assert by_x(trace(figure, "failed")) == {
        "2026-03-02T09:00:00": 1,
        "2026-03-02T10:00:00": 1,
    }
    assert [row[1] for row in trace(figure, "ok")["customdata"]] == [2, 3]
    assert [row[1] for row in trace(figure, "failed")["customdata"]] == [1, 1]


def test_step_results_tooltip_job_counts_equal_the_linked_list(fixture_jobs, window):
    assert_links_match_list(charts.step_results(window))


def test_step_result_bar_links_to_its_bucket_and_segment(fixture_jobs, window):
    url = trace(charts.step_results(window), "failed")["customdata"][1][0]
    assert parse_qs(urlsplit(url).query) == {
        "show": ["all"],
        "segment": ["failed"],
        "since": ["2026-03-02T10:00:00Z"],
        "until": ["2026-03-02T11:00:00Z"],
    }


def test_failures_by_code_counts_steps_per_canonical_code(fixture_jobs, window):
    figure = charts.failures_by_code(window)
    counts = {
        code: steps
        for figure_trace in figure["data"]
        for code, steps in zip(figure_trace["y"], figure_trace["x"], strict=True)
    }
    assert counts == {"adapter_timeout": 1, "tool_not_found": 1, "provider_terminal": 1}
    assert trace(figure, "retried by adapter")["y"] == ["adapter_timeout"]
    assert figure["unlisted"] == 1  # weird_code
    assert_links_match_list(figure)


def test_failures_by_error_type_count_jobs_per_run_status(fixture_jobs, window):
    figure = charts.failures_by_error_type(window)
    cells = {
        (error_type, figure_trace["name"]): jobs
        for figure_trace in figure["data"]
        for error_type, jobs in zip(figure_trace["y"], figure_trace["x"], strict=True)
    }
    # Each job by its root failure: j1's network failure was retried and succeeded.
    assert cells == {
        ("logic", "failed:logic"): 1,
        ("PermanentError", "failed"): 1,
        ("auth", "paused:approval"): 1,
    }
    assert_links_match_list(figure)


def test_planner_counts_and_degraded_rate_per_provider_model(fixture_jobs, window):
    counts, rate = charts.planner(window)
    assert by_x(trace(counts, "anthropic/claude-x parse_invalid")) == {"2026-03-02T10:00:00": 2}
    assert by_x(trace(counts, "anthropic/claude-x degraded")) == {"2026-03-02T10:00:00": 1}
    # j4 and j5 carry anthropic/claude-x on job_started: 1 degraded of 2 jobs.
    assert by_x(trace(rate, "anthropic/claude-x degraded rate")) == {"2026-03-02T10:00:00": 0.5}
    assert by_x(trace(rate, "openai/gpt-4.1 degraded rate")) == {"2026-03-02T09:00:00": 0}
    assert not any(t["name"].startswith("openai/gpt-4.1 parse") for t in counts["data"])


def test_time_bars_cover_their_bucket_side_by_side(fixture_jobs, window):
    """Hour bars span their hour less a tenth either side, from the bucket's start (plotly's
    default width is the gap between a trace's x values: a lone bar was a hairline); grouped
    traces share that span without overlapping."""
    hour = 3_600_000
    for figure_trace in charts.step_results(window)["data"]:
        assert (figure_trace["offset"], figure_trace["width"]) == (0.1 * hour, 0.8 * hour)
    counts, _rate = charts.planner(window)
    spans = sorted((t["offset"], t["offset"] + t["width"]) for t in counts["data"])
    (first_start, first_end), (second_start, second_end) = spans
    assert first_start == 0.1 * hour and second_end == pytest.approx(0.9 * hour)
    assert first_end <= second_start


def test_planner_rate_draws_the_alert_threshold(fixture_jobs, window):
    _counts, rate = charts.planner(window)
    assert trace(rate, "alert threshold 20%")["y"] == [0.2, 0.2]
    AlertRule.objects.filter(kind=AlertRule.Kind.PLANNER_DEGRADED_RATE).update(threshold=0.35)
    _counts, rate = charts.planner(window)
    assert trace(rate, "alert threshold 35%")["y"] == [0.35, 0.35]


def test_planner_bars_link_to_the_provider_models_jobs_in_the_bucket(fixture_jobs, window):
    counts, _rate = charts.planner(window)
    url, jobs, *_ = trace(counts, "anthropic/claude-x degraded")["customdata"][0]
    assert jobs == 2
    assert list_count(url) == 2


def test_duration_percentiles_per_node(fixture_jobs, window):
    rows = {row["node_id"]: row for row in charts.duration_percentiles(window)}
    # n1: 100 200 300 400 500 -> p50 300, p95 at position 3.8 -> 480 (percentile_cont).
    assert rows["n1"]["steps"] == 5
    assert rows["n1"]["p50"] == pytest.approx(300)
    assert rows["n1"]["p95"] == pytest.approx(480)
    # n2: 50 150 250 -> p50 150, p95 at position 1.9 -> 240.
    assert rows["n2"]["p50"] == pytest.approx(150)
    assert rows["n2"]["p95"] == pytest.approx(240)
    assert list(rows) == ["n1", "n2"]


def test_filtering_by_provider_narrows_every_panel(fixture_jobs):
    window = Window("custom", BASE_TS, BASE_TS + timedelta(hours=3), "hour", "openai")
    figure = charts.step_results(window)
    assert sum(sum(t["y"]) for t in figure["data"]) == 4  # j1's three steps and j2's one
    assert all("provider=openai" in row[0] for t in figure["data"] for row in t["customdata"])
    assert_links_match_list(figure)


def test_open_escalations_by_kind_and_age(fixture_jobs):
    figure = charts.open_escalations(BASE_TS + timedelta(hours=3))
    # j6 paused:approval at 11:10 -> one user_action escalation, 50 minutes old at 12:00.
    assert trace(figure, "open under 1 h")["x"] == ["user_action"]
    assert trace(figure, "open under 1 h")["y"] == [1]
    figure = charts.open_escalations(BASE_TS + timedelta(days=2))
    assert trace(figure, "open 1-7 d")["y"] == [1]


def test_headlines_compare_with_the_previous_period(fixture_jobs, window):
    numbers = {h.label: h for h in headlines.headlines(window, BASE_TS + timedelta(hours=3))}
    assert (numbers["Jobs"].value, numbers["Jobs"].previous) == (6, 1)
    assert (numbers["Failed jobs"].value, numbers["Failed jobs"].previous) == (3, 0)
    assert numbers["Failure rate"].value == pytest.approx(0.5)
    assert numbers["Failure rate"].change_display == "+50.0 pt"
    assert numbers["Open escalations"].value == 1
    assert list_count(numbers["Failed jobs"].url) == 3
    assert list_count(numbers["Jobs"].url) == 6


def test_open_escalations_headline_counts_those_open_when_the_range_began(db):
    from jobs.models import Escalation

    cutoff = BASE_TS
    # (created, resolved): hours relative to the range's start; None: still unresolved.
    for n, (created, resolved) in enumerate(
        [(-5, None), (-4, 2), (-3, -1), (-2, None), (1, None), (2, 3), (-1, 0)]
    ):
        Escalation.objects.create(
            kind="retry_exhausted",
            node_id=f"n{n}",
            severity="high",
            status="open" if resolved is None else "resolved",
            triggered_at=cutoff + timedelta(hours=created),
            created_at=cutoff + timedelta(hours=created),
            resolved_at=None if resolved is None else cutoff + timedelta(hours=resolved),
        )
    # Now: the three unresolved. At the start: created by then and not resolved by then
    # (-5 open, -4 resolved at +2, -2 open), not -3 (resolved at -1) nor -1 (resolved at 0).
    assert headlines.escalation_counts(cutoff) == (3, 3)
    assert headlines.escalation_counts(cutoff + timedelta(hours=2, minutes=30)) == (3, 4)


def test_empty_range_says_what_to_send(db, window):
    figure = charts.step_results(window)
    assert figure["data"] == []
    assert "node_finished" in figure["empty"]


def test_parse_window_defaults_to_the_last_24_hours():
    now = BASE_TS
    window, errors = parse_window({}, now)
    assert (window.key, window.start, window.end, window.bucket) == (
        "24h",
        now - timedelta(hours=24),
        now,
        "hour",
    )
    assert errors == []


@pytest.mark.parametrize(
    ("key", "span", "start"),
    [
        ("1h", timedelta(hours=1), BASE_TS + timedelta(hours=-1, minutes=37)),
        ("24h", timedelta(hours=24), BASE_TS - timedelta(hours=24)),
        # The day bars' boundary: UTC midnight.
        ("7d", timedelta(days=7), BASE_TS - timedelta(days=7, hours=9)),
    ],
)
def test_a_preset_range_starts_on_its_bucket_boundary_so_only_the_current_hour_is_read_raw(
    db, key, span, start
):
    now = BASE_TS + timedelta(minutes=37, seconds=12, microseconds=5)  # 09:37:12 UTC
    window, errors = parse_window({"range": key}, now)
    assert (window.start, window.end, errors) == (start, now, [])
    assert window.end - window.start >= span
    # The previous period has the same length, so the headlines compare like with like.
    assert window.previous.end - window.previous.start == window.end - window.start
    if key != "1h":
        plan = window.plan()
        assert plan.raw == ((BASE_TS, now),)
        assert plan.rollup == ((start, BASE_TS),)


def test_parse_window_reads_a_custom_range():
    window, errors = parse_window(
        {"range": "custom", "since": "2026-03-02T09:00:00Z", "until": "2026-03-02T10:00:00Z"},
        BASE_TS,
    )
    assert (window.start, window.end, window.bucket) == (
        BASE_TS,
        BASE_TS + timedelta(hours=1),
        "minute",
    )
    assert errors == []


def test_parse_window_reports_a_bad_custom_range():
    window, errors = parse_window({"range": "custom", "since": "yesterday"}, BASE_TS)
    assert window.key == "24h"
    assert errors


# --- the page -------------------------------------------------------------------------------

CUSTOM = "/dashboard/?range=custom&since=2026-03-02T09:00:00Z&until=2026-03-02T12:00:00Z"


@pytest.fixture
def operator_client(client, db):
    client.force_login(user("olga", "operator"))
    return client


def test_dashboard_needs_a_role(client, db):
    assert client.get("/dashboard/").status_code == 302
    client.force_login(user("nobody"))
    assert client.get("/dashboard/").status_code == 403


def test_dashboard_emits_each_figure_as_json_and_a_chart_div(operator_client, fixture_jobs):
    response = operator_client.get(CUSTOM)
    html = response.content.decode()
    assert response.status_code == 200
    for chart_id in (
        "step-results",
        "failures-by-code",
        "failures-by-error-type",
        "planner-counts",
        "planner-rate",
        "durations",
        "open-escalations",
    ):
        assert f'<script id="{chart_id}" type="application/json">' in html
        assert f'data-chart="{chart_id}"' in html
    assert "vendor/plotly/plotly-basic.min.js" in html
    assert "js/charts.js" in html
    assert response["Vary"] and "HX-Request" in response["Vary"]


def test_dashboard_fragment_renders_panels_without_page_chrome(operator_client, fixture_jobs):
    response = operator_client.get(CUSTOM, HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="dashboard-panels"')
    assert "site-header" not in html
    assert 'data-chart="step-results"' in html


def test_history_restore_gets_the_whole_page(operator_client, fixture_jobs):
    response = operator_client.get(
        CUSTOM, HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true"
    )
    assert "site-header" in response.content.decode()


def chart_figure(html: str, chart_id: str) -> dict:
    """The figure the page emits with json_script under ``chart_id``."""
    match = re.search(rf'<script id="{chart_id}" type="application/json">(.*?)</script>', html)
    assert match, f"no {chart_id} figure in the page"
    return json.loads(match.group(1))


@pytest.mark.parametrize(
    "query",
    ["provider=anthropic", "model=claude-x", "provider=anthropic&model=claude-x"],
)
def test_dashboard_filtered_by_provider_or_model_shows_only_its_planner_activity(
    operator_client, fixture_jobs, query
):
    response = operator_client.get(f"{CUSTOM}&{query}")
    assert response.status_code == 200
    html = response.content.decode()
    counts = chart_figure(html, "planner-counts")
    assert {t["name"]: sum(t["y"]) for t in counts["data"]} == {
        "anthropic/claude-x parse_invalid": 2,
        "anthropic/claude-x degraded": 1,
    }
    rate = chart_figure(html, "planner-rate")
    assert [t["name"] for t in rate["data"] if "/" in t["name"]] == [
        "anthropic/claude-x degraded rate"
    ]


def test_empty_dashboard_shows_what_to_send_instead_of_axes(operator_client):
    html = operator_client.get("/dashboard/").content.decode()
    assert 'data-chart="' not in html
    assert "Send node_finished events" in html
    assert "graph.next_step.degraded" in html


@pytest.mark.speed_guard
def test_dashboard_query_count_does_not_grow_with_rows(
    operator_client, fixture_jobs, django_assert_max_num_queries
):
    # Session, user and roles, one query per panel (the provider failure rate too; the LLM
    # panels' rows come with the step panels': summed cells, per provider/model cells, raw
    # edge hours), the rollup's refresh of dirty hours (a lock and an insert on PostgreSQL, and
    # the planner pre-aggregates' two deletes, two inserts and the relinking of prev_hour: the
    # jobs deleted, the jobs inserted, one update), the headlines' previous period (its dirty
    # hours, rollup rows and raw edge hours) and their three escalation counts: 34 on
    # PostgreSQL (33 on SQLite, which takes no lock); never one per row.
    with django_assert_max_num_queries(34):
        operator_client.get(CUSTOM)
    store(
        [job_started(f"x{i}", 100 + i, **OPENAI) for i in range(30)]
        + [finished("n1", job_id=f"x{i}", at=101 + i) for i in range(30)]
    )
    with django_assert_max_num_queries(34):
        operator_client.get(CUSTOM)


# --- LLM tokens and cost (calls made of OpenTelemetry spans) ------------------------------------


def test_llm_panels_sum_tokens_and_cost_per_provider_model_by_job_start(db, window):
    from jobs.dashboard import llm_usage
    from tests.otlp_spans import ROOT_ID, llm_span, root, sid, span, store_spans

    store_spans(
        root(end_ms=900),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=100),
        llm_span(sid(2), sid(1), "gpt-4o-mini", 10),
        llm_span(sid(3), sid(1), "gpt-4o-mini", 20),
        llm_span(sid(4), ROOT_ID, "gpt-4o", 30),
    )
    figures = llm_usage.panels(window)
    tokens = {t["name"]: sum(t["y"]) for t in figures["llm_tokens"]["data"]}
    assert tokens == {
        "openai/gpt-4o input": 1000,
        "openai/gpt-4o output": 500,
        "openai/gpt-4o-mini input": 2000,
        "openai/gpt-4o-mini output": 1000,
    }
    cost = {t["name"]: sum(t["y"]) for t in figures["llm_cost"]["data"]}
    assert cost["openai/gpt-4o-mini"] == pytest.approx(2 * 0.00045)
    # A bar's link lists the jobs started in its bucket.
    link = figures["llm_tokens"]["data"][0]["customdata"][0][0]
    assert "since=2026-03-02T09%3A00%3A00" in link


def test_llm_panels_count_every_call_the_jobs_header_counts(db, window):
    """An embedding's tokens count in the job's header: in the LLM panels too; an agent's
    repeated run total counts in neither."""
    from jobs.dashboard import llm_usage
    from tests.otlp_spans import attrs, llm_span, root, sid, span, store_spans

    store_spans(
        root(
            end_ms=900,
            attributes=attrs(
                gen_ai__operation__name="invoke_agent",
                gen_ai__usage__input_tokens=1300,
                gen_ai__usage__output_tokens=500,
            ),
        ),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=100),
        llm_span(sid(2), sid(1), "gpt-4o-mini", 10),
        span(
            name="embed",
            span_id=sid(3),
            parent=sid(1),
            start_ms=20,
            end_ms=30,
            attributes=attrs(
                openinference__span__kind="EMBEDDING",
                embedding__model_name="text-embedding-3-small",
                llm__model_name="text-embedding-3-small",
                llm__token_count__prompt=300,
            ),
        ),
    )
    job = Job.objects.get()
    figures = llm_usage.panels(window)
    tokens = {t["name"]: sum(t["y"]) for t in figures["llm_tokens"]["data"]}
    assert sum(v for k, v in tokens.items() if k.endswith(" input")) == job.input_tokens == 1300


def test_llm_panels_are_empty_with_a_hint_without_calls(db, window):
    from jobs.dashboard import llm_usage

    figures = llm_usage.panels(window)
    assert figures["llm_tokens"]["data"] == []
    assert "/v1/traces" in figures["llm_tokens"]["empty"]


def test_dashboard_page_shows_the_llm_panels(operator_client):
    body = operator_client.get("/dashboard/").content.decode()
    assert "LLM tokens by provider/model" in body and "LLM cost by provider/model" in body
    assert 'data-empty="llm-tokens"' in body  # no calls yet: the empty state says what to send
