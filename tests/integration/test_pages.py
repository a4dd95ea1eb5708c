"""The jobs list and job page over HTTP: access, fragments, filters, query counts, deep links,
escaping, export."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.models import Job
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script> and <img src=x onerror=alert(1)>"


def job_stream(job_id: str, at: float = 0, **attrs) -> list[dict]:
    return [event("job_started", job_id, at, **attrs)]


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


@pytest.fixture
def engineer(client):
    client.force_login(factories.user("erin", "engineer"))
    return client


@pytest.fixture
def release_42():
    """build ok; upload retryable (attempt 1) then permanent (attempt 2)."""
    factories.store(
        [
            *job_stream(
                "release-42",
                workflow="publish-release",
                provider="openai",
                model="gpt-4.1",
                correlation_id="corr-42",
                session_id="sess-42",
            ),
            started("build", "release-42", 1, trace_span_id="a1"),
            finished(
                "build",
                "success",
                "release-42",
                2,
                trace_span_id="a1",
                payload_results={"artifact": "dist/app.tar.gz"},
            ),
            started("upload", "release-42", 3, trace_span_id="a2", parent_span_id="a1"),
            finished(
                "upload",
                "retryable_failure",
                "release-42",
                4,
                reason="network timeout",
                failure_code="adapter_timeout",
                error_type="network",
                duration_ms=812,
            ),
            started("upload", "release-42", 6, attempt=2),
            finished(
                "upload",
                "permanent_failure",
                "release-42",
                7,
                attempt=2,
                reason="404 bucket\nnot found",
                failure_code="provider_terminal",
                error_type="PermanentError",
                context={
                    "expected_arguments": {"bucket": "eu", "acl": "private"},
                    "actual_arguments": {"bucket": "us", "acl": "private"},
                },
            ),
        ]
    )
    return Job.objects.get(job_id="release-42")


def make_jobs():
    """A spread of jobs, one per filter the list offers."""
    factories.store(
        [
            *job_stream("failed-net", 0, workflow="crm", provider="openai", model="gpt-4.1"),
            finished(
                "fetch",
                "permanent_failure",
                "failed-net",
                1,
                failure_code="adapter_error",
                error_type="PermanentError",
                reason="upstream connection refused",
            ),
            *job_stream("paused-1", 10, workflow="crm", provider="anthropic", model="claude-x"),
            finished(
                "fetch",
                "retryable_failure",
                "paused-1",
                11,
                failure_code="adapter_timeout",
                reason="read timeout",
            ),
            finished(
                "fetch",
                "retryable_failure",
                "paused-1",
                12,
                attempt=2,
                failure_code="adapter_timeout",
                reason="read timeout again",
            ),
            *job_stream("done-1", 20, workflow="mail"),
            finished("send", "success", "done-1", 21),
            event("job_finished", "done-1", 22, status="completed"),
            *job_stream("running-1", 30, workflow="mail"),
            started("send", "running-1", 31),
            *job_stream("logic-1", 40, workflow="pdca", provider="openai"),
            finished(
                "plan",
                "permanent_failure",
                "logic-1",
                41,
                error_type="ValidationError",
                failure_code="validation_error",
                reason="schema mismatch on field total",
            ),
            finished("plan", "success", "logic-1", 42, attempt=3),
            finished(
                "plan",
                "permanent_failure",
                "logic-1",
                43,
                attempt=4,
                error_type="ValidationError",
                reason="schema mismatch again",
            ),
        ]
    )


def ids(response) -> list[str]:
    return [row.job.job_id for row in response.context["rows"]]


# -- access ----------------------------------------------------------------------------------


def test_anonymous_user_is_sent_to_login(client, release_42):
    for url in ("/", "/jobs/release-42/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/?next=")


def test_login_page_has_username_and_password_fields(client):
    response = client.get("/accounts/login/")
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content


def test_operator_sees_list_and_job_page(operator, release_42):
    assert operator.get("/").status_code == 200
    assert operator.get("/jobs/release-42/").status_code == 200


def test_user_without_a_role_is_forbidden(client, release_42):
    client.force_login(factories.user("nobody"))
    assert client.get("/").status_code == 403
    assert client.get("/jobs/release-42/").status_code == 403


def test_unknown_job_is_404(operator):
    assert operator.get("/jobs/nope/").status_code == 404


def test_raw_events_and_export_are_for_engineers_only(operator, release_42):
    page = operator.get("/jobs/release-42/?step=upload:2")
    assert b"Raw event" not in page.content
    assert operator.get("/jobs/release-42/events.ndjson").status_code == 403


def test_engineer_exports_events_as_ndjson_and_json(engineer, release_42):
    response = engineer.get("/jobs/release-42/events.ndjson")
    assert response.status_code == 200
    lines = [json.loads(line) for line in response.content.decode().splitlines()]
    assert [item["type"] for item in lines][:2] == ["job_started", "node_started"]
    assert len(lines) == 7
    assert "attachment" in response["Content-Disposition"]
    as_json = json.loads(engineer.get("/jobs/release-42/events.json").content)
    assert as_json == lines


def test_engineer_sees_the_raw_event_in_the_panel(engineer, release_42):
    response = engineer.get("/jobs/release-42/?step=upload:2")
    assert b"Raw events (2)" in response.content


# -- fragments -------------------------------------------------------------------------------


def test_step_link_request_renders_only_the_panel(operator, release_42):
    response = operator.get("/jobs/release-42/?step=upload:1", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="step-panel"')
    assert "network timeout" in body
    assert "site-header" not in body and "<html" not in body
    assert 'id="narrative"' not in body


def test_history_restore_request_gets_the_whole_page(operator, release_42):
    response = operator.get(
        "/jobs/release-42/?step=upload:1",
        HTTP_HX_REQUEST="true",
        HTTP_HX_HISTORY_RESTORE_REQUEST="true",
    )
    body = response.content.decode()
    assert "<html" in body and 'id="step-list"' in body and 'id="step-panel"' in body


def test_list_fragment_renders_only_the_table(operator, release_42):
    response = operator.get("/?show=all", HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="job-table"')
    assert 'hx-trigger="every 5s"' in body
    assert "job-filters" not in body and "<html" not in body


def test_pages_vary_on_hx_request(operator, release_42):
    for url in ("/", "/jobs/release-42/"):
        assert "HX-Request" in operator.get(url)["Vary"]


def test_show_more_returns_the_next_rows_only(operator):
    items = job_stream("big")
    items += [finished(f"n{i}", "success", "big", 1 + i / 1000) for i in range(210)]
    factories.store(items)
    page = operator.get("/jobs/big/")
    assert page.context["steps_more"]["remaining"] == 10
    assert len(page.context["step_rows"]) == 200
    assert page.context["steps_more"]["fragment"] == "/jobs/big/rows/steps?from=200"
    more = operator.get("/jobs/big/rows/steps?from=200", HTTP_HX_REQUEST="true")
    assert "HX-Request" in more["Vary"]
    body = more.content.decode()
    assert body.count("data-step-link") == 10
    assert 'data-step-key="n200:1"' in body and 'data-step-key="n209:1"' in body
    assert 'data-step-key="n199:1"' not in body
    assert "<html" not in body and "Show more" not in body
    no_js = operator.get("/jobs/big/?rows=400")
    assert len(no_js.context["step_rows"]) == 210
    assert len(no_js.context["narrative_lines"]) == 211  # job_started + 210 finishes
    narrative_more = operator.get("/jobs/big/rows/narrative?from=200", HTTP_HX_REQUEST="true")
    assert narrative_more.content.decode().count('class="line ') == 11
    waterfall_more = operator.get("/jobs/big/rows/waterfall?from=200", HTTP_HX_REQUEST="true")
    assert waterfall_more.content.decode().count('class="wf-row"') == 10
    # Without HTMX a rows URL is the job page with that list's window from the row asked.
    no_js_more = operator.get("/jobs/big/rows/steps?from=200&to=400")
    assert no_js_more["Location"] == "/jobs/big/?first=200#steps"
    # A link made before the rows had their URL (?more=...) is sent there, query kept.
    old = operator.get("/jobs/big/?more=steps&from=200", HTTP_HX_REQUEST="true")
    assert (old.status_code, old["Location"]) == (302, "/jobs/big/rows/steps?from=200")


# -- list filters ----------------------------------------------------------------------------


def test_default_list_shows_jobs_needing_attention_newest_first(operator):
    make_jobs()
    assert ids(operator.get("/")) == ["logic-1", "paused-1", "failed-net"]


def strip_label(response, job_id: str) -> str:
    html = response.content.decode()
    row = html[html.index(f'href="/jobs/{job_id}/"') :]
    return row[row.index('aria-label="Steps: ') + len('aria-label="Steps: ') :].split('"')[0]


def test_the_mini_bar_of_a_long_job_counts_every_step_and_shows_each_failure(operator):
    events = job_stream("long")
    for index in range(5200):
        result = "success"
        if index == 5170:
            result = "permanent_failure"
        elif index in (30, 4000):
            result = "retryable_failure"
        events.append(finished(f"n{index}", result, "long", at=1 + index * 0.001))
    factories.store(events)
    factories.store([*job_stream("short"), finished("n1", job_id="short", at=1)])
    response = operator.get("/?show=all")
    assert strip_label(response, "long") == (
        "5,200 steps, 128 a cell: 5,197 ok, 2 retryable, 1 failed"
    )
    assert strip_label(response, "short") == "1 ok"
    row = next(r for r in response.context["rows"] if r.job.job_id == "long")
    marks = [css for css, _steps in row.strip]
    assert len(marks) == 41 and marks.count("seg-failed") == 1
    assert marks.count("seg-retryable") == 2
    assert marks.index("seg-failed") == 5170 // 128
    assert sum(steps for _css, steps in row.strip) == 5200
    assert "+5170" not in response.content.decode()


def test_a_strip_stored_before_every_step_was_counted_says_it_holds_the_first(operator):
    factories.store([*job_stream("old"), finished("n1", job_id="old", at=1)])
    Job.objects.filter(job_id="old").update(
        segment_strip=[["ok", False], ["failed", False]], step_count=205
    )
    assert strip_label(operator.get("/?show=all"), "old") == "first 2 of 205 steps: 1 ok, 1 failed"


def test_all_shows_every_job(operator):
    make_jobs()
    assert ids(operator.get("/?show=all")) == [
        "logic-1",
        "running-1",
        "done-1",
        "paused-1",
        "failed-net",
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # "failed" is the failed family (issue 14); failed:logic beside it narrows it.
        ("status=failed", ["logic-1", "failed-net"]),
        ("status=failed&status=failed:logic", ["logic-1", "failed-net"]),
        ("show=all&segment=retryable", ["paused-1"]),
        ("show=all&segment=failed", ["logic-1", "failed-net"]),
        ("show=all&failure_code=adapter_timeout", ["paused-1"]),
        ("show=all&error_type=ValidationError", ["logic-1"]),
        ("show=all&provider=openai", ["logic-1", "failed-net"]),
        ("show=all&provider=openai&workflow=crm", ["failed-net"]),
        ("show=all&model=claude-x", ["paused-1"]),
        ("show=all&workflow=mail", ["running-1", "done-1"]),
        # paused-1 is paused between attempts: waiting to retry, not retrying now.
        ("retrying=on", []),
        ("waiting=on", ["paused-1"]),
        ("show=all&min_attempts=2", ["logic-1", "paused-1"]),
        ("show=all&min_attempts=4", ["logic-1"]),
        ("show=all&reason=timeout", ["paused-1"]),
        ("show=all&reason=refused", ["failed-net"]),
        ("show=all&has_findings=on", ["logic-1"]),
        ("q=failed-net", ["failed-net"]),
    ],
)
def test_filters_return_exactly_the_matching_jobs(operator, query, expected):
    make_jobs()
    assert ids(operator.get(f"/?{query}")) == expected


def test_status_all_from_older_links_lists_every_job(operator):
    make_jobs()
    every = ids(operator.get("/?show=all"))
    assert len(every) > len(ids(operator.get("/")))
    assert ids(operator.get("/?status=all")) == every
    assert ids(operator.get("/?status=all&status=failed")) == ids(operator.get("/?status=failed"))


def test_time_range_filter_uses_started_at(operator):
    make_jobs()
    base = factories.BASE_TS
    since = (base + timedelta(seconds=15)).strftime("%Y-%m-%dT%H:%M:%S")
    until = (base + timedelta(seconds=35)).strftime("%Y-%m-%dT%H:%M:%S")
    assert ids(operator.get(f"/?show=all&since={since}&until={until}")) == ["running-1", "done-1"]


def test_lookup_finds_by_correlation_and_session_id_whatever_the_status(operator, release_42):
    make_jobs()
    assert ids(operator.get("/?q=corr-42")) == ["release-42"]
    assert ids(operator.get("/?q=sess-42")) == ["release-42"]
    assert ids(operator.get("/?q=done-1")) == ["done-1"]


def test_stalled_filter_finds_silent_running_jobs(operator):
    make_jobs()
    Job.objects.filter(job_id="running-1").update(
        last_received_at=timezone.now() - timedelta(hours=2)
    )
    Job.objects.filter(job_id="done-1").update(last_received_at=timezone.now() - timedelta(hours=2))
    assert ids(operator.get("/?stalled=on")) == ["running-1"]


def test_filters_combine_with_keyset_pages(operator, settings):
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 2
    make_jobs()
    first = operator.get("/?show=all")
    assert ids(first) == ["logic-1", "running-1"]
    second = operator.get("/" + first.context["next_page_url"])
    assert ids(second) == ["done-1", "paused-1"]
    third = operator.get("/" + second.context["next_page_url"])
    assert ids(third) == ["failed-net"]
    assert third.context["next_page_url"] == ""
    assert "show=all" in second.context["next_page_url"]


def test_bad_cursor_is_reported_not_a_500(operator):
    make_jobs()
    response = operator.get("/?show=all&cursor=!!!")
    assert response.status_code == 200
    assert b"not a page link this list made" in response.content


@pytest.mark.speed_guard
def test_list_query_count_does_not_grow_with_page_size(
    operator, settings, django_assert_num_queries
):
    for n in range(30):
        factories.store(
            [
                *job_stream(f"job-{n}", n),
                finished("a", "success", f"job-{n}", n + 0.1),
                finished(
                    "b",
                    "permanent_failure",
                    f"job-{n}",
                    n + 0.2,
                    reason="broken",
                    error_type="PermanentError",
                ),
            ]
        )
    searched_url = "/?show=all&reason=broken&segment=failed"
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 5
    baseline = _count_queries(operator, "/?show=all")
    # Reason search reads the failures it matched, for the whole page at once.
    searched = _count_queries(operator, searched_url)
    assert searched == baseline + 1
    settings.TRACEVIZ_JOBS_PAGE_SIZE = 25
    with django_assert_num_queries(baseline):
        response = operator.get("/?show=all")
    assert len(response.context["rows"]) == 25
    with django_assert_num_queries(searched):
        response = operator.get(searched_url)
    assert len(response.context["rows"]) == 25


def _count_queries(client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured.captured_queries)


# -- job page --------------------------------------------------------------------------------


def test_deep_link_renders_that_steps_panel(operator, release_42):
    response = operator.get("/jobs/release-42/?step=upload:2")
    assert response.context["step"].attempt == 2
    body = response.content.decode()
    assert 'data-step-key="upload:2"' in body
    assert "404 bucket\nnot found" in body  # line breaks kept (CSS pre-wrap)
    assert "retried by <strong>reducer</strong>" not in body
    assert "not retried: terminal, the reducer settles the job&#x27;s state" in body
    # Attempt 2 sent no duration_ms: its duration runs from its start to its finish.
    assert response.context["duration"] == "1.0 s"
    assert response.context["job_duration"] == "7.0 s"
    assert "PermanentError</code> → " in body


def test_step_key_is_split_at_the_last_colon(operator):
    factories.store(
        [
            *job_stream("colons"),
            finished("ns:fetch", "retryable_failure", "colons", 1, reason="colon node"),
        ]
    )
    response = operator.get("/jobs/colons/?step=ns%3Afetch:1")
    assert response.context["step"].node_id == "ns:fetch"
    assert 'href="?step=ns%3Afetch:1"' in response.content.decode()


def test_unknown_step_is_404_with_a_clear_message(operator, release_42):
    for key in ("upload:9", "nope:1", "upload", "upload:x"):
        response = operator.get(f"/jobs/release-42/?step={key}")
        assert response.status_code == 404
        assert b"This job has no step" in response.content


def test_step_links_carry_the_step_query(operator, release_42):
    body = operator.get("/jobs/release-42/").content.decode()
    for key in ("build:1", "upload:1", "upload:2"):
        assert f'href="?step={key}" hx-get="?step={key}"' in body


def test_panel_shows_attempts_and_argument_differences(operator, release_42):
    response = operator.get("/jobs/release-42/?step=upload:2")
    panel = response.context
    assert [(e.key, e.step.segment) for e in panel["attempts"]] == [
        ("upload:1", "retryable"),
        ("upload:2", "failed"),
    ]
    rows = {row.name: row.status for row in panel["argument_rows"]}
    assert rows == {"bucket": "changed", "acl": "same"}
    assert panel["is_root"] is True


def test_panel_lists_the_attempts_earlier_results_with_a_stale_one_marked(operator):
    factories.store(
        [
            factories.finished("n1", "retryable_failure", "h1", at=1, reason="503"),
            factories.finished("n1", "success", "h1", at=2),
            factories.event("cancel_requested", "h1", at=3, epoch=2),
            factories.finished("n1", "permanent_failure", "h1", at=4, epoch=1, reason="late"),
        ]
    )
    response = operator.get("/jobs/h1/?step=n1:1")
    history = response.context["history"]
    assert [(h["result_type"], h["stale"], h["reason"]) for h in history] == [
        ("retryable_failure", False, "503"),
        ("permanent_failure", True, "late"),
    ]
    body = response.content.decode()
    assert "Earlier results of attempt 1" in body
    assert "stale: arrived after the cancel, changed nothing" in body


def test_narrative_reads_events_in_order_and_marks_the_root_failure(operator, release_42):
    lines = operator.get("/jobs/release-42/").context["narrative_lines"]
    texts = [line["text"] for line in lines]
    assert texts[4] == "Node upload · retryable_failure (attempt 1, 812 ms): network timeout"
    marked = [(line["role"], line["text"].split(":")[0]) for line in lines if line["role"]]
    assert marked == [("root", "Node upload · permanent_failure (attempt 2)")]


def test_waterfall_nests_children_under_their_parent_span(operator, release_42):
    rows = operator.get("/jobs/release-42/").context["waterfall_rows"]
    assert [(row["node_id"], row["depth"]) for row in rows] == [("build", 0), ("upload", 1)]
    upload = rows[1]
    assert [bar["segment"] for bar in upload["bars"]] == ["retryable", "failed"]
    assert len(upload["gaps"]) == 1  # the backoff between attempt 1 and 2


def test_resume_preview_skips_completed_and_reruns_the_rest(operator, release_42):
    resume = operator.get("/jobs/release-42/").context["resume"]
    assert resume.skip == ["build"]
    assert [node.node_id for node in resume.rerun] == ["upload"]


def test_retry_chain_links_previous_and_next_runs(operator):
    factories.store(
        [
            *job_stream("run-1"),
            finished("a", "permanent_failure", "run-1", 1),
            *job_stream("run-2", 5, retry_of="run-1"),
            finished("a", "success", "run-2", 6),
        ]
    )
    first = operator.get("/jobs/run-1/")
    assert [run.job_id for run in first.context["next_runs"]] == ["run-2"]
    second = operator.get("/jobs/run-2/")
    assert second.context["previous_run"].job_id == "run-1"
    assert b'href="/jobs/run-1/"' in second.content


def test_job_ids_with_slashes_and_spaces_resolve(operator):
    factories.store([*job_stream("team/a b?"), finished("x", "success", "team/a b?", 1)])
    list_body = operator.get("/?show=all").content.decode()
    assert 'href="/jobs/team/a%20b%3F/"' in list_body
    assert operator.get("/jobs/team/a%20b%3F/").status_code == 200


def test_hostile_reason_is_escaped_everywhere(operator):
    factories.store(
        [
            *job_stream("evil"),
            finished("collect", "permanent_failure", "evil", 1, reason=HOSTILE),
        ]
    )
    for url in ("/?show=all", "/jobs/evil/", "/jobs/evil/?step=collect:1"):
        body = operator.get(url).content.decode()
        assert "<script>alert(1)</script>" not in body
        assert "<img src=x" not in body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_hostile_node_id_is_escaped_in_the_waterfall_bars_and_words(operator):
    node = 'n"><img src=x onerror=alert(1)>'
    factories.store(
        [
            *job_stream("evil-node"),
            started(node, "evil-node", 1),
            finished(node, "retryable_failure", "evil-node", 2, reason="x"),
            started(node, "evil-node", 4, attempt=2),
            finished(node, "success", "evil-node", 5, attempt=2),
        ]
    )
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        url = "/jobs/evil-node/" + ("rows/waterfall?from=0" if headers else "")
        body = operator.get(url, **headers).content.decode()
        assert "<img src=x" not in body
        escaped = "n&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
        # A bar per attempt, its word, and the wait between them.
        assert f'title="{escaped} attempt 2: ok' in body
        assert '<span class="seg-word seg-retryable">retryable</span>' in body
        assert 'class="wf-gap"' in body


def test_times_are_shown_in_the_display_time_zone_with_offset(operator, settings, release_42):
    settings.TRACEVIZ_DISPLAY_TIME_ZONE = "Europe/Berlin"
    body = operator.get("/jobs/release-42/").content.decode()
    assert "2026-03-02 10:00:00 +01:00" in body  # 09:00 UTC
    assert "10:00:04.000" in body
