"""Projection (DESIGN.md section 2): a job's stored events replayed into its Job, Step and
Escalation rows.

``project_jobs`` replays every job it is given from all of that job's events, so the rows are
exactly ``walk.build``'s output whatever order the events arrived in (replay parity). Callers
hold the jobs' locks (``locks.lock_jobs``) inside their transaction.
"""

from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from jobs.contract.events import Event
from jobs.escalations import actions, repair_budget
from jobs.ingest import database
from jobs.models import DashboardDirtyHour, Escalation, Job, Step
from jobs.models import Event as EventRow
from jobs.replay import walk
from jobs.replay.failures import RunStatus
from jobs.replay.state import JOB_ATTRIBUTES, JobState, ReplayConfig, StepState


def replay_config() -> ReplayConfig:
    return ReplayConfig(max_retries=settings.TRACEVIZ_MAX_RETRIES)


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
    states = [walk.build(events, config) for events in events_by_job.values() if events]
    rows = [job_row(state, existing.get(state.job_id), received_at) for state in states]
    previous_status = {job_id: job.status for job_id, job in existing.items()}
    # The dashboard rollup recomputes these jobs' start hours (before and after) later.
    DashboardDirtyHour.objects.mark(
        [job.started_at for job in existing.values()] + [r["started_at"] for r in rows]
    )
    # One upsert writes new and known jobs alike; a known job keeps its id (escalations
    # point at it). Its steps are replaced whole, as replay rebuilt them.
    ids = database.upsert_rows(Job, rows, unique="job_id")
    if existing:
        Step.objects.filter(job_id__in=[job.pk for job in existing.values()]).delete()
    database.insert_rows(
        Step, [step_row(step, ids[state.job_id]) for state in states for step in state.steps]
    )
    jobs_by_id = {row["job_id"]: Job(id=ids[row["job_id"]], **row) for row in rows}
    _apply_escalations(states, jobs_by_id, previous_status)
    return list(jobs_by_id.values())


def job_row(state: JobState, previous: Job | None, received_at: datetime | None) -> dict:
    """The Job row's values (by attname) for a replayed state."""
    root = state.root_failure
    segments = {step.segment for step in state.steps}
    failing = [s for s in state.steps if s.node_id in state.failing_node_ids and s.is_failure]
    attrs = state.attributes
    return dict(
        job_id=state.job_id,
        status=state.status,
        **{name: attrs.get(name, "") for name in JOB_ATTRIBUTES},
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


def step_row(step: StepState, job_pk: int) -> dict:
    """The Step row's values: every StepState field has a column of the same name."""
    return {
        **{name: getattr(step, name) for name in STEP_STATE_FIELDS},
        "job_id": job_pk,
        "segment": step.segment.value,
        "result_type": step.result_type or "",
    }


STEP_STATE_FIELDS = tuple(f.name for f in fields(StepState))


def _apply_escalations(
    states: list[JobState], jobs_by_id: dict[str, Job], previous_status: dict[str, str]
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
            current[key] = actions.apply_trigger(
                trigger, job=job, existing=current.get(key), source=source
            )
        held = {(trigger.kind, trigger.node_id) for trigger in state.escalation_triggers}
        mine = [esc for key, esc in current.items() if key[0] == job.pk]
        for withdrawn in actions.withdraw_unheld(mine, held):
            current.pop((job.pk, withdrawn.kind, withdrawn.node_id), None)
        was = previous_status.get(state.job_id)
        if state.status == RunStatus.COMPLETED and was and was != RunStatus.COMPLETED:
            actions.note_recovery(job)
        if state.status == RunStatus.FAILED_LOGIC:
            repair_budget.check_repair_budget(job, current)
