"""The escalation outbox: rows written with the change, delivered on commit, claimed with a
conditional update, retried on the run-status contract's backoff, bounded, swept, and leased."""

import json
import urllib.error
from datetime import UTC, datetime, timedelta

import pytest
from django.core import mail

from jobs import tasks
from jobs.escalations import actions, outbox
from jobs.models import Escalation, Job, Notification
from jobs.replay.backoff import backoff_seconds
from tests import factories
from tests.factories import event, finished, started

T0 = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


@pytest.fixture
def channels(settings):
    settings.TRACEVIZ_ESCALATION_EMAILS = ["support@example.com"]
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = "http://127.0.0.1:9/hook"
    settings.TRACEVIZ_NOTIFY_MAX_ATTEMPTS = 3
    settings.TRACEVIZ_NOTIFY_LEASE = timedelta(minutes=2)
    return settings


@pytest.fixture
def webhook_calls(monkeypatch):
    """Replaces the HTTP POST: records bodies; set ``.fail`` to an exception to raise it."""

    class Calls(list):
        fail: Exception | None = None

    calls = Calls()

    def fake_post(url, body, timeout, key):
        calls.append((url, body, timeout))
        if calls.fail is not None:
            raise calls.fail

    monkeypatch.setattr(outbox, "post_json", fake_post)
    return calls


def open_escalation(job_id: str = "j1") -> Escalation:
    factories.store(
        [
            event("job_started", job_id, 0),
            started("n1", job_id, 1),
            finished("n1", "retryable_failure", job_id, 2, error_type="auth", reason="expired"),
        ]
    )
    return Escalation.objects.get(job__job_id=job_id)


def pending(channel: str = "webhook", **fields) -> Notification:
    escalation = Escalation.objects.create(
        kind="raised", severity="high", triggered_at=T0, message="disk full"
    )
    fields.setdefault("next_attempt_at", T0)
    return Notification.objects.create(
        escalation=escalation, reason="opened", channel=channel, **fields
    )


# -- backoff (pure) --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retries", "seconds"),
    [(0, 1), (1, 2), (2, 4), (5, 32), (8, 256), (9, 300), (40, 300), (1024, 300), (10**6, 300)],
)
def test_backoff_doubles_from_one_second_to_a_five_minute_cap(retries, seconds):
    assert backoff_seconds(retries, rand=lambda: 0.0) == seconds


def test_backoff_jitter_adds_up_to_thirty_percent():
    assert backoff_seconds(3, rand=lambda: 0.5) == pytest.approx(8 * 1.15)
    assert backoff_seconds(3, rand=lambda: 0.999999) == pytest.approx(8 * 1.3, rel=1e-5)
    assert backoff_seconds(30, rand=lambda: 0.999999) == pytest.approx(390, rel=1e-5)


# -- rows written with the change ------------------------------------------------------------


@pytest.mark.django_db
def test_opening_writes_one_row_per_destination_and_enqueues_after_commit(
    channels, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        escalation = open_escalation()
    rows = list(escalation.notifications.values_list("reason", "channel", "status"))
    assert rows == [("opened", "email", "pending"), ("opened", "webhook", "pending")]
    assert len(callbacks) == 2


@pytest.mark.django_db
def test_no_destination_configured_writes_no_rows(settings):
    settings.TRACEVIZ_ESCALATION_EMAILS = []
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = ""
    assert not open_escalation().notifications.exists()


@pytest.mark.django_db
def test_committed_opening_is_delivered_eagerly_by_email_and_webhook(
    channels, webhook_calls, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        escalation = open_escalation()
    assert set(escalation.notifications.values_list("status", flat=True)) == {"sent"}
    (message,) = mail.outbox
    assert message.to == ["support@example.com"]
    assert message.subject == "[traceviz] medium escalation opened: user_action on j1"
    ((url, body, _timeout),) = webhook_calls
    assert url == "http://127.0.0.1:9/hook"
    assert body["event"] == "escalation.opened"
    assert body["escalation"]["id"] == escalation.pk
    assert body["escalation"]["kind"] == "user_action" and body["escalation"]["job_id"] == "j1"
    json.dumps(body)  # serialisable as it is sent


@pytest.mark.django_db
def test_reopening_by_hand_notifies_again(channels, django_capture_on_commit_callbacks):
    user = factories.user("sam", "support")
    escalation = open_escalation()
    actions.resolve(escalation, user, "done")
    with django_capture_on_commit_callbacks() as callbacks:
        actions.reopen(escalation, user)
    assert escalation.notifications.filter(reason="reopened").count() == 2
    assert len(callbacks) == 2


# -- claims ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_two_claims_one_wins(channels):
    row = pending()
    assert outbox.claim(row.pk, T0) == 1
    assert outbox.claim(row.pk, T0) is None
    row.refresh_from_db()
    assert (row.status, row.attempts, row.lease_until) == ("sending", 1, T0 + timedelta(minutes=2))


@pytest.mark.django_db
def test_second_delivery_of_a_claimed_row_sends_nothing(channels, webhook_calls):
    row = pending()
    outbox.claim(row.pk, T0)  # another worker holds it
    assert outbox.deliver(row.pk, T0) == outbox.Outcome(claimed=False)
    assert webhook_calls == []


@pytest.mark.django_db
def test_not_yet_due_row_is_not_claimed(channels):
    row = pending(next_attempt_at=T0 + timedelta(minutes=1))
    assert outbox.claim(row.pk, T0) is None
    assert outbox.claim(row.pk, T0 + timedelta(minutes=1)) == 1


@pytest.mark.django_db
def test_sending_row_whose_worker_died_is_claimable_after_its_lease(channels):
    row = pending()
    assert outbox.claim(row.pk, T0) == 1
    assert outbox.claim(row.pk, T0 + timedelta(seconds=119)) is None
    assert outbox.claim(row.pk, T0 + timedelta(seconds=121)) == 2


@pytest.mark.django_db
def test_worker_whose_lease_lapsed_cannot_record_over_the_next_one(channels):
    row = pending()
    outbox.claim(row.pk, T0)
    outbox.claim(row.pk, T0 + timedelta(minutes=3))  # attempt 2 took over
    outcome = outbox._record_failure(row.pk, 1, "late", T0 + timedelta(minutes=4), lambda: 0.0)
    assert outcome == outbox.Outcome(claimed=True)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.last_error) == ("sending", 2, outbox.UNRECORDED)


@pytest.mark.django_db
def test_gone_row_returns_quietly(channels):
    assert outbox.deliver(987654, T0) == outbox.Outcome(claimed=False)
    assert tasks.deliver_notification(987654) == "not claimed"


# -- failures and retries --------------------------------------------------------------------


@pytest.mark.django_db
def test_failed_delivery_is_recorded_and_scheduled_on_the_backoff(channels, webhook_calls):
    webhook_calls.fail = urllib.error.HTTPError("http://x", 500, "Internal Server Error", {}, None)
    row = pending()
    outcome = outbox.deliver(row.pk, T0, rand=lambda: 0.5)
    assert outcome.status == "pending"
    assert outcome.retry_at == T0 + timedelta(seconds=1.15)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.lease_until) == ("pending", 1, None)
    assert row.next_attempt_at == T0 + timedelta(seconds=1.15)
    assert row.last_error == "attempt 1: HTTP 500 Internal Server Error"
    second = outbox.deliver(row.pk, T0 + timedelta(seconds=2), rand=lambda: 0.0)
    assert second.retry_at == T0 + timedelta(seconds=4)


@pytest.mark.django_db
def test_never_more_than_the_configured_attempts(channels, webhook_calls):
    webhook_calls.fail = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    row = pending()
    now = T0
    for _ in range(5):
        outbox.deliver(row.pk, now)
        now += timedelta(hours=1)
    assert len(webhook_calls) == 3
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("failed", 3)
    assert row.last_error.startswith("attempt 3 of 3, giving up: connection failed")


@pytest.mark.django_db
def test_success_after_a_failure_is_sent(channels, webhook_calls):
    webhook_calls.fail = TimeoutError("timed out")
    row = pending()
    outbox.deliver(row.pk, T0)
    webhook_calls.fail = None
    assert outbox.deliver(row.pk, T0 + timedelta(seconds=5)).status == "sent"
    row.refresh_from_db()
    assert (row.status, row.attempts, row.sent_at) == ("sent", 2, T0 + timedelta(seconds=5))
    assert row.last_error == "attempt 1: TimeoutError: timed out"


@pytest.mark.django_db
def test_email_failure_is_recorded(channels, monkeypatch):
    def broken_send(message, fail_silently=False):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(outbox.EmailMessage, "send", broken_send)
    row = pending(channel="email")
    assert outbox.deliver(row.pk, T0).status == "pending"
    row.refresh_from_db()
    assert "ConnectionRefusedError" in row.last_error


@pytest.mark.django_db
def test_subject_never_carries_line_breaks_from_producer_text(channels):
    # Ingest refuses such ids now; a row stored before it did may still carry one.
    job = Job.objects.create(job_id="evil\nBcc: x@example.com")
    escalation = Escalation.objects.create(
        kind="raised", severity="medium", triggered_at=T0, job=job, message="m"
    )
    notification = Notification.objects.create(escalation=escalation, reason="opened")
    subject, _body = outbox.email_message(notification)
    assert "\n" not in subject and "\r" not in subject


# -- sweep -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_sweep_delivers_what_is_due_and_leaves_the_rest(channels, webhook_calls, monkeypatch):
    monkeypatch.setattr(tasks.timezone, "now", lambda: T0 + timedelta(minutes=10))
    monkeypatch.setattr(outbox.timezone, "now", lambda: T0 + timedelta(minutes=10))
    due = pending()
    later = pending(next_attempt_at=T0 + timedelta(hours=1))
    done = pending(status="sent")
    assert tasks.sweep_outbox() == 1  # eager: delivered in-process
    statuses = {row.pk: row.status for row in Notification.objects.all()}
    assert statuses == {due.pk: "sent", later.pk: "pending", done.pk: "sent"}
    assert len(webhook_calls) == 1


@pytest.mark.django_db
def test_sweep_retakes_rows_of_dead_workers_and_fails_exhausted_ones(channels, monkeypatch):
    now = T0 + timedelta(minutes=10)
    monkeypatch.setattr(tasks.timezone, "now", lambda: now)
    orphan = pending(status="sending", attempts=1, lease_until=now - timedelta(seconds=1))
    exhausted = pending(status="sending", attempts=3, lease_until=now - timedelta(seconds=1))
    leased = pending(status="sending", attempts=1, lease_until=now + timedelta(minutes=1))
    assert outbox.due_ids(now, 10) == [orphan.pk]
    assert outbox.fail_abandoned(now) == 1
    exhausted.refresh_from_db()
    assert exhausted.status == "failed" and "worker" in exhausted.last_error
    assert Notification.objects.get(pk=leased.pk).status == "sending"


@pytest.mark.django_db
def test_sweep_batch_is_bounded(channels, monkeypatch):
    monkeypatch.setattr(tasks.deliver_notification, "delay", lambda pk: None)
    for _ in range(4):
        pending()
    assert tasks.sweep_outbox(batch_size=3) == 3


def test_beat_schedule_names_registered_tasks(settings):
    from traceviz.celery import app

    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks
