"""Celery tasks: side effects only (docs/architecture.md). Each takes ids or nothing, re-fetches
what it needs, returns quietly when a row is gone, and works in bounded batches; the logic lives
in the packages below (escalations, ingest, dashboard) so it is tested without a worker.
Nothing imports this module but the app config and Celery: the domain enqueues by task name.

Without CELERY_BROKER_URL the tasks run eagerly in-process; with it, run a worker and beat
(``celery -A traceviz worker`` and ``celery -A traceviz beat``; the schedule is
CELERY_BEAT_SCHEDULE in settings).
"""

import logging
from datetime import timedelta

from axes.models import AccessAttempt, AccessLog
from celery import shared_task
from django.conf import settings
from django.utils import timezone

from jobs.dashboard import rollup
from jobs.escalations import alerts, group_lifecycle, outbox, stalls
from jobs.ingest import retention
from jobs.models import RateCounter

logger = logging.getLogger(__name__)
SWEEP_BATCH = 500
# Rate-limit windows last a minute; an hour's margin keeps every live one.
RATE_WINDOWS_KEPT = timedelta(hours=1)


@shared_task(ignore_result=True)
def deliver_notification(notification_id: int) -> str:
    """Deliver one outbox row. A failed attempt goes back to pending with its next time set by
    the backoff; with a broker the retry is scheduled for that time (the sweep is the safety
    net), eagerly it is left to the sweep so a failing webhook never blocks a request."""
    outcome = outbox.deliver(notification_id)
    if outcome.retry_at is not None and not deliver_notification.app.conf.task_always_eager:
        deliver_notification.apply_async((notification_id,), eta=outcome.retry_at)
    return outcome.status or "not claimed"


@shared_task(ignore_result=True)
def sweep_outbox(batch_size: int = SWEEP_BATCH) -> int:
    """Periodic: enqueue every notification that is due and not held by a live worker (lost
    enqueues, retries whose message was lost, rows whose worker died). Duplicate messages are
    harmless: only one delivery can claim a row. Returns how many were enqueued."""
    now = timezone.now()
    abandoned = outbox.fail_abandoned(now)
    if abandoned:
        logger.warning("outbox: %d notifications failed after their last worker died", abandoned)
    due = outbox.due_ids(now, batch_size)
    for notification_id in due:
        deliver_notification.delay(notification_id)
    return len(due)


@shared_task(ignore_result=True)
def check_stalls() -> int:
    """Periodic: open or reopen ``stalled`` escalations. Returns how many."""
    return stalls.check_stalls()


@shared_task(ignore_result=True)
def apply_retention() -> dict:
    """Periodic: delete data older than TRACEVIZ_RETENTION_DAYS (a no-op while it is 0)."""
    result = retention.apply_retention(settings.TRACEVIZ_RETENTION_DAYS)
    return {
        "jobs": result.jobs,
        "events": result.events,
        "escalations": result.escalations,
        "span_resources": result.resources,
    }


@shared_task(ignore_result=True)
def evaluate_alerts() -> dict:
    """Periodic: evaluate alert rules (fire new episodes, resolve stopped ones)."""
    outcome = alerts.evaluate()
    return {"fired": len(outcome.fired), "resolved": len(outcome.resolved)}


@shared_task(ignore_result=True)
def lapse_group_ignores() -> int:
    """Periodic: unignore the failure groups ignored until a time that has passed. Returns how
    many."""
    return group_lifecycle.lapse_ignores()


@shared_task(ignore_result=True)
def refresh_dashboard_rollup() -> int:
    """Periodic: recompute the dashboard rollup's dirty hours, newest first, in bounded batches
    of one transaction each (the dashboard itself refreshes only a few per request). Returns how
    many hours."""
    return rollup.refresh_pending()


@shared_task(ignore_result=True)
def prune_rate_limits() -> dict:
    """Periodic: delete ended ingest rate-limit windows, sign-in failures past their cool-off
    and sign-in logs older than TRACEVIZ_LOGIN_LOG_DAYS. Returns how many of each."""
    now = timezone.now()
    failures, _ = AccessAttempt.objects.filter(
        attempt_time__lte=now - settings.AXES_COOLOFF_TIME
    ).delete()
    logs, _ = AccessLog.objects.filter(
        attempt_time__lt=now - timedelta(days=settings.TRACEVIZ_LOGIN_LOG_DAYS)
    ).delete()
    windows = RateCounter.forget_windows_before(now - RATE_WINDOWS_KEPT)
    return {"windows": windows, "sign_in_failures": failures, "sign_in_logs": logs}
