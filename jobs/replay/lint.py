"""Contract lint: where a producer broke the failure contract (DESIGN.md section 4, findings).

Pure, fed by replay's single walk in event order, so the same events in any delivery order give
the same findings. Sources: 000 (no duplicate side effects, a permanent failure never re-runs),
002 (cancellation fences), 004 (plan hash boundaries).
"""

from dataclasses import dataclass, field

from jobs.contract.events import Event
from jobs.replay.failures import ResultType

SEVERITY_BY_KIND = {
    "duplicate_success": "error",
    "rerun_after_permanent": "error",
    "uncompensated": "warning",
    "result_after_finish": "warning",
    "finish_without_start": "info",
    "attempt_gap": "info",
    "plan_hash_mismatch": "error",
}
# Error findings that open a contract_violation escalation; plan_hash_mismatch opens a
# boundary_violation instead (source 004).
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


@dataclass(slots=True)
class Linter:
    findings: list[Finding] = field(default_factory=list)
    position: int = 0
    successes: dict[str, tuple[int, str]] = field(default_factory=dict)
    permanent: dict[str, tuple[int, str]] = field(default_factory=dict)
    uncompensated: dict[str, tuple[int, str]] = field(default_factory=dict)
    attempts_seen: dict[str, set[int]] = field(default_factory=dict)
    started: set[tuple[str, int]] = field(default_factory=set)
    finishes: list[tuple[int, str, int, str]] = field(default_factory=list)
    finished_event: str = ""

    def _add(self, kind: str, node: str, attempts, event_ids, message: str) -> None:
        self.findings.append(
            Finding(kind, node, tuple(attempts), tuple(event_ids), message, self.position)
        )

    def observe(self, event: Event, *, stale: bool, job_plan_hash: str) -> None:
        self.position += 1
        if event.type == "job_finished":
            self.finished_event = self.finished_event or event.event_id
            for node, (attempt, event_id) in self.uncompensated.items():
                self._add(
                    "uncompensated",
                    node,
                    [attempt],
                    [event_id, event.event_id],
                    f"Node {node} failed compensatably (attempt {attempt}) and the job finished "
                    "with no compensation: the partial commit may still be in place",
                )
            self.uncompensated.clear()
            return
        if event.type == "compensation_finished":
            self.uncompensated.pop(event.payload["node_id"], None)
            return
        if event.type not in ("node_started", "node_finished") or stale:
            return
        node, attempt, event_id = event.payload["node_id"], event.attempt, event.event_id
        if self.finished_event:
            self._add(
                "result_after_finish",
                node,
                [attempt],
                [self.finished_event, event_id],
                f"Node {node} reported attempt {attempt} after the job had finished",
            )
        if node in self.permanent:
            failed_attempt, failed_event = self.permanent[node]
            verb = "started" if event.type == "node_started" else "finished"
            self._add(
                "rerun_after_permanent",
                node,
                [failed_attempt, attempt],
                [failed_event, event_id],
                f"Node {node} {verb} again (attempt {attempt}) after its permanent failure "
                f"(attempt {failed_attempt}): a permanently failed step must not run again",
            )
        seen = self.attempts_seen.setdefault(node, set())
        if attempt > 1 and attempt - 1 not in seen and attempt not in seen:
            self._add(
                "attempt_gap",
                node,
                [attempt],
                [event_id],
                f"Node {node} has attempt {attempt} with no attempt {attempt - 1}",
            )
        seen.add(attempt)
        if event.type == "node_started":
            self.started.add((node, attempt))
            return
        self.finishes.append((self.position, node, attempt, event_id))
        self._observe_finish(event, node, attempt, event_id, job_plan_hash)

    def _observe_finish(self, event, node, attempt, event_id, job_plan_hash) -> None:
        result_type = event.payload.get("result_type", ResultType.SUCCESS)
        plan_hash = event.payload.get("plan_hash")
        if job_plan_hash and plan_hash and plan_hash != job_plan_hash:
            self._add(
                "plan_hash_mismatch",
                node,
                [attempt],
                [event_id],
                f"Node {node} ran plan {plan_hash} but the job's plan is {job_plan_hash}",
            )
        if result_type == ResultType.SUCCESS:
            earlier = self.successes.get(node)
            if earlier and earlier[0] != attempt:
                self._add(
                    "duplicate_success",
                    node,
                    [earlier[0], attempt],
                    [earlier[1], event_id],
                    f"Node {node} succeeded twice (attempts {earlier[0]} and {attempt}): "
                    "its side effect may have happened twice",
                )
            self.successes.setdefault(node, (attempt, event_id))
        elif result_type == ResultType.PERMANENT_FAILURE:
            self.permanent.setdefault(node, (attempt, event_id))
        elif result_type == ResultType.COMPENSATABLE_FAILURE:
            self.uncompensated[node] = (attempt, event_id)

    def finish(self, *, finished: bool) -> list[Finding]:
        """All findings in event order. Unstarted finishes count only for producers that send
        node_started at all: a producer that never does is not breaking anything."""
        if self.started:
            for position, node, attempt, event_id in self.finishes:
                if (node, attempt) not in self.started:
                    self.findings.append(
                        Finding(
                            "finish_without_start",
                            node,
                            (attempt,),
                            (event_id,),
                            f"Node {node} finished attempt {attempt} with no node_started for it",
                            position,
                        )
                    )
        return sorted(self.findings, key=lambda f: (f.position, f.kind, f.node_id))
