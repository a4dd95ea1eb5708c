"""Projection (docs/architecture.md): a job's events folded into its Job, Step and Escalation rows.

Incremental: each Job row keeps the replay fold's snapshot (``Job.fold``). When every new event
of a job sorts after the snapshot's last event, the batch is folded onto the snapshot with the
steps of the nodes it touches: only the Step rows that changed are written, the Job row is
updated in place, and the cost grows with the batch, not with the job. An event that sorts
earlier (out-of-order delivery), a missing snapshot or one of another fold version falls back to
a full replay of that job from all its events. Both paths run the same fold, so the rows are
exactly ``walk.build``'s output whatever order the events arrived in (replay parity). A job's
new OpenTelemetry spans are first expanded onto its stored trace (``trace_growth``) into the
events and calls they stand for, or the job is replayed whole when that would not be exact.

Callers hold the jobs' projection locks (``locks.lock_projections``) inside their transaction;
the projector (``projector``) says which events are new.
"""

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import date, datetime
from decimal import Decimal
from operator import attrgetter

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from jobs.contract.events import Event
from jobs.escalations import actions, group_lifecycle, repair_budget
from jobs.ingest import counters, database, failure_groups, failure_records, trace_growth
from jobs.models import (
    MAX_BIGINT,
    PLANNER_EVENT_TYPES,
    Call,
    DashboardDirtyHour,
    Escalation,
    Job,
    ProjectionMark,
    Step,
)
from jobs.models import Event as EventRow
from jobs.replay import strip as strip_cells
from jobs.replay import walk
from jobs.replay.calls import CallRecord
from jobs.replay.failures import RunStatus, Segment
from jobs.replay.state import JOB_ATTRIBUTES, JobState, ReplayConfig, StepState

STEP_STATE_FIELDS = tuple(f.name for f in fields(StepState))
step_values = attrgetter(*STEP_STATE_FIELDS)
# The StepState fields read back from Step rows, node_id first (the key read with them).
STEP_LOADED = ("node_id", *(name for name in STEP_STATE_FIELDS if name != "node_id"))
CALL_FIELDS = tuple(f.name for f in fields(CallRecord))
STEP_KEY = ("job_id", "node_id", "attempt", "partition_day")
INCREMENTAL, FULL = "incremental", "full"
# The Job row columns projection reads back: the fold resumes from them (the others it rewrites).
RESUMED_FROM = (
    "job_id",
    "partition_day",
    "fold",
    "payload_results",
    "metadata",
    "segment_strip",
    "started_at",
    "last_received_at",
    # A change of workflow re-signs every failure of the job: a full replay.
    "workflow",
    "provider",
    "model",
)

# The Job row columns an append reads, under its jobs' append locks: the day their events go to
# and the snapshot that says whether they are new to the job (``unseen_jobs``). Not the rest of
# RESUMED_FROM: a live producer's request touches hundreds of jobs, and reading (parsing) their
# timelines and results held every other request for those jobs waiting.
APPEND_READS = ("job_id", "partition_day", "fold")


def replay_config() -> ReplayConfig:
    return ReplayConfig(max_retries=settings.TRACEVIZ_MAX_RETRIES)


@dataclass(slots=True)
class Projected:
    """One job's replayed state and how it was reached (``INCREMENTAL`` or ``FULL``)."""

    state: JobState
    path: str
    fold: walk.Fold
    # An incremental fold's stored grouped steps as they were read, by (node, attempt): (group
    # id, started_at, finished_at); the failure records of the steps it did not change keep
    # that group.
    stored_groups: dict[tuple[str, int], tuple] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Counted:
    """What a projection run leaves to count (``counters``): jobs by path, and the steps spans
    became by result type. The caller writes them in one statement, last in its transaction:
    counter rows are shared by every fold, so a second write of them before or after the
    failure groups' totals (shared too) would let two folds lock the two in opposite orders."""

    paths: Counter = field(default_factory=Counter)
    span_steps: Counter = field(default_factory=Counter)


def load_events(
    job_ids: Sequence[str],
    days: dict[str, date] | None = None,
    through: Mapping[str, int] | None = None,
) -> dict[str, list[Event]]:
    """Every stored event of these jobs, as replay takes them. With ``days``, the jobs'
    partition days (every job's), only those days' partitions are read. ``through``: by job,
    the last append (``ProjectionMark.generation``) to read; a later one is left for the next
    fold."""
    by_job: dict[str, list[Event]] = {job_id: [] for job_id in job_ids}
    through = through or {}
    rows = EventRow.objects.filter(job_id__in=job_ids)
    if days is not None:
        rows = rows.filter(partition_day__in=sorted({days[job_id] for job_id in job_ids}))
    # A plain fetch: a server-side cursor (iterator) plans for the first rows and may scan.
    for job_id, event_id, event_type, ts, seq, payload, masked, generation in rows.values_list(
        "job_id", "event_id", "type", "ts", "seq", "payload", "masked", "generation"
    ):
        if generation <= through.get(job_id, generation):
            by_job[job_id].append(
                Event(event_type, job_id, event_id, ts, seq, payload, tuple(masked))
            )
    return by_job


def event_days(job_ids: Sequence[str]) -> dict[str, date]:
    """The partition day of these jobs' stored events (a job without a row: a rebuild)."""
    return dict(
        EventRow.objects.filter(job_id__in=job_ids)
        .values_list("job_id", "partition_day")
        .distinct()
    )


def read_jobs(job_ids: Sequence[str], columns: Sequence[str] = RESUMED_FROM) -> dict[str, dict]:
    """The stored Job rows of these jobs (those that have one), by job_id: their id and the
    columns projection resumes from (``RESUMED_FROM``), or the append's (``APPEND_READS``)."""
    rows = Job.objects.filter(job_id__any=job_ids).values("id", *columns)
    return {row["job_id"]: row for row in rows}


def project_jobs(
    job_ids: Sequence[str],
    *,
    received_at: Mapping[str, datetime] | None = None,
    new_events: dict[str, list[Event]] | None = None,
    days: dict[str, date] | None = None,
    existing: dict[str, dict] | None = None,
    full: bool = False,
    whole: Collection[str] = (),
    through: Mapping[str, int] | None = None,
) -> Counted:
    """Project these jobs and write their Job, Step and Escalation rows; returns what the
    caller counts (``counters``) once, last in its transaction: how many jobs went each path
    (``INCREMENTAL``, ``FULL``) and the steps spans became.

    ``new_events`` are the job's events not folded yet (``projector``), by job: folded onto
    each job's snapshot when they all sort after it, else (and for ``full``, and for jobs
    without new events) the job is replayed from every stored event up to ``through`` (by job,
    the mark's generation the fold reads to). ``received_at``, by job, is when its new events
    arrived (the stall clock); a rebuild passes None and keeps each job's receive time.
    ``days`` are the partition days the caller stored new jobs' events under (a job with a row
    keeps its own). ``existing`` is ``read_jobs`` of at least these jobs, when the caller read
    it already (under the jobs' locks). ``whole``: jobs replayed from every stored event
    whatever their new events (a job that received a re-homed job's events, ``aliases``).
    """
    if not job_ids:
        return Counted()
    config = replay_config()
    new_events = new_events or {}
    if existing is None:
        existing = read_jobs(job_ids)
    existing = {job_id: existing[job_id] for job_id in job_ids if job_id in existing}
    foldable = {job_id: events for job_id, events in new_events.items() if job_id not in whole}
    projected = {} if full else _fold_onto_snapshots(existing, foldable, config)
    replay_whole = [job_id for job_id in job_ids if job_id not in projected]
    # A job without a row has no other events than the new ones: no need to read them back.
    to_load = [j for j in replay_whole if j in existing or j not in new_events or j in whole]
    days = {
        **(days or {}),
        **event_days([j for j in to_load if j not in existing]),
        **{job_id: row["partition_day"] for job_id, row in existing.items()},
    }
    events_by_job = {**{j: new_events[j] for j in replay_whole if j not in to_load}}
    events_by_job.update(load_events(to_load, days, through))
    for job_id, events in events_by_job.items():
        if events:
            fold = walk.Fold.of(events, config)
            projected[job_id] = Projected(fold.finish(), FULL, fold)
    if not projected:
        return Counted()
    rows = [
        job_row(
            p.state,
            _received_at(existing.get(job_id), (received_at or {}).get(job_id)),
            p.fold.snapshot(),
            days[job_id],
        )
        for job_id, p in projected.items()
    ]
    # The dashboard rollup recomputes these jobs' start hours (before and after) later, and
    # (the planner panels) the hours of their new job_started and planner events.
    DashboardDirtyHour.objects.mark(
        [job["started_at"] for job in existing.values()]
        + [r["started_at"] for r in rows]
        + [e.ts for events in new_events.values() for e in events if e.type in PLANNER_EVENT_TYPES]
    )
    # One upsert writes new and known jobs alike; a known job keeps its id (escalations
    # point at it).
    ids = database.upsert_rows(Job, rows, unique=("job_id",))
    earlier, step_groups = _write_steps(projected, existing, ids, days)
    contributions = failure_records.write(projected, existing, ids, step_groups)
    failure_records.write_providers(
        projected,
        ids,
        {
            job_id: events_by_job.get(job_id, []) if p.path == FULL else new_events.get(job_id, [])
            for job_id, p in projected.items()
        },
    )
    _write_calls(projected, existing, ids)
    _apply_escalations(projected, rows, ids)
    if contributions:
        # Last: the failure groups' totals are rows every batch may update, and their row locks
        # last until commit, so concurrent batches wait on each other only from here on.
        seen = failure_groups.apply(contributions)
        if seen:
            # A group's lifecycle reads what was new to it (a rebuild brings nothing new).
            versions = {
                ids[(job_id,)]: group_lifecycle.job_version(p.state.metadata)
                for job_id, p in projected.items()
            }
            group_lifecycle.note_seen(seen, versions)
    return Counted(
        Counter(p.path for p in projected.values()),
        _new_span_steps(projected, earlier, new_events),
    )


def _fold_onto_snapshots(
    existing: dict[str, dict], new_events: dict[str, list[Event]], config: ReplayConfig
) -> dict[str, Projected]:
    """Fold each job's new events onto its snapshot where they all sort after it; new spans
    first become the events they stand for, expanded onto the job's trace where they can be
    (``trace_growth``), with the calls they add."""
    spans_of = {
        job_id: events
        for job_id, events in new_events.items()
        if job_id in existing and any(event.type == walk.SPAN for event in events)
    }
    grown = trace_growth.grow(existing, spans_of) if spans_of else {}
    plans = {}
    for job_id, events in new_events.items():
        job = existing.get(job_id)
        if job_id in grown:
            events = grown[job_id].events
        # New spans that stand for no event (calls whose step has not come) still grow it.
        snapshot = job["fold"] if job and job_id in grown and not events else _foldable(job, events)
        if job is not None and snapshot is not None:
            plans[job_id] = (job, snapshot, walk.sort_events(events))
    if not plans:
        return {}
    needed = {
        job["id"]: walk.Fold.nodes_needed(snapshot, events)
        for job, snapshot, events in plans.values()
    }
    steps, stored_groups = _load_steps(
        needed, {job["id"]: job["partition_day"] for job, _, _ in plans.values()}
    )
    projected = {}
    for job_id, (job, snapshot, events) in plans.items():
        fold = walk.Fold.resume(
            job_id,
            snapshot,
            steps=steps.get(job["id"], []),
            nodes=needed[job["id"]],
            payload_results=job["payload_results"],
            metadata=job["metadata"],
            strip=job["segment_strip"],
            config=config,
        )
        if job_id in grown:
            fold.take_growth(grown[job_id])
        try:
            for event in events:
                fold.apply(event)
        except walk.NeedsFullReplay:
            continue
        state = fold.finish()
        if state.attributes.get("workflow", "") != job["workflow"]:
            continue  # the job's failure signatures change: replayed whole
        projected[job_id] = Projected(state, INCREMENTAL, fold, stored_groups.get(job["id"], {}))
    return projected


def _foldable(job: dict | None, events: list[Event]) -> dict | None:
    """The Job row's snapshot when ``events`` can be folded onto it: one of this fold version,
    no span among the events (``trace_growth`` expands them first) nor log record, and every
    event sorting after its last one."""
    snapshot = job["fold"] if job is not None else None
    if not snapshot or snapshot.get("version") != walk.FOLD_VERSION or not events:
        return None
    if snapshot["last_key"] is None:
        return None  # nothing folded yet (spans that stood for no event)
    if any(event.type in (walk.SPAN, walk.LOG) for event in events):
        return None  # a log record may change a stored call or step: the job is replayed
    return snapshot if walk.all_after(snapshot, events) else None


def unseen_jobs(
    existing: dict[str, dict], events: dict[str, list[Event]], clean: Collection[str]
) -> set[str]:
    """The jobs none of whose stored events can be among their ``events`` (a hint: should one
    be stored after all, the insert looks every row up): new jobs (no Job row, and the append
    found no mark: among ``clean`` with no row) and ``clean`` ones (every stored event folded)
    whose events all fold onto their snapshot (a folded event sorts at or before the
    snapshot's last one, and a resend sorts where it did). ``existing`` is ``read_jobs`` (its
    ``APPEND_READS`` at least) of at least these jobs."""
    return {
        job_id
        for job_id, job_events in events.items()
        if job_id in clean
        and (job_id not in existing or _foldable(existing[job_id], job_events) is not None)
    }


def _load_steps(
    nodes_by_job: dict[int, set[str]], days: dict[int, date]
) -> tuple[dict[int, list[StepState]], dict[int, dict[tuple[str, int], tuple]]]:
    """Every step of these nodes, by job pk, and the grouped ones' (group id, started_at,
    finished_at) by job pk and (node, attempt): one query per partition day, by the step
    unique index."""
    pairs_by_day: dict[date, list[tuple]] = {}
    for job_pk, nodes in nodes_by_job.items():
        pairs_by_day.setdefault(days[job_pk], []).extend((job_pk, n) for n in sorted(nodes))
    by_job: dict[int, list[StepState]] = {}
    stored_groups: dict[int, dict[tuple[str, int], tuple]] = {}
    for day, pairs in pairs_by_day.items():
        if not pairs:
            continue
        rows = database.rows_by_pairs(
            Step, ("job", "node_id"), pairs, day, ("failure_group_id", *STEP_LOADED)
        )
        for job_pk, _node, group_id, *values in rows:
            step = StepState(**dict(zip(STEP_LOADED, values, strict=True)))
            step.result_type = step.result_type or None
            by_job.setdefault(job_pk, []).append(step)
            if group_id is not None:
                stored_groups.setdefault(job_pk, {})[(step.node_id, step.attempt)] = (
                    group_id,
                    step.started_at,
                    step.finished_at,
                )
    return by_job, stored_groups


def _received_at(previous: dict | None, received_at: datetime | None) -> datetime:
    """When the job's newest events arrived: now for a batch of new ones, else (a rebuild) what
    its row says."""
    return received_at or (previous["last_received_at"] if previous else timezone.now())


def failed_steps(strip: dict) -> int:
    """Attempts that failed, from the job's mini-bar counts (stale results aside)."""
    counts = strip_cells.totals(strip)
    return counts.get("failed", 0) + counts.get("retryable", 0)


def duration_ms(state: JobState) -> int:
    """The job's duration so far in whole milliseconds: its end (or last event) less its start;
    0 without a start."""
    end = state.finished_at or state.last_event_at
    if state.started_at is None or end is None:
        return 0
    return max(int((end - state.started_at).total_seconds() * 1000), 0)


def job_row(state: JobState, received_at: datetime, snapshot: dict, partition_day: date) -> dict:
    """The Job row's values (by attname) for a replayed state."""
    root = state.root_failure
    attrs = state.attributes
    trace = snapshot["spans"] or {}
    return dict(
        job_id=state.job_id,
        status=state.status,
        **{name: attrs.get(name, "") for name in JOB_ATTRIBUTES},
        metadata=state.metadata,
        cursor_node=state.cursor_node,
        payload_results=state.payload_results,
        last_validation_error=state.last_validation_error,
        findings=[finding.as_dict() for finding in state.findings],
        started_at=state.started_at,
        finished_at=state.finished_at,
        last_event_at=state.last_event_at,
        last_received_at=received_at,
        finish_code=state.finish_code,
        finish_reason=state.finish_reason,
        cancel_reason=state.cancel_reason,
        failing_node_id=root.node_id if root else "",
        failing_reason=root.reason if root else "",
        failure_code=root.failure_code if root else "",
        error_type=root.error_type if root else "",
        failed_at=state.failed_at,
        has_retryable=state.segment_counts.get(Segment.RETRYABLE, 0) > 0,
        has_failed=state.segment_counts.get(Segment.FAILED, 0) > 0,
        step_count=state.step_count,
        max_attempt=state.max_attempt,
        failed_steps=failed_steps(state.strip),
        duration_ms=duration_ms(state),
        event_count=state.event_count,
        planner_parse_invalid=state.planner_parse_invalid,
        planner_degraded=state.planner_degraded,
        segment_strip=state.strip,
        input_tokens=min(trace.get("input_tokens", 0), MAX_BIGINT),
        output_tokens=min(trace.get("output_tokens", 0), MAX_BIGINT),
        cost=usd(trace["cost"]) if trace.get("cost") is not None else None,
        fold=snapshot,
        partition_day=partition_day,
    )


# Within what a cost column holds (16 digits, 8 of them decimals; a whole number, as SQLite's
# REAL reads it back the same): a job's sum of calls is held there, as its token sums are at
# the largest BIGINT.
MAX_USD = Decimal("99999999")


def usd(amount: float) -> Decimal:
    """An amount of USD as the cost columns store it (8 decimal places), held at MAX_USD."""
    return min(Decimal(f"{amount:.8f}"), MAX_USD)


def call_row(call: CallRecord, job_pk: int) -> dict:
    """The Call row's values: every CallRecord field has a column of the same name."""
    values = {name: getattr(call, name) for name in CALL_FIELDS}
    values["cost"] = usd(call.cost) if call.cost is not None else None
    return {**values, "job_id": job_pk}


def step_row(step: StepState, job_pk: int, partition_day: date) -> dict:
    """The Step row's values: every StepState field has a column of the same name."""
    return {
        **dict(zip(STEP_STATE_FIELDS, step_values(step), strict=True)),
        "job_id": job_pk,
        "partition_day": partition_day,
        "segment": step.segment.value,
        "result_type": step.result_type or "",
    }


def _write_steps(
    projected: dict[str, Projected],
    existing: dict[str, dict],
    ids: dict[tuple, int],
    days: dict[str, date],
) -> tuple[dict[str, set[str]], dict[tuple[int, str, int], int]]:
    """A full replay's steps replace the job's whole; an incremental fold's changed steps are
    upserted by (job, node, attempt). Returns, by fully replayed job, the span ids of its
    replaced steps; and each grouped step's group id by (job pk, node, attempt) (the failure
    records, which the groups count, are written from them: ``failure_records``)."""
    written = {
        ids[(job_id,)]: (p.state.steps if p.path == FULL else p.state.changed_steps)
        for job_id, p in projected.items()
    }
    group_ids = failure_groups.assign_groups(
        {
            ids[(job_id,)]: (p.state.attributes.get("workflow", ""), written[ids[(job_id,)]])
            for job_id, p in projected.items()
        }
    )
    replaced = [j for j, p in projected.items() if p.path == FULL and j in existing]
    earlier: dict[str, set[str]] = {}
    if replaced:
        replaced_pks = [existing[j]["id"] for j in replaced]
        rows = Step.objects.filter(
            job_id__in=replaced_pks, partition_day__in=sorted({days[j] for j in replaced})
        )
        job_ids = {existing[j]["id"]: j for j in replaced}
        for job_pk, span_id in rows.exclude(trace_span_id="").values_list(
            "job_id", "trace_span_id"
        ):
            earlier.setdefault(job_ids[job_pk], set()).add(span_id)
        rows.delete()
    inserted: list[dict] = []
    upserted: list[dict] = []
    for job_id, p in projected.items():
        job_pk, day = ids[(job_id,)], days[job_id]
        step_rows = [step_row(step, job_pk, day) for step in written[job_pk]]
        for row, step in zip(step_rows, written[job_pk], strict=True):
            row["failure_group_id"] = group_ids.get((job_pk, step.node_id, step.attempt))
        (inserted if p.path == FULL else upserted).extend(step_rows)
    database.insert_rows(Step, inserted)
    database.upsert_rows(Step, upserted, unique=STEP_KEY, returning=False)
    return earlier, group_ids


def _new_span_steps(
    projected: dict[str, Projected],
    earlier: dict[str, set[str]],
    new_events: dict[str, list[Event]],
) -> Counter:
    """By result type, the steps spans became in this projection (``/metrics``' steps
    finished): a full replay's steps whose span was no step before (a span may become one
    later than it came: an LLM call under a root that had not come yet), an incremental
    fold's steps of its new spans (a growth makes no stored span a step)."""
    found: Counter = Counter()
    for job_id, p in projected.items():
        if p.path == FULL:
            before = earlier.get(job_id, set())
            steps = [s for s in p.state.steps if s.trace_span_id not in before]
        else:
            new_spans = {
                e.payload.get("span_id") for e in new_events.get(job_id, ()) if e.type == walk.SPAN
            }
            steps = [s for s in p.state.changed_steps if s.trace_span_id in new_spans]
        found.update(s.result_type for s in steps if s.trace_span_id and s.result_type)
    return found


def _write_calls(
    projected: dict[str, Projected], existing: dict[str, dict], ids: dict[tuple, int]
) -> None:
    """A full replay rewrites the job's calls (they come from its spans, expanded whole); an
    incremental fold adds the calls of its new spans, and rewrites the stored calls whose
    parent came (``growth``: they are its step's now)."""
    replayed = [job_id for job_id, p in projected.items() if p.path == FULL]
    known = [existing[job_id]["id"] for job_id in replayed if job_id in existing]
    if known:
        Call.objects.filter(job_id__in=known).delete()
    rows: dict[str, list[dict]] = {FULL: [], INCREMENTAL: []}
    for job_id, p in projected.items():
        rows[p.path].extend(call_row(call, ids[(job_id,)]) for call in p.state.calls)
    database.insert_rows(Call, rows[FULL])
    database.upsert_rows(Call, rows[INCREMENTAL], unique=("job_id", "span_id"), returning=False)


def _apply_escalations(
    projected: dict[str, Projected], rows: list[dict], ids: dict[tuple, int]
) -> None:
    """Open or reopen what the triggers name; after a full replay or a reopened failure,
    withdraw what never held; note recoveries; check the repair budget of failed:logic runs."""
    jobs_by_id = {
        row["job_id"]: Job(id=ids[(row["job_id"],)], **row)
        for row in rows
        if _changes_escalations(projected[row["job_id"]])
    }
    if not jobs_by_id:
        return  # a live batch that changes no escalation: nothing to read
    job_pks = [job.pk for job in jobs_by_id.values()]
    current = {
        (esc.job_id, esc.kind, esc.node_id): esc
        for esc in Escalation.objects.filter(job_id__in=job_pks)
    }
    for job_id, job in jobs_by_id.items():
        p = projected[job_id]
        state = p.state
        for trigger in state.escalation_triggers:
            key = (job.pk, trigger.kind, trigger.node_id)
            source = "producer" if trigger.kind == "raised" else "replay"
            current[key] = actions.apply_trigger(
                trigger, job=job, existing=current.get(key), source=source
            )
        if p.path == FULL or p.fold.reopened:
            mine = [esc for key, esc in current.items() if key[0] == job.pk]
            actions.withdraw_unheld(mine, state.triggered)
        for recovery in state.recoveries:
            actions.note_recovery(job, recovery)
        if state.status == RunStatus.FAILED_LOGIC:
            repair_budget.check_repair_budget(job, current)


def _changes_escalations(p: Projected) -> bool:
    """Whether the job's escalations must be read: a full replay re-decides them all, and so
    does a fold that reopened a failure; any other incremental fold only when it triggers,
    recovers or leaves the job failed:logic."""
    return bool(
        p.path == FULL
        or p.fold.reopened
        or p.state.escalation_triggers
        or p.state.recoveries
        or p.state.status == RunStatus.FAILED_LOGIC
    )


def replay_jobs(job_ids: Iterable[str]) -> None:
    """Replay these jobs from all their events (rebuild, purge): every job on the full path.
    The caller holds both their locks (``locks.lock_jobs``): no append comes meanwhile, so
    every stored event is folded, and their marks are left clean."""
    job_ids = sorted(job_ids)
    counted = project_jobs(job_ids, full=True)
    counters.record_projections(counted.paths, span_steps=counted.span_steps)
    ProjectionMark.objects.filter(job_id__in=job_ids).update(projected=F("generation"), whole=False)
