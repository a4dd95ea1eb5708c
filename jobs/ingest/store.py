"""Store a batch of events and project the jobs it touched (DESIGN.md section 2).

Knows no HTTP: the ingest view, the import command, the demo loader and the OTLP endpoint all
call ``store_batch``. One transaction per batch: event rows (unique per job + event_id), then a
full replay of every touched job into Job, Step and Escalation rows. Replaying the whole job keeps
the projection identical to ``replay.build`` whatever order the events arrived in.
"""

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from jobs.contract.bodies import ParsedBatch
from jobs.contract.events import Event
from jobs.contract.redaction import redact_payload
from jobs.dashboard import rollup
from jobs.escalations import actions as escalations
from jobs.ingest import counters as metrics
from jobs.ingest import database as bulk
from jobs.models import Escalation, IngestToken, Job, Step
from jobs.models import Event as EventRow
from jobs.replay import walk as replay
from jobs.replay.failures import RunStatus

EVENT_COLUMNS = (
    "job_id",
    "event_id",
    "type",
    "ts",
    "seq",
    "attempt",
    "payload",
    "received_at",
    "token_id",
)


@dataclass(slots=True)
class IngestResult:
    received: int = 0
    stored: int = 0
    duplicates: int = 0
    errors: list[dict] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> int:
        return len(self.errors)

    @property
    def http_status(self) -> int:
        if not self.rejected:
            return 200
        return 207 if self.stored + self.duplicates else 400


def replay_config() -> replay.ReplayConfig:
    return replay.ReplayConfig(max_retries=settings.TRACEVIZ_MAX_RETRIES)


def store_batch(
    batch: ParsedBatch, *, token: IngestToken | None = None, received_at: datetime | None = None
) -> IngestResult:
    """Redact, store and project a parsed batch. Returns counts and the per-item errors."""
    received_at = received_at or timezone.now()
    result = IngestResult(received=batch.total, errors=list(batch.errors))
    events: dict[tuple[str, str], Event] = {}
    for _index, event in batch.events:
        # A batch that repeats an event stores it once; the repeat counts as a duplicate.
        key = (event.job_id, event.event_id)
        if key not in events:
            events[key] = Event(
                event.type,
                event.job_id,
                event.event_id,
                event.ts or received_at,
                event.seq,
                redact_payload(event.payload, settings.TRACEVIZ_PREVIEW_CHARS),
            )
    if not events:
        return result
    with transaction.atomic():
        job_ids = sorted({job_id for job_id, _ in events})
        _lock_jobs(job_ids)
        new_keys = _insert_events(events.values(), token, received_at)
        touched = sorted({job_id for job_id, _ in new_keys})
        new_events: dict[str, list[Event]] = {}
        for key in new_keys:
            new_events.setdefault(key[0], []).append(events[key])
        project_jobs(touched, received_at=received_at, new_events=new_events)
        metrics.record_batch(events[key] for key in new_keys)
        if token is not None:
            IngestToken.objects.filter(pk=token.pk).update(last_used_at=received_at)
    result.stored = len(new_keys)
    result.duplicates = len(batch.events) - result.stored
    result.job_ids = touched
    return result


def _lock_jobs(job_ids: Sequence[str]) -> None:
    """Serialise projection per job across concurrent batches (PostgreSQL advisory locks, taken in
    sorted order so two batches never deadlock). SQLite serialises writers by itself."""
    if connection.vendor != "postgresql" or not job_ids:
        return
    keys = sorted({zlib.crc32(job_id.encode("utf-8")) for job_id in job_ids})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k ORDER BY k", [keys]
        )


def _insert_events(
    events: Iterable[Event], token: IngestToken | None, received_at: datetime
) -> set[tuple[str, str]]:
    """Insert event rows, skipping stored ones; returns the new rows' (job_id, event_id)."""
    adapt = connection.ops.adapt_datetimefield_value
    received, token_id = adapt(received_at), token.pk if token else None
    rows = (
        (
            event.job_id,
            event.event_id,
            event.type,
            adapt(event.ts),
            event.seq,
            event.attempt,
            bulk.json_text(event.payload),
            received,
            token_id,
        )
        for event in events
    )
    table = connection.ops.quote_name(EventRow._meta.db_table)
    return bulk.insert_new_events(table, EVENT_COLUMNS, rows)


def load_events(job_ids: Sequence[str]) -> dict[str, list[Event]]:
    """Every stored event of these jobs, as replay takes them."""
    by_job: dict[str, list[Event]] = {job_id: [] for job_id in job_ids}
    rows = EventRow.objects.filter(job_id__in=job_ids).values_list(
        "job_id", "event_id", "type", "ts", "seq", "payload"
    )
    # A plain fetch: a server-side cursor (iterator) plans for the first rows and may scan.
    for job_id, event_id, event_type, ts, seq, payload in rows:
        by_job[job_id].append(Event(event_type, job_id, event_id, ts, seq, payload))
    return by_job


def project_jobs(
    job_ids: Sequence[str],
    *,
    received_at: datetime | None = None,
    new_events: dict[str, list[Event]] | None = None,
) -> list[Job]:
    """Replay these jobs from their stored events and write their Job, Step and Escalation rows.

    ``received_at`` marks new events having arrived (the stall clock); a rebuild passes None and
    keeps each job's receive time. ``new_events`` are events just stored by the caller: a job
    that has no Job row yet has no other events, so it is replayed from these without reading
    them back.
    """
    if not job_ids:
        return []
    config = replay_config()
    existing = {job.job_id: job for job in Job.objects.filter(job_id__in=job_ids)}
    new_events = new_events or {}
    to_load = [job_id for job_id in job_ids if job_id in existing or job_id not in new_events]
    events_by_job = {
        **{j: new_events[j] for j in job_ids if j not in to_load},
        **load_events(to_load),
    }
    states = [replay.build(events, config) for events in events_by_job.values() if events]
    rows = [_job_row(state, existing.get(state.job_id), received_at) for state in states]
    previous_status = {job_id: job.status for job_id, job in existing.items()}
    # The dashboard rollup recomputes these jobs' start hours (before and after) later.
    rollup.mark_dirty(
        [job.started_at for job in existing.values()] + [r["started_at"] for r in rows]
    )
    # One upsert writes new and known jobs alike; a known job keeps its id (escalations
    # point at it). Its steps are replaced whole, as replay rebuilt them.
    ids = bulk.upsert_rows(Job, rows, unique="job_id")
    if existing:
        Step.objects.filter(job_id__in=[job.pk for job in existing.values()]).delete()
    bulk.insert_rows(
        Step, [_step_row(step, ids[state.job_id]) for state in states for step in state.steps]
    )
    jobs_by_id = {row["job_id"]: Job(id=ids[row["job_id"]], **row) for row in rows}
    _apply_escalations(states, jobs_by_id, previous_status)
    return list(jobs_by_id.values())


def _job_row(state: replay.JobState, previous: Job | None, received_at: datetime | None) -> dict:
    """The Job row's values (by attname) for a replayed state."""
    root = state.root_failure
    segments = {step.segment for step in state.steps}
    failing = [s for s in state.steps if s.node_id in state.failing_node_ids and s.is_failure]
    attrs = state.attributes
    return dict(
        job_id=state.job_id,
        status=state.status,
        **{name: attrs.get(name, "") for name in replay.JOB_ATTRIBUTES},
        metadata=state.metadata,
        completed_node_ids=state.completed_node_ids,
        cursor_node=state.cursor_node,
        payload_results=state.payload_results,
        last_validation_error=state.last_validation_error,
        findings=[finding.as_dict() for finding in state.findings],
        started_at=state.started_at,
        finished_at=state.finished_at,
        last_event_at=state.last_event_at,
        last_received_at=received_at or (previous.last_received_at if previous else timezone.now()),
        finish_code=state.finish_code,
        finish_reason=state.finish_reason,
        cancel_reason=state.cancel_reason,
        failing_node_id=root.node_id if root else "",
        failing_reason=root.reason if root else "",
        failure_code=root.failure_code if root else "",
        error_type=root.error_type if root else "",
        failed_at=max((s.finished_at for s in failing), default=None),
        has_retryable="retryable" in segments,
        has_failed="failed" in segments,
        step_count=len(state.steps),
        max_attempt=max((step.attempt for step in state.steps), default=0),
        event_count=state.event_count,
        planner_parse_invalid=state.planner_parse_invalid,
        planner_degraded=state.planner_degraded,
        segment_strip=[[step.segment.value, step.ignored_stale] for step in state.steps[:200]],
    )


def _step_row(step: replay.StepState, job_pk: int) -> dict:
    """The Step row's values: every StepState field has a column of the same name."""
    return {
        **{name: getattr(step, name) for name in STEP_STATE_FIELDS},
        "job_id": job_pk,
        "segment": step.segment.value,
        "result_type": step.result_type or "",
    }


STEP_STATE_FIELDS = tuple(f.name for f in fields(replay.StepState))


def _apply_escalations(
    states: list[replay.JobState], jobs_by_id: dict[str, Job], previous_status: dict[str, str]
) -> None:
    job_pks = [job.pk for job in jobs_by_id.values()]
    current = {
        (esc.job_id, esc.kind, esc.node_id): esc
        for esc in Escalation.objects.filter(job_id__in=job_pks)
    }
    for state in states:
        job = jobs_by_id[state.job_id]
        for trigger in state.escalation_triggers:
            key = (job.pk, trigger.kind, trigger.node_id)
            source = "producer" if trigger.kind == "raised" else "replay"
            current[key] = escalations.apply_trigger(
                trigger, job=job, existing=current.get(key), source=source
            )
        held = {(trigger.kind, trigger.node_id) for trigger in state.escalation_triggers}
        mine = [esc for key, esc in current.items() if key[0] == job.pk]
        for withdrawn in escalations.withdraw_unheld(mine, held):
            current.pop((job.pk, withdrawn.kind, withdrawn.node_id), None)
        was = previous_status.get(state.job_id)
        if state.status == RunStatus.COMPLETED and was and was != RunStatus.COMPLETED:
            escalations.note_recovery(job)
        if state.status == RunStatus.FAILED_LOGIC:
            escalations.check_repair_budget(job, current)
