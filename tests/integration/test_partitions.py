"""Events and steps laid out by day (docs/architecture.md; migration 0015).

A job's rows live in the day its first event arrived (``Job.partition_day``); on PostgreSQL that
day is a partition of ``jobs_event`` and ``jobs_step``, and retention drops whole days. The same
behaviour holds on SQLite, which partitions nothing: these tests run on both, and check the
partitions themselves where there are some.
"""

from datetime import UTC, date, datetime, timedelta

import pytest
from django.db import connection

from jobs.contract import bodies
from jobs.escalations import actions
from jobs.ingest import database, parity, retention
from jobs.ingest.store import store_batch
from jobs.models import Escalation, Event, Job, Step
from tests.factories import event, finished, started, user

pytestmark = pytest.mark.django_db

DAY1 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
POSTGRES = connection.vendor == "postgresql"


def store_at(items: list[dict], received_at: datetime):
    return store_batch(bodies.parse_items(items, max_events=1000), received_at=received_at)


def failing_job(job_id: str) -> list[dict]:
    """A job whose credentials expired: it opens an escalation for support."""
    return [
        event("job_started", job_id, 0, event_id=f"{job_id}-s"),
        started("n1", job_id, 1),
        finished("n1", "retryable_failure", job_id, 2, error_type="auth", reason="token expired"),
    ]


def days_of(job_id: str) -> tuple[set[date], set[date]]:
    events = set(Event.objects.filter(job_id=job_id).values_list("partition_day", flat=True))
    steps = set(Step.objects.filter(job__job_id=job_id).values_list("partition_day", flat=True))
    return events, steps


def test_a_job_keeps_the_day_its_first_event_arrived():
    store_at([event("job_started", "j1", 0), started("n1", "j1", 1)], DAY1)
    store_at([finished("n1", "success", "j1", 2)], DAY1 + timedelta(days=1, hours=3))
    job = Job.objects.get(job_id="j1")
    assert job.partition_day == DAY1.date()
    assert days_of("j1") == ({DAY1.date()}, {DAY1.date()})
    if POSTGRES:
        assert {DAY1.date(), DAY1.date() + timedelta(days=1)} <= set(database.partition_days())


def test_an_event_sent_again_on_a_later_day_is_a_duplicate():
    first = store_at([event("job_started", "j1", 0, event_id="e1")], DAY1)
    again = store_at([event("job_started", "j1", 0, event_id="e1")], DAY1 + timedelta(days=3))
    assert (first.stored, again.stored, again.duplicates) == (1, 0, 1)
    assert Event.objects.filter(job_id="j1").count() == 1


def test_stored_events_of_a_job_without_a_row_are_still_duplicates():
    """A batch does not look up the stored events of a job that has no Job row (events and Job
    rows commit together, so it has none); should such a job have some, its resend is still a
    duplicate (never an error), and the batch's other events are stored."""
    store_at([event("job_started", "j1", 0, event_id="e1")], DAY1)
    Job.objects.filter(job_id="j1").delete()
    again = store_at(
        [
            event("job_started", "j1", 0, event_id="e1"),
            event("node_started", "j1", 1, event_id="e2", node_id="n1"),
            event("job_started", "j2", 0, event_id="e1"),
        ],
        DAY1,
    )
    assert (again.stored, again.duplicates, again.errors) == (2, 1, [])
    assert sorted(Event.objects.values_list("job_id", "event_id")) == [
        ("j1", "e1"),
        ("j1", "e2"),
        ("j2", "e1"),
    ]


def test_an_event_id_sent_again_with_a_later_time_is_a_duplicate():
    """Events that all sort after a job's snapshot are not looked up (a stored one was folded,
    so it sorts before); an event id reused with other content can sort after, and is still a
    duplicate of the stored event, which stays as it was."""
    store_at([event("job_started", "j1", 0, event_id="e1"), started("n1", "j1", 1)], DAY1)
    again = store_at(
        [started("n2", "j1", 5), event("node_started", "j1", 6, event_id="e1", node_id="n3")],
        DAY1,
    )
    assert (again.stored, again.duplicates, again.errors) == (1, 1, [])
    assert Event.objects.get(job_id="j1", event_id="e1").type == "job_started"
    assert Job.objects.get(job_id="j1").step_count == 2
    assert parity.differences("j1") == []


@pytest.fixture
def support():
    return user("support", "support")


def test_retention_drops_whole_days_and_moves_the_jobs_it_keeps(support):
    store_at(failing_job("resolved"), DAY1)
    store_at(failing_job("open"), DAY1)  # an unresolved escalation keeps its job
    store_at([event("job_started", "busy", 0), started("n1", "busy", 1)], DAY1)
    store_at([event("job_started", "day2", 0)], DAY1 + timedelta(days=1))
    actions.resolve(Escalation.objects.get(job__job_id="resolved"), support, "fixed")
    now = DAY1 + timedelta(days=8, hours=1)
    # "busy" hears from its producer a week later: it is no longer old.
    store_at([finished("n1", "success", "busy", 2)], now - timedelta(hours=1))

    result = retention.apply_retention(7, now)

    assert set(Job.objects.values_list("job_id", flat=True)) == {"open", "busy"}
    assert (result.jobs, result.events) == (2, 4)
    assert not Event.objects.filter(job_id__in=["resolved", "day2"]).exists()
    for job_id, node_ids in {"open": ["n1"], "busy": ["n1"]}.items():
        assert list(Step.objects.filter(job__job_id=job_id).values_list("node_id", flat=True)) == (
            node_ids
        )
        assert parity.differences(job_id) == []
    if POSTGRES:
        today = now.date()
        # The cutoff's own day goes row by row: "day2" was deleted so.
        assert (result.days, result.moved) == (1, 2)
        assert days_of("open") == ({today}, {today})
        assert Job.objects.get(job_id="busy").partition_day == today
        assert DAY1.date() not in database.partition_days()
    assert Escalation.objects.filter(job__job_id="open", status="open").exists()


def test_a_moved_job_goes_on_where_it_was():
    store_at(failing_job("j1"), DAY1)
    now = DAY1 + timedelta(days=10)
    retention.apply_retention(7, now)  # kept: its escalation is open
    store_at([event("job_started", "j1", 0, event_id="j1-s")], now)  # sent again
    store_at([started("n2", "j1", 3), finished("n2", "success", "j1", 4)], now)
    assert Event.objects.filter(job_id="j1").count() == 5
    assert list(Step.objects.filter(job__job_id="j1").order_by("pk").values_list("node_id")) == [
        ("n1",),
        ("n2",),
    ]
    assert parity.differences("j1") == []


@pytest.mark.postgres  # partitions exist on PostgreSQL only
def test_partitions_are_created_once_and_for_every_partitioned_table():
    day = date(2031, 1, 5)
    database.ensure_partitions([day, day])
    database.ensure_partitions([day])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relname LIKE %s ORDER BY relname", ["%_p20310105"]
        )
        assert [name for (name,) in cursor.fetchall()] == [
            "jobs_event_p20310105",
            "jobs_step_p20310105",
        ]
    assert day in database.partition_days()
    database.drop_partitions(day)
    assert day not in database.partition_days()


@pytest.mark.postgres  # partitions exist on PostgreSQL only
def test_the_unique_keys_hold_inside_the_partitioned_tables():
    from django.db import IntegrityError, transaction

    store_at([event("job_started", "j1", 0, event_id="e1")], DAY1)
    row = Event.objects.get(job_id="j1")
    with pytest.raises(IntegrityError), transaction.atomic():
        Event.objects.create(
            type=row.type,
            job_id=row.job_id,
            event_id=row.event_id,
            ts=row.ts,
            payload={},
            received_at=row.received_at,
            partition_day=row.partition_day,
        )


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_stored_jobs_their_first_day_and_keeps_every_row():
    """An install upgraded across migration 0015 keeps its events and steps, now in the day
    its jobs started (on PostgreSQL: in that day's partitions)."""
    from django.db.migrations.executor import MigrationExecutor

    before = [("jobs", "0014_json_columns_read_with_orjson")]
    after = [("jobs", "0015_partition_events_and_steps_by_day")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    received = DAY1 + timedelta(days=1)
    job = old.get_model("jobs", "Job").objects.create(job_id="old", last_received_at=received)
    for n, at in enumerate([received, received + timedelta(days=2)]):
        old.get_model("jobs", "Event").objects.create(
            job_id="old", event_id=f"e{n}", type="job_started", ts=at, payload={}, received_at=at
        )
    old.get_model("jobs", "Step").objects.create(job=job, node_id="n1", attempt=1, position=0)
    try:
        MigrationExecutor(connection).migrate(after)
        with connection.cursor() as cursor:
            cursor.execute("SELECT partition_day FROM jobs_job")
            assert cursor.fetchall() == [(received.date(),)]
            for table, rows in {"jobs_event": 2, "jobs_step": 1}.items():
                cursor.execute(f"SELECT partition_day, count(*) FROM {table} GROUP BY 1")
                assert cursor.fetchall() == [(received.date(), rows)]
        if POSTGRES:
            assert received.date() in database.partition_days()
    finally:
        MigrationExecutor(connection).migrate(latest)


@pytest.mark.speed_guard
@pytest.mark.postgres
def test_rows_by_pairs_uses_the_unique_index_in_a_partition_without_statistics():
    """A new day's partition has no statistics until autovacuum gets to it: the pair lookups
    must still go by the (job, node, attempt) index, not read all of a long job's steps by its
    (job, position) index for each pair."""
    day = DAY1 + timedelta(days=400)
    steps = [
        item for n in range(300) for item in (started(f"n{n}", "long", n), finished(f"n{n}", at=n))
    ]
    store_at(steps, day)
    job = Job.objects.get(job_id="long")
    statements = []

    def capture(execute, sql, params, many, context):
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        database.rows_by_pairs(Step, ("job", "node_id"), [(job.pk, "n7")], day.date(), ["attempt"])
    [(sql, params)] = statements
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "node_id_attempt_partition_day_key" in plan, plan
    assert "position" not in plan, plan


def test_rows_by_pairs_reads_exactly_the_pairs_of_that_day():
    """Projection reads a live batch's steps pair by pair (``database.rows_by_pairs``): the
    rows of the asked (job, node) pairs in that day's partition, JSON columns decoded, and
    nothing of other nodes, other jobs or other days."""
    store_at([*failing_job("early"), started("n2", "early", 3)], DAY1)
    store_at(failing_job("late"), DAY1 + timedelta(days=1))
    early, late = (Job.objects.get(job_id=j) for j in ("early", "late"))

    rows = database.rows_by_pairs(
        Step,
        ("job", "node_id"),
        [(early.pk, "n1"), (late.pk, "n1"), (early.pk, "absent")],
        early.partition_day,
        ("attempt", "result_type", "marks"),
    )

    assert [row[:4] for row in rows] == [(early.pk, "n1", 1, "retryable_failure")]
    assert rows[0][4] == Step.objects.get(job=early, node_id="n1").marks
    assert isinstance(rows[0][4], dict) and rows[0][4]
