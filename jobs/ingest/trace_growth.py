"""Read what ``replay.growth`` needs to expand a batch's new spans onto the jobs' stored traces:
a few spans by id and the stored steps of the new steps' base nodes, never a whole trace, in a
few queries for all the batch's jobs (a collector's export holds spans of many live runs).

Callers hold the jobs' projection locks (``locks.lock_projections``) inside their transaction.
"""

from collections.abc import Iterable
from dataclasses import replace
from datetime import date
from functools import reduce
from operator import or_

from django.db.models import Q

from jobs.contract.events import Event
from jobs.ingest import database
from jobs.models import Event as EventRow
from jobs.models import Step
from jobs.replay import growth, spans, walk
from jobs.replay.spans import SpanView

STEP_COLUMNS = ("attempt", "trace_span_id", "started_at")


def grow(jobs: dict[str, dict], new_events: dict[str, list[Event]]) -> dict[str, growth.Grown]:
    """By job, for the jobs whose new spans can be expanded alone: what they add to its trace,
    with its new events (their spans replaced by the events they stand for) as the events to
    fold. ``jobs``: their stored Job rows (``projection.read_jobs``); a job left out is
    replayed whole."""
    growing: dict[str, growth.Growth] = {}
    for job_id, events in new_events.items():
        snapshot = jobs[job_id]["fold"] or {}
        if snapshot.get("version") == walk.FOLD_VERSION and snapshot["last_key"] is not None:
            span_events = [event for event in events if event.type == walk.SPAN]
            started = growth.Growth.start(job_id, snapshot, span_events)
            if started is not None:
                growing[job_id] = started
    stored = _read_spans(jobs, {job_id: g.wanted() for job_id, g in growing.items()})
    names = {}
    for job_id, g in growing.items():
        if g.place(stored.get(job_id, {})) and g.bases() is not None:
            names[job_id] = g.step_names()
    steps = _stored_steps(jobs, names)
    read = {job_id: growing[job_id].siblings_to_read(steps[job_id]) for job_id in steps}
    siblings = _read_spans(jobs, read)
    out = {}
    for job_id, job_steps in steps.items():
        grown = growing[job_id].extend(job_steps, siblings.get(job_id, {}))
        if grown is not None:
            others = [event for event in new_events[job_id] if event.type != walk.SPAN]
            out[job_id] = replace(grown, events=others + grown.events)
    return out


def _by_day(jobs: dict[str, dict], job_ids: Iterable[str]) -> dict[date, list[str]]:
    days: dict[date, list[str]] = {}
    for job_id in job_ids:
        days.setdefault(jobs[job_id]["partition_day"], []).append(job_id)
    return days


def _read_spans(
    jobs: dict[str, dict], wanted: dict[str, list[str]]
) -> dict[str, dict[str, SpanView]]:
    """The stored, readable spans of these ids, by job and span id (a job's spans all belong
    to its one trace: ``growth``)."""
    found: dict[str, dict[str, SpanView]] = {}
    for day, job_ids in _by_day(jobs, [j for j, ids in wanted.items() if ids]).items():
        pairs = [
            (job_id, f"otlp:{jobs[job_id]['fold']['spans']['trace_id']}:{span_id}")
            for job_id in job_ids
            for span_id in wanted[job_id]
        ]
        columns = ("type", "ts", "seq", "payload", "masked")
        rows = database.rows_by_pairs(EventRow, ("job_id", "event_id"), pairs, day, columns)
        for job_id, event_id, event_type, ts, seq, payload, masked in rows:
            if event_type == walk.SPAN:
                event = Event(event_type, job_id, event_id, ts, seq, payload, tuple(masked))
                span = spans.read_span(event)
                if span is not None:
                    found.setdefault(job_id, {})[span.span_id] = span
    return found


def _stored_steps(
    jobs: dict[str, dict], names: dict[str, dict[str, list[str] | None]]
) -> dict[str, list[growth.StoredStep]]:
    """By job: the stored steps of the node names ``Growth.step_names`` lists by base, and of
    a base it lists as None, every stored step whose node is the base or an iteration of it. A
    job one of whose steps is not a span's (contract events on the same node) is left out."""
    rows: dict[str, list[tuple]] = {job_id: [] for job_id in names}
    by_pk = {jobs[job_id]["id"]: job_id for job_id in names}
    for day, job_ids in _by_day(jobs, names).items():
        pairs = [
            (jobs[job_id]["id"], name)
            for job_id in job_ids
            for base, listed in sorted(names[job_id].items())
            for name in (listed or [base])
        ]
        named = database.rows_by_pairs(Step, ("job", "node_id"), pairs, day, STEP_COLUMNS)
        # By the unique index first: no step is numbered "base #2" from a base until one named
        # "base" exists (``spans.number_attempts``), so only the bases found have iterations.
        # The bases whose names Growth did not list: all their iterations, by prefix.
        open_bases = {
            (pk, node) for pk, node, *_ in named if names[by_pk[pk]].get(node, []) is None
        }
        if found := sorted(open_bases):
            iterated = reduce(
                or_, (Q(job_id=pk, node_id__startswith=f"{base} #") for pk, base in found)
            )
            named += Step.objects.filter(iterated, partition_day=day).values_list(
                "job_id", "node_id", *STEP_COLUMNS
            )
        for pk, *row in named:
            rows[by_pk[pk]].append(tuple(row))
    out = {}
    for job_id, job_rows in rows.items():
        # SQLite's LIKE ignores case: keep the exact names.
        bases = names[job_id]
        stored = [
            growth.StoredStep(*row)
            for row in job_rows
            if any(row[0] == b or row[0].startswith(f"{b} #") for b in bases)
        ]
        if all(step.started_at is not None and step.span_id for step in stored):
            out[job_id] = stored
    return out
