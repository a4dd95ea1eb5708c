"""Delivering the escalation outbox: email and an optional JSON webhook, one Notification row
per destination.

A delivery first claims its row with a conditional update (pending and due, or sending with a
lapsed lease -> sending with a fresh lease, attempts + 1) and goes on only when that update
changed exactly one row, so two workers never send the same notification at once. The claimed
attempt number fences the outcome: a worker whose lease lapsed while it was stuck cannot record
over the worker that took the row after it. Failures are retried on the run-status contract's
backoff up to TRACEVIZ_NOTIFY_MAX_ATTEMPTS, then the row is marked failed; every error is kept on
the row.

Exactly once, as the receiver sees it: an attempt's outcome is recorded after the destination
answered, so a worker killed, or a database lost, between the two leaves the row claimed with
no outcome; once its lease lapses the notification is sent again (it may never have arrived).
Every attempt carries the same key, the notification id: the webhook's ``Idempotency-Key``
header (and the body's ``notification_id``), the email's ``Message-ID``. A receiver that drops
a key it has processed sees each notification once, and the row says it was sent again.
"""

import json
import random
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from celery import current_app
from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Case, F, Q, TextField, Value, When
from django.utils import timezone

from jobs.models import Notification
from jobs.replay.backoff import backoff_seconds

Status = Notification.Status
Channel = Notification.Channel
# The Celery task that delivers one row, enqueued by name: the domain never imports jobs.tasks
# (tasks sit on top of every package; JobsConfig.ready registers them in every process).
DELIVER_TASK = "jobs.tasks.deliver_notification"
# A retry scheduled for exactly next_attempt_at may reach a worker whose clock is a little
# behind the one that scheduled it; it still counts as due.
CLAIM_SLACK = timedelta(seconds=2)
ERROR_CHARS = 2000
UNRECORDED = (
    "the previous attempt ended without recording whether it was delivered (its worker stopped "
    "or lost the database): sent again with the same Idempotency-Key"
)


class DeliveryError(Exception):
    """The destination answered but did not accept the notification."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one ``deliver`` call did. ``retry_at`` is set when the row went back to pending."""

    claimed: bool
    status: str = ""
    retry_at: datetime | None = None


def configured_channels() -> list[str]:
    """The destinations an escalation notifies, from settings, in a fixed order."""
    channels: list[str] = []
    if settings.TRACEVIZ_ESCALATION_EMAILS:
        channels.append(Channel.EMAIL)
    if settings.TRACEVIZ_ESCALATION_WEBHOOK_URL:
        channels.append(Channel.WEBHOOK)
    return channels


def deliver_after_commit(notification_id: int) -> None:
    """Enqueue the delivery of a row once the caller's transaction commits. Robust: a broker
    that is down then must not fail the request that wrote the row; the periodic sweep sends
    it later. Eager (no broker configured), the delivery runs right after the commit."""

    def enqueue() -> None:
        # A named function, not functools.partial: Django logs a robust callback's failure by
        # its __qualname__, which a partial lacks (that AttributeError became a 500).
        current_app.signature(DELIVER_TASK, args=(notification_id,)).delay()

    transaction.on_commit(enqueue, robust=True)


def claimable(now: datetime) -> Q:
    """Rows a worker may take now: pending and due, or sending with a lapsed lease (the worker
    died or lost its connection), in both cases with attempts left."""
    due = Q(status=Status.PENDING, next_attempt_at__lte=now + CLAIM_SLACK)
    orphaned = Q(status=Status.SENDING, lease_until__lt=now)
    return (due | orphaned) & Q(attempts__lt=settings.TRACEVIZ_NOTIFY_MAX_ATTEMPTS)


def claim(notification_id: int, now: datetime) -> int | None:
    """Take the row for one delivery attempt. Returns the attempt number (1-based), or None
    when the row is gone, delivered, failed, not due, or held by another worker. Taking a row
    whose last attempt never recorded an outcome says so on the row."""
    claimed = Notification.objects.filter(claimable(now), pk=notification_id).update(
        status=Status.SENDING,
        lease_until=now + settings.TRACEVIZ_NOTIFY_LEASE,
        attempts=F("attempts") + 1,
        last_error=Case(
            When(status=Status.SENDING, then=Value(UNRECORDED)),
            default=F("last_error"),
            output_field=TextField(),
        ),
    )
    if claimed != 1:
        return None
    return Notification.objects.values_list("attempts", flat=True).get(pk=notification_id)


def deliver(
    notification_id: int,
    now: datetime | None = None,
    *,
    rand: Callable[[], float] = random.random,
) -> Outcome:
    """Claim and send one notification, and record the result on its row. Never raises for a
    destination's failure (that is recorded and retried); returns quietly for a row that is
    gone or not claimable."""
    now = now or timezone.now()
    attempt = claim(notification_id, now)
    if attempt is None:
        return Outcome(claimed=False)
    notification = (
        Notification.objects.select_related("escalation__job", "entry")
        .filter(pk=notification_id)
        .first()
    )
    if notification is None:  # deleted (retention, a deleted job) since the claim
        return Outcome(claimed=True)
    try:
        send(notification)
    except (OSError, ValueError, DeliveryError) as error:
        return _record_failure(notification_id, attempt, describe(error), now, rand)
    Notification.objects.filter(pk=notification_id, status=Status.SENDING, attempts=attempt).update(
        status=Status.SENT, sent_at=now, lease_until=None
    )
    return Outcome(claimed=True, status=Status.SENT)


def _record_failure(
    notification_id: int, attempt: int, error: str, now: datetime, rand: Callable[[], float]
) -> Outcome:
    if attempt >= settings.TRACEVIZ_NOTIFY_MAX_ATTEMPTS:
        status, retry_at = Status.FAILED, None
        error = f"attempt {attempt} of {attempt}, giving up: {error}"
    else:
        status = Status.PENDING
        retry_at = now + timedelta(seconds=backoff_seconds(attempt - 1, rand=rand))
        error = f"attempt {attempt}: {error}"
    recorded = Notification.objects.filter(
        pk=notification_id, status=Status.SENDING, attempts=attempt
    ).update(
        status=status,
        last_error=error[:ERROR_CHARS],
        lease_until=None,
        next_attempt_at=retry_at or now,
    )
    if not recorded:  # our lease lapsed and another worker owns the row now
        return Outcome(claimed=True)
    return Outcome(claimed=True, status=status, retry_at=retry_at)


def fail_abandoned(now: datetime) -> int:
    """Mark failed the rows whose last allowed attempt was claimed by a worker that never came
    back (lease lapsed with no attempts left). Returns how many."""
    return Notification.objects.filter(
        status=Status.SENDING,
        lease_until__lt=now,
        attempts__gte=settings.TRACEVIZ_NOTIFY_MAX_ATTEMPTS,
    ).update(
        status=Status.FAILED,
        lease_until=None,
        last_error="the worker sending the last attempt stopped before recording a result",
    )


def due_ids(now: datetime, limit: int) -> list[int]:
    """Ids of notifications a sweep should (re-)enqueue, longest overdue first."""
    rows = Notification.objects.filter(claimable(now)).order_by("next_attempt_at", "pk")
    return list(rows.values_list("pk", flat=True)[:limit])


# -- destinations ------------------------------------------------------------------------------


def send(notification: Notification) -> None:
    """Send to the row's destination; raises OSError, ValueError or DeliveryError on failure."""
    if notification.channel == Channel.EMAIL:
        recipients = settings.TRACEVIZ_ESCALATION_EMAILS
        if not recipients:
            raise DeliveryError("no TRACEVIZ_ESCALATION_EMAILS configured any more")
        subject, body = email_message(notification)
        EmailMessage(
            subject,
            body,
            settings.DEFAULT_FROM_EMAIL,
            recipients,
            headers={"Message-ID": message_id(notification)},
        ).send(fail_silently=False)
    elif notification.channel == Channel.WEBHOOK:
        url = settings.TRACEVIZ_ESCALATION_WEBHOOK_URL
        if not url:
            raise DeliveryError("no TRACEVIZ_ESCALATION_WEBHOOK_URL configured any more")
        webhook = webhook_body(notification)
        post_json(url, webhook, settings.TRACEVIZ_WEBHOOK_TIMEOUT, key=str(notification.pk))
    else:
        raise DeliveryError(f"unknown channel {notification.channel!r}")


def webhook_body(notification: Notification) -> dict:
    """The webhook's JSON; a comment's notification also carries ``comment`` (author, text,
    at)."""
    escalation = notification.escalation
    body: dict = {
        "event": f"escalation.{notification.reason}",
        "notification_id": notification.pk,
        "escalation": {
            "id": escalation.pk,
            "url": escalation_url(escalation),
            "kind": escalation.kind,
            "severity": escalation.severity,
            "status": escalation.status,
            "message": escalation.message,
            "source": escalation.source,
            "job_id": escalation.job.job_id if escalation.job else None,
            "node_id": escalation.node_id,
            "opened_at": escalation.opened_at.isoformat(),
        },
    }
    if (entry := notification.entry) is not None:
        body["comment"] = {
            "author": entry.actor_name,
            "text": entry.note,
            "at": entry.at.isoformat(),
        }
    return body


def email_message(notification: Notification) -> tuple[str, str]:
    """Subject and plain-text body. Producer text (job ids, messages) stays out of the subject
    line apart from the job id, with line breaks removed (header injection)."""
    escalation = notification.escalation
    job_id = escalation.job.job_id if escalation.job else ""
    subject = (
        f"[traceviz] {escalation.severity} escalation {notification.reason}: {escalation.kind}"
    )
    if job_id:
        subject += f" on {job_id}"
    subject = " ".join(subject.split())[:200]
    entry = notification.entry
    news = (
        [f"{entry.actor_name} commented on escalation {escalation.pk}:", "", entry.note]
        if entry is not None
        else [f"Escalation {escalation.pk} was {notification.reason}."]
    )
    body = "\n".join(
        [
            *news,
            "",
            f"Kind: {escalation.kind}",
            f"Severity: {escalation.severity}",
            f"Job: {job_id or '-'}",
            f"Node: {escalation.node_id or '-'}",
            f"Source: {escalation.source or '-'}",
            "",
            escalation.message,
            "",
            f"Queue page: {escalation_url(escalation)}",
        ]
    )
    return subject, body


def message_id(notification: Notification) -> str:
    """The email's Message-ID: the same for every attempt of the notification, so a mail
    reader can tell a resend from a new message."""
    host = urllib.parse.urlsplit(settings.TRACEVIZ_SITE_URL).hostname or "traceviz"
    return f"<traceviz-notification-{notification.pk}@{host}>"


def escalation_url(escalation) -> str:
    """The escalation's page, absolute (TRACEVIZ_SITE_URL): a notification is read outside the
    site, where a path alone leads nowhere."""
    return f"{settings.TRACEVIZ_SITE_URL.rstrip('/')}/escalations/{escalation.pk}/"


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook that answers with a redirect has failed: following it would send the body to
    an address nobody configured (and a POST turned GET loses it anyway)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise DeliveryError(f"HTTP {code}: redirect to {newurl[:200]} not followed")


WEBHOOK_OPENER = urllib.request.build_opener(RefuseRedirects)
WEBHOOK_SCHEMES = ("http", "https")


def post_json(url: str, body: dict, timeout: float, key: str) -> None:
    """POST ``body`` as JSON to an http or https URL, with ``key`` as its Idempotency-Key; any
    answer other than 2xx raises, and so does a redirect (never followed) or another scheme
    (file:, ftp: are never opened)."""
    if urllib.parse.urlsplit(url).scheme.lower() not in WEBHOOK_SCHEMES:
        raise DeliveryError("the webhook URL must be http or https")
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode("utf-8"),
        headers={
            "Content-Type": "application/json",
            "User-Agent": "traceviz-webhook/1",
            "Idempotency-Key": key,
        },
        method="POST",
    )
    with WEBHOOK_OPENER.open(request, timeout=timeout) as response:
        if not 200 <= response.status < 300:
            raise DeliveryError(f"HTTP {response.status}")


def describe(error: Exception) -> str:
    """A short, deterministic description of a delivery failure for the row and the page."""
    if isinstance(error, urllib.error.HTTPError):
        return f"HTTP {error.code} {error.reason}"
    if isinstance(error, urllib.error.URLError):
        return f"connection failed: {error.reason}"
    if isinstance(error, DeliveryError):
        return str(error)
    return f"{type(error).__name__}: {error}"
