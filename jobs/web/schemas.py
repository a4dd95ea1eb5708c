"""The JSON bodies the API answers, as pydantic models.

The views write every JSON body through ``json_response`` and the OpenAPI document takes its
response schemas from these same models (``jobs.web.openapi``), so what the API sends and what
its document says cannot drift apart. Models forbid keys they do not name, and name no key with
a default, so the document lists exactly the keys of each answer, all required.
"""

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from django.core.serializers.json import DjangoJSONEncoder
from django.http import JsonResponse
from pydantic import BaseModel, ConfigDict, PlainSerializer, WithJsonSchema

from jobs import models
from jobs.contract.events import truncate_text
from jobs.replay.failures import RunStatus, Segment
from jobs.replay.state import completed_node_ids

DEFAULT_PAGE_SIZE = 50
# A stack trace in the job JSON is cut here, with a visible marker (ingest keeps 64 KiB, which
# the step panel and the export show whole): a job of thousands of failed steps stays readable.
API_STACK_BYTES = 16 * 1024

# Times as the API has always written them (Django's JSON encoder: milliseconds, "Z" for UTC),
# not pydantic's microseconds.
Timestamp = Annotated[
    datetime,
    PlainSerializer(DjangoJSONEncoder().default, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]
JsonObject = dict[str, Any]
# USD as stored (8 decimal places), written as a decimal string: a JSON number would pass
# through binary floating point in most readers.
Usd = Annotated[
    Decimal,
    PlainSerializer(lambda amount: f"{amount:.8f}", return_type=str, when_used="json"),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^[0-9]+\.[0-9]{8}$",
            "description": "USD, a decimal string with 8 decimal places",
        }
    ),
]


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


def json_response(body: Body, status: int = 200) -> JsonResponse:
    """``body`` as a JSON response: the one way the API writes a JSON body."""
    return JsonResponse(body.model_dump(mode="json"), status=status)


class Error(Body):
    """Why a request was refused."""

    error: str


class Projection(Body):
    """How far projection is behind ingest (docs/architecture.md, "Data flow")."""

    dirty_jobs: int
    """Jobs with events not yet folded into their rows."""
    lag_seconds: float
    """How long the longest-dirty job has been dirty; 0 when none is."""


class Health(Body):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]
    projection: Projection | None = None
    """``null`` when the database cannot be reached."""


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


class SpanEvent(Body):
    """A span event (not an exception: those make the reason, ``exception_type`` and
    ``stack``), as stored."""

    name: str
    ts: str
    """When, as OTLP ingest wrote it (RFC 3339, microseconds, UTC)."""
    attributes: JsonObject

    @classmethod
    def from_stored(cls, event: dict) -> "SpanEvent":
        return cls(
            name=str(event.get("name") or ""),
            ts=str(event.get("ts") or ""),
            attributes=_object(event.get("attributes")),
        )


class SpanLink(Body):
    """A link to a span of another (or the same) trace."""

    trace_id: str
    span_id: str
    job_id: str | None
    """The job that holds the linked trace, when it is here."""
    attributes: JsonObject

    @classmethod
    def from_stored(cls, link: dict, jobs_by_trace: dict[str, str]) -> "SpanLink":
        trace_id = str(link.get("trace_id") or "")
        return cls(
            trace_id=trace_id,
            span_id=str(link.get("span_id") or ""),
            job_id=jobs_by_trace.get(trace_id),
            attributes=_object(link.get("attributes")),
        )


class SpanValue(Body):
    """An input or output value (``input.value`` / ``output.value``), as stored."""

    value: Any
    mime_type: str

    @classmethod
    def from_stored(cls, value: Any) -> "SpanValue | None":
        if not isinstance(value, dict) or "value" not in value:
            return None
        return cls(value=value["value"], mime_type=str(value.get("mime_type") or ""))


class ToolCallRequest(Body):
    """A tool call an LLM asked for in its answer."""

    id: str
    name: str
    arguments: str
    """JSON text, as the model wrote it."""

    @classmethod
    def from_stored(cls, request: dict) -> "ToolCallRequest":
        return cls(
            id=str(request.get("id") or ""),
            name=str(request.get("name") or ""),
            arguments=str(request.get("arguments") or ""),
        )


class Message(Body):
    """One message of a call's transcript."""

    direction: Literal["in", "out"]
    """``in``: what the call read (system, user, tool results); ``out``: what it wrote."""
    role: str
    content: str
    tool_calls: list[ToolCallRequest]

    @classmethod
    def from_stored(cls, message: dict) -> "Message":
        return cls(
            direction="out" if message.get("direction") == "out" else "in",
            role=str(message.get("role") or ""),
            content=str(message.get("content") or ""),
            tool_calls=[
                ToolCallRequest.from_stored(request)
                for request in _list(message.get("tool_calls"))
                if isinstance(request, dict)
            ],
        )


class Tool(Body):
    """The tool a call ran, with its arguments and result as the producer sent them."""

    name: str
    arguments: Any
    """null when the producer sent none."""
    result: Any
    """null when the producer sent none."""

    @classmethod
    def from_stored(cls, tool: Any) -> "Tool | None":
        if not isinstance(tool, dict):
            return None
        return cls(
            name=str(tool.get("name") or ""),
            arguments=tool.get("arguments"),
            result=tool.get("result"),
        )


class CallAttempt(Body):
    """An earlier attempt of a model call an SDK retried (docs/otlp.md, "A model call an SDK
    retried")."""

    attempt: int
    span_id: str
    status: str
    reason: str
    exception_type: str
    started_at: str
    duration_ms: float

    @classmethod
    def from_stored(cls, attempt: Any) -> "CallAttempt | None":
        if not isinstance(attempt, dict):
            return None
        try:
            return cls(
                attempt=int(attempt.get("attempt") or 0),
                span_id=str(attempt.get("span_id") or ""),
                status=str(attempt.get("status") or ""),
                reason=str(attempt.get("reason") or ""),
                exception_type=str(attempt.get("exception_type") or ""),
                started_at=str(attempt.get("started_at") or ""),
                duration_ms=float(attempt.get("duration_ms") or 0),
            )
        except (TypeError, ValueError):
            return None


class UsageTotal(Body):
    """The usage a span states for the calls below it (an agent's run total), not counted."""

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None

    @classmethod
    def from_stored(cls, total: Any) -> "UsageTotal | None":
        if not isinstance(total, dict):
            return None
        return cls(**{key: _int(total.get(key)) for key in cls.model_fields})


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class Call(Body):
    """A call a step (or the job) made, from an OpenTelemetry span: an LLM, a tool, a
    retriever, a chain, a message published..."""

    span_id: str
    parent_span_id: str
    kind: str
    """llm, tool, retriever, embedding, reranker, chain, agent, guardrail, evaluator, prompt,
    publish, or span."""
    name: str
    status: str
    """The span's status: unset, ok or error."""
    reason: str
    exception_type: str
    stack: str
    """Cut at 16 KiB with a marker, as the step's."""
    started_at: Timestamp
    finished_at: Timestamp
    duration_ms: float
    provider: str
    model: str
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cost: Usd | None
    """null when no price is known for the model (or the call reported no tokens)."""
    messages: list[Message]
    """The transcript, oldest first."""
    input: SpanValue | None
    output: SpanValue | None
    tool: Tool | None
    usage_total: UsageTotal | None
    """The run total the span states for the calls below it (an agent's), kept apart from
    the call's own tokens: never added to the job's."""
    attempts: list[CallAttempt]
    """A model call an SDK retried: its earlier attempts, oldest first."""
    attempt_of: str | None
    """An earlier attempt of a retried model call: the span id of the call it is one of."""
    attributes: JsonObject
    """The span's other attributes."""
    events: list[SpanEvent]
    links: list[SpanLink]

    @classmethod
    def from_call(cls, call: models.Call, jobs_by_trace: dict[str, str]) -> "Call":
        detail = _object(call.detail)
        return cls(
            span_id=call.span_id,
            parent_span_id=call.parent_span_id,
            kind=call.kind,
            name=call.name,
            status=call.status,
            reason=call.reason,
            exception_type=call.exception_type,
            stack=bounded_stack(str(detail.get("stack") or "")),
            started_at=call.started_at,
            finished_at=call.finished_at,
            duration_ms=call.duration_ms,
            provider=call.provider,
            model=call.model,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            total_tokens=call.total_tokens,
            cost=call.cost,
            messages=[Message.from_stored(m) for m in _list(call.messages) if isinstance(m, dict)],
            input=SpanValue.from_stored(call.input),
            output=SpanValue.from_stored(call.output),
            tool=Tool.from_stored(call.tool),
            usage_total=UsageTotal.from_stored(detail.get("usage_total")),
            attempts=[
                attempt
                for attempt in map(CallAttempt.from_stored, _list(detail.get("attempts")))
                if attempt is not None
            ],
            attempt_of=detail["attempt_of"] if isinstance(detail.get("attempt_of"), str) else None,
            attributes=_object(detail.get("attributes")),
            events=_events(detail),
            links=_links(detail, jobs_by_trace),
        )


class Span(Body):
    """The OpenTelemetry span behind a step (its events and links are the step's)."""

    name: str
    kind: str
    """internal, server, client, producer, consumer or unspecified."""
    status: str
    attributes: JsonObject
    """The attributes the step does not show in its own fields."""
    input: SpanValue | None
    output: SpanValue | None
    dropped: JsonObject
    """What ingest left out to keep the span bounded: counts of span events and links, and
    the attributes cut (``cut``)."""

    @classmethod
    def from_stored(cls, span: dict) -> "Span":
        return cls(
            name=str(span.get("name") or ""),
            kind=str(span.get("kind") or ""),
            status=str(span.get("status") or ""),
            attributes=_object(span.get("attributes")),
            input=SpanValue.from_stored(span.get("input")),
            output=SpanValue.from_stored(span.get("output")),
            dropped=_object(span.get("dropped")),
        )


def bounded_stack(stack: str) -> str:
    """A stack trace as the job JSON carries it: at most API_STACK_BYTES, cut with a marker."""
    return truncate_text(stack, API_STACK_BYTES)


def _object(value: Any) -> JsonObject:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _events(stored: dict) -> list[SpanEvent]:
    return [SpanEvent.from_stored(e) for e in _list(stored.get("events")) if isinstance(e, dict)]


def _links(stored: dict, jobs_by_trace: dict[str, str]) -> list[SpanLink]:
    return [
        SpanLink.from_stored(link, jobs_by_trace)
        for link in _list(stored.get("links"))
        if isinstance(link, dict)
    ]


def linked_trace_ids(stored: dict) -> list[str]:
    """The trace ids the links of a stored span (a step's, a call's detail) point at."""
    return [
        str(link.get("trace_id"))
        for link in _list(stored.get("links"))
        if isinstance(link, dict) and link.get("trace_id")
    ]


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
    tool: str
    source: str
    plan_hash: str
    continue_on_error: bool
    epoch: int | None
    step_epoch: int | None
    context: JsonObject
    """Expected and actual arguments, the step definition, as the producer sent them."""
    audit_trail: list[Any]
    extra: JsonObject
    """The producer's payload fields the event contract does not name."""
    compensation_reason: str
    handled: bool
    """A failure whatever called the step dealt with: drawn failed, it fails no node."""
    inferred: bool
    """The result type was inferred from a span's status, not declared by the producer."""
    exception_type: str
    stack: str
    """Cut at 16 KiB with a visible marker ("… [truncated N bytes]"); the step panel and the
    export have it whole (up to the 64 KiB ingest keeps)."""
    calls: list[Call]
    """The calls made inside this attempt, in call order."""
    span: Span | None
    """The OpenTelemetry span behind the step; null for a step sent as events."""
    events: list[SpanEvent]
    """The span's events, as timed entries of the step (empty for a step sent as events)."""
    links: list[SpanLink]
    masked: list[str]
    """Where ingest masked a secret in this attempt's events (``payload_results.password``,
    ``attributes.http.request.header.authorization``), in the order met; never the values."""

    @classmethod
    def from_step(
        cls, step: models.Step, calls: list[Call], jobs_by_trace: dict[str, str]
    ) -> "Step":
        span = _object(step.span)
        return cls(
            node_id=step.node_id,
            attempt=step.attempt,
            result_type=step.result_type or None,
            segment=Segment(step.segment),
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
            tool=step.tool,
            source=step.source,
            plan_hash=step.plan_hash,
            continue_on_error=step.continue_on_error,
            epoch=step.epoch,
            step_epoch=step.step_epoch,
            context=_object(step.context),
            audit_trail=_list(step.audit_trail),
            extra=_object(step.extra),
            compensation_reason=step.compensation_reason,
            handled=step.handled,
            inferred=step.inferred,
            exception_type=step.exception_type,
            stack=bounded_stack(step.stack),
            calls=calls,
            span=Span.from_stored(span) if span else None,
            events=_events(span),
            links=_links(span, jobs_by_trace),
            masked=step.masked,
        )


class EscalationRef(Body):
    id: int
    kind: str
    status: str
    severity: str
    node_id: str
    message: str


class NextAttempt(Body):
    """When a job waiting to retry (``paused:transient``) should start its next attempt, by
    the run-status contract's backoff (1 s doubling per retry, capped at 5 min, plus up to 30 %
    jitter): the attempt that failed retryably, and the window its successor is due in."""

    node_id: str
    attempt: int
    """The attempt that failed retryably; the next is ``attempt + 1``."""
    failed_at: Timestamp
    due_from: Timestamp
    """Its finish plus the backoff without jitter."""
    due_by: Timestamp
    """Its finish plus the backoff with full jitter: later than this, the retry is overdue."""

    @classmethod
    def from_due(cls, due: models.NextAttempt) -> "NextAttempt":
        return cls(
            node_id=due.node_id,
            attempt=due.attempt,
            failed_at=due.failed_at,
            due_from=due.due_from,
            due_by=due.due_by,
        )


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
    input_tokens: int
    """Summed over the job's calls, as the job page's header shows them."""
    output_tokens: int
    cost: Usd | None
    """Summed over the calls with a known price; null when none had one."""
    next_attempt: NextAttempt | None
    """For a job waiting to retry, when its next attempt is due; null for any other job, and
    for a paused one without a finished retryable attempt (nothing says when it retries)."""

    @classmethod
    def from_job(cls, job: models.Job, due: models.NextAttempt | None = None) -> "JobSummary":
        """``due``: the job's entry of ``models.next_attempts``, read for a whole page."""
        return cls(**_summary_fields(job, due))


def _summary_fields(job: models.Job, due: models.NextAttempt | None) -> dict[str, Any]:
    return {
        "next_attempt": NextAttempt.from_due(due) if due else None,
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
        "input_tokens": job.input_tokens,
        "output_tokens": job.output_tokens,
        "cost": job.cost,
    }


class Job(JobSummary):
    """A job's replayed state and what its producer sent: metadata, totals, completed nodes,
    results, steps with their calls, escalations and findings (the raw events are in the
    export)."""

    metadata: JsonObject
    """``job_started.metadata`` as stored (secrets masked); for a trace, its resource
    attributes, ``otel.trace_id`` and ``otel.scope``."""
    plan_hash: str
    finish_code: str
    finish_reason: str
    cancel_reason: str
    unpriced_calls: int
    """Calls whose tokens count in the totals but whose model has no known price: ``cost``
    leaves them out."""
    completed_node_ids: list[str]
    """In completion order, without repeats."""
    cursor_node: str | None
    payload_results: JsonObject
    last_validation_error: JsonObject | None
    findings: list[JsonObject]
    steps: list[Step]
    calls: list[Call]
    """The calls of the job itself, in no step (a root span that is a call: an agent run)."""
    escalations: list[EscalationRef]
    projected: bool
    """False while the job has events not folded into these rows yet (sent with
    ``Prefer: respond-async``, the projector not there yet): ``unprojected_events`` of them."""
    unprojected_events: int

    @classmethod
    def from_job(
        cls, job: models.Job, due: models.NextAttempt | None = None, unprojected_events: int = 0
    ) -> "Job":
        """``due``: the job's next attempt when the caller read it (else read here);
        ``unprojected_events``: its events not in its rows.

        Reads the job's steps (its completed nodes come off them), its calls, the jobs its
        spans link to (when they link), its escalations and, for a job waiting to retry, the
        attempt it waits on: five queries at most, whatever the number of steps and calls."""
        steps = list(job.own_steps().order_by("position"))
        stored_calls = list(job.calls.order_by("position"))
        jobs_by_trace = models.Job.objects.ids_by_trace(
            trace_id
            for stored in [
                *(_object(step.span) for step in steps),
                *(_object(call.detail) for call in stored_calls),
            ]
            for trace_id in linked_trace_ids(stored)
        )
        by_step: dict[tuple[str, int | None], list[Call]] = defaultdict(list)
        for call in stored_calls:
            by_step[call.node_id, call.attempt].append(Call.from_call(call, jobs_by_trace))
        step_keys = {(step.node_id, step.attempt) for step in steps}
        return cls(
            **_summary_fields(job, due or models.next_attempts([job]).get(job.pk)),
            metadata=_object(job.metadata),
            plan_hash=job.plan_hash,
            finish_code=job.finish_code,
            finish_reason=job.finish_reason,
            cancel_reason=job.cancel_reason,
            unpriced_calls=sum(1 for call in stored_calls if call.is_unpriced),
            completed_node_ids=completed_node_ids(steps),
            cursor_node=job.cursor_node or None,
            payload_results=job.payload_results,
            last_validation_error=job.last_validation_error,
            findings=job.findings,
            steps=[
                Step.from_step(step, by_step.get((step.node_id, step.attempt), []), jobs_by_trace)
                for step in steps
            ],
            # A call whose step is not listed (none is expected) is kept here, not lost.
            calls=[
                call for key, calls in by_step.items() if key not in step_keys for call in calls
            ],
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
            projected=not unprojected_events,
            unprojected_events=unprojected_events,
        )


class MatchedFailure(Body):
    """The failure a ``reason`` search found a job by."""

    kind: models.Failure.Kind
    node_id: str | None
    """Null for a job-level or planner failure."""
    attempt: int | None
    reason: str
    recovered: bool
    """A later attempt of its node succeeded: it did not end the job."""
    handled: bool
    """Its caller handled it (``continue_on_error``, a span whose parent ended well)."""

    @classmethod
    def from_failure(cls, failure: models.Failure) -> "MatchedFailure":
        step = failure.kind == models.Failure.Kind.STEP
        return cls(
            kind=models.Failure.Kind(failure.kind),
            node_id=failure.node_id if step else None,
            attempt=failure.attempt if step else None,
            reason=failure.reason,
            recovered=failure.recovered,
            handled=failure.handled,
        )


class ListedJob(JobSummary):
    """A job of a page of the jobs list."""

    matched_failure: MatchedFailure | None
    """With a ``reason`` filter, the earliest of the job's failures it matched (a job may be
    found by an attempt that was retried successfully: ``recovered``); null without one."""

    @classmethod
    def listed(
        cls,
        job: models.Job,
        due: models.NextAttempt | None = None,
        matched: models.Failure | None = None,
    ) -> "ListedJob":
        return cls(
            **_summary_fields(job, due),
            matched_failure=MatchedFailure.from_failure(matched) if matched else None,
        )


class JobPage(Body):
    """One page of jobs, newest first."""

    jobs: list[ListedJob]
    next_cursor: str | None
    """Pass as ``cursor`` for the next page; null on the last page."""
