"""What replay produces: a job's state and its steps' states (docs/contract.md).

Plain data: ``walk.Fold`` fills these in, and the projection stores them as Job and Step rows
(every StepState field has a Step column of the same name).
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

from jobs.contract.events import Event
from jobs.replay import failures, lint
from jobs.replay import strip as strip_cells
from jobs.replay.calls import CallRecord
from jobs.replay.failures import ResultType, RunStatus, Segment

# Payload fields a step row shows in its own columns; anything else is kept in ``extra``.
STEP_FIELDS = frozenset(
    {
        "node_id",
        "attempt",
        "result_type",
        "reason",
        "duration_ms",
        "state",
        "step_index",
        "trace_span_id",
        "parent_span_id",
        "failure_code",
        "error_type",
        "tool",
        "source",
        "plan_hash",
        "continue_on_error",
        "context",
        "audit_trail",
        "payload_results",
        "epoch",
        "step_epoch",
        # Filled from OpenTelemetry spans (jobs.replay.spans); a producer may send the first two.
        "exception_type",
        "stack",
        "handled",
        "inferred",
        "span",
    }
)
JOB_ATTRIBUTES = (
    "name",
    "workflow",
    "correlation_id",
    "session_id",
    "provider",
    "model",
    "plan_hash",
    "retry_of",
)
DEGRADED_REASON = "next_step_parse_failed"
PLANNER_SCHEMA = "NextStepProposal"


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    max_retries: int = 5


DEFAULT_CONFIG = ReplayConfig()


@dataclass(slots=True)
class StepState:
    """One attempt of one node. ``result_type`` is None while the attempt is running.

    ``history`` keeps the results this attempt no longer shows, oldest first: a stale result
    that came after the attempt had finished (the failure-code contract: it never overwrites), or
    a result a later non-stale finish replaced. ``marks`` is replay's own bookkeeping (event
    positions and the first success and permanent failure of the attempt), which lets a later
    batch resume the fold from this row; ``lint.node_facts`` reads it.
    """

    node_id: str
    attempt: int
    position: int
    result_type: str | None = None
    reason: str = ""
    ignored_stale: bool = False
    compensated: bool = False
    compensation_reason: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    state: str = ""
    step_index: int | None = None
    trace_span_id: str = ""
    parent_span_id: str = ""
    failure_code: str = ""
    error_type: str = ""
    tool: str = ""
    source: str = ""
    plan_hash: str = ""
    continue_on_error: bool = False
    epoch: int | None = None
    step_epoch: int | None = None
    payload_results: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    audit_trail: list[Any] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    started_event_id: str = ""
    finished_event_id: str = ""
    exception_type: str = ""
    stack: str = ""
    # A failure whatever called the step dealt with (its parent step ended well): drawn failed,
    # it makes no node failing. ``inferred``: the result type was inferred from a span's status,
    # not declared by the producer (lint's contract findings leave those alone).
    handled: bool = False
    inferred: bool = False
    # What the step panel shows of the OpenTelemetry span behind the step (kind, attributes,
    # span events, links, input and output).
    span: dict[str, Any] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    marks: dict[str, Any] = field(default_factory=dict)
    # Set on the step whose success completed its node (the node's first success): the node's
    # place, from 0, in the job's completed nodes. The job's list is read off its steps, so a
    # batch writes only the step it completes, never a list as long as the job.
    completes: int | None = None
    # The payload paths ingest masked in the attempt's events (``Event.masked``), in the order
    # met: the step panel says "masked at ingest" for them.
    masked: list[str] = field(default_factory=list)

    @property
    def segment(self) -> Segment:
        return failures.segment_for(self.result_type)

    @property
    def is_failure(self) -> bool:
        return self.result_type not in (None, ResultType.SUCCESS)

    @property
    def is_running(self) -> bool:
        """Started and not finished yet."""
        return self.result_type is None and bool(self.started_event_id)

    def keep_stale(self, event: Event) -> None:
        """Keep a stale result that came after the attempt finished in its history (the
        failure-code contract: it never overwrites)."""
        payload = event.payload
        assert event.ts is not None  # a stored event always has its time
        record = {
            "event_id": event.event_id,
            "why": "stale",
            "result_type": payload.get("result_type", ResultType.SUCCESS),
            "finished_at": event.ts.isoformat(),
        }
        for name in ("reason", "failure_code", "error_type", "epoch"):
            if name in payload:
                record[name] = payload[name]
        self.history.append(record)

    def result_record(self) -> dict[str, Any]:
        """The attempt's current result, for its history when a new one takes its place."""
        assert self.finished_at is not None  # a result's attempt has finished
        record: dict[str, Any] = {
            "event_id": self.finished_event_id,
            "why": "stale" if self.ignored_stale else "replaced",
            "result_type": self.result_type,
            "finished_at": self.finished_at.isoformat(),
        }
        for name in ("reason", "failure_code", "error_type"):
            if value := getattr(self, name):
                record[name] = value
        if self.epoch is not None:
            record["epoch"] = self.epoch
        return record

    @property
    def strip_cell(self) -> list:
        """This step in the jobs list's mini-bar: [segment, stale] (jobs.replay.strip)."""
        return [self.segment.value, self.ignored_stale]


@dataclass(frozen=True, slots=True)
class EscalationTrigger:
    """An event after which an escalation rule holds and before which it did not."""

    kind: str
    node_id: str
    severity: str
    message: str
    event_id: str
    ts: datetime


@dataclass(frozen=True, slots=True)
class Recovery:
    """A ``job_finished: completed`` and the escalations (kind, node) triggered before it: each
    of those still unresolved gets a "job recovered" audit entry (support decides)."""

    event_id: str
    ts: datetime
    escalations: frozenset[tuple[str, str]]


@dataclass(slots=True)
class JobState:
    """A job's state after replay.

    After a full replay ``steps`` holds every step and ``escalation_triggers`` every trigger;
    after a resumed fold (an incremental batch) they hold the steps the fold had loaded and the
    triggers of the new events only. ``changed_steps`` are the steps the fold wrote to.
    """

    job_id: str
    status: RunStatus = RunStatus.RUNNING
    # How many nodes a success completed (each one's step has ``completes``).
    completed_count: int = 0
    cursor_node: str = ""
    payload_results: dict[str, Any] = field(default_factory=dict)
    steps: list[StepState] = field(default_factory=list)
    changed_steps: list[StepState] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_event_at: datetime | None = None
    finish_code: str = ""
    finish_reason: str = ""
    cancel_reason: str = ""
    last_validation_error: dict[str, Any] | None = None
    # Nodes failing now (latest non-stale attempt a failure and no later attempt running), in
    # the order their failure began; ``failing_steps`` holds each one's latest failure.
    failing_node_ids: list[str] = field(default_factory=list)
    failing_steps: list[StepState] = field(default_factory=list)
    escalation_triggers: list[EscalationTrigger] = field(default_factory=list)
    # Every (kind, node) a trigger ever named, new or folded in earlier.
    triggered: set[tuple[str, str]] = field(default_factory=set)
    recoveries: list[Recovery] = field(default_factory=list)
    findings: list[lint.Finding] = field(default_factory=list)
    # Calls made inside the steps (from OpenTelemetry spans), after a full replay.
    calls: list[CallRecord] = field(default_factory=list)
    planner_parse_invalid: int = 0
    planner_degraded: int = 0
    event_count: int = 0
    step_count: int = 0
    max_attempt: int = 0
    segment_counts: dict[str, int] = field(default_factory=dict)
    # The jobs list's mini-bar (jobs.replay.strip): every step, counted in a few cells.
    strip: dict[str, Any] = field(default_factory=strip_cells.empty)

    @property
    def completed_node_ids(self) -> list[str]:
        """The nodes a success completed, in completion order (of ``steps``: all of them after
        a full replay)."""
        return completed_node_ids(self.steps)

    def step(self, node_id: str, attempt: int) -> StepState | None:
        return next((s for s in self.steps if s.node_id == node_id and s.attempt == attempt), None)

    @property
    def root_failure(self) -> StepState | None:
        """The first failing node's latest failure: where the trouble started. Never a stale
        result (those change nothing)."""
        if not self.failing_node_ids:
            return None
        root = self.failing_node_ids[0]
        return next(s for s in self.failing_steps if s.node_id == root)

    @property
    def failed_at(self) -> datetime | None:
        """When the latest failure of a failing node happened (event time)."""
        return max((s.finished_at for s in self.failing_steps if s.finished_at), default=None)


class Completing(Protocol):
    """What ``completed_node_ids`` reads of a step: a StepState's, or a page's row of one."""

    @property
    def node_id(self) -> str: ...

    @property
    def completes(self) -> int | None: ...


def completed_node_ids(steps: Iterable[Completing]) -> list[str]:
    """The nodes whose completing step is among ``steps``, in completion order."""
    done = sorted((step.completes, step.node_id) for step in steps if step.completes is not None)
    return [node for _, node in done]


class Attempted(Protocol):
    """What ``root_failure_of`` reads of a step: a StepState's, or a page's row of one."""

    @property
    def node_id(self) -> str: ...

    @property
    def position(self) -> int: ...

    @property
    def result_type(self) -> str: ...

    @property
    def ignored_stale(self) -> bool: ...


AttemptedT = TypeVar("AttemptedT", bound=Attempted)


def root_failure_of(failing_node_id: str, steps: Iterable[AttemptedT]) -> AttemptedT | None:
    """The root failure among a projected job's stored steps, given the first failing node it
    recorded (``Job.failing_node_id``): that node's latest failed attempt (by position), never a
    stale result, the attempt ``JobState.root_failure`` names. None without a failing node."""
    failed = [
        step
        for step in steps
        if failing_node_id
        and step.node_id == failing_node_id
        and not step.ignored_stale
        and step.result_type not in ("", ResultType.SUCCESS)
    ]
    return max(failed, key=lambda step: step.position) if failed else None
