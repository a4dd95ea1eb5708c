"""Retention: delete what is older than TRACEVIZ_RETENTION_DAYS (0 keeps everything).

A job's events go together: the Event table is the source of truth and projection replays a
job's whole stream, so deleting part of a stream would change its projection. A job expires
when its newest event was received before the cutoff and it has no unresolved escalation
(support still owes those an answer); its events, steps, escalations, audit entries and
notifications are deleted with it. Deleting a resolved escalation of a job whose events stay
would make the next replay of that job open it again, so the only escalations deleted on their
own are those with no job (alert rules) resolved before the cutoff.

Everything works in bounded batches, so one run never holds long locks or a huge transaction.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from jobs.ingest.locks import lock_jobs
from jobs.models import DashboardDirtyHour, Escalation, Event, Job

JOB_BATCH = 100
EVENT_BATCH = 5000
MAX_BATCHES = 50


@dataclass(slots=True)
class RetentionResult:
    jobs: int = 0
    events: int = 0
    escalations: int = 0


def apply_retention(
    days: int,
    now: datetime | None = None,
    *,
    job_batch: int = JOB_BATCH,
    event_batch: int = EVENT_BATCH,
    max_batches: int = MAX_BATCHES,
) -> RetentionResult:
    """Delete expired jobs (with their events) and job-less resolved escalations; at most
    ``max_batches`` batches of each per call, so a backlog is worked off over several runs.
    ``days`` of 0 deletes nothing."""
    result = RetentionResult()
    if days <= 0:
        return result
    cutoff = (now or timezone.now()) - timedelta(days=days)
    unresolved = Escalation.objects.filter(job=OuterRef("pk")).exclude(
        status=Escalation.Status.RESOLVED
    )
    expired = (
        Job.objects.filter(last_received_at__lt=cutoff)
        .exclude(Exists(unresolved))
        .order_by("last_received_at", "pk")
    )
    for _ in range(max_batches):
        candidates = list(expired.values_list("job_id", flat=True)[:job_batch])
        if not candidates:
            break
        with transaction.atomic():
            # Ingest's per-job locks: an event arriving now either lands before this (and the
            # job no longer expires) or after (and starts the job afresh).
            lock_jobs(candidates)
            job_ids = list(expired.filter(job_id__in=candidates).values_list("job_id", flat=True))
            result.events += _delete_events(job_ids, event_batch)
            doomed = Job.objects.filter(job_id__in=job_ids)
            DashboardDirtyHour.objects.mark(doomed.values_list("started_at", flat=True))
            doomed.delete()
        result.jobs += len(job_ids)
    old_resolved = Escalation.objects.filter(
        job__isnull=True, status=Escalation.Status.RESOLVED, resolved_at__lt=cutoff
    ).order_by("resolved_at", "pk")
    for _ in range(max_batches):
        ids = list(old_resolved.values_list("pk", flat=True)[:job_batch])
        if not ids:
            break
        Escalation.objects.filter(pk__in=ids).delete()
        result.escalations += len(ids)
    return result


def _delete_events(job_ids: list[str], batch: int) -> int:
    deleted = 0
    while True:
        ids = list(Event.objects.filter(job_id__in=job_ids).values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        Event.objects.filter(pk__in=ids).delete()
        deleted += len(ids)
