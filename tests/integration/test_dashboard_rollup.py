"""The dashboard rollup (jobs.rollup): numbers read from it equal the raw aggregates, also after
jobs are re-projected, with dirty hours left unrefreshed and for ranges with partial hours; the
links' job counts still equal the jobs list's; histogram percentiles stay within 2 %."""

import json
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models import Count, Q
from django.test.utils import CaptureQueriesContext

from jobs import tasks
from jobs.dashboard import charts, headlines, histograms, rollup
from jobs.dashboard.window import Window
from jobs.ingest.retention import apply_retention
from jobs.models import DashboardDirtyHour, DashboardRollup, Job
from jobs.replay.failures import FAILED_FAMILY
from tests.factories import BASE_TS, event, finished, store
from tests.integration.test_dashboard import (
    ANTHROPIC,
    HOUR,
    OPENAI,
    assert_links_match_list,
    job_started,
    trace,
)

STEP_PANELS = (charts.step_results, charts.failures_by_code, charts.failures_by_error_type)


@pytest.fixture
def jobs_over_hours(db):
    """Jobs over four hours from 09:00, with every segment, codes, error types and durations."""
    items = []
    for i in range(24):
        job_id, at = f"r{i}", i * 600 + 7
        items.append(job_started(job_id, at, **(OPENAI if i % 2 else ANTHROPIC)))
        items += steps_of(job_id, at, i)
    store(items)


def steps_of(job_id: str, at: int, i: int) -> list[dict]:
    """Job number ``i``'s steps: n1 ok, n2 retried (every third job), n3 failed (every fourth
    from the second), with failure codes, error types and durations."""
    items = [finished("n1", job_id=job_id, at=at + 1, duration_ms=10 * i)]
    if i % 3 == 0:
        items.append(
            finished(
                "n2",
                "retryable_failure",
                job_id=job_id,
                at=at + 2,
                failure_code="adapter_timeout",
                error_type="network",
                duration_ms=700 + i,
            )
        )
    if i % 4 == 1:
        items.append(
            finished(
                "n3",
                "permanent_failure",
                job_id=job_id,
                at=at + 3,
                failure_code="tool_not_found",
                error_type="logic",
                duration_ms=30,
            )
        )
    return items


def window(start_hours=0.0, end_hours=4.0, bucket="hour", **filters):
    return Window(
        "custom",
        BASE_TS + timedelta(hours=start_hours),
        BASE_TS + timedelta(hours=end_hours),
        bucket,
        **filters,
    )


def raw_plan(w: Window) -> rollup.Plan:
    """Everything aggregated from Step rows: the reference."""
    return rollup.Plan((), ((w.start, w.end),))


def assert_same_as_raw(w: Window, plan: rollup.Plan | None = None):
    for panel in STEP_PANELS:
        assert panel(w, plan or w.plan()) == panel(w, raw_plan(w)), panel.__name__
    from_rollup = charts.duration_percentiles(w, plan or w.plan())
    assert from_rollup == charts.duration_percentiles(w, raw_plan(w))


def test_hour_aligned_window_reads_only_the_rollup(jobs_over_hours):
    w = window()
    plan = w.plan()
    assert plan.raw == ()
    assert plan.rollup == ((w.start, w.end),)
    assert not DashboardDirtyHour.objects.exists()
    job_rows = DashboardRollup.objects.filter(kind="jobs", scope=rollup.Scope.OWN)
    # 4 hours x 2 providers, each split into failed-family jobs and the others
    assert len({(row.hour, row.provider) for row in job_rows}) == 8
    assert {row.status for row in job_rows} == {"", rollup.FAILED_STATUS}
    # Each job used only its own provider and model: no guest rows.
    assert not DashboardRollup.objects.exclude(scope=rollup.Scope.OWN).exists()
    assert_same_as_raw(w)


@pytest.mark.parametrize(
    ("start", "end", "bucket"),
    [(0.5, 3.25, "hour"), (0.2, 0.7, "hour"), (-23.5, 24, "day"), (1.5, 2.5, "minute")],
)
def test_partial_hours_are_read_raw_and_add_up(jobs_over_hours, start, end, bucket):
    w = window(start, end, bucket)
    assert w.plan().raw
    assert_same_as_raw(w)
    for panel in STEP_PANELS:
        if panel(w)["data"]:
            assert_links_match_list(panel(w))


@pytest.mark.parametrize("filters", [OPENAI, {"provider": "anthropic"}, {"model": "gpt-4.1"}])
def test_provider_and_model_filters(jobs_over_hours, filters):
    w = window(0.5, 4, **filters)
    assert_same_as_raw(w)
    assert_links_match_list(charts.step_results(w))
    assert_links_match_list(charts.failures_by_error_type(w))


def test_reprojected_jobs_are_recomputed(jobs_over_hours):
    w = window()
    before = charts.step_results(w)
    # Later events: r2 (09:20) fails permanently, r13 (11:10) finishes a retry, and "late"
    # first shows up at 10:05, then an earlier event moves its start into the 09:00 hour.
    store(
        [
            finished(
                "n4",
                "permanent_failure",
                job_id="r2",
                at=2 * 600 + 50,
                failure_code="tool_not_found",
                error_type="logic",
            ),
            finished("n2", job_id="r13", at=13 * 600 + 60, attempt=2, duration_ms=5),
            finished(
                "n1",
                "retryable_failure",
                job_id="late",
                at=HOUR + 300,
                failure_code="adapter_timeout",
                error_type="network",
            ),
        ]
    )
    assert rollup.dirty_hours() == [BASE_TS + timedelta(hours=h) for h in (2, 1, 0)]
    assert_same_as_raw(w)
    assert charts.step_results(w) != before
    store([event("job_started", "late", HOUR - 300, name="late")])
    assert set(rollup.dirty_hours()) == {BASE_TS, BASE_TS + timedelta(hours=1)}
    assert_same_as_raw(w)
    late = Job.objects.get(job_id="late")
    assert late.started_at == BASE_TS + timedelta(minutes=55)
    failed = charts.step_results(w)
    assert_links_match_list(failed)
    assert_links_match_list(charts.failures_by_code(w))
    assert_links_match_list(charts.failures_by_error_type(w))


def test_dirty_hours_beyond_the_refresh_bound_are_read_raw(jobs_over_hours):
    rollup.refresh_pending()
    DashboardDirtyHour.objects.mark([BASE_TS, BASE_TS + timedelta(hours=2)])
    # Make the stored rows of 09:00 wrong: a dirty hour must not be read from them.
    DashboardRollup.objects.filter(hour=BASE_TS).update(steps=999, jobs=999)
    w = window()
    plan = rollup.plan(w.start, w.end, refresh_hours=0)
    assert plan.raw == (
        (BASE_TS, BASE_TS + timedelta(hours=1)),
        (BASE_TS + timedelta(hours=2), BASE_TS + timedelta(hours=3)),
    )
    assert_same_as_raw(w, plan)
    assert rollup.refresh(w.start, w.end, limit=1) == [BASE_TS]  # newest first
    assert tasks.refresh_dashboard_rollup() == 1
    assert not DashboardDirtyHour.objects.exists()
    assert not DashboardRollup.objects.filter(steps=999).exists()
    assert_same_as_raw(w)


def test_rebuild_equals_incremental_refresh(jobs_over_hours):
    def stored():
        columns = ("hour", "kind", "provider", "model", "dimension", "status", "steps", "jobs")
        return sorted(
            (*row, histograms.merge([histogram]))
            for *row, histogram in DashboardRollup.objects.values_list(*columns, "histogram")
        )

    rollup.refresh_pending()
    incremental = stored()
    assert any(row[-1] for row in incremental)
    assert rollup.rebuild() == len(incremental)
    assert stored() == incremental


def test_retention_marks_the_hours_of_deleted_jobs(jobs_over_hours):
    rollup.refresh_pending()
    Job.objects.filter(job_id__in=["r2", "r4"]).update(last_received_at=BASE_TS)
    result = apply_retention(1, now=BASE_TS + timedelta(days=1, seconds=1))
    assert result.jobs == 2
    assert rollup.dirty_hours() == [BASE_TS]
    w = window()
    assert_same_as_raw(w)
    numbers = {h.label: h.value for h in headlines.headlines(w, BASE_TS + timedelta(hours=4))}
    jobs_in_figure = sum(row[1] for row in trace(charts.step_results(w), "ok")["customdata"])
    assert numbers["Jobs"] == jobs_in_figure == 22


def test_durations_from_histograms_within_two_percent(db, monkeypatch):
    values = [0, 1, 3, 7.5, 12, 40, 41, 42, 99, 150, 333, 1000, 1001, 2500, 9000, 65000]
    items = []
    for i in range(120):
        job_id, at = f"d{i}", (i % 4) * HOUR + i
        items.append(job_started(job_id, at))
        duration = values[i % len(values)] * (1 + i / 1000)
        items.append(finished("n1", job_id=job_id, at=at + 1, duration_ms=duration))
        items.append(finished("n2", job_id=job_id, at=at + 2, duration_ms=i * 17.25))
    store(items)
    w = window(0, 4)
    exact = {row["node_id"]: row for row in charts.duration_percentiles(w)}
    assert all(row["exact"] for row in exact.values())
    assert "note" not in charts.durations(w)
    monkeypatch.setattr(charts, "DURATION_EXACT_STEPS", 0)
    approx = {row["node_id"]: row for row in charts.duration_percentiles(w)}
    assert list(approx) == list(exact)
    for node, row in approx.items():
        assert not row["exact"]
        assert row["steps"] == exact[node]["steps"] == 120
        for name in ("p50", "p95"):
            assert row[name] == pytest.approx(exact[node][name], rel=0.021, abs=0.03), name
    assert "2 %" in charts.durations(w)["note"]


def test_histogram_percentiles_bracket_every_value():
    for value in (0, 0.5, 1, 9.99, 100, 12345.6):
        histogram = histograms.merge([{"b": [histograms.bucket_of(value)], "n": [1]}])
        assert histograms.percentiles(histogram, [0.5]) == [
            pytest.approx(value, rel=0.021, abs=0.03)
        ]
    assert histograms.percentiles({}, [0.5, 0.95]) == [0.0, 0.0]


def test_whole_days_read_compiled_day_rows(jobs_over_hours, monkeypatch):
    monkeypatch.setattr(charts, "DURATION_EXACT_STEPS", 0)  # histograms, also from raw rows
    rollup.refresh_pending()  # the fixture's day is in the past: compiled
    assert DashboardRollup.objects.filter(kind="day", hour=BASE_TS.replace(hour=0)).exists()
    # n1 and n2 of both providers, n3 (odd jobs) of openai only.
    assert DashboardRollup.objects.filter(kind="duration_day").count() == 5
    # Every kind's day rows: one per cell, the sums of its hours.
    day_jobs = DashboardRollup.objects.filter(kind="jobs_day").values_list("jobs", flat=True)
    assert sum(day_jobs) == 24 and len(day_jobs) <= 4
    assert DashboardRollup.objects.filter(kind="segment_day").exists()
    # The fixture's day inside a longer range, and exactly that day (day rows alone). Its hour
    # rows made wrong: the compiled day must be read from its day rows, not from them.
    day_hours = DashboardRollup.objects.filter(kind__in=rollup.HOUR_KINDS)
    day_hours.update(steps=999, jobs=999)
    for (start, end), filters in [((-30, 30), {}), ((-30, 30), OPENAI), ((-9, 15), {})]:
        w = window(start, end, "day", **filters)
        plan = w.plan()
        assert_same_as_raw(w)
        assert headlines.job_counts(w, plan) == job_rows_count(w)
    rollup.rebuild()  # the hour rows right again
    # A late event for r5 (09:50) makes the day's rows stale: they go, the hours answer.
    store([finished("n9", job_id="r5", at=5 * 600 + 99, duration_ms=12345)])
    w.plan()
    assert not DashboardRollup.objects.filter(kind__in=rollup.DAY_KINDS).exists()
    assert_same_as_raw(w)
    nodes = {row["node_id"]: row for row in charts.duration_percentiles(w)}
    assert nodes["n9"]["steps"] == 1
    assert rollup.compile_days() == 1
    assert_same_as_raw(w)


def job_rows_count(w: Window) -> tuple[int, int]:
    """(jobs, failed-family jobs) counted from Job rows: the reference for the headlines."""
    jobs = w.jobs()
    return jobs.count(), jobs.filter(status__in=[s.value for s in FAILED_FAMILY]).count()


@pytest.mark.parametrize(
    ("start", "end", "filters"),
    [
        (0, 4, {}),  # whole hours: the rollup alone
        (0.5, 3.25, {}),  # partial hours at both ends read raw
        (2, 6, {}),  # previous period 0-2 h
        (0.5, 4, OPENAI),
        (0, 4, {"provider": "anthropic"}),
    ],
)
def test_headline_job_counts_from_the_rollup_equal_job_rows(jobs_over_hours, start, end, filters):
    store(
        [
            event("job_finished", job_id, i * 600 + 60, status="failed", reason="gave up")
            for i, job_id in ((4, "r4"), (5, "r5"), (22, "r22"))
        ]
    )
    rollup.refresh_pending()
    w = window(start, end, **filters)
    assert not w.plan().raw or (start, end) != (0, 4)
    expected, expected_before = job_rows_count(w), job_rows_count(w.previous)
    assert expected[1] > 0  # the data has failed jobs in it, so the split is tested
    numbers = {h.label: h for h in headlines.headlines(w, w.end)}
    assert (numbers["Jobs"].value, numbers["Failed jobs"].value) == expected
    assert (numbers["Jobs"].previous, numbers["Failed jobs"].previous) == expected_before
    assert headlines.job_counts(w, raw_plan(w)) == expected
    # After the panels' prefetch, the raw hours' totals come from its JOBS cells: no Job rows
    # are read again.
    prefetched = w.plan()
    rollup.prefetch(prefetched, [rollup.Kind.JOBS], w.provider, w.model)
    with CaptureQueriesContext(connection) as queries:
        assert headlines.job_counts(w, prefetched) == expected
    assert not any('"jobs_job"' in query["sql"] for query in queries)


def test_headline_job_counts_follow_a_job_that_fails_later(jobs_over_hours):
    rollup.refresh_pending()
    w = window()
    jobs, failed = headlines.job_counts(w)
    store([event("job_finished", "r0", 60, status="failed", reason="gave up")])
    assert headlines.job_counts(w) == (jobs, failed + 1) == job_rows_count(w)
    rollup.refresh_pending()
    assert headlines.job_counts(w, w.plan()) == (jobs, failed + 1)
    assert w.plan().raw == ()


@pytest.mark.django_db(transaction=True)
def test_the_migration_recomputes_the_hours_of_unsplit_job_rows():
    """Rollups made before JOBS rows were split by status family are recomputed: migration
    0019 marks their hours dirty, so they are read raw until the refresh rewrites them."""
    assert_migration_marks_old_rollup_hours_dirty(
        "0017_staff_group", "0019_rollup_jobs_by_status_and_provider_index"
    )


def assert_migration_marks_old_rollup_hours_dirty(before: str, after: str) -> None:
    """Rollup rows written at migration ``before`` (JOBS rows at hours 0 and 1, SEGMENT rows at
    0 and 2): migrating to ``after`` marks the hours of their JOBS rows dirty."""
    from django.db.migrations.executor import MigrationExecutor

    from jobs.models import DashboardRollup

    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    executor.migrate([("jobs", before)])
    old = executor.loader.project_state([("jobs", before)]).apps
    for hour, kind in ((0, "jobs"), (0, "segment"), (1, "jobs"), (2, "segment")):
        old.get_model("jobs", "DashboardRollup").objects.create(
            hour=BASE_TS + timedelta(hours=hour), kind=kind, dimension=f"{kind}-{hour}", jobs=3
        )
    try:
        MigrationExecutor(connection).migrate([("jobs", after)])
        assert sorted(rollup.dirty_hours()) == [BASE_TS, BASE_TS + timedelta(hours=1)]
    finally:
        MigrationExecutor(connection).migrate(latest)
        DashboardRollup.objects.all().delete()
        rollup.DashboardDirtyHour.objects.all().delete()


def test_provider_failure_rates_from_the_rollup_equal_job_rows(jobs_over_hours):
    from jobs.dashboard import provider_health

    store([event("job_finished", "r4", 4 * 600 + 60, status="failed", reason="gave up")])
    rollup.refresh_pending()
    for w in (window(), window(0.5, 3.25), window(0, 4, provider="openai")):
        assert provider_health.failure_rates(w) == provider_health.failure_rates(w, raw_plan(w))
        expected = {
            (row["provider"], row["model"]): (row["jobs"], row["failed"])
            for row in w.jobs()
            .values("provider", "model")
            .annotate(
                jobs=Count("id"),
                failed=Count("id", filter=Q(status__in=[s.value for s in FAILED_FAMILY])),
            )
        }
        found = provider_health.failure_rates(w)
        assert {(r["provider"], r["model"]): (r["jobs"], r["failed"]) for r in found} == expected
        assert any(failed for _jobs, failed in expected.values())


# --- LLM usage (calls made of OpenTelemetry spans) ----------------------------------------------


@pytest.fixture
def calls_over_hours(db):
    """Eight traced jobs 40 minutes apart from 09:00, each with an LLM call of gpt-4o or
    gpt-4o-mini and one of a model without a known price."""
    from tests.otlp_spans import ROOT_ID, llm_span, root, sid, store_spans

    for i in range(8):
        at = i * 40 * 60_000
        spans = [
            root(start_ms=at, end_ms=at + 900),
            llm_span(sid(2), ROOT_ID, "gpt-4o" if i % 2 else "gpt-4o-mini", at + 10),
            llm_span(sid(3), ROOT_ID, "house-model", at + 20),
        ]
        for span in spans:
            span.trace_id = bytes([i + 1]) * 16
        store_spans(*spans)


@pytest.mark.parametrize(
    ("start", "end", "bucket", "filters"),
    [
        (0, 6, "hour", {}),
        (0.5, 5.25, "hour", {}),
        (-23.5, 24, "day", {}),
        (0.5, 5.25, "hour", {"model": "gpt-4o"}),
        (0, 6, "hour", {"provider": "openai"}),
    ],
)
def test_llm_usage_from_the_rollup_equals_the_calls(calls_over_hours, start, end, bucket, filters):
    from jobs.dashboard import llm_usage

    w = window(start, end, bucket, **filters)
    expected = llm_usage._from_calls(w)
    assert {row["model"] for row in expected} >= {"gpt-4o"}
    # Partial and dirty hours raw, the rest from the rollup's LLM rows: the same rows.
    assert llm_usage.usage_rows(w, raw_plan(w)) == expected
    rollup.refresh_pending()
    plan = w.plan()
    assert plan.rollup and DashboardRollup.objects.filter(kind="llm").exists()
    assert llm_usage.usage_rows(w, plan) == expected
    assert llm_usage.panels(w, plan) == llm_usage.panels(w, raw_plan(w))
    unpriced = [row for row in expected if row["model"] == "house-model"]
    assert all(row["cost"] is None for row in unpriced)
    assert all(row["cost"] for row in expected if row["model"] == "gpt-4o")


def test_a_late_call_dirties_its_jobs_start_hour(calls_over_hours):
    from jobs.dashboard import llm_usage
    from tests.otlp_spans import llm_span, root, sid, store_spans

    rollup.refresh_pending()
    w = window(0, 6)
    before = llm_usage.usage_rows(w, w.plan())
    # The first job's trace gets one more call, exported later: its start hour is recomputed.
    late = llm_span(sid(7), bytes.fromhex("eee19b7ec3c1b174"), "gpt-4o", 500)
    late_root = root(start_ms=0, end_ms=900)
    for span in (late, late_root):
        span.trace_id = bytes([1]) * 16
    store_spans(late_root, late)
    assert BASE_TS in rollup.dirty_hours()
    after = llm_usage.usage_rows(w, w.plan())
    assert after == llm_usage._from_calls(w) != before


@pytest.mark.django_db(transaction=True)
def test_the_migration_recomputes_the_hours_of_jobs_with_llm_calls():
    """Rollups made before they held LLM rows: migration 0020 marks the start hours of jobs
    with LLM calls dirty (and only those), so the LLM panels read them raw until refreshed."""
    from django.db.migrations.executor import MigrationExecutor

    before = [("jobs", "0019_rollup_jobs_by_status_and_provider_index")]
    after = [("jobs", "0020_rollup_llm_and_day_rows_escalation_indexes")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    job_model, call_model = old.get_model("jobs", "Job"), old.get_model("jobs", "Call")
    for n, (hour, kind) in enumerate(((1, "llm"), (1, "llm"), (2, "tool"), (3, "llm"))):
        started = BASE_TS + timedelta(hours=hour, minutes=10 * n)
        job = job_model.objects.create(job_id=f"m{n}", started_at=started)
        call_model.objects.create(
            job=job,
            position=0,
            span_id=f"{n:016x}",
            kind=kind,
            name="chat",
            status="ok",
            started_at=started,
            finished_at=started,
            duration_ms=1.0,
        )
    try:
        MigrationExecutor(connection).migrate(after)
        hours = [BASE_TS + timedelta(hours=3), BASE_TS + timedelta(hours=1)]
        assert rollup.dirty_hours() == hours
    finally:
        MigrationExecutor(connection).migrate(latest)


@pytest.mark.django_db(transaction=True)
def test_histograms_stored_as_json_text_read_back_as_they_were():
    """Migration 0023 turns the stored jsonb histograms into JSON text; the field reads them
    back unchanged, and dumpdata / loaddata carry them as JSON."""
    from django.core import serializers
    from django.db.migrations.executor import MigrationExecutor

    histogram = {"b": [3, 180, 181, 400], "n": [1, 7, 2, 1]}
    before = [("jobs", "0022_planner_prev_hour")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("jobs", "DashboardRollup")
        old.objects.create(hour=BASE_TS, kind="duration", dimension="n1", histogram=histogram)
        old.objects.create(hour=BASE_TS, kind="segment", dimension="ok", steps=2)
    finally:
        MigrationExecutor(connection).migrate(latest)
    rows = DashboardRollup.objects.order_by("kind")
    assert [row.histogram for row in rows] == [histogram, None]
    dumped = serializers.serialize("json", rows)
    assert json.loads(dumped)[0]["fields"]["histogram"] == histogram
    DashboardRollup.objects.all().delete()
    for loaded in serializers.deserialize("json", dumped):
        loaded.save()
    assert [row.histogram for row in DashboardRollup.objects.order_by("kind")] == [histogram, None]
