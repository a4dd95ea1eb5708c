"""What replay produces: a job's state and its steps' states (DESIGN.md sections 4 and 5).

Plain data, no behaviour beyond derived properties: ``walk.build`` fills these in.
"""

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobs.replay import failures, lint
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
    """One attempt of one node. ``result_type`` is None while the attempt is running."""

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

    @property
    def segment(self) -> Segment:
        return failures.segment_for(self.result_type)

    @property
    def is_failure(self) -> bool:
        return self.result_type not in (None, ResultType.SUCCESS)


@dataclass(frozen=True, slots=True)
class EscalationTrigger:
    """An event after which an escalation rule holds and before which it did not."""

    kind: str
    node_id: str
    severity: str
    message: str
    event_id: str
    ts: datetime


@dataclass(slots=True)
class JobState:
    job_id: str
    status: RunStatus = RunStatus.RUNNING
    completed_node_ids: list[str] = field(default_factory=list)
    cursor_node: str = ""
    payload_results: dict[str, Any] = field(default_factory=dict)
    steps: list[StepState] = field(default_factory=list)
    attributes: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    last_event_at: datetime | None = None
    finish_code: str = ""
    finish_reason: str = ""
    cancel_reason: str = ""
    last_validation_error: dict[str, Any] | None = None
    # Nodes failing now (latest non-stale attempt a failure), in the order their failure began.
    failing_node_ids: list[str] = field(default_factory=list)
    escalation_triggers: list[EscalationTrigger] = field(default_factory=list)
    findings: list[lint.Finding] = field(default_factory=list)
    planner_parse_invalid: int = 0
    planner_degraded: int = 0
    event_count: int = 0

    def step(self, node_id: str, attempt: int) -> StepState | None:
        return next((s for s in self.steps if s.node_id == node_id and s.attempt == attempt), None)

    @property
    def root_failure(self) -> StepState | None:
        """The first failing node's latest attempt: where the trouble started."""
        if not self.failing_node_ids:
            return None
        root = self.failing_node_ids[0]
        return max(
            (s for s in self.steps if s.node_id == root and s.is_failure),
            key=lambda s: s.position,
            default=None,
        )
