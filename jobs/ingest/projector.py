"""The projector (docs/architecture.md, "Data flow"): folds each dirty job's unprojected events
into its rows, coalesced, under the job's projection lock.

An append stores a job's events numbered after its mark (``ProjectionMark.generation``) and
leaves. A fold reads the mark under the job's projection lock, folds every event numbered after
``projected`` and up to the mark's generation at once (read from the database, whatever request
brought them), and sets ``projected`` to that generation in the same transaction as the rows.
An append that came meanwhile numbered its events higher: the job stays dirty and the next fold
takes them. A fold that fails or is killed rolls back whole: the mark still says dirty.

Three callers: a request projecting its own jobs before it answers (``project_own``), the
projector loop (``manage.py run_projector``, ``project_dirty``) and re-homing (``fold_locked``,
inside the append's transaction).
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime

from django.db import transaction

from jobs.contract.events import Event
from jobs.ingest import counters, database, locks
from jobs.ingest.projection import project_jobs, read_jobs
from jobs.models import ByCodePoint, ProjectionMark
from jobs.models import Event as EventRow

# Jobs a projector loop folds per transaction: enough to share the queries among many live jobs,
# few enough that its locks and row locks are held briefly.
DIRTY_BATCH = 50
# Dirty marks a projector looks at per batch, in batches' worth: the oldest ones may be another
# projector's batch in progress, and the next ones are then this one's.
CANDIDATE_BATCHES = 4


@dataclass(frozen=True, slots=True)
class Mark:
    """A dirty job's mark as a fold read it."""

    generation: int
    projected: int
    whole: bool
    partition_day: date


def project_dirty(job_ids: Iterable[str] | None = None, *, limit: int = DIRTY_BATCH) -> int:
    """Fold up to ``limit`` dirty jobs (of ``job_ids``, or the longest dirty) that no other
    projector is folding, in one transaction; returns how many jobs were folded. A job whose
    lock another holds is skipped, never waited for: it is being folded, and the next dirty
    ones are taken instead (two projectors would otherwise both reach for the oldest marks,
    and the one that lost would fold nothing until the other's batch committed)."""
    with transaction.atomic():
        marks = ProjectionMark.objects.dirty()
        if job_ids is not None:
            marks = marks.filter(job_id__any=sorted(set(job_ids)))
        candidates = list(
            marks.order_by("first_marked_at", "job_id").values_list("job_id", flat=True)[
                : limit * CANDIDATE_BATCHES
            ]
        )
        taken: set[str] = set()
        while candidates and len(taken) < limit:
            wanted = limit - len(taken)
            taken |= locks.try_lock_projections(candidates[:wanted])
            candidates = candidates[wanted:]
        return fold_locked(taken)


def project_own(job_ids: Iterable[str]) -> int:
    """Fold these jobs' unprojected events (a request's own jobs, after its append committed);
    returns how many were folded here. A job another worker is folding is waited for, then
    folded only if something is left: what that fold took is not folded twice."""
    job_ids = sorted(set(job_ids))
    if not job_ids:
        return 0
    with transaction.atomic():
        locks.lock_projections(job_ids)
        return fold_locked(job_ids)


def fold_locked(job_ids: Iterable[str]) -> int:
    """Fold the dirty ones of these jobs, whose projection locks the caller holds in its
    transaction, and clear their marks; returns how many were folded."""
    job_ids = sorted(set(job_ids))
    marks = {
        job_id: Mark(generation, projected, whole, day)
        for job_id, generation, projected, whole, day in ProjectionMark.objects.dirty()
        .filter(job_id__any=job_ids)
        .values_list("job_id", "generation", "projected", "whole", "partition_day")
    }
    if not marks:
        return 0
    new_events, received = unprojected_events(marks)
    folded = sorted(job_id for job_id, mark in marks.items() if mark.whole or new_events[job_id])
    counted = project_jobs(
        folded,
        received_at=received,
        new_events={job_id: new_events[job_id] for job_id in folded},
        days={job_id: mark.partition_day for job_id, mark in marks.items()},
        existing=read_jobs(folded),
        whole={job_id for job_id in folded if marks[job_id].whole},
        through={job_id: mark.generation for job_id, mark in marks.items()},
    )
    counters.record_batch(
        (event for events in new_events.values() for event in events),
        projections=counted.paths,
        span_steps=counted.span_steps,
    )
    clear(marks)
    return len(marks)


def unprojected_events(
    marks: Mapping[str, Mark],
) -> tuple[dict[str, list[Event]], dict[str, datetime]]:
    """The events of these jobs numbered after their marks' ``projected`` and up to their
    ``generation`` (all committed: a generation is taken under the mark's row lock), as replay
    takes them, by job; and when the newest of each job's arrived."""
    by_job: dict[str, list[Event]] = {job_id: [] for job_id in marks}
    received: dict[str, datetime] = {}
    if not marks:
        return by_job, received
    after = database.after_marks(
        {job_id: (mark.projected, mark.generation) for job_id, mark in marks.items()}
    )
    rows = EventRow.objects.filter(
        after, partition_day__in=sorted({mark.partition_day for mark in marks.values()})
    )
    for job_id, event_id, event_type, ts, seq, payload, masked, at in rows.values_list(
        "job_id", "event_id", "type", "ts", "seq", "payload", "masked", "received_at"
    ):
        by_job[job_id].append(Event(event_type, job_id, event_id, ts, seq, payload, tuple(masked)))
        if job_id not in received or at > received[job_id]:
            received[job_id] = at
    return by_job, received


def clear(through: Mapping[str, Mark | int]) -> None:
    """Set these jobs' marks projected up to the generation given (a ``Mark``'s or a number);
    a mark whose generation went past it stays dirty (and keeps ``whole``: the newer append
    may have asked for it). Locks the marks first, in the order appends do (``lock_marks``)."""
    generations = {
        job_id: mark.generation if isinstance(mark, Mark) else mark
        for job_id, mark in through.items()
    }
    if not generations:
        return
    lock_marks(generations)
    database.set_projected(generations)


def lock_marks(job_ids: Iterable[str]) -> list[str]:
    """Lock these jobs' marks (their rows, until the transaction ends) in job id order by code
    point, the order an append's upsert locks them in (``sorted``); returns the ids in the order
    locked. Not in the database's collation: one that orders "a" before "B" would let a fold and
    an append lock two marks in opposite orders, and deadlock."""
    rows = ProjectionMark.objects.filter(job_id__any=sorted(job_ids))
    locked = rows.order_by(ByCodePoint("job_id")).select_for_update()
    return list(locked.values_list("job_id", flat=True))


def dirty_summary(now: datetime) -> tuple[int, float]:
    """How many jobs are dirty, and how long the oldest has been (seconds; 0 with none)."""
    marks = ProjectionMark.objects.dirty()
    count = marks.count()
    oldest = marks.order_by("first_marked_at").values_list("first_marked_at", flat=True).first()
    return count, max((now - oldest).total_seconds(), 0.0) if oldest else 0.0


@dataclass(frozen=True, slots=True)
class Backlog:
    """A job's events not yet folded into its rows: how many, and since when it is dirty."""

    events: int
    since: datetime


def backlog(job_id: str) -> Backlog | None:
    """The job's unprojected events (None when its rows hold every event it received, a mark
    left by a resend of stored events among them): one read of its mark, and for a dirty job a
    count over its newest appends' events."""
    mark = (
        ProjectionMark.objects.dirty()
        .filter(job_id=job_id)
        .values_list("projected", "partition_day", "first_marked_at")
        .first()
    )
    if mark is None:
        return None
    projected, day, since = mark
    events = EventRow.objects.filter(
        job_id=job_id, partition_day=day, generation__gt=projected
    ).count()
    return Backlog(events, since) if events else None
