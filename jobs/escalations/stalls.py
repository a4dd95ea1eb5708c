"""Stalls (docs/contract.md): a job that expects events and has received none for
TRACEVIZ_STALL_AFTER gets a ``stalled`` escalation, found by a periodic task.

Whether a job is stalled is decided in one place, ``Job.objects.stalled`` / ``Job.is_stalled``
(jobs.models); this module turns each stall episode into its escalation trigger.
"""

import logging
from datetime import datetime, timedelta
from functools import partial

from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from jobs.escalations.actions import apply_trigger
from jobs.models import Escalation, Job, NextAttempt, contained, next_attempts
from jobs.replay.state import EscalationTrigger

logger = logging.getLogger(__name__)
STALLED = "stalled"
STALL_BATCH = 200
STALL_MAX_BATCHES = 50


def duration_label(delta: timedelta) -> str:
    """A short human duration: "45 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def stall_trigger(job: Job, now: datetime, due: NextAttempt | None = None) -> EscalationTrigger:
    """The trigger of a stall episode. The episode is named by the job's last receive time, so
    the same silence never triggers twice and a job that stalls again after new events does.
    ``due``: the job's next attempt (``next_attempts``), when it waits to retry."""
    silent = duration_label(now - job.last_received_at)
    message = (
        f"No event received for {silent} while {job.status} (last event received "
        f"{job.last_received_at:%Y-%m-%d %H:%M:%S} UTC)."
    )
    if due is not None:
        message += (
            f" Node {due.node_id} attempt {due.attempt} failed retryably at "
            f"{due.failed_at:%Y-%m-%d %H:%M:%S} UTC; by the expected backoff its "
            f"next attempt was due between {due.due_from:%H:%M:%S} and {due.due_by:%H:%M:%S} UTC "
            f"and has not arrived."
        )
    return EscalationTrigger(
        STALLED,
        "",
        "medium",
        message,
        f"stall:{job.last_received_at.isoformat()}",
        job.last_received_at,
    )


def check_stalls(now: datetime | None = None, *, batch_size: int = STALL_BATCH) -> int:
    """Open (or reopen) a ``stalled`` escalation on every job that received no event for
    TRACEVIZ_STALL_AFTER while running, cancelling or paused:transient (docs/contract.md).

    Works in bounded batches, longest silence first, and skips in the query the jobs whose
    current stall episode already opened or reopened their escalation. A job it cannot handle
    is logged and skipped (``contained``): every other job is still checked. Returns how many
    escalations it opened or reopened.
    """
    now = now or timezone.now()
    seen_episode = Escalation.objects.filter(
        job=OuterRef("pk"), kind=STALLED, node_id="", triggered_at=OuterRef("last_received_at")
    )
    stalled = (
        Job.objects.stalled(now)
        .exclude(Exists(seen_episode))
        .order_by("last_received_at", "pk")
        .only("pk", "last_received_at")
    )
    changed = 0
    page = stalled
    for _ in range(STALL_MAX_BATCHES):
        batch = list(page[:batch_size])
        changed += sum(
            contained(logger, f"stall check of job {job.pk}", partial(_apply_stall, job.pk, now), 0)
            for job in batch
        )
        if len(batch) < batch_size:
            break
        # Keyset: an escalation still open from an earlier episode only records the new one,
        # so its job stays in the query; move past it rather than see it again.
        last = batch[-1]
        page = stalled.filter(
            Q(last_received_at__gt=last.last_received_at)
            | Q(last_received_at=last.last_received_at, pk__gt=last.pk)
        )
    return changed


def _apply_stall(job_pk: int, now: datetime) -> int:
    """Apply one job's stall trigger under its row lock (ingest writes the same row), after
    checking it is still stalled. Returns 1 when this opened or reopened the escalation."""
    with transaction.atomic():
        job = Job.objects.stalled(now).select_for_update().filter(pk=job_pk).first()
        if job is None:
            return 0
        due = next_attempts([job]).get(job.pk)
        existing = (
            Escalation.objects.select_for_update().filter(job=job, kind=STALLED, node_id="").first()
        )
        was_open = existing is not None and existing.status != Escalation.Status.RESOLVED
        escalation = apply_trigger(
            stall_trigger(job, now, due), job=job, existing=existing, source="stall check"
        )
        return int(not was_open and escalation.status == Escalation.Status.OPEN)
