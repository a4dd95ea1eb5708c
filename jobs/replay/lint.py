"""Contract lint: where a producer broke the failure contract (docs/contract.md, findings).

Pure, fed by replay's single walk in event order, so the same events in any delivery order give
the same findings. Sources: 000 (no duplicate side effects, a permanent failure never re-runs),
002 (cancellation fences), 004 (plan hash boundaries).

Two kinds of finding: those an event shows when it is folded in (the ``Linter`` methods), and
those judged over all of a job's events (attempt_gap, finish_without_start), which
``judged_over_the_job`` derives from a node's steps, so a later batch can judge them again for
the nodes it touches.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from jobs.replay.failures import ResultType

SEVERITY_BY_KIND = {
    "duplicate_success": "error",
    "rerun_after_permanent": "error",
    "refinished": "warning",
    "uncompensated": "warning",
    "result_after_finish": "warning",
    "finish_without_start": "info",
    "attempt_gap": "info",
    "plan_hash_mismatch": "error",
}
# Error findings that open a contract_violation escalation; plan_hash_mismatch opens a
# boundary_violation instead (the failure-report contract).
CONTRACT_VIOLATION_KINDS = frozenset({"duplicate_success", "rerun_after_permanent"})


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    node_id: str
    attempts: tuple[int, ...]
    event_ids: tuple[str, ...]
    message: str
    position: int

    @property
    def severity(self) -> str:
        return SEVERITY_BY_KIND[self.kind]

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "node_id": self.node_id,
            "attempts": list(self.attempts),
            "event_ids": list(self.event_ids),
            "message": self.message,
        }

    def stored(self) -> list:
        """The finding as JSON-ready data, position included (a snapshot keeps it)."""
        attempts, event_ids = list(self.attempts), list(self.event_ids)
        return [self.kind, self.node_id, attempts, event_ids, self.message, self.position]

    @classmethod
    def from_stored(cls, row: list) -> "Finding":
        kind, node_id, attempts, event_ids, message, position = row
        return cls(kind, node_id, tuple(attempts), tuple(event_ids), message, position)


def in_event_order(findings: Iterable[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (f.position, f.kind, f.node_id, f.attempts))


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What lint needs to know of a node's earlier events, read from its steps' marks:
    (position, attempt, event_id) of its first non-stale success and permanent failure."""

    first_success: tuple[int, int, str] | None
    first_permanent: tuple[int, int, str] | None
    # Lint judges only what producers declared (an inferred success is no contract breach).
    first_declared_success: tuple[int, int, str] | None = None


def node_facts(steps: Iterable[Any]) -> NodeFacts:
    found: dict[str, list[tuple[int, int, str]]] = {
        "success": [],
        "permanent": [],
        "declared_success": [],
    }
    for step in steps:
        for name, marks in found.items():
            if mark := step.marks.get(name):
                marks.append((mark[0], step.attempt, mark[1]))
    first = {name: min(marks, default=None) for name, marks in found.items()}
    return NodeFacts(first["success"], first["permanent"], first["declared_success"])


@dataclass(slots=True)
class Linter:
    """The job-level part of lint's state; small, so it travels in the fold's snapshot."""

    position: int = 0
    finished_event: str = ""
    # node -> (attempt, event_id) of its latest compensatable failure not compensated yet.
    uncompensated: dict[str, tuple[int, str]] = field(default_factory=dict)
    any_started: bool = False
    findings: list[Finding] = field(default_factory=list)
    # Findings judged over all of the job's events, by node.
    judged: dict[str, list[Finding]] = field(default_factory=dict)
    # node -> the message of its first contract violation (``CONTRACT_VIOLATION_KINDS``): the
    # escalation rules read it after every event, where walking every finding made a job that
    # keeps reporting after its finish quadratic in its events.
    violations: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for finding in self.findings:
            self._note_violation(finding)

    def _add(self, kind: str, node: str, attempts, event_ids, message: str) -> None:
        finding = Finding(kind, node, tuple(attempts), tuple(event_ids), message, self.position)
        self.findings.append(finding)
        self._note_violation(finding)

    def _note_violation(self, finding: Finding) -> None:
        if finding.kind in CONTRACT_VIOLATION_KINDS and finding.severity == "error":
            self.violations.setdefault(finding.node_id, finding.message)

    def job_finished(self, event_id: str) -> None:
        self.finished_event = self.finished_event or event_id
        for node, (attempt, failed_event) in self.uncompensated.items():
            self._add(
                "uncompensated",
                node,
                [attempt],
                [failed_event, event_id],
                f"Node {node} failed compensatably (attempt {attempt}) and the job finished "
                "with no compensation: the partial commit may still be in place",
            )
        self.uncompensated.clear()

    def compensated(self, node: str, attempt: int) -> None:
        if self.uncompensated.get(node, (None,))[0] == attempt:
            del self.uncompensated[node]

    def node_event(self, event, node: str, attempt: int, facts: NodeFacts) -> None:
        """A non-stale node_started or node_finished; ``facts`` are from before it."""
        if self.finished_event:
            self._add(
                "result_after_finish",
                node,
                [attempt],
                [self.finished_event, event.event_id],
                f"Node {node} reported attempt {attempt} after the job had finished",
            )
        permanent = facts.first_permanent
        if permanent is not None and attempt > permanent[1]:
            verb = "started" if event.type == "node_started" else "finished"
            self._add(
                "rerun_after_permanent",
                node,
                [permanent[1], attempt],
                [permanent[2], event.event_id],
                f"Node {node} {verb} again (attempt {attempt}) after its permanent failure "
                f"(attempt {permanent[1]}): a permanently failed step must not run again",
            )
        if event.type == "node_started":
            self.any_started = True

    def node_finished(
        self,
        event,
        node: str,
        attempt: int,
        facts: NodeFacts,
        *,
        replaced_event: str,
        job_plan_hash: str,
    ) -> None:
        """A non-stale node_finished; ``replaced_event`` is the earlier non-stale finish of the
        same attempt, "" when this is its first."""
        self.node_event(event, node, attempt, facts)
        result_type = event.payload.get("result_type", ResultType.SUCCESS)
        if replaced_event:
            self._add(
                "refinished",
                node,
                [attempt],
                [replaced_event, event.event_id],
                f"Node {node} reported attempt {attempt} finished again: the later result "
                "replaces the earlier one",
            )
        plan_hash = event.payload.get("plan_hash")
        if job_plan_hash and plan_hash and plan_hash != job_plan_hash:
            self._add(
                "plan_hash_mismatch",
                node,
                [attempt],
                [event.event_id],
                f"Node {node} ran plan {plan_hash} but the job's plan is {job_plan_hash}",
            )
        success = facts.first_declared_success
        declared = not event.payload.get("inferred")
        if (
            declared
            and result_type == ResultType.SUCCESS
            and success is not None
            and success[1] != attempt
        ):
            self._add(
                "duplicate_success",
                node,
                [success[1], attempt],
                [success[2], event.event_id],
                f"Node {node} succeeded twice (attempts {success[1]} and {attempt}): "
                "its side effect may have happened twice",
            )
        if result_type == ResultType.COMPENSATABLE_FAILURE:
            self.uncompensated[node] = (attempt, event.event_id)

    def judge(self, node: str, steps: Iterable[Any]) -> None:
        """Judge again the findings over all of the job's events for ``node``, from all of its
        steps (unstarted finishes count only for producers that send node_started at all: a
        producer that never does is not breaking anything)."""
        self.judged[node] = judged_over_the_job(node, list(steps), self.any_started)

    def all_findings(self) -> list[Finding]:
        return in_event_order([*self.findings, *(f for fs in self.judged.values() for f in fs)])

    def snapshot(self) -> dict:
        return {
            "position": self.position,
            "finished_event": self.finished_event,
            "uncompensated": [[n, a, e] for n, (a, e) in self.uncompensated.items()],
            "any_started": self.any_started,
            "findings": [f.stored() for f in self.findings],
            "judged": {n: [f.stored() for f in fs] for n, fs in self.judged.items() if fs},
        }

    @classmethod
    def restore(cls, data: dict) -> "Linter":
        return cls(
            position=data["position"],
            finished_event=data["finished_event"],
            uncompensated={n: (a, e) for n, a, e in data["uncompensated"]},
            any_started=data["any_started"],
            findings=[Finding.from_stored(row) for row in data["findings"]],
            judged={
                node: [Finding.from_stored(row) for row in rows]
                for node, rows in data["judged"].items()
            },
        )


def judged_over_the_job(node: str, steps: list[Any], any_started: bool) -> list[Finding]:
    """attempt_gap and finish_without_start for one node, from all of its steps."""
    findings = []
    seen = {
        s.attempt: s
        for s in steps
        if s.started_event_id or (s.result_type is not None and not s.ignored_stale)
    }
    for attempt, step in sorted(seen.items()):
        if attempt > 1 and attempt - 1 not in seen:
            findings.append(
                Finding(
                    "attempt_gap",
                    node,
                    (attempt,),
                    (step.started_event_id or step.finished_event_id,),
                    f"Node {node} has attempt {attempt} with no attempt {attempt - 1}",
                    step.marks["first"],
                )
            )
    if any_started:
        for step in steps:
            finished = step.result_type is not None and not step.ignored_stale
            if finished and not step.started_event_id:
                findings.append(
                    Finding(
                        "finish_without_start",
                        node,
                        (step.attempt,),
                        (step.finished_event_id,),
                        f"Node {node} finished attempt {step.attempt} with no node_started for it",
                        step.marks["finished"],
                    )
                )
    return findings
