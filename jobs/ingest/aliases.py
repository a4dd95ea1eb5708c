"""One trace, one job, whatever order its spans arrive in (docs/otlp.md, "How a trace finds its
job").

The OTLP mapping gives each span the job it can see: ``traceviz.job_id`` on the span, on its
resource or on another span of the trace in the same request, else the trace id. A trace named
only in a later request than some of its spans (a ``SimpleSpanProcessor`` exports the children
before their root, and so does a ``BatchSpanProcessor`` for a run longer than its delay) would
be split in two: the spans before the name under the trace id, the rest under the name.
``store_batch`` runs each batch through here, under the batch's append locks (and, for a batch
that names a trace, both jobs' projection locks), before it stores anything:

- ``locked_homes``: a trace is named when one of its spans arrives under a job id other than its
  trace id; the first name recorded wins (``JobAlias``: trace id -> job). Every event of a
  named trace, and every event sent under an alias (a trace's log records, an event sent to
  /api/v1/events under the trace id), goes to the named job, whatever job id its request gave
  it.
- ``rehome``: a job stored under a trace id before the trace was named moves to the named job.
  When that job has no row yet, the row is renamed: its events, steps, calls, escalations and
  failure groups stay with it. Otherwise its events move into the named job (but those the named
  job holds already under the same event id), its escalations move (or merge with the named
  job's of the same kind and node, ``actions.merge``) and its projection goes as retention
  deletes a job: its steps leave their failure groups, its dashboard hours are marked. Either
  way the named job is replayed from all its events, so its rows are those of the whole trace
  sent at once.
- ``record``: the new aliases, once their jobs have rows.
"""

from collections.abc import Mapping
from dataclasses import dataclass, replace

from jobs.contract.events import Event
from jobs.contract.otlp import trace_of
from jobs.escalations import actions
from jobs.ingest import failure_groups
from jobs.ingest.locks import lock_appends
from jobs.models import (
    DashboardDirtyHour,
    Escalation,
    FailureGroup,
    Job,
    JobAlias,
    ProjectionMark,
)
from jobs.models import Event as EventRow


class LockedTooFew(Exception):
    """An alias recorded (or re-pointed by a re-homing) after the batch first read the aliases
    sends some of its events to a job whose lock it does not hold: the caller rolls back,
    releasing its locks, and starts again. An alias changes only when it is recorded or its
    job is re-homed, so the next attempt, which reads it first, locks that job from the
    start."""


@dataclass(slots=True)
class Homes:
    """Where a batch's events go: ``events`` by (job id, event id) with their jobs resolved
    (a repeat that resolved to the same key kept once), and ``named``, the traces this batch
    names (trace id -> job id), to re-home and record."""

    events: dict[tuple[str, str], Event]
    named: dict[str, str]


def locked_homes(events: Mapping[tuple[str, str], Event]) -> Homes:
    """Take the append locks of every job the batch's events may go to (their job ids, their traces'
    ids and the jobs those are aliases of) and decide each event's job. Must run inside a
    transaction; raises ``LockedTooFew`` (see there)."""
    traces = {key: trace_of(event) for key, event in events.items()}
    ids = {job_id for job_id, _ in events} | {trace for trace in traces.values() if trace}
    guessed = JobAlias.objects.jobs_of(ids)
    locked = ids | set(guessed.values())
    lock_appends(locked)
    # Read again: an alias recorded since was recorded under the lock of its trace's id.
    stored = JobAlias.objects.jobs_of(ids)
    named: dict[str, str] = {}
    for key, event in events.items():
        trace = traces[key]
        if trace and trace not in stored and event.job_id != trace:
            named.setdefault(trace, stored.get(event.job_id, event.job_id))
    homes = {**named, **stored}
    resolved: dict[tuple[str, str], Event] = {}
    for (job_id, event_id), event in events.items():
        trace = traces[(job_id, event_id)]
        home = (homes.get(trace) if trace else None) or homes.get(job_id, job_id)
        if home not in locked:
            raise LockedTooFew(home)
        resolved.setdefault(
            (home, event_id), event if home == job_id else replace(event, job_id=home)
        )
    return Homes(resolved, named)


def rehome(named: Mapping[str, str]) -> set[str]:
    """Move each job stored under a trace id of ``named`` (trace id -> job id) to its named
    job; returns the named jobs that received one, which the caller replays whole (the moved
    events take generation 0, folded by that replay). The caller holds both jobs' append and
    projection locks, and brought both projections up to date (``projector.fold_locked``)."""
    if not named:
        return set()
    rows = {
        row["job_id"]: row
        for row in Job.objects.filter(job_id__in=[*named, *named.values()]).values(
            "id", "job_id", "partition_day", "started_at"
        )
    }
    received = set()
    for trace, job_id in sorted(named.items()):
        anonymous = rows.pop(trace, None)
        if anonymous is None:
            continue
        events = EventRow.objects.filter(job_id=trace, partition_day=anonymous["partition_day"])
        # The planner panels count the moved events under their job id by the events' hours.
        DashboardDirtyHour.objects.mark([anonymous["started_at"], *events.planner_hours()])
        note = (
            f"The job's first spans arrived under its trace id {trace}; a later span named it "
            f"{job_id} (traceviz.job_id), and the trace id is now an alias of {job_id}"
        )
        named_job = rows.get(job_id)
        if named_job is None:
            Job.objects.filter(pk=anonymous["id"]).update(job_id=job_id)
            events.update(job_id=job_id, generation=0)
            # The named job had no events (its row would exist): its mark, if any, goes; the
            # trace's mark, with the day of the moved events, becomes the job's.
            ProjectionMark.objects.filter(job_id=job_id).delete()
            ProjectionMark.objects.filter(job_id=trace).update(job_id=job_id)
            for escalation in Escalation.objects.filter(job_id=anonymous["id"]).order_by("pk"):
                actions.rehome(escalation, anonymous["id"], note)
            rows[job_id] = {**anonymous, "job_id": job_id}
        else:
            _merge(anonymous, named_job, events, note)
        received.add(job_id)
    return received


def _merge(anonymous: dict, named_job: dict, events, note: str) -> None:
    """Move the anonymous job's events and escalations into the named job and delete its
    projection, as retention deletes a job (``rehome``)."""
    pk, day = named_job["id"], named_job["partition_day"]
    held = EventRow.objects.filter(job_id=named_job["job_id"], partition_day=day)
    events.filter(event_id__in=held.values("event_id")).delete()
    # On PostgreSQL the rows move to the named job's day partition when it is another.
    events.update(job_id=named_job["job_id"], partition_day=day, generation=0)
    # The trace id holds no event now: its numbering may start again.
    ProjectionMark.objects.filter(job_id=anonymous["job_id"]).delete()
    same = {(e.kind, e.node_id): e for e in Escalation.objects.filter(job_id=pk)}
    for escalation in Escalation.objects.filter(job_id=anonymous["id"]).order_by("pk"):
        key = (escalation.kind, escalation.node_id)
        if key in same:
            same[key] = actions.merge(same[key], escalation, pk, note)
        else:
            actions.rehome(escalation, pk, note)
    JobAlias.objects.filter(job_id=anonymous["id"]).update(job_id=pk)
    FailureGroup.objects.filter(example_job_id=anonymous["id"]).update(example_job_id=pk)
    failure_groups.forget_jobs([anonymous["id"]])
    Job.objects.filter(pk=anonymous["id"]).delete_with_steps()


def record(named: Mapping[str, str]) -> None:
    """Record the traces ``named`` names (trace id -> job id): their jobs have rows now."""
    if not named:
        return
    pks = dict(Job.objects.filter(job_id__in=set(named.values())).values_list("job_id", "pk"))
    JobAlias.objects.bulk_create(
        [
            JobAlias(alias=trace, job_id=pks[job_id])
            for trace, job_id in sorted(named.items())
            if job_id in pks
        ],
        ignore_conflicts=True,
    )
