"""Retention: delete what is older than TRACEVIZ_RETENTION_DAYS (0 keeps everything).

A job's events go together: the Event table is the source of truth and projection replays a
job's whole stream, so deleting part of a stream would change its projection. A job expires
when its newest event was received before the cutoff and it has no unresolved escalation
(support still owes those an answer); its events, steps, calls, escalations, audit entries and
notifications are deleted with it. Deleting a resolved escalation of a job whose events stay
would make the next replay of that job open it again, so the only escalations deleted on their
own are those with no job (alert rules) resolved before the cutoff.

On PostgreSQL events and steps are partitioned by their job's ``partition_day`` (migration
0015), so a whole day before the cutoff goes without deleting its rows one by one: its jobs
that are kept (an event since the cutoff, an unresolved escalation) move to today's partitions,
the others' Job rows are deleted, and the day's partitions are dropped. Expired jobs of the
days the cutoff falls in (and every expired job on SQLite) are deleted row by row.

Everything works in bounded batches of jobs, each under the jobs' ingest locks, so one run never
holds long locks or a huge transaction, and an event arriving meanwhile either lands before
its job is looked at (and the job no longer expires) or after (and starts the job afresh). A
batch that fails goes again one job at a time; a job that fails alone is logged and kept (with
its day's partitions), and every other job goes (``jobs.models.contained_batch``).

Span resources (``SpanResource``: an OpenTelemetry resource or scope stored once for the
spans and log records that carry it) first seen before the cutoff go once no event references
them, looked at a batch at a time; each batch holds off new resources while it looks
(``database.lock_out_writers``), so none goes that a batch being stored references.
"""

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from functools import partial

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from jobs.ingest import database, failure_groups
from jobs.ingest.locks import lock_jobs
from jobs.models import (
    DashboardDirtyHour,
    Escalation,
    Event,
    Job,
    ProjectionMark,
    SpanResource,
    Step,
    contained_batch,
)

logger = logging.getLogger(__name__)
JOB_BATCH = 100
EVENT_BATCH = 5000
MAX_BATCHES = 50
# Jobs per transaction when a day's partitions go (their rows are not deleted one by one).
DAY_JOB_BATCH = 1000
# Span resources looked at per transaction.
RESOURCE_BATCH = 500


@dataclass(slots=True)
class RetentionResult:
    jobs: int = 0
    events: int = 0
    escalations: int = 0
    days: int = 0
    moved: int = 0
    resources: int = 0


def expired(cutoff: datetime) -> QuerySet:
    """Jobs whose newest event was received before ``cutoff`` and that have no unresolved
    escalation."""
    unresolved = Escalation.objects.filter(job=OuterRef("pk")).exclude(
        status=Escalation.Status.RESOLVED
    )
    return Job.objects.filter(last_received_at__lt=cutoff).exclude(Exists(unresolved))


def apply_retention(
    days: int,
    now: datetime | None = None,
    *,
    job_batch: int = JOB_BATCH,
    event_batch: int = EVENT_BATCH,
    max_batches: int = MAX_BATCHES,
) -> RetentionResult:
    """Delete expired jobs (with their events) and job-less resolved escalations; at most
    ``max_batches`` batches of each per call, so a backlog is worked off over several runs
    (whole days on PostgreSQL go first, each in full). ``days`` of 0 deletes nothing."""
    result = RetentionResult()
    if days <= 0:
        return result
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    today = now.astimezone(UTC).date()
    for day in database.partition_days():
        if day >= cutoff.astimezone(UTC).date() or day >= today:
            break
        _drop_day(day, today, cutoff, result)
    stale = expired(cutoff).order_by("last_received_at", "pk")
    failed: set[str] = set()
    for _ in range(max_batches):
        candidates = list(
            stale.exclude(job_id__in=failed).values_list("job_id", flat=True)[:job_batch]
        )
        if not candidates:
            break
        done, unhandled = contained_batch(
            logger, _jobs_label, candidates, partial(_delete_jobs, stale, event_batch)
        )
        failed.update(unhandled)
        for jobs, events in done:
            result.jobs += jobs
            result.events += events
    old_resolved = Escalation.objects.filter(
        job__isnull=True, status=Escalation.Status.RESOLVED, resolved_at__lt=cutoff
    ).order_by("resolved_at", "pk")
    for _ in range(max_batches):
        ids = list(old_resolved.values_list("pk", flat=True)[:job_batch])
        if not ids:
            break
        Escalation.objects.filter(pk__in=ids).delete()
        result.escalations += len(ids)
    result.resources = forget_resources(cutoff)
    return result


def forget_resources(cutoff: datetime, batch: int = RESOURCE_BATCH) -> int:
    """Delete the span resources first seen before ``cutoff`` that no event references any
    more, looking at ``batch`` of them per transaction (in digest order, every one each run: a
    resource still referenced never holds up the others); returns how many went."""
    old = SpanResource.objects.filter(first_seen__lt=cutoff).order_by("digest")
    deleted, after = 0, ""
    while digests := list(old.filter(digest__gt=after).values_list("digest", flat=True)[:batch]):
        after = digests[-1]
        done, _failed = contained_batch(logger, _resources_label, digests, _delete_unreferenced)
        if None in done:
            logger.info("retention left span resources for its next run: ingest kept writing")
            break
        deleted += sum(count for count in done if count is not None)
    return deleted


def _resources_label(digests: list[str]) -> str:
    if len(digests) == 1:
        return f"retention of span resource {digests[0]}"
    return f"retention of {len(digests)} span resources ({digests[0]} to {digests[-1]})"


def _delete_unreferenced(digests: list[str]) -> int | None:
    """Delete those of ``digests`` no event references, once no batch can be about to; returns
    how many, or None when ingest held the resources too long to wait for."""
    with transaction.atomic():
        if not database.lock_out_writers(SpanResource):
            return None
        referenced = Event.objects.resources_referenced(digests)
        unreferenced = [digest for digest in digests if digest not in referenced]
        SpanResource.objects.filter(digest__in=unreferenced).delete()
    return len(unreferenced)


def _jobs_label(job_ids: list[str]) -> str:
    if len(job_ids) == 1:
        return f"retention of job {job_ids[0]!r}"
    return f"retention of {len(job_ids)} jobs ({job_ids[0]!r} to {job_ids[-1]!r})"


def _delete_jobs(stale: QuerySet, event_batch: int, candidates: list[str]) -> tuple[int, int]:
    """Delete those of ``candidates`` that are still expired (``stale``) under their ingest
    locks, with their events and rows; returns how many jobs and events."""
    with transaction.atomic():
        lock_jobs(candidates)
        job_ids = list(stale.filter(job_id__in=candidates).values_list("job_id", flat=True))
        # The planner panels count events by their own hour: those hours change too.
        planner_hours = Event.objects.filter(job_id__in=job_ids).planner_hours()
        events = _delete_events(job_ids, event_batch)
        doomed = Job.objects.filter(job_id__in=job_ids)
        DashboardDirtyHour.objects.mark(
            [*doomed.values_list("started_at", flat=True), *planner_hours]
        )
        failure_groups.forget_jobs(sorted(doomed.values_list("pk", flat=True)))
        doomed.delete_with_steps()
        # Their events are gone: a job id sent again starts a new mark, on the day it comes.
        ProjectionMark.objects.filter(job_id__in=job_ids).delete()
    return len(job_ids), events


def _delete_events(job_ids: list[str], batch: int) -> int:
    deleted = 0
    while True:
        ids = list(Event.objects.filter(job_id__in=job_ids).values_list("pk", flat=True)[:batch])
        if not ids:
            return deleted
        Event.objects.filter(pk__in=ids).delete()
        deleted += len(ids)


def _drop_day(day: date, today: date, cutoff: datetime, result: RetentionResult) -> None:
    """Move the day's kept jobs to today's partitions, delete its other jobs' rows, then drop
    the day's partitions with every event and step in them."""
    database.ensure_partitions([today])
    of_day = Job.objects.filter(partition_day=day).order_by("pk")
    failed: set[str] = set()
    while batch := list(
        of_day.exclude(job_id__in=failed).values_list("job_id", flat=True)[:DAY_JOB_BATCH]
    ):
        done, unhandled = contained_batch(
            logger, _jobs_label, batch, partial(_empty_day, day, today, cutoff)
        )
        failed.update(unhandled)
        for gone, kept in done:
            result.jobs += gone
            result.moved += kept
    if failed:
        # Its partitions hold the rows of jobs that are still there: the day stays, and the
        # next run tries those jobs again.
        logger.error("retention kept the day %s: %d of its jobs could not go", day, len(failed))
        return
    with transaction.atomic():
        of_partition = Event.objects.filter(partition_day=day)
        result.events += of_partition.count()
        # The events that go (the kept jobs' moved out): their hours' planner counts change.
        DashboardDirtyHour.objects.mark(of_partition.planner_hours())
        # A mark of that day has no event left: a job id sent again starts anew.
        ProjectionMark.objects.filter(partition_day=day).delete()
        database.drop_partitions(day)
    result.days += 1


def _empty_day(day: date, today: date, cutoff: datetime, batch: list[str]) -> tuple[int, int]:
    """Of these jobs of ``day``, delete the expired ones' Job rows and move the others to
    ``today``'s partitions; returns how many of each."""
    with transaction.atomic():
        lock_jobs(batch)
        jobs = Job.objects.filter(job_id__in=batch, partition_day=day)
        doomed = set(expired(cutoff).filter(pk__in=jobs).values_list("pk", flat=True))
        kept = list(jobs.exclude(pk__in=doomed).values_list("pk", "job_id"))
        _move(kept, day, today)
        gone = Job.objects.filter(pk__in=doomed)
        DashboardDirtyHour.objects.mark(gone.values_list("started_at", flat=True))
        ProjectionMark.objects.filter(job_id__in=gone.values("job_id")).delete()
        failure_groups.forget_jobs(sorted(doomed))
        # Their steps and events stay until the partitions go (no row-by-row deletes).
        gone.delete()
    return len(doomed), len(kept)


def _move(jobs: list[tuple[int, str]], day: date, today: date) -> None:
    """Move these jobs' rows from ``day``'s partitions to ``today``'s."""
    if not jobs:
        return
    pks, job_ids = [pk for pk, _ in jobs], [job_id for _, job_id in jobs]
    Event.objects.filter(job_id__in=job_ids, partition_day=day).update(partition_day=today)
    Step.objects.filter(job_id__in=pks, partition_day=day).update(partition_day=today)
    Job.objects.filter(pk__in=pks).update(partition_day=today)
    # Their next appends go to the day their rows are on now.
    ProjectionMark.objects.filter(job_id__in=job_ids).update(partition_day=today)
