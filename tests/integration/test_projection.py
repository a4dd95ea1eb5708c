"""Projection: stored Job/Step/Escalation rows equal replay over the stored events, whatever the
batching (docs/architecture.md and docs/contract.md), rebuilds, escalation life cycle. The
import command's tests are in test_import_events.py, the repair budget's in
test_escalations_lifecycle.py."""

import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.contract import bodies
from jobs.escalations import actions
from jobs.ingest import parity, projection
from jobs.ingest.store import store_batch
from jobs.models import Escalation, EscalationEntry, Event, Job, Notification, Step
from jobs.replay import walk
from jobs.replay.state import JobState
from tests.factories import event, finished, started, store, user
from tests.strategies import job_events

pytestmark = pytest.mark.django_db

HYPOTHESIS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def replayed(job_id: str) -> JobState:
    return walk.build(projection.load_events([job_id])[job_id], projection.replay_config())


def job_values(job: Job) -> tuple:
    return (
        job.status,
        job.completed_node_ids,
        job.cursor_node,
        job.payload_results,
        job.last_validation_error,
        job.findings,
        job.started_at,
        job.finished_at,
        job.last_event_at,
        job.failing_node_id,
        job.event_count,
        job.step_count,
        job.planner_parse_invalid,
        job.planner_degraded,
        job.provider,
        job.plan_hash,
    )


def state_values(state: JobState) -> tuple:
    root = state.root_failure
    return (
        state.status.value,
        state.completed_node_ids,
        state.cursor_node,
        state.payload_results,
        state.last_validation_error,
        [f.as_dict() for f in state.findings],
        state.started_at,
        state.finished_at,
        state.last_event_at,
        root.node_id if root else "",
        state.event_count,
        len(state.steps),
        state.planner_parse_invalid,
        state.planner_degraded,
        state.attributes.get("provider", ""),
        state.attributes.get("plan_hash", ""),
    )


STEP_COLUMNS = (
    "node_id",
    "attempt",
    "position",
    "result_type",
    "segment",
    "reason",
    "ignored_stale",
    "compensated",
    "state",
    "epoch",
    "error_type",
    "failure_code",
    "continue_on_error",
    "payload_results",
    "started_event_id",
    "finished_event_id",
    "started_at",
    "finished_at",
)


def step_rows(job: Job) -> list[tuple]:
    return list(job.steps.order_by("position").values_list(*STEP_COLUMNS))


def step_values(state: JobState) -> list[tuple]:
    return [
        tuple(
            (s.result_type or "")
            if name == "result_type"
            else s.segment.value
            if name == "segment"
            else getattr(s, name)
            for name in STEP_COLUMNS
        )
        for s in state.steps
    ]


def escalation_set(job_id: str) -> set[tuple]:
    """The job's escalations that are not resolved. Delivery out of event order can open one
    whose rule, with every event in place, never held; it is then withdrawn (resolved by the
    system), never deleted, so only the unresolved set is the same however events arrive."""
    return set(
        Escalation.objects.filter(job__job_id=job_id)
        .exclude(status="resolved")
        .values_list("kind", "node_id", "severity", "status")
    )


def assert_resolved_ones_were_withdrawn(job_id: str, state: JobState) -> None:
    for escalation in Escalation.objects.filter(job__job_id=job_id, status="resolved"):
        assert (escalation.kind, escalation.node_id) not in state.triggered
        assert escalation.entries.filter(action="withdrawn", actor=None).exists()


def trigger_set(state: JobState) -> set[tuple]:
    first: dict[tuple, str] = {}
    for t in state.escalation_triggers:
        first.setdefault((t.kind, t.node_id), t.severity)
    return {(kind, node, severity, "open") for (kind, node), severity in first.items()}


def assert_parity(job_id: str) -> None:
    state = replayed(job_id)
    job = Job.objects.get(job_id=job_id)
    assert job_values(job) == state_values(state)
    assert step_rows(job) == step_values(state)
    assert escalation_set(job_id) == trigger_set(state)
    assert_resolved_ones_were_withdrawn(job_id, state)
    assert parity.differences(job_id) == []


def store_in_batches(items: list[dict], sizes: list[int]) -> None:
    start, index = 0, 0
    while start < len(items):
        size = sizes[index % len(sizes)] if sizes else len(items)
        store(items[start : start + size])
        start, index = start + size, index + 1


def clear() -> None:
    Event.objects.all().delete()
    Job.objects.all().delete()


# --- replay parity ----------------------------------------------------------------------------


@HYPOTHESIS
@given(
    data=st.data(),
    jobs=st.lists(st.sampled_from(["j1", "j2", "j3"]), min_size=1, max_size=3, unique=True),
)
def test_stored_rows_equal_replay_whatever_the_batching(db, data, jobs):
    clear()
    items = [item for job_id in jobs for item in data.draw(job_events(job_id))]
    shuffled = data.draw(st.permutations(items))
    sizes = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=5))
    store_in_batches(shuffled, sizes)
    for job_id in jobs:
        assert_parity(job_id)


@HYPOTHESIS
@given(data=st.data(), items=job_events("j1", min_size=2))
def test_same_escalations_in_one_batch_or_one_event_at_a_time(db, data, items):
    clear()
    store(items)
    one_batch = escalation_set("j1")
    clear()
    for item in data.draw(st.permutations(items)):
        store([item])
    assert escalation_set("j1") == one_batch


def test_event_older_than_the_jobs_latest_replays_the_whole_job():
    store(
        [
            finished("n1", "retryable_failure", at=5, error_type="network"),
            finished("n1", at=6, attempt=2),
        ]
    )
    store([event("cancel_requested", at=4, epoch=3)])
    job = Job.objects.get(job_id="j1")
    assert (job.status, job.completed_node_ids) == ("cancelling", [])
    assert list(job.steps.values_list("ignored_stale", flat=True)) == [True, True]
    assert_parity("j1")


def test_late_cancel_withdraws_an_escalation_instead_of_deleting_it(email_channel):
    store([finished("n1", "permanent_failure", at=5, error_type="auth")])
    assert escalation_set("j1") == {("user_action", "n1", "medium", "open")}
    store([event("cancel_requested", at=4, epoch=2)])
    escalation = Escalation.objects.get()
    assert escalation.status == "resolved"
    assert list(escalation.entries.values_list("action", "actor_name", "to_status")) == [
        ("opened", "traceviz", "open"),
        ("withdrawn", "traceviz", "resolved"),
    ]
    assert "never held" in escalation.entries.last().note
    assert list(Notification.objects.values_list("reason", flat=True)) == ["opened"]
    assert_parity("j1")


def test_late_cancel_withdraws_an_acknowledged_escalation_keeping_what_people_did():
    store([finished("n1", "permanent_failure", at=5, error_type="auth")])
    actions.acknowledge(Escalation.objects.get(), user("support1", "support"))
    store([event("cancel_requested", at=4, epoch=2)])
    escalation = Escalation.objects.get()
    assert escalation.status == "resolved"
    assert list(escalation.entries.values_list("action", "actor_name")) == [
        ("opened", "traceviz"),
        ("acknowledged", "support1"),
        ("withdrawn", "traceviz"),
    ]


def test_withdrawn_escalation_reopens_when_its_rule_holds_again():
    boundary = {"error_type": "BoundaryViolation"}
    store([finished("n1", "permanent_failure", at=5, **boundary)])
    store([event("cancel_requested", at=4, epoch=2)])
    assert Escalation.objects.get().status == "resolved"
    store([finished("n1", "permanent_failure", at=6, attempt=2, epoch=2, **boundary)])
    escalation = Escalation.objects.get()
    assert escalation.status == "open"
    assert list(escalation.entries.values_list("action", flat=True)) == [
        "opened",
        "withdrawn",
        "reopened",
    ]
    assert_parity("j1")


# Exercises the PostgreSQL advisory locks of locks.lock_jobs (SQLite serialises writers itself).
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_batches_of_one_job_keep_parity():
    first = [finished(f"n{i}", "retryable_failure", "cj", at=i, attempt=1) for i in range(0, 40, 2)]
    second = [finished(f"n{i}", "success", "cj", at=i + 1, attempt=2) for i in range(0, 40, 2)]
    errors = []

    def ingest_all(items):
        try:
            for start in range(0, len(items), 5):
                store(items[start : start + 5])
        except Exception as error:  # reported below, a thread cannot fail the test itself
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=ingest_all, args=(items,)) for items in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Event.objects.filter(job_id="cj").count() == 40
    assert Job.objects.get(job_id="cj").completed_node_ids == [f"n{i}" for i in range(0, 40, 2)]
    assert_parity("cj")


# --- rebuild_projections ----------------------------------------------------------------------


def rows(model, exclude=()) -> list[dict]:
    fields = [f.attname for f in model._meta.concrete_fields if f.attname not in exclude]
    return sorted(model.objects.values(*fields), key=repr)


def failing_jobs() -> None:
    store(
        [
            event("job_started", "r1", at=0, plan_hash="p1"),
            finished("n1", "permanent_failure", "r1", at=1, error_type="auth"),
            finished("n2", "retryable_failure", "r2", at=1, error_type="internal"),
            finished("n3", "permanent_failure", "r3", at=1, state="indeterminate"),
        ]
    )


def test_rebuild_projections_reproduces_the_same_rows():
    failing_jobs()
    before = (
        rows(Job),
        rows(Step, exclude=("id",)),
        rows(Escalation),
        rows(EscalationEntry),
        rows(Notification),
    )
    call_command("rebuild_projections", stdout=None, stderr=None)
    after = (
        rows(Job),
        rows(Step, exclude=("id",)),
        rows(Escalation),
        rows(EscalationEntry),
        rows(Notification),
    )
    assert after == before
    for job_id in ("r1", "r2", "r3"):
        assert_parity(job_id)


def test_rebuild_projections_repairs_a_tampered_projection():
    failing_jobs()
    Job.objects.filter(job_id="r1").update(status="completed")
    Step.objects.filter(job__job_id="r1").update(completes=7)
    Step.objects.filter(job__job_id="r2").delete()
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert_parity("r1")
    assert_parity("r2")


def test_rebuild_leaves_what_people_did_to_escalations_untouched():
    failing_jobs()
    support = user("support1", "support")
    acked = Escalation.objects.get(job__job_id="r1")
    resolved = Escalation.objects.get(job__job_id="r2")
    actions.acknowledge(acked, support)
    actions.resolve(resolved, support, "fixed the connector")
    before = (rows(Escalation), rows(EscalationEntry), rows(Notification))
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert (rows(Escalation), rows(EscalationEntry), rows(Notification)) == before
    assert dict(Escalation.objects.values_list("job__job_id", "status")) == {
        "r1": "acknowledged",
        "r2": "resolved",
        "r3": "open",
    }


def test_rebuild_of_one_job_only_touches_that_job():
    failing_jobs()
    Job.objects.filter(job_id__in=["r1", "r2"]).update(status="completed")
    call_command("rebuild_projections", job=["r1"], stdout=None, stderr=None)
    assert dict(Job.objects.values_list("job_id", "status")) == {
        "r1": "paused:approval",
        "r2": "completed",
        "r3": "paused:reconciliation",
    }


# --- escalation life cycle through ingest -----------------------------------------------------


@pytest.fixture
def email_channel(settings):
    """One notification channel, so every opening and reopening writes one outbox row."""
    settings.TRACEVIZ_ESCALATION_EMAILS = ["support@example.com"]


def auth_failure(at: float, attempt: int) -> dict:
    return finished("n1", "retryable_failure", at=at, attempt=attempt, error_type="auth")


def test_new_escalation_gets_an_opened_entry_and_a_notification(email_channel):
    store([auth_failure(1, 1) | {"event_id": "f1"}])
    escalation = Escalation.objects.get()
    assert (
        escalation.kind,
        escalation.node_id,
        escalation.status,
        escalation.source,
        escalation.trigger_event_ids,
    ) == ("user_action", "n1", "open", "replay", ["f1"])
    assert list(escalation.entries.values_list("action", "actor_name", "to_status")) == [
        ("opened", "traceviz", "open")
    ]
    assert list(Notification.objects.values_list("reason", "status")) == [("opened", "pending")]


def test_resolved_escalation_stays_resolved_when_its_rule_keeps_holding(email_channel):
    store([auth_failure(1, 1)])
    actions.resolve(Escalation.objects.get(), user("support1", "support"), "re-authed")
    store([finished("n2", at=2), auth_failure(3, 2)])
    escalation = Escalation.objects.get()
    assert escalation.status == "resolved"
    assert list(escalation.entries.values_list("action", flat=True)) == ["opened", "resolved"]
    assert Notification.objects.count() == 1


def test_resolved_escalation_reopens_on_a_new_trigger(email_channel):
    store([auth_failure(1, 1)])
    actions.resolve(Escalation.objects.get(), user("support1", "support"), "re-authed")
    store([finished("n1", at=2, attempt=2) | {"event_id": "ok2"}])
    assert Escalation.objects.get().status == "resolved"
    store([auth_failure(3, 3) | {"event_id": "f3"}])
    escalation = Escalation.objects.get()
    assert escalation.status == "open"
    assert escalation.trigger_event_ids[-1] == "f3"
    assert list(escalation.entries.values_list("action", "from_status", "to_status")) == [
        ("opened", "", "open"),
        ("resolved", "open", "resolved"),
        ("reopened", "resolved", "open"),
    ]
    assert list(Notification.objects.values_list("reason", flat=True).order_by("id")) == [
        "opened",
        "reopened",
    ]


def test_resend_does_not_reopen_a_resolved_escalation():
    items = [auth_failure(1, 1), finished("n1", at=2, attempt=2), auth_failure(3, 3)]
    store(items)
    actions.resolve(Escalation.objects.get(), user("support1", "support"), "done")
    store(items)
    assert Escalation.objects.get().status == "resolved"


def test_job_finishing_completed_adds_job_recovered_to_unresolved_escalations():
    store(
        [
            auth_failure(1, 1),
            finished("n2", "permanent_failure", at=2, error_type="BoundaryViolation"),
        ]
    )
    support = user("support1", "support")
    boundary = Escalation.objects.get(kind="boundary_violation")
    actions.resolve(boundary, support, "known")
    store([finished("n1", at=3, attempt=2), event("job_finished", at=4, status="completed")])
    trail = {
        esc.kind: list(esc.entries.values_list("action", flat=True))
        for esc in Escalation.objects.all()
    }
    assert trail == {
        "user_action": ["opened", "job recovered"],
        "boundary_violation": ["opened", "resolved"],
    }
    assert Escalation.objects.get(kind="user_action").status == "open"


def test_job_recovered_is_noted_when_failure_and_completion_come_in_one_batch():
    store(
        [
            auth_failure(1, 1),
            finished("n1", at=2, attempt=2),
            event("job_finished", at=3, status="completed"),
        ]
    )
    escalation = Escalation.objects.get()
    assert list(escalation.entries.values_list("action", flat=True)) == ["opened", "job recovered"]


def test_job_recovered_is_noted_once():
    store([auth_failure(1, 1)])
    store([event("job_finished", at=4, status="completed")])
    store([event("custom.thing", at=5)])
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert list(EscalationEntry.objects.values_list("action", flat=True)) == [
        "opened",
        "job recovered",
    ]


def test_raised_escalation_comes_from_the_producer():
    store(
        [
            event(
                "escalation_raised",
                at=1,
                kind="budget",
                message="over",
                severity="high",
                node_id="n7",
            )
        ]
    )
    escalation = Escalation.objects.get()
    assert (
        escalation.kind,
        escalation.node_id,
        escalation.severity,
        escalation.message,
        escalation.source,
    ) == ("raised", "n7", "high", "over", "producer")


def test_store_batch_uses_receive_time_for_events_without_ts():
    from datetime import UTC, datetime

    received = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    batch = bodies.parse_items(
        [{"type": "node_finished", "job_id": "nt", "payload": {"node_id": "n1"}}], 10
    )
    store_batch(batch, received_at=received)
    assert Event.objects.get(job_id="nt").ts == received
    assert Job.objects.get(job_id="nt").last_received_at == received


def test_max_retries_exceeded_follows_traceviz_max_retries(settings):
    settings.TRACEVIZ_MAX_RETRIES = 2
    store([finished("n1", "retryable_failure", at=a, attempt=a) for a in (1, 2)])
    assert not Escalation.objects.exists()
    store([finished("n1", "retryable_failure", at=3, attempt=3) | {"event_id": "third"}])
    escalation = Escalation.objects.get()
    assert (
        escalation.kind,
        escalation.node_id,
        escalation.severity,
        escalation.trigger_event_ids,
    ) == (
        "max_retries_exceeded",
        "n1",
        "medium",
        ["third"],
    )


def test_rebuild_takes_ingests_job_locks_batch_by_batch(monkeypatch):
    from jobs.management.commands import rebuild_projections

    failing_jobs()
    locked = []
    monkeypatch.setattr(rebuild_projections, "lock_jobs", lambda ids: locked.append(list(ids)))
    call_command("rebuild_projections", batch=2, stdout=None, stderr=None)
    assert locked == [["r1", "r2"], ["r3"]]


def test_rebuild_resumes_after_a_job_id(capsys):
    failing_jobs()
    Job.objects.update(status="completed")
    call_command("rebuild_projections", after="r1")
    assert dict(Job.objects.values_list("job_id", "status")) == {
        "r1": "completed",
        "r2": "failed:internal",
        "r3": "paused:reconciliation",
    }
    assert "jobs rebuilt: 2 in" in capsys.readouterr().out


def test_interrupted_rebuild_says_how_to_resume(monkeypatch):
    from jobs.management.commands import rebuild_projections

    failing_jobs()
    calls = []

    def replay_then_interrupt(job_ids):
        calls.append(list(job_ids))
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(rebuild_projections, "replay_jobs", replay_then_interrupt)
    with pytest.raises(CommandError, match=r"1 of 3 jobs.*--after r1"):
        call_command("rebuild_projections", batch=1, stdout=None, stderr=None)


# Rebuild and ingest take the same per-job locks (PostgreSQL advisory locks).
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_rebuild_beside_live_ingest_keeps_parity():
    store([finished(f"n{i}", "success", "live", at=i) for i in range(5)])
    errors = []

    def ingest_more():
        try:
            for i in range(5, 45, 2):
                store(
                    [started(f"n{i}", "live", at=i), finished(f"n{i}", "success", "live", at=i + 1)]
                )
        except Exception as error:  # reported below, a thread cannot fail the test itself
            errors.append(error)
        finally:
            connection.close()

    def rebuild_often():
        try:
            for _ in range(10):
                call_command("rebuild_projections", stdout=None, stderr=None)
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=target) for target in (ingest_more, rebuild_often)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert Job.objects.get(job_id="live").step_count == 25
    assert_parity("live")
