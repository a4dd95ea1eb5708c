"""The planner panels' pre-aggregates (jobs.dashboard.planner_rollup): the panel's rows equal
``alerts.planner_activity``'s for any window, bucket and filter, whatever hours are dirty,
refreshed or compiled into days; ingest, retention and purge mark the hours of the events they
store, delete or rewrite; the migration fills the tables for data stored before it."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.contract import bodies
from jobs.dashboard import charts, planner_rollup, rollup
from jobs.dashboard.window import Window
from jobs.escalations import alerts
from jobs.ingest import database, purge, retention
from jobs.ingest.store import store_batch
from jobs.models import (
    DashboardDirtyHour,
    DashboardRollup,
    Event,
    Job,
    PlannerCount,
    PlannerJobHour,
    Step,
)
from tests.factories import BASE_TS, event

pytestmark = pytest.mark.django_db

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
MIDNIGHT = BASE_TS.replace(hour=0)  # BASE_TS is 09:00 UTC
OPENAI = {"provider": "openai", "model": "gpt-4.1"}
ANTHROPIC = {"provider": "anthropic", "model": "claude-x"}
SUBJECTS = (OPENAI, ANTHROPIC, {"provider": "openai", "model": "gpt-4.1-mini"})
TYPES = ("job_started", alerts.PARSE_INVALID, alerts.DEGRADED)

HYPOTHESIS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def at(moment: datetime) -> float:
    return (moment - BASE_TS).total_seconds()


def planner_event(type_: str, job_id: str, moment: datetime, event_id: str, **payload) -> dict:
    return event(type_, job_id, at(moment), event_id=event_id, **payload)


def store_at(items: list[dict], received_at: datetime | None = None):
    batch = bodies.parse_items(items, max_events=10_000)
    assert not batch.errors, batch.errors
    return store_batch(batch, received_at=received_at)


def raw(start, end, bucket, provider="", model="") -> list[dict]:
    """The reference: the aggregate over Event rows the panel used to run."""
    rows = alerts.planner_activity(start, end, provider=provider, model=model, bucket=bucket)
    return [dict(row) for row in rows]


def panel_rows(start, end, bucket, provider="", model="", refresh_hours=0) -> list[dict]:
    plan = rollup.plan(start, end, refresh_hours)
    return planner_rollup.activity(plan.rollup, plan.raw, bucket, provider, model)


def assert_same_as_raw(start, end, bucket, provider="", model="", refresh_hours=0):
    expected = raw(start, end, bucket, provider, model)
    assert panel_rows(start, end, bucket, provider, model, refresh_hours) == expected


def assert_linked() -> None:
    """Every membership row's prev_hour is its job's (and provider/model's) previous row's."""
    rows = PlannerJobHour.objects.values_list("job_id", "provider", "model", "hour", "prev_hour")
    previous: dict[tuple, datetime] = {}
    for job_id, provider, model, hour, prev_hour in sorted(rows):
        assert prev_hour == previous.get((job_id, provider, model)), (job_id, hour)
        previous[job_id, provider, model] = hour


# --- parity, drawn ----------------------------------------------------------------------------

# Event times over three days from midnight, often right at an hour's or a day's edge.
EDGES = (0, 1, 1799, 3599)
moments = st.builds(
    lambda hour, second: MIDNIGHT + timedelta(hours=hour, seconds=second),
    st.integers(0, 71),
    st.one_of(st.sampled_from(EDGES), st.integers(0, 3599)),
)
payloads = st.one_of(
    st.sampled_from(SUBJECTS),
    # Not counted: no provider, or no model.
    st.just({}),
    st.just({"provider": "openai"}),
)
planner_items = st.tuples(
    st.sampled_from([f"j{i}" for i in range(6)]),
    st.sampled_from((*TYPES, "node_started")),
    moments,
    payloads,
)
windows = st.tuples(
    st.integers(-6, 80),  # start, hours after midnight
    st.sampled_from([0, 0, 1, 15, 30, 45]),  # minutes past the hour
    st.sampled_from([HOUR, 24 * HOUR, 7 * DAY, 26 * HOUR, 50 * HOUR + timedelta(minutes=20)]),
    st.sampled_from(["hour", "day"]),
    st.sampled_from([{}, {"provider": "openai"}, {"model": "claude-x"}, OPENAI]),
    st.integers(0, 3),  # dirty hours the read may refresh first
)


def as_items(drawn: list[tuple], prefix: str) -> list[dict]:
    items = []
    for n, (job_id, type_, moment, payload) in enumerate(drawn):
        extra = {"node_id": "n1"} if type_ == "node_started" else {}
        items.append(planner_event(type_, job_id, moment, f"{prefix}{n}", **payload, **extra))
    return items


def clear() -> None:
    for model in (Event, Step, Job, DashboardDirtyHour, DashboardRollup):
        model.objects.all().delete()
    planner_rollup.delete_all()


@HYPOTHESIS
@given(
    first=st.lists(planner_items, min_size=1, max_size=25),
    late=st.lists(planner_items, max_size=8),
    refreshed=st.booleans(),
    refresh_some=st.integers(0, 4),
    drawn_windows=st.lists(windows, min_size=1, max_size=4),
)
def test_panel_rows_equal_the_raw_aggregate(
    db, first, late, refreshed, refresh_some, drawn_windows
):
    clear()
    store_at(as_items(first, "a"))
    if refreshed:
        rollup.refresh_pending()  # every hour clean, the past days compiled
    # Late events (some into compiled days) mark their hours dirty; some of those are
    # refreshed, which deletes their days' rows; the others are read raw.
    store_at(as_items(late, "b"))
    rollup.refresh(MIDNIGHT, MIDNIGHT + 3 * DAY, limit=refresh_some)
    for start_hour, minutes, span, bucket, filters, refresh_hours in drawn_windows:
        start = MIDNIGHT + timedelta(hours=start_hour, minutes=minutes)
        assert_same_as_raw(start, start + span, bucket, **filters, refresh_hours=refresh_hours)
    assert_linked()


# --- parity, by example -----------------------------------------------------------------------


@pytest.fixture
def planner_days(db):
    """Jobs over three days from midnight, some with events in several hours and days."""
    items = []
    for i in range(36):
        job_id, started = f"p{i}", MIDNIGHT + timedelta(hours=2 * i, minutes=50)
        subject = SUBJECTS[i % 3]
        items.append(planner_event("job_started", job_id, started, f"{job_id}-s", **subject))
        if i % 2:
            # The planner fails 20 minutes later: the next hour.
            later = started + timedelta(minutes=20)
            items.append(
                planner_event(alerts.PARSE_INVALID, job_id, later, f"{job_id}-p", **subject)
            )
        if i % 5 == 0:
            # Degraded the next day, at midnight's edge for some.
            later = started + timedelta(hours=23, minutes=10 - i % 3)
            items.append(planner_event(alerts.DEGRADED, job_id, later, f"{job_id}-d", **subject))
    # Received after the last of them: on PostgreSQL, in one day partition retention can drop.
    store_at(items, received_at=MIDNIGHT + 4 * DAY)


def test_clean_hours_and_compiled_days_are_read_from_the_pre_aggregates(planner_days):
    rollup.refresh_pending()
    assert not DashboardDirtyHour.objects.exists()
    days = PlannerCount.objects.filter(span=PlannerCount.Span.DAY)
    assert sorted(set(days.values_list("start", flat=True))) == [
        MIDNIGHT + d * DAY for d in range(4)
    ]
    # Make the members of a compiled day wrong: a compiled day must be read from its row.
    PlannerJobHour.objects.filter(hour__gte=MIDNIGHT, hour__lt=MIDNIGHT + DAY).update(degraded=99)
    week = (MIDNIGHT - 2 * DAY + 7 * HOUR, MIDNIGHT + 5 * DAY + 7 * HOUR)
    assert_same_as_raw(*week, "day")
    assert_same_as_raw(MIDNIGHT + 30 * HOUR + timedelta(minutes=5), MIDNIGHT + 54 * HOUR, "hour")
    assert_same_as_raw(MIDNIGHT + 30 * HOUR, MIDNIGHT + 54 * HOUR, "hour", provider="openai")


def test_a_job_in_clean_and_raw_hours_of_a_day_counts_once(planner_days):
    rollup.refresh_pending()
    # p1 started 02:50 and failed 03:10: with the window from 02:45, its start is read raw,
    # its parse failure from the membership rows of 03:00; the day is not whole.
    start = MIDNIGHT + timedelta(hours=2, minutes=45)
    rows = panel_rows(start, MIDNIGHT + 20 * HOUR, "day", provider="anthropic")
    assert rows == raw(start, MIDNIGHT + 20 * HOUR, "day", provider="anthropic")
    assert rows[0]["parse_invalid"] >= 1


def test_a_run_of_clean_hours_counts_each_job_by_its_first_row(planner_days):
    rollup.refresh_pending()
    assert_linked()
    # Jobs with events in two hours of the day: p1 (02:50, 03:10), p3 (06:50, 07:10), ...
    start, end = MIDNIGHT + timedelta(hours=1, minutes=30), MIDNIGHT + 20 * HOUR
    assert_same_as_raw(start, end, "day")
    # The run's jobs are counted by prev_hour, not by gathering job ids: unlinked, every row
    # counts, and the jobs in two hours count twice.
    PlannerJobHour.objects.update(prev_hour=None)
    doubled = {row["provider"]: row["jobs"] for row in panel_rows(start, end, "day")}
    expected = {row["provider"]: row["jobs"] for row in raw(start, end, "day")}
    assert doubled != expected
    assert all(doubled[provider] >= jobs for provider, jobs in expected.items())


def test_a_row_gone_from_a_recomputed_hour_relinks_the_jobs_later_rows(db):
    moments = [MIDNIGHT + timedelta(hours=hour, minutes=10) for hour in (9, 14, 16)]
    store_at(
        [
            planner_event(alerts.PARSE_INVALID, "j1", moment, f"p{n}", **OPENAI)
            for n, moment in enumerate(moments)
        ]
    )
    rollup.refresh_pending()
    # The 09:00 event goes (as retention or a purge can take a job's events out of an hour):
    # the 14:00 row's previous row is gone, though nothing of the job is inserted at 09:00.
    Event.objects.filter(event_id="p0").delete()
    DashboardDirtyHour.objects.mark([moments[0]])
    rollup.refresh_pending()
    assert_linked()
    assert PlannerJobHour.objects.get(hour=MIDNIGHT + 14 * HOUR).prev_hour is None
    assert_same_as_raw(MIDNIGHT + 8 * HOUR, MIDNIGHT + 20 * HOUR, "day")


def test_dirty_hours_are_read_raw_until_refreshed(planner_days):
    rollup.refresh_pending()
    late = MIDNIGHT + timedelta(hours=5, minutes=30)
    store_at([planner_event(alerts.DEGRADED, "p0", late, "late", **OPENAI)])
    # The late event's hour, and (the step rollup's) the job's start hour.
    assert set(rollup.dirty_hours()) == {MIDNIGHT + 5 * HOUR, MIDNIGHT}
    # The day's rows stay until the hour is recomputed; the day is not whole-clean meanwhile.
    assert PlannerCount.objects.filter(span="day", start=MIDNIGHT).exists()
    week = (MIDNIGHT - 3 * DAY, MIDNIGHT + 4 * DAY)
    assert_same_as_raw(*week, "day", refresh_hours=0)
    assert_same_as_raw(MIDNIGHT, MIDNIGHT + DAY, "hour", refresh_hours=0)
    assert_same_as_raw(*week, "day", refresh_hours=2)  # recomputes both
    assert not DashboardDirtyHour.objects.exists()
    assert not PlannerCount.objects.filter(span="day", start=MIDNIGHT).exists()
    assert_same_as_raw(*week, "day")
    rollup.compile_days()
    assert PlannerCount.objects.filter(span="day", start=MIDNIGHT).exists()
    assert_same_as_raw(*week, "day")


def test_the_chart_reads_the_same_numbers_as_from_events(planner_days):
    rollup.refresh_pending()
    for bucket, span in (("day", 7 * DAY), ("hour", DAY)):
        w = Window("custom", MIDNIGHT + timedelta(hours=20, minutes=7), MIDNIGHT + span, bucket)
        everything_raw = rollup.Plan((), ((w.start, w.end),))
        assert w.plan().rollup
        assert charts.planner(w) == charts.planner(w, everything_raw)
        counts, _rate = charts.planner(w)
        assert counts["data"]


def test_rebuild_equals_incremental_refresh(planner_days):
    def stored():
        members = PlannerJobHour.objects.values_list(
            "hour", "provider", "model", "job_id", "parse_invalid", "degraded", "prev_hour"
        )
        counts = PlannerCount.objects.values_list(
            "span", "start", "provider", "model", "jobs", "parse_invalid", "degraded"
        )
        return sorted(members), sorted(counts)

    rollup.refresh_pending()
    incremental = stored()
    assert incremental[0] and incremental[1]
    rollup.rebuild()
    assert stored() == incremental


# --- marks --------------------------------------------------------------------------------------


def test_ingest_marks_the_hours_of_new_planner_events(db):
    started = MIDNIGHT + timedelta(hours=9, minutes=10)
    store_at([planner_event("job_started", "j1", started, "s", **OPENAI)])
    rollup.refresh_pending()
    # A planner event hours after the job started: its own hour is marked, not only the
    # job's start hour.
    later = MIDNIGHT + timedelta(hours=13, minutes=30)
    store_at([planner_event(alerts.PARSE_INVALID, "j1", later, "p", **OPENAI)])
    assert set(rollup.dirty_hours()) == {MIDNIGHT + 9 * HOUR, MIDNIGHT + 13 * HOUR}
    rollup.refresh_pending()
    assert PlannerJobHour.objects.filter(hour=MIDNIGHT + 13 * HOUR, job_id="j1").exists()
    assert_same_as_raw(MIDNIGHT, MIDNIGHT + DAY, "hour")


def test_retention_keeps_the_figures_equal_to_the_events(planner_days):
    rollup.refresh_pending()
    expired = ["p0", "p5", "p10"]  # degraded the next day: events in two days
    Job.objects.filter(job_id__in=expired).update(last_received_at=MIDNIGHT)
    now = MIDNIGHT + 13 * DAY
    Job.objects.exclude(job_id__in=expired).update(last_received_at=now)
    result = retention.apply_retention(7, now=now)
    assert result.jobs == 3
    assert result.days == (1 if connection.vendor == "postgresql" else 0)
    assert not Event.objects.filter(job_id__in=expired).exists()
    week = (MIDNIGHT - DAY, MIDNIGHT + 6 * DAY)
    for refresh_hours in (0, 100):
        assert_same_as_raw(*week, "day", refresh_hours=refresh_hours)
        assert_same_as_raw(MIDNIGHT + 20 * HOUR, MIDNIGHT + 44 * HOUR, "hour")
    assert_linked()
    assert not PlannerJobHour.objects.filter(job_id__in=expired).exists()


def test_purge_marks_the_hours_of_the_events_it_scrubs(db):
    started = MIDNIGHT + timedelta(hours=9, minutes=10)
    leaked = {"provider": "openai", "model": "codename-zeta-internal"}
    store_at(
        [
            planner_event("job_started", "j1", started, "s", **OPENAI),
            planner_event(alerts.PARSE_INVALID, "j1", started + 5 * HOUR, "p", **leaked),
        ]
    )
    rollup.refresh_pending()
    purge.purge_text("codename-zeta", dry_run=False)
    # The scrubbed event's hour (14:00), besides the replayed job's start hour.
    assert set(rollup.dirty_hours()) == {MIDNIGHT + 9 * HOUR, MIDNIGHT + 14 * HOUR}
    for refresh_hours in (0, 10):
        assert_same_as_raw(MIDNIGHT, MIDNIGHT + DAY, "hour", refresh_hours=refresh_hours)
    assert_linked()
    assert not PlannerJobHour.objects.filter(model__contains="zeta").exists()


# --- the migration ----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_fills_the_tables_for_stored_events():
    from django.db.migrations.executor import MigrationExecutor

    before = [("jobs", "0020_rollup_llm_and_day_rows_escalation_indexes")]
    after = [("jobs", "0022_planner_prev_hour")]  # 0022 links the rows 0021 fills
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("jobs", "Event")
        database.ensure_partitions([datetime.now(UTC).date()])
        rows = []
        for i in range(12):
            moment = MIDNIGHT + timedelta(hours=5 * i, minutes=59)
            subject = SUBJECTS[i % 3]
            rows.append(
                old(
                    job_id=f"m{i % 5}",
                    event_id=f"s{i}",
                    type="job_started",
                    ts=moment,
                    payload=subject,
                )
            )
            if i % 2:
                rows.append(
                    old(
                        job_id=f"m{i % 5}",
                        event_id=f"d{i}",
                        type=alerts.DEGRADED,
                        ts=moment + HOUR,
                        payload=subject,
                    )
                )
        old.objects.bulk_create(rows)
        MigrationExecutor(connection).migrate(after)
        assert not DashboardDirtyHour.objects.exists()
        assert PlannerCount.objects.filter(span="day").count() > 0
        for start, end, bucket in (
            (MIDNIGHT - DAY, MIDNIGHT + 6 * DAY, "day"),
            (MIDNIGHT + timedelta(hours=3, minutes=30), MIDNIGHT + 40 * HOUR, "day"),
            (MIDNIGHT + 7 * HOUR, MIDNIGHT + 31 * HOUR, "hour"),
        ):
            # Read only from the tables the migration filled (nothing is dirty).
            assert rollup.plan(start, end).rollup
            assert_same_as_raw(start, end, bucket)
        filled = sorted(
            PlannerJobHour.objects.values_list(
                "hour", "provider", "model", "job_id", "parse_invalid", "degraded", "prev_hour"
            )
        )
        # The planner's tables rebuilt from events (the whole rollup's rebuild would read
        # tables of later migrations than this schema's).
        planner_rollup.delete_all()
        planner_rollup.insert(None)
        rebuilt = sorted(
            PlannerJobHour.objects.values_list(
                "hour", "provider", "model", "job_id", "parse_invalid", "degraded", "prev_hour"
            )
        )
        assert filled == rebuilt
    finally:
        MigrationExecutor(connection).migrate(latest)
        Event.objects.all().delete()
        planner_rollup.delete_all()
        DashboardRollup.objects.all().delete()


@pytest.mark.speed_guard
@pytest.mark.postgres
@pytest.mark.parametrize(
    "events",
    [
        lambda: Event.objects.filter(ts__gte=BASE_TS).planner(),
        lambda: Event.objects.filter(ts__gte=BASE_TS).planner("openai", "gpt-4.1"),
        lambda: Event.objects.filter(ts__gte=BASE_TS, type=alerts.DEGRADED),
    ],
)
def test_planner_event_lookups_can_use_the_partial_type_index(events):
    """The (type, ts) event index holds job_started and planner events only (migration 0028):
    the planner panels' and alerts' conditions must imply that for the planner to use it."""
    sql, params = events().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "type_ts_idx" in plan, plan
