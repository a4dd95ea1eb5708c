"""Replay: a job's events in, its state out (DESIGN.md sections 4 and 5, source 000 section 5).

Pure: no models, no ORM. ``build(events)`` sorts the events into event order and walks them once.
After each event it re-evaluates the escalation rules, so the escalations a job gets never depend
on how its events were batched or shuffled. The stored Job and Step rows are this function's
output (replay parity).
"""

from collections.abc import Iterable

from jobs.contract.events import Event, order_key
from jobs.replay import failures, lint
from jobs.replay.failures import ResultType, RunStatus
from jobs.replay.state import (
    DEFAULT_CONFIG,
    DEGRADED_REASON,
    JOB_ATTRIBUTES,
    PLANNER_SCHEMA,
    STEP_FIELDS,
    EscalationTrigger,
    JobState,
    ReplayConfig,
    StepState,
)


def sort_events(events: Iterable[Event]) -> list[Event]:
    """Events in event order. Every event must carry a ``ts`` (ingest defaults it)."""
    return sorted(events, key=lambda e: order_key(e.ts, e.seq, e.type, e.attempt, e.event_id))


def build(events: Iterable[Event], config: ReplayConfig = DEFAULT_CONFIG) -> JobState:
    """Replay a job's events (in any order) into its state."""
    ordered = sort_events(events)
    if not ordered:
        raise ValueError("a job has at least one event")
    replay = _Replay(ordered[0].job_id, config)
    for event in ordered:
        replay.apply(event)
    return replay.finish()


class _Replay:
    """The single walk over a job's events; one instance per ``build`` call."""

    def __init__(self, job_id: str, config: ReplayConfig):
        self.config = config
        self.state = JobState(job_id=job_id)
        self.steps: dict[tuple[str, int], StepState] = {}
        self.completed: set[str] = set()
        # node -> its latest non-stale failed attempt, ordered by when that failure came.
        self.failing: dict[str, StepState] = {}
        self.cancel_seen = False
        self.cancel_epoch: int | None = None
        self.cancel_epochless = False
        self.finished_status = ""
        self.degraded = False
        self.boundary_nodes: dict[str, str] = {}
        self.holding: dict[tuple[str, str], tuple[str, str]] = {}
        self.linter = lint.Linter()

    # -- events ---------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        state = self.state
        state.event_count += 1
        state.last_event_at = event.ts
        if state.started_at is None:
            state.started_at = event.ts
        stale = event.type == "node_finished" and self._is_stale(event)
        if event.type == "node_finished":
            self._on_node_finished(event, stale)
        elif handler := getattr(self, "_on_" + event.type.replace(".", "_"), None):
            handler(event)
        self.linter.observe(event, stale=stale, job_plan_hash=state.attributes.get("plan_hash", ""))
        self._evaluate_rules(event)

    def _on_job_started(self, event: Event) -> None:
        payload = event.payload
        for name in JOB_ATTRIBUTES:
            if isinstance(payload.get(name), str):
                self.state.attributes[name] = payload[name]
        if isinstance(payload.get("metadata"), dict):
            self.state.metadata = payload["metadata"]

    def _step(self, event: Event) -> StepState:
        key = (event.payload["node_id"], event.attempt)
        step = self.steps.get(key)
        if step is None:
            step = StepState(node_id=key[0], attempt=key[1], position=len(self.steps))
            self.steps[key] = step
        for name in ("step_index", "trace_span_id", "parent_span_id", "epoch", "step_epoch"):
            if name in event.payload:
                setattr(step, name, event.payload[name])
        return step

    def _on_node_started(self, event: Event) -> None:
        step = self._step(event)
        step.started_at = event.ts
        step.started_event_id = event.event_id

    def _on_node_finished(self, event: Event, stale: bool) -> None:
        payload = event.payload
        step = self._step(event)
        step.result_type = payload.get("result_type", ResultType.SUCCESS)
        step.finished_at = event.ts
        step.finished_event_id = event.event_id
        step.ignored_stale = stale
        step.reason = payload.get("reason", "")
        step.duration_ms = payload.get("duration_ms")
        step.continue_on_error = payload.get("continue_on_error", False)
        for name in ("state", "failure_code", "error_type", "tool", "source", "plan_hash"):
            setattr(step, name, payload.get(name, ""))
        step.payload_results = payload.get("payload_results", {})
        step.context = payload.get("context", {})
        step.audit_trail = payload.get("audit_trail", [])
        step.extra = {k: v for k, v in payload.items() if k not in STEP_FIELDS}
        if stale:
            return  # source 002's cancellation fence: kept and shown, changes nothing.
        node = step.node_id
        if step.result_type == ResultType.SUCCESS:
            self._recovered(node)
            if node not in self.completed:
                self.completed.add(node)
                self.state.completed_node_ids.append(node)
            self.state.payload_results.update(step.payload_results)
            self.state.cursor_node = node
        elif step.continue_on_error:
            self._recovered(node)  # source 004: declared in the plan, the run goes on.
        else:
            self.failing.pop(node, None)
            self.failing[node] = step
            if node not in self.state.failing_node_ids:
                self.state.failing_node_ids.append(node)
        if step.error_type == "BoundaryViolation":
            self.boundary_nodes.setdefault(node, "raised a BoundaryViolation")
        job_hash = self.state.attributes.get("plan_hash", "")
        if job_hash and step.plan_hash and step.plan_hash != job_hash:
            self.boundary_nodes.setdefault(
                node, f"ran plan {step.plan_hash}, the job's plan is {job_hash}"
            )

    def _recovered(self, node: str) -> None:
        """``node``'s latest attempt is no longer a failure: it stops being a failing node."""
        self.failing.pop(node, None)
        if node in self.state.failing_node_ids:
            self.state.failing_node_ids.remove(node)

    def _on_compensation_finished(self, event: Event) -> None:
        node = event.payload["node_id"]
        if event.payload.get("result_type", ResultType.SUCCESS) != ResultType.SUCCESS:
            return
        candidates = [
            s
            for s in self.steps.values()
            if s.node_id == node and s.result_type == ResultType.COMPENSATABLE_FAILURE
        ]
        if candidates:
            step = max(candidates, key=lambda s: s.position)
            step.compensated = True
            step.compensation_reason = event.payload.get("reason", "")

    def _on_state_checkpointed(self, event: Event) -> None:
        node = event.payload.get("node_id")
        if node and isinstance(event.payload.get("state"), str):
            step = max(
                (s for s in self.steps.values() if s.node_id == node),
                key=lambda s: s.position,
                default=None,
            )
            if step is not None and step.result_type is None:
                step.state = event.payload["state"]

    def _on_cancel_requested(self, event: Event) -> None:
        self.cancel_seen = True
        self.state.cancel_reason = event.payload.get("reason", "")
        epoch = event.payload.get("epoch")
        if epoch is None:
            self.cancel_epochless = True
        else:
            self.cancel_epoch = max(epoch, self.cancel_epoch or 0)

    def _on_job_finished(self, event: Event) -> None:
        self.finished_status = event.payload["status"]
        self.state.finished_at = event.ts
        self.state.finish_code = event.payload.get("code", "")
        self.state.finish_reason = event.payload.get("reason", "")

    def _on_planner(self, event: Event) -> None:
        payload = event.payload
        for name in ("provider", "model", "correlation_id"):
            if isinstance(payload.get(name), str):
                self.state.attributes.setdefault(name, payload[name])

    def _on_graph_next_step_parse_invalid(self, event: Event) -> None:
        self._on_planner(event)
        self.state.planner_parse_invalid += 1

    def _on_graph_next_step_degraded(self, event: Event) -> None:
        self._on_planner(event)
        payload = event.payload
        self.degraded = True
        self.state.planner_degraded += 1
        self.state.last_validation_error = {
            "reason": payload.get("reason") or DEGRADED_REASON,
            "attempts": payload.get("attempts", self.state.planner_parse_invalid),
            "schema": payload.get("schema", PLANNER_SCHEMA),
            "provider": payload.get("provider"),
            "model": payload.get("model"),
        }

    def _is_stale(self, event: Event) -> bool:
        if not self.cancel_seen:
            return False
        epoch = event.payload.get("epoch")
        return self.cancel_epochless or epoch is None or epoch < (self.cancel_epoch or 0)

    # -- status and rules -----------------------------------------------------------------

    def _latest_failing(self) -> StepState | None:
        return next(reversed(self.failing.values()), None)

    def _status(self) -> RunStatus:
        if self.finished_status:
            return RunStatus(self.finished_status)
        if self.cancel_seen:
            return RunStatus.CANCELLING
        latest = self._latest_failing()
        if latest is not None:
            if latest.state == "indeterminate":
                return RunStatus.PAUSED_RECONCILIATION
            if latest.error_type:
                return failures.run_status_for_error_type(latest.error_type)
        if self.degraded:
            return RunStatus.FAILED
        if any(s.result_type in failures.TERMINAL_RESULT_TYPES for s in self.failing.values()):
            return RunStatus.FAILED
        if self.failing:
            return RunStatus.PAUSED_TRANSIENT
        return RunStatus.RUNNING

    def _rules_holding(self, status: RunStatus) -> dict[tuple[str, str], tuple[str, str]]:
        """(kind, node) -> (severity, message) for every state-based rule that holds now."""
        holding: dict[tuple[str, str], tuple[str, str]] = {}
        latest = self._latest_failing()
        status_rule = STATUS_RULES.get(status)
        if status_rule is not None and latest is not None:
            kind, severity, what = status_rule
            holding[(kind, latest.node_id)] = (severity, _step_message(latest, what))
        for step in self.failing.values():
            if (
                step.result_type == ResultType.RETRYABLE_FAILURE
                and step.attempt > self.config.max_retries
            ):
                what = f"still failing after {step.attempt} attempts"
                holding[("max_retries_exceeded", step.node_id)] = (
                    "medium",
                    _step_message(step, what),
                )
        for node, why in self.boundary_nodes.items():
            holding[("boundary_violation", node)] = ("high", f"Node {node} {why}")
        for finding in self.linter.findings:
            if finding.severity == "error" and finding.kind in lint.CONTRACT_VIOLATION_KINDS:
                holding.setdefault(
                    ("contract_violation", finding.node_id), ("high", finding.message)
                )
        return holding

    def _evaluate_rules(self, event: Event) -> None:
        status = self._status()
        self.state.status = status
        holding = self._rules_holding(status)
        for key, (severity, message) in holding.items():
            if key not in self.holding:
                self._trigger(key[0], key[1], severity, message, event)
        self.holding = holding
        if event.type == "escalation_raised":
            payload = event.payload
            self._trigger(
                "raised",
                payload.get("node_id", ""),
                payload.get("severity", "medium"),
                payload.get("message") or payload.get("kind") or "Escalation raised by producer",
                event,
            )

    def _trigger(self, kind: str, node_id: str, severity: str, message: str, event: Event) -> None:
        self.state.escalation_triggers.append(
            EscalationTrigger(kind, node_id, severity, message, event.event_id, event.ts)
        )

    def finish(self) -> JobState:
        state = self.state
        state.steps = sorted(self.steps.values(), key=lambda s: s.position)
        state.findings = self.linter.finish(finished=bool(self.finished_status))
        return state


# Status-based escalation kinds: status -> (kind, severity, what the message says).
STATUS_RULES: dict[RunStatus, tuple[str, str, str]] = {
    RunStatus.PAUSED_APPROVAL: ("user_action", "medium", "needs a person (approval or re-auth)"),
    RunStatus.FAILED_INTERNAL: ("internal", "high", "failed with an internal error"),
    RunStatus.PAUSED_RECONCILIATION: (
        "reconciliation",
        "high",
        "left a mutation indeterminate: verify before resuming",
    ),
}


def _step_message(step: StepState, what: str) -> str:
    detail = f" ({step.error_type})" if step.error_type else ""
    reason = f": {step.reason}" if step.reason else ""
    return f"Node {step.node_id} {what}{detail}{reason}"
