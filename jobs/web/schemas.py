"""The JSON bodies the API answers, as pydantic models.

The views write every JSON body through ``json_response`` and the OpenAPI document takes its
response schemas from these same models (``jobs.web.openapi``), so what the API sends and what
its document says cannot drift apart. Models forbid keys they do not name, and name no key with
a default, so the document lists exactly the keys of each answer, all required.
"""

from datetime import datetime
from typing import Annotated, Any, Literal

from django.core.serializers.json import DjangoJSONEncoder
from django.http import JsonResponse
from pydantic import BaseModel, ConfigDict, PlainSerializer, WithJsonSchema

from jobs import models
from jobs.replay.failures import RunStatus, Segment
from jobs.replay.state import completed_node_ids

DEFAULT_PAGE_SIZE = 50

# Times as the API has always written them (Django's JSON encoder: milliseconds, "Z" for UTC),
# not pydantic's microseconds.
Timestamp = Annotated[
    datetime,
    PlainSerializer(DjangoJSONEncoder().default, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
JsonObject = dict[str, Any]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def json_response(body: Body, status: int = 200) -> JsonResponse:
    """``body`` as a JSON response: the one way the API writes a JSON body."""
    return JsonResponse(body.model_dump(mode="json"), status=status)


class Error(Body):
    """Why a request was refused."""

    error: str


class Health(Body):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]


class FieldError(Body):
    field: str
    """The field's path, as ``payload.attempt``; ``(item)`` or ``(line)``: the whole event."""
    message: str


class ItemError(Body):
    index: int
    """The event's position in the batch (0-based)."""
    errors: list[FieldError]


class IngestResult(Body):
    """Counts of a batch and the field errors of each rejected event."""

    received: int
    stored: int
    duplicates: int
    """Events already stored (or repeated in this batch): stored once, counted here."""
    rejected: int
    errors: list[ItemError]


class Step(Body):
    """One node attempt, in event order."""

    node_id: str
    attempt: int
    result_type: str | None
    """null while the attempt has not finished."""
    segment: Segment
    reason: str
    ignored_stale: bool
    compensated: bool
    failure_code: str
    error_type: str
    state: str
    step_index: int | None
    duration_ms: float | None
    started_at: Timestamp | None
    finished_at: Timestamp | None
    trace_span_id: str
    parent_span_id: str
    payload_results: JsonObject

    @classmethod
    def from_step(cls, step: models.Step) -> "Step":
        return cls(
            node_id=step.node_id,
            attempt=step.attempt,
            result_type=step.result_type or None,
            segment=step.segment,
            reason=step.reason,
            ignored_stale=step.ignored_stale,
            compensated=step.compensated,
            failure_code=step.failure_code,
            error_type=step.error_type,
            state=step.state,
            step_index=step.step_index,
            duration_ms=step.duration_ms,
            started_at=step.started_at,
            finished_at=step.finished_at,
            trace_span_id=step.trace_span_id,
            parent_span_id=step.parent_span_id,
            payload_results=step.payload_results,
        )


class EscalationRef(Body):
    id: int
    kind: str
    status: str
    severity: str
    node_id: str
    message: str


class JobSummary(Body):
    """A job as the jobs list shows it."""

    job_id: str
    status: RunStatus
    stalled: bool
    """Still running (or paused for a transient failure) but silent for TRACEVIZ_STALL_AFTER."""
    name: str
    workflow: str
    provider: str
    model: str
    correlation_id: str
    session_id: str
    retry_of: str | None
    started_at: Timestamp | None
    finished_at: Timestamp | None
    failing_node_id: str | None
    failing_reason: str | None
    failure_code: str | None
    error_type: str | None

    @classmethod
    def from_job(cls, job: models.Job) -> "JobSummary":
        return cls(**_summary_fields(job))


def _summary_fields(job: models.Job) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "status": job.status,
        "stalled": job.is_stalled,
        "name": job.name,
        "workflow": job.workflow,
        "provider": job.provider,
        "model": job.model,
        "correlation_id": job.correlation_id,
        "session_id": job.session_id,
        "retry_of": job.retry_of or None,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "failing_node_id": job.failing_node_id or None,
        "failing_reason": job.failing_reason or None,
        "failure_code": job.failure_code or None,
        "error_type": job.error_type or None,
    }


class Job(JobSummary):
    """A job's replayed state: completed nodes, results, steps, escalations and findings."""

    completed_node_ids: list[str]
    """In completion order, without repeats."""
    cursor_node: str | None
    payload_results: JsonObject
    last_validation_error: JsonObject | None
    findings: list[JsonObject]
    steps: list[Step]
    escalations: list[EscalationRef]

    @classmethod
    def from_job(cls, job: models.Job) -> "Job":
        """Reads the job's steps (its completed nodes come off them) and escalations (two
        queries)."""
        steps = list(job.steps.filter(partition_day=job.partition_day).order_by("position"))
        return cls(
            **_summary_fields(job),
            completed_node_ids=completed_node_ids(steps),
            cursor_node=job.cursor_node or None,
            payload_results=job.payload_results,
            last_validation_error=job.last_validation_error,
            findings=job.findings,
            steps=[Step.from_step(step) for step in steps],
            escalations=[
                EscalationRef(
                    id=esc.pk,
                    kind=esc.kind,
                    status=esc.status,
                    severity=esc.severity,
                    node_id=esc.node_id,
                    message=esc.message,
                )
                for esc in job.escalations.order_by("created_at", "pk")
            ],
        )


class JobPage(Body):
    """One page of jobs, newest first."""

    jobs: list[JobSummary]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""


# The bodies the document describes, in the order its components list them.
RESPONSE_BODIES: tuple[type[Body], ...] = (JobPage, Job, IngestResult, Error, Health)
