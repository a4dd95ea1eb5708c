"""Incremental projection (docs/architecture.md): new events that sort after a job's snapshot are
folded onto it, out-of-order ones replay the job, and the rows are the same either way."""

import gc
from datetime import timedelta
from unittest import mock

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.contract import bodies
from jobs.ingest import counters, failure_groups, parity, projector
from jobs.ingest.store import store_batch
from jobs.models import (
    Counter,
    Escalation,
    EscalationEntry,
    Event,
    FailureGroup,
    FailureGroupHour,
    FailureGroupJob,
    Job,
    ProjectionMark,
    Step,
)
from jobs.replay import walk
from tests.factories import BASE_TS, event, finished, started, store
from tests.strategies import job_events

pytestmark = pytest.mark.django_db

HYPOTHESIS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def projections(path: str) -> int:
    series = Counter.objects.filter(
        name=counters.PROJECTIONS, labels=counters.labels_key(path=path)
    ).first()
    return int(series.value) if series else 0


def step_ids(job_id: str) -> dict[tuple, int]:
    return {(s.node_id, s.attempt): s.pk for s in Step.objects.filter(job__job_id=job_id)}


def test_events_after_the_snapshot_are_folded_incrementally():
    store([event("job_started", at=0), started("n1", at=1), finished("n1", at=2)])
    assert (projections("full"), projections("incremental")) == (1, 0)
    before = step_ids("j1")
    store([started("n2", at=3)])
    store([finished("n2", "retryable_failure", at=4, error_type="network")])
    assert (projections("full"), projections("incremental")) == (1, 2)
    # Only changed steps were written: n1's row is the same row.
    assert step_ids("j1")[("n1", 1)] == before[("n1", 1)]
    job = Job.objects.get(job_id="j1")
    assert (job.status, job.step_count, job.failing_node_id) == ("paused:transient", 2, "n2")
    assert parity.differences("j1") == []


def test_event_sorting_before_the_snapshot_replays_the_whole_job():
    store([finished("n1", at=5), finished("n2", at=6)])
    store([event("cancel_requested", at=4, epoch=2)])
    assert (projections("full"), projections("incremental")) == (2, 0)
    assert Job.objects.get().completed_node_ids == []
    assert parity.differences("j1") == []


def test_snapshot_of_another_fold_version_replays_the_whole_job():
    store([finished("n1", at=1)])
    Job.objects.update(fold={**Job.objects.get().fold, "version": f"{walk.FOLD_MEANING - 1}.0"})
    store([finished("n2", at=2)])
    assert (projections("full"), projections("incremental")) == (2, 0)
    assert Job.objects.get().fold["version"] == walk.FOLD_VERSION
    assert parity.differences("j1") == []


def test_long_job_streamed_one_step_per_batch_stays_exact():
    for index in range(60):
        store(
            [
                started(f"n{index}", at=2 * index),
                finished(
                    f"n{index}", "success" if index % 7 else "retryable_failure", at=2 * index + 1
                ),
            ]
        )
    assert projections("incremental") == 59
    assert Job.objects.get().step_count == 60
    assert parity.differences("j1") == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_live_batch_updates_the_job_row_once():
    """A live batch rewrites its Job row once. Each batch commits, as an ingest request does, so
    the row's earlier versions can be pruned and its page keeps room: inside one test
    transaction they cannot, and whether five versions fit then depended on what earlier tests
    left on the page."""

    def counts() -> tuple[int, int]:
        # The backend's counts not yet reported (they can span transactions: read differences).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_stat_get_xact_tuples_updated('jobs_job'::regclass),"
                " pg_stat_get_xact_tuples_hot_updated('jobs_job'::regclass)"
            )
            return cursor.fetchone()

    def job_updates(events: list[dict]) -> tuple[int, int]:
        """(updates, HOT updates) of the job table made by storing the events, in their own
        transaction."""
        with transaction.atomic():
            before = counts()
            store(events)
            after = counts()
        return (after[0] - before[0], after[1] - before[1])

    with connection.cursor() as cursor:
        # Rows earlier tests inserted and rolled back fill pages that nothing prunes (no update
        # marked them prunable, and autovacuum may be off): the new row must find room.
        cursor.execute("VACUUM jobs_job")
    store([event("job_started", at=0, workflow="w"), started("n1", at=1)])
    batches = [
        [finished(f"n{index}", at=2 * index), started(f"n{index + 1}", at=2 * index + 1)]
        for index in range(1, 6)
    ]
    # One update of the row per batch. It is no longer a HOT update: the list's sort indexes
    # (steps, duration, attempts, failures) hold columns every live batch changes.
    assert [job_updates(batch)[0] for batch in batches] == [1] * 5
    assert Job.objects.get().step_count == 6


def test_json_text_columns_keep_integers_past_64_bits():
    """The Job and Step columns kept as JSON text read back what the stdlib's JSON holds and
    orjson does not (an integer past 64 bits), on the full and the incremental path."""
    big, negative = {"rows": 2**70 + 1, "city": "Zürich"}, {"total": -(2**65) - 1}
    store(
        [event("job_started", at=0), started("n1", at=1), finished("n1", at=2, payload_results=big)]
    )
    store([started("n2", at=3), finished("n2", at=4, payload_results=negative)])
    assert projections("incremental") == 1
    assert {s.node_id: s.payload_results for s in Step.objects.all()} == {"n1": big, "n2": negative}
    assert Job.objects.get().payload_results == {**big, **negative}
    assert parity.differences("j1") == []


@pytest.mark.django_db(transaction=True)
def test_a_job_survives_migrating_back_before_0024_and_forward_and_folds_on():
    """Migration 0024 turned the Job and Step JSON columns read whole from jsonb into JSON text;
    0027 moved a job's completed nodes from a list on the job onto the steps that completed
    them. A job's rows go back through both and forward again unchanged. 0033 (failure records)
    clears its snapshot, so its next events replay it whole and write its failure records."""
    before = [("jobs", "0023_rollup_histogram_as_text")]
    results = {"rows": 3, "nested": {"ok": [1, "two", None]}}
    store([event("job_started", at=0), started("n1", at=1)])
    # n0 completes with its first attempt (the second succeeds again); n3 with its second.
    store(
        [
            finished("n1", at=2, payload_results=results),
            finished("n3", "retryable_failure", at=2.5),
            finished("n0", at=3),
            finished("n0", at=3.2, attempt=2),
            finished("n3", at=3.5, attempt=2),
            started("n2", at=4),
        ]
    )
    snapshot = Job.objects.get().fold
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    before_records = [("jobs", "0032_job_workflow_newest_index")]
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("jobs", "Job")
        assert old.objects.values_list("completed_node_ids", "fold").get() == (
            ["n1", "n0", "n3"],
            snapshot,
        )
        MigrationExecutor(connection).migrate(before_records)
        kept = executor.loader.project_state(before_records).apps.get_model("jobs", "Job")
        assert kept.objects.values_list("payload_results", "fold").get() == (results, snapshot)
    finally:
        MigrationExecutor(connection).migrate(latest)
    job = Job.objects.get()
    assert (job.fold, job.payload_results, job.completed_node_ids) == (
        {},
        results,
        ["n1", "n0", "n3"],
    )
    completing = Step.objects.exclude(completes=None).order_by("completes")
    assert list(completing.values_list("node_id", "attempt")) == [("n1", 1), ("n0", 1), ("n3", 2)]
    assert Step.objects.get(node_id="n1").payload_results == results
    full = projections("full")
    store([finished("n2", at=5)])
    assert projections("full") == full + 1
    assert Job.objects.get().completed_node_ids == ["n1", "n0", "n3", "n2"]
    assert parity.differences("j1") == []


# --- the same events through every path give the same rows -------------------------------------


def ordered_items(items: list[dict]) -> list[dict]:
    """Items sorted as replay orders them (in-order delivery of a live producer)."""
    batch = bodies.parse_items(items, max_events=1000)
    order = sorted(range(len(batch.events)), key=lambda i: walk.event_key(batch.events[i][1]))
    return [items[batch.events[i][0]] for i in order]


def deliver(items: list[dict], sizes: list[int]) -> None:
    start, index = 0, 0
    while start < len(items):
        size = sizes[index % len(sizes)]
        store_batch(bodies.parse_items(items[start : start + size], max_events=1000))
        start, index = start + size, index + 1


def projection_rows() -> tuple:
    jobs = sorted(
        Job.objects.values(
            *[
                f.attname
                for f in Job._meta.concrete_fields
                if f.attname not in ("id", "last_received_at")
            ]
        ),
        key=lambda row: row["job_id"],
    )
    steps = sorted(
        Step.objects.values(
            "job__job_id",
            "failure_group__fingerprint",
            *[
                f.attname
                for f in Step._meta.concrete_fields
                if f.attname not in ("id", "job_id", "failure_group_id")
            ],
        ),
        key=lambda row: (row["job__job_id"], row["position"]),
    )
    live = sorted(
        Escalation.objects.exclude(status="resolved").values_list(
            "job__job_id", "kind", "node_id", "severity", "status"
        )
    )
    return jobs, steps, live, group_rows()


def group_rows() -> tuple:
    """Failure groups as counts (first/last seen are history: a failure that a late event
    turned stale was still seen)."""
    groups = sorted(
        FailureGroup.objects.filter(job_count__gt=0).values_list(
            "fingerprint", "job_count", "step_count"
        )
    )
    group_jobs = sorted(
        FailureGroupJob.objects.values_list(
            "group__fingerprint", "job__job_id", "step_count", "provider", "model"
        )
    )
    hours = sorted(
        FailureGroupHour.objects.filter(step_count__gt=0).values_list(
            "group__fingerprint", "hour", "step_count"
        )
    )
    return groups, group_jobs, hours


def clear() -> None:
    for model in (EscalationEntry, Escalation, Event, Step, Job, FailureGroup):
        model.objects.all().delete()


@HYPOTHESIS
@given(
    data=st.data(),
    jobs=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
)
def test_incremental_shuffled_and_rebuilt_rows_are_identical(db, data, jobs):
    items = [item for job_id in jobs for item in data.draw(job_events(job_id, max_size=16))]
    sizes = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))

    clear()
    deliver(ordered_items(items), sizes)
    in_order = projection_rows()
    for job_id in jobs:
        assert parity.differences(job_id) == []
    assert failure_groups.differences() == []

    clear()
    deliver(data.draw(st.permutations(items)), sizes)
    shuffled = projection_rows()
    assert failure_groups.differences() == []

    call_command("rebuild_projections", stdout=None, stderr=None)
    rebuilt = projection_rows()
    assert failure_groups.differences() == []
    assert in_order == shuffled == rebuilt


def test_job_page_times_are_the_same_after_a_rebuild():
    store([finished("n1", at=1), finished("n1", "permanent_failure", at=2, attempt=2)])
    before = Job.objects.values("failed_at", "last_event_at").get()
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert Job.objects.values("failed_at", "last_event_at").get() == before
    assert before["failed_at"] == BASE_TS + timedelta(seconds=2)


@pytest.mark.parametrize("enabled", [True, False])
def test_a_batch_runs_without_the_cyclic_collector_and_leaves_it_as_it_found_it(
    monkeypatch, collector_states, enabled
):
    seen = collector_states(projector, "project_jobs")
    (gc.enable if enabled else gc.disable)()
    try:
        store([event("job_started", "gc1", 0), started("n1", "gc1", 1)])
        assert seen == [False] and gc.isenabled() is enabled
        monkeypatch.setattr(projector, "project_jobs", mock.Mock(side_effect=OSError("disk")))
        with pytest.raises(OSError):
            store([finished("n1", "success", "gc1", 2)])
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
    # The append committed, its fold rolled back: the job is dirty until a fold finishes it.
    assert Step.objects.get(job__job_id="gc1").result_type == ""
    assert list(ProjectionMark.objects.dirty().values_list("job_id", flat=True)) == ["gc1"]
    monkeypatch.undo()
    assert projector.project_dirty() == 1
    assert Step.objects.get(job__job_id="gc1").result_type == "success"
