"""The run status and the escalation rules (docs/contract.md), evaluated by the fold
after each event in event order.

Pure functions of the fold's state: the failing nodes (each one's latest non-stale failure), the
cancel and finish seen, the planner's degradation, the boundary violations and the findings. And
the failure-code contract's cancellation fence, which decides which results are stale.
"""

from typing import Protocol

from jobs.contract.events import Event
from jobs.replay import failures, lint
from jobs.replay.failures import ResultType, RunStatus
from jobs.replay.state import StepState

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
# Rules that hold or not depending on the job's state; a late event that sorts earlier can show
# one never held (the projection then withdraws its escalation).
STATE_KINDS = frozenset(
    {
        "user_action",
        "internal",
        "reconciliation",
        "max_retries_exceeded",
        "boundary_violation",
        "contract_violation",
    }
)


class CancelFence:
    """The failure-code contract's cancellation fence: once a cancel came in event order, a
    node_finished whose epoch is lower than the cancel's, or that has no epoch, or follows a
    cancel without one, is stale."""

    __slots__ = ("epoch", "epochless", "seen")

    def __init__(self, seen: bool = False, epoch: int | None = None, epochless: bool = False):
        self.seen, self.epoch, self.epochless = seen, epoch, epochless

    def is_stale(self, event: Event) -> bool:
        if not self.seen:
            return False
        epoch = event.payload.get("epoch")
        return self.epochless or epoch is None or epoch < (self.epoch or 0)


class Fold(Protocol):
    """What the rules read of the walk's fold (``walk.Fold``): declared here so that the walk
    imports the rules and the rules import nothing of the walk."""

    failing: dict[str, StepState]
    finished_status: str
    cancel: CancelFence
    degraded: bool
    boundary: dict[str, str]
    linter: lint.Linter

    def is_retrying(self, step: StepState) -> bool: ...


def active_failures(fold: Fold) -> list[StepState]:
    """The failing nodes' latest failures, the most recent last, without the nodes that are
    retrying (a later attempt started and not finished: they are running again)."""
    return [step for step in fold.failing.values() if not fold.is_retrying(step)]


def run_status(fold: Fold, failing: list[StepState]) -> RunStatus:
    """docs/contract.md's rules, the first that applies."""
    if fold.finished_status:
        return RunStatus(fold.finished_status)
    if fold.cancel.seen:
        return RunStatus.CANCELLING
    latest = failing[-1] if failing else None
    if latest is not None:
        if latest.state == "indeterminate":
            return RunStatus.PAUSED_RECONCILIATION
        if latest.error_type:
            return failures.run_status_for_error_type(latest.error_type)
    if fold.degraded:
        return RunStatus.FAILED
    if any(step.result_type in failures.TERMINAL_RESULT_TYPES for step in failing):
        return RunStatus.FAILED
    if failing:
        return RunStatus.PAUSED_TRANSIENT
    return RunStatus.RUNNING


def holding(
    fold: Fold, status: RunStatus, failing: list[StepState], max_retries: int
) -> dict[tuple[str, str], tuple[str, str]]:
    """(kind, node) -> (severity, message) for every state-based rule that holds now."""
    held: dict[tuple[str, str], tuple[str, str]] = {}
    latest = failing[-1] if failing else None
    status_rule = STATUS_RULES.get(status)
    if status_rule is not None and latest is not None:
        kind, severity, what = status_rule
        held[(kind, latest.node_id)] = (severity, step_message(latest, what))
    for step in failing:
        if step.result_type == ResultType.RETRYABLE_FAILURE and step.attempt > max_retries:
            # The limit, not the attempt that crossed it: later attempts keep the escalation
            # (no new trigger), and the queue row shows the node's latest attempt count.
            what = f"kept failing past the retry limit ({max_retries} attempts)"
            held[("max_retries_exceeded", step.node_id)] = ("medium", step_message(step, what))
    for node, why in fold.boundary.items():
        held[("boundary_violation", node)] = ("high", f"Node {node} {why}")
    for node, message in fold.linter.violations.items():
        held.setdefault(("contract_violation", node), ("high", message))
    return held


def step_message(step: StepState, what: str) -> str:
    detail = f" ({step.error_type})" if step.error_type else ""
    reason = f": {step.reason}" if step.reason else ""
    return f"Node {step.node_id} {what}{detail}{reason}"
