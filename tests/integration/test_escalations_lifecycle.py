"""Escalations over time, through ingest and the periodic tasks: recurrence reopens, recovery
notes, the stall check, retention, the repair budget across a retry chain."""

from datetime import UTC, datetime, timedelta

import pytest

from jobs.contract import bodies
from jobs.escalations import actions, stalls
from jobs.ingest import retention
from jobs.ingest.store import store_batch
from jobs.models import Escalation, Event, Job, Notification, Step
from tests import factories
from tests.factories import event, finished, started, store

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def support(db):
    return factories.user("sam", "support")


def store_at(items: list[dict], received_at: datetime):
    return store_batch(bodies.parse_items(items, max_events=1000), received_at=received_at)


def auth_failure(job_id="j1", at=2, attempt=1) -> list[dict]:
    return [
        started("n1", job_id, at - 1, attempt=attempt),
        finished(
            "n1",
            "retryable_failure",
            job_id,
            at,
            attempt=attempt,
            error_type="auth",
            reason="token expired",
        ),
    ]


# -- recurrence and recovery -----------------------------------------------------------------


def test_rule_firing_again_reopens_the_resolved_escalation_instead_of_a_duplicate(support):
    factories.store([event("job_started", "j1", 0), *auth_failure()])
    escalation = Escalation.objects.get(job__job_id="j1", kind="user_action")
    actions.resolve(escalation, support, "user re-authenticated")
    # The rule stops holding (n1 succeeds), then holds again (n1 fails on auth once more).
    factories.store(
        [started("n1", "j1", 3, attempt=2), finished("n1", "success", "j1", 4, attempt=2)]
    )
    assert Escalation.objects.get(pk=escalation.pk).status == "resolved"
    factories.store(auth_failure(at=6, attempt=3))
    assert Escalation.objects.filter(job__job_id="j1", kind="user_action").count() == 1
    escalation.refresh_from_db()
    assert escalation.status == "open" and escalation.resolved_at is None
    last = escalation.entries.last()
    assert (last.action, last.actor_name, last.from_status, last.to_status) == (
        "reopened",
        "traceviz",
        "resolved",
        "open",
    )
    assert last.note.startswith("The rule held again")


def test_resending_the_same_events_changes_nothing(support):
    items = [event("job_started", "j1", 0, event_id="e0"), *auth_failure()]
    factories.store(items)
    escalation = Escalation.objects.get(job__job_id="j1", kind="user_action")
    actions.resolve(escalation, support, "handled")
    factories.store(items)
    escalation.refresh_from_db()
    assert escalation.status == "resolved"
    assert escalation.entries.count() == 2


def test_job_that_recovers_notes_it_on_each_open_escalation(support):
    factories.store(
        [
            event("job_started", "j1", 0),
            *auth_failure(),
            event("escalation_raised", "j1", 3, node_id="n1", message="look at this"),
        ]
    )
    acked = Escalation.objects.get(job__job_id="j1", kind="raised")
    actions.acknowledge(acked, support)
    factories.store(
        [
            started("n1", "j1", 5, attempt=2),
            finished("n1", "success", "j1", 6, attempt=2),
            event("job_finished", "j1", 7, status="completed"),
        ]
    )
    for escalation in Escalation.objects.filter(job__job_id="j1"):
        last = escalation.entries.last()
        assert last.action == "job recovered"
        assert last.from_status == last.to_status == escalation.status
        assert escalation.status in ("open", "acknowledged")  # support decides


def test_recovery_leaves_resolved_escalations_alone(support):
    factories.store([event("job_started", "j1", 0), *auth_failure()])
    escalation = Escalation.objects.get(job__job_id="j1")
    actions.resolve(escalation, support, "done")
    factories.store(
        [
            started("n1", "j1", 5, attempt=2),
            finished("n1", "success", "j1", 6, attempt=2),
            event("job_finished", "j1", 7, status="completed"),
        ]
    )
    assert not escalation.entries.filter(action="job recovered").exists()


# -- stall check -----------------------------------------------------------------------------


def test_silent_running_job_gets_a_stalled_escalation_on_the_job(settings):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at([event("job_started", "j1", 0), started("n1", "j1", 1)], T0)
    assert stalls.check_stalls(T0 + timedelta(minutes=29)) == 0
    assert stalls.check_stalls(T0 + timedelta(minutes=31)) == 1
    stalled = Escalation.objects.get(kind="stalled")
    assert (stalled.job.job_id, stalled.node_id, stalled.status) == ("j1", "", "open")
    assert stalled.trigger_event_ids == [f"stall:{T0.isoformat()}"]
    assert "No event received for 31 min while running" in stalled.message
    assert stalled.source == "stall check"


def test_stall_check_is_idempotent_for_the_same_silence(settings, support):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at([event("job_started", "j1", 0)], T0)
    stalls.check_stalls(T0 + timedelta(minutes=31))
    stalled = Escalation.objects.get(kind="stalled")
    actions.resolve(stalled, support, "producer restarted")
    assert stalls.check_stalls(T0 + timedelta(hours=5)) == 0
    stalled.refresh_from_db()
    assert stalled.status == "resolved" and stalled.entries.count() == 2


def test_job_stalling_again_after_new_events_reopens_its_stalled_escalation(settings, support):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at([event("job_started", "j1", 0)], T0)
    stalls.check_stalls(T0 + timedelta(minutes=31))
    stalled = Escalation.objects.get(kind="stalled")
    actions.resolve(stalled, support, "it moved on")
    later = T0 + timedelta(hours=1)
    store_at([started("n1", "j1", 60)], later)
    assert stalls.check_stalls(later + timedelta(minutes=10)) == 0
    assert stalls.check_stalls(later + timedelta(minutes=45)) == 1
    stalled.refresh_from_db()
    assert stalled.status == "open"
    assert stalled.entries.last().action == "reopened"
    assert Escalation.objects.filter(kind="stalled").count() == 1


def test_stall_on_paused_transient_says_when_the_retry_was_due(settings):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at(
        [
            event("job_started", "j1", 0),
            started("n1", "j1", 1, attempt=3),
            finished("n1", "retryable_failure", "j1", 2, attempt=3, error_type="network"),
        ],
        T0,
    )
    assert Job.objects.get(job_id="j1").status == "paused:transient"
    stalls.check_stalls(T0 + timedelta(hours=1))
    message = Escalation.objects.get(kind="stalled").message
    # Attempt 3 finished at 09:00:02; two retries made: 4 s, up to 5.2 s with jitter.
    assert "Node n1 attempt 3 failed retryably at 2026-03-02 09:00:02 UTC" in message
    assert "next attempt was due between 09:00:06 and 09:00:07 UTC" in message


def test_stall_of_a_job_retrying_at_the_attempt_bound_is_opened_and_worked(settings, client):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at(
        [
            event("job_started", "j1", 0),
            started("n1", "j1", 1, attempt=1_000_000),
            finished("n1", "retryable_failure", "j1", 2, attempt=1_000_000, error_type="network"),
        ],
        T0,
    )
    assert stalls.check_stalls(T0 + timedelta(hours=1)) == 1
    stalled = Escalation.objects.get(kind="stalled")
    # The backoff is capped at 5 min (6.5 with jitter) however many retries were made.
    assert "next attempt was due between 09:05:02 and 09:06:32 UTC" in stalled.message
    client.force_login(factories.user("pat", "support"))
    page = client.get(f"/escalations/{stalled.pk}/")
    assert page.status_code == 200
    assert b"attempt 1000000" in page.content
    acknowledged = client.post(f"/escalations/{stalled.pk}/acknowledge/")
    assert acknowledged.status_code == 303
    stalled.refresh_from_db()
    assert stalled.status == "acknowledged"


def test_finished_and_paused_for_approval_jobs_never_stall(settings):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at(
        [event("job_started", "done", 0), event("job_finished", "done", 1, status="completed")], T0
    )
    store_at([event("job_started", "j1", 0), *auth_failure()], T0)
    assert stalls.check_stalls(T0 + timedelta(days=2)) == 0
    assert not Escalation.objects.filter(kind="stalled").exists()


def test_stall_check_works_through_more_jobs_than_one_batch(settings):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    store_at([event("job_started", f"j{n}", 0) for n in range(5)], T0)
    assert stalls.check_stalls(T0 + timedelta(hours=1), batch_size=2) == 5
    assert Escalation.objects.filter(kind="stalled").count() == 5


def test_backoff_window_table():
    from jobs.replay.backoff import retry_window

    earliest, latest = retry_window(T0, 1)
    assert (earliest - T0, latest - T0) == (timedelta(seconds=1), timedelta(seconds=1.3))
    earliest, latest = retry_window(T0, 20)
    assert (earliest - T0, latest - T0) == (timedelta(minutes=5), timedelta(minutes=6.5))


# -- retention -------------------------------------------------------------------------------


def test_retention_zero_keeps_everything(support):
    store_at([event("job_started", "old", 0)], T0)
    assert retention.apply_retention(0, T0 + timedelta(days=999)).jobs == 0
    assert Job.objects.filter(job_id="old").exists()


def test_retention_deletes_expired_jobs_with_their_events_and_resolved_escalations(support):
    store_at([event("job_started", "old", 0), *auth_failure("old")], T0)
    store_at([event("job_started", "old-open", 0), *auth_failure("old-open")], T0)
    store_at([event("job_started", "new", 0)], T0 + timedelta(days=9))
    actions.resolve(Escalation.objects.get(job__job_id="old"), support, "done")
    result = retention.apply_retention(7, T0 + timedelta(days=10))
    assert (result.jobs, result.events) == (1, 3)
    assert set(Job.objects.values_list("job_id", flat=True)) == {"old-open", "new"}
    assert not Event.objects.filter(job_id="old").exists()
    assert not Step.objects.filter(job__job_id="old").exists()
    # An unresolved escalation keeps its job (support still owes it an answer).
    assert Escalation.objects.filter(job__job_id="old-open", status="open").exists()


def test_retention_works_in_bounded_batches():
    store_at([event("job_started", f"old{n}", 0) for n in range(5)], T0)
    # The cutoff falls on the jobs' own day: they go row by row (earlier days go whole).
    now = T0 + timedelta(days=7, hours=1)
    first = retention.apply_retention(7, now, job_batch=2, max_batches=1)
    assert first.jobs == 2 and Job.objects.count() == 3
    rest = retention.apply_retention(7, now, job_batch=2, max_batches=10)
    assert rest.jobs == 3 and Job.objects.count() == 0


def test_retention_deletes_old_resolved_escalations_without_a_job(support):
    escalation = Escalation.objects.create(kind="raised", severity="medium", triggered_at=T0)
    actions.resolve(escalation, support, "alert cleared")
    Escalation.objects.filter(pk=escalation.pk).update(resolved_at=T0)
    Notification.objects.create(escalation=escalation, reason="opened")
    result = retention.apply_retention(7, T0 + timedelta(days=8))
    assert result.escalations == 1
    assert not Escalation.objects.filter(pk=escalation.pk).exists()


# --- repair budget ----------------------------------------------------------------------------


def logic_run(job_id: str, at: float, retry_of: str | None = None) -> list[dict]:
    start = {"retry_of": retry_of} if retry_of else {}
    return [
        event("job_started", job_id, at=at, **start),
        finished("fix", "permanent_failure", job_id, at=at + 1, error_type="logic")
        | {"event_id": f"{job_id}-fail"},
    ]


def test_repair_budget_exhausted_on_the_run_that_pushed_the_chain_over(settings):
    settings.TRACEVIZ_REPAIR_BUDGET = 2
    store(logic_run("run-1", 0))
    store(logic_run("run-2", 10, retry_of="run-1"))
    assert not Escalation.objects.filter(kind="repair_budget_exhausted").exists()
    store(logic_run("run-3", 20, retry_of="run-2"))
    escalation = Escalation.objects.get(kind="repair_budget_exhausted")
    assert (
        escalation.job.job_id,
        escalation.node_id,
        escalation.severity,
        escalation.trigger_event_ids,
    ) == ("run-3", "", "medium", ["run-3-fail"])


def test_repair_budget_picks_the_run_by_event_time_not_arrival(settings):
    settings.TRACEVIZ_REPAIR_BUDGET = 2
    store(logic_run("run-3", 20, retry_of="run-2"))
    store(logic_run("run-1", 0))
    store(logic_run("run-2", 10, retry_of="run-1"))
    (escalation,) = Escalation.objects.filter(kind="repair_budget_exhausted")
    assert escalation.job.job_id == "run-3"


def test_repair_budget_uses_the_default_of_three(settings):
    assert settings.TRACEVIZ_REPAIR_BUDGET == 3
    for i in range(3):
        store(logic_run(f"run-{i}", i * 10, retry_of=f"run-{i - 1}" if i else None))
    assert not Escalation.objects.filter(kind="repair_budget_exhausted").exists()
    store(logic_run("run-3", 30, retry_of="run-2"))
    assert Escalation.objects.get(kind="repair_budget_exhausted").job.job_id == "run-3"


def test_runs_outside_the_chain_do_not_count(settings):
    settings.TRACEVIZ_REPAIR_BUDGET = 1
    store(logic_run("a-1", 0))
    store(logic_run("b-1", 5))
    assert not Escalation.objects.filter(kind="repair_budget_exhausted").exists()
