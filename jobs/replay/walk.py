"""Replay: a job's events in, its state out (docs/architecture.md and docs/contract.md; the
step-result contract).

Pure: no models, no ORM. Replay is a fold over the job's events in event order: ``Fold.apply``
takes one event, and after each one the status and the escalation rules are evaluated again, so
the escalations a job gets never depend on how its events were batched or shuffled.
``build(events)`` folds a whole job (a full replay).

A fold can stop and resume: ``Fold.snapshot()`` is the job-level part of its state (small: the
failing nodes, the cancel fence, the rules holding, lint's job-level state...) with the order key
of the last event folded in. Everything per node lives in the steps (``StepState``, stored as
Step rows), so ``Fold.resume`` needs the snapshot, a few Job row fields and the steps of the nodes
the new events touch (``nodes_needed``), never the whole job: the cost of folding a batch onto a
snapshot grows with the batch, not with the job. Both paths run the same code, so a resumed fold
gives what a full replay of all the events gives (the parity tests check it).
"""

import hashlib
import inspect
from collections.abc import Iterable
from dataclasses import fields
from datetime import datetime
from typing import Any

from jobs.contract.events import Event, order_key
from jobs.replay import growth, lint, rules, spans
from jobs.replay import strip as strip_cells
from jobs.replay.failures import ResultType, RunStatus
from jobs.replay.state import (
    DEFAULT_CONFIG,
    DEGRADED_REASON,
    JOB_ATTRIBUTES,
    PLANNER_SCHEMA,
    STEP_FIELDS,
    EscalationTrigger,
    JobState,
    Recovery,
    ReplayConfig,
    StepState,
)

# Bump when the fold's meaning changes (the same events would fold into other rows or another
# snapshot): every job then gets a full replay on its next batch (and rebuild_projections
# refreshes them all). A change of the snapshot's shape needs no bump: the fold version
# (``FOLD_VERSION``, at the end of this module) carries a digest of it.
FOLD_MEANING = 12
SPAN = "span"
# An OpenTelemetry log record: read with its trace's spans (``spans.expand``), and folded as
# an event of the job like any other type.
LOG = "log"
# A finish's result, replaced as a whole when the attempt finishes again; the other fields of a
# finish keep the value an earlier event of the attempt gave when the finish leaves them out.
RESULT_DEFAULTS = {
    "reason": "",
    "failure_code": "",
    "error_type": "",
    "continue_on_error": False,
    "payload_results": {},
    "exception_type": "",
    "stack": "",
    "handled": False,
    "inferred": False,
}
# Checks of the result fields a producer cannot have validated (the contract does not name
# them): anything else counts as absent.
RESULT_TYPES_OF = {"handled": bool, "inferred": bool, "exception_type": str, "stack": str}
KEPT_FIELDS = (
    "duration_ms",
    "state",
    "tool",
    "source",
    "plan_hash",
    "context",
    "audit_trail",
    "span",
)
ID_FIELDS = ("step_index", "trace_span_id", "parent_span_id", "epoch", "step_epoch")
# The JobState fields a snapshot keeps: its times (as text), and these as they are.
SNAPSHOT_TIMES = ("started_at", "finished_at", "last_event_at")
SNAPSHOT_FIELDS = (
    *("cursor_node", "attributes", "finish_code", "finish_reason", "cancel_reason"),
    *("last_validation_error", "planner_parse_invalid", "planner_degraded", "event_count"),
    *("step_count", "max_attempt", "segment_counts", "completed_count"),
)


class NeedsFullReplay(Exception):
    """A resumed fold cannot go on exactly with the steps it was given: replay the whole job."""


def event_key(event: Event) -> tuple:
    assert event.ts is not None  # a stored event always has its time
    return order_key(event.ts, event.seq, event.type, event.attempt, event.event_id)


def sort_events(events: Iterable[Event]) -> list[Event]:
    """Events in event order. Every event must carry a ``ts`` (ingest defaults it)."""
    return sorted(events, key=event_key)


def touched_node(event: Event) -> str | None:
    """The node whose steps folding ``event`` reads or writes, if any."""
    if event.type in ("node_started", "node_finished", "compensation_finished"):
        return event.payload["node_id"]
    if event.type == "state_checkpointed" and isinstance(event.payload.get("node_id"), str):
        return event.payload["node_id"] or None
    return None


def build(events: Iterable[Event], config: ReplayConfig = DEFAULT_CONFIG) -> JobState:
    """Replay a job's events (in any order) into its state."""
    return Fold.of(events, config).finish()


class Fold:
    """The walk over one job's events, in event order."""

    def __init__(self, job_id: str, config: ReplayConfig = DEFAULT_CONFIG):
        self.config = config
        self.state = JobState(job_id=job_id)
        self.steps: dict[tuple[str, int], StepState] = {}
        self.by_node: dict[str, list[StepState]] = {}
        # None: this fold has seen every step (a full replay); else the nodes whose steps it
        # was given, the only ones it may read.
        self.loaded_nodes: set[str] | None = None
        self.changed: dict[tuple[str, int], StepState] = {}
        # node -> its latest non-stale failed attempt, ordered by when that failure came.
        self.failing: dict[str, StepState] = {}
        # The nodes of ``failing`` in the order their failure began.
        self.failing_began: list[str] = []
        self.cancel = rules.CancelFence()
        self.finished_status = ""
        self.degraded = False
        self.boundary: dict[str, str] = {}
        self.holding: dict[tuple[str, str], tuple[str, str]] = {}
        self.triggered: set[tuple[str, str]] = set()
        self.linter = lint.Linter()
        self.last_key: tuple | None = None
        # What the job's OpenTelemetry spans decided (None: it has none): a batch of new spans
        # is expanded onto it (``growth``) or the job replayed whole.
        self.trace: growth.TraceSummary | None = None
        # [node, attempt, holding, triggered]: the last event folded is a span step's inferred
        # permanent failure, which a later attempt makes retryable (docs/otlp.md); the
        # rules' state before it, to decide them again then. ``reopened``: that happened.
        self.reopenable: list | None = None
        self.reopened = False

    @classmethod
    def of(cls, events: Iterable[Event], config: ReplayConfig = DEFAULT_CONFIG) -> "Fold":
        """A fold of a whole job's events (in any order): a full replay. A job's OpenTelemetry
        spans are expanded first (``spans.expand``: what a span means depends on its whole
        trace) into the contract events folded with the others; its log records are read with
        them (a call's transcript, a step's timed entries) and folded as events too."""
        events = list(events)
        if not events:
            raise ValueError("a job has at least one event")
        fold = cls(events[0].job_id, config)
        span_events = [event for event in events if event.type == SPAN]
        log_events = [event for event in events if event.type == LOG]
        if span_events or log_events:
            expansion = spans.expand(fold.state.job_id, span_events, log_events)
            events = [event for event in events if event.type != SPAN] + expansion.events
            fold.state.calls = expansion.calls
            fold.trace = growth.summarize(expansion)
            # Each span is one of the job's events; the events made of it are not.
            fold.state.event_count += len(span_events)
        for event in sort_events(events):
            fold.apply(event)
        if fold.last_key is None and span_events:
            # Only calls waiting for their step so far: the job began with its first span (a
            # snapshot with no event folded is never resumed).
            fold.state.started_at = fold.state.last_event_at = expansion.spans[0].start
        return fold

    # -- events ---------------------------------------------------------------------------

    def apply(self, event: Event) -> None:
        """Fold in the next event in event order. The same event again (same order key, so the
        same event_id) is a resend and changes nothing, as in the event log."""
        if event.type == SPAN:
            # Spans are expanded first: with their whole trace (Fold.of), or onto it (growth).
            raise NeedsFullReplay("a span is folded as the events it stands for")
        key = event_key(event)
        if self.last_key is not None and key <= self.last_key:
            if key == self.last_key:
                return
            raise ValueError(f"event {event.event_id!r} does not come after the last one folded")
        self.last_key = key
        rules_before = self._rules_before(event)
        self.reopenable = None
        state = self.state
        if not spans.made_of_a_span(event):
            state.event_count += 1
        self.linter.position += 1
        state.last_event_at = event.ts
        if state.started_at is None:
            state.started_at = event.ts
        if handler := getattr(self, "_on_" + event.type.replace(".", "_"), None):
            handler(event)
        self._evaluate_rules(event)
        if rules_before is not None:
            step = self.steps[(event.payload["node_id"], event.attempt)]
            if (
                step.result_type == ResultType.PERMANENT_FAILURE
                and not step.ignored_stale
                and step.finished_event_id == event.event_id
            ):
                self.reopenable = [step.node_id, step.attempt, *rules_before]

    def _rules_before(self, event: Event) -> list | None:
        """The holding rules and the triggered ones before ``event``, as a snapshot keeps them,
        when it is a span step's inferred permanent failure (None otherwise)."""
        payload = event.payload
        if (
            self.trace is None
            or event.type != "node_finished"
            or payload.get("inferred") is not True
            or payload.get("result_type") != ResultType.PERMANENT_FAILURE
        ):
            return None
        return [self._holding_json(), sorted([k, n] for k, n in self.triggered)]

    def _holding_json(self) -> list:
        return sorted([k, n, s, m] for (k, n), (s, m) in self.holding.items())

    def take_growth(self, grown: "growth.Grown") -> None:
        """Resume a trace grown by new spans (``growth.Growth.extend``): its summary and calls,
        its new spans among the job's events, and the failure they retry reopened; the events
        made of them are folded next."""
        self.trace, self.state.calls = grown.summary, grown.calls
        self.state.event_count += grown.spans
        if grown.reopens:
            self.reopen_failure()

    def reopen_failure(self) -> None:
        """Make the failure ``reopenable`` names, the last event folded, the retryable failure a
        later attempt of its node makes it, and decide the rules after it again: what a replay
        of the whole trace with that attempt gives. Nothing else its finish did depends on
        which of the two it is: either makes its node failing, and lint marks neither (it was
        inferred, not declared)."""
        assert self.reopenable is not None  # only a trace whose failure it names reopens
        node, attempt, holding, triggered = self.reopenable
        step = self.steps[(node, attempt)]
        before = step.strip_cell
        step.result_type = ResultType.RETRYABLE_FAILURE
        self._changed(step, before)
        self.holding = {(k, n): (s, m) for k, n, s, m in holding}
        self.triggered = {(k, n) for k, n in triggered}
        job_id, event_id = self.state.job_id, step.finished_event_id
        self._evaluate_rules(Event("node_finished", job_id, event_id, step.finished_at, None, {}))
        self.reopenable, self.reopened = None, True

    def _on_job_started(self, event: Event) -> None:
        payload = event.payload
        for name in JOB_ATTRIBUTES:
            if isinstance(payload.get(name), str):
                self.state.attributes[name] = payload[name]
        if isinstance(payload.get("metadata"), dict):
            self.state.metadata = payload["metadata"]

    def node_steps(self, node: str) -> list[StepState]:
        if self.loaded_nodes is not None and node not in self.loaded_nodes:
            raise RuntimeError(f"replay needs the steps of node {node!r}, which were not loaded")
        return self.by_node.get(node, [])

    def _step(self, event: Event) -> tuple[StepState, list | None]:
        """The step of the event's attempt (created when new) and its strip cell before this
        event (None for a new step)."""
        key = (event.payload["node_id"], event.attempt)
        step = self.steps.get(key)
        before = step.strip_cell if step is not None else None
        if step is None:
            step = StepState(node_id=key[0], attempt=key[1], position=self.state.step_count)
            step.marks["first"] = self.linter.position
            self.steps[key] = step
            self.by_node.setdefault(key[0], []).append(step)
            self.state.step_count += 1
            self.state.max_attempt = max(self.state.max_attempt, step.attempt)
        for name in ID_FIELDS:
            if name in event.payload:
                setattr(step, name, event.payload[name])
        for path in event.masked:
            if path not in step.masked:
                step.masked.append(path)
        return step, before

    def _changed(self, step: StepState, before: list | None) -> None:
        """Record that ``step`` was written to: its row, the segment counts (of the segments
        some step has) and the strip."""
        self.changed[(step.node_id, step.attempt)] = step
        counts = self.state.segment_counts
        if before is not None:
            if counts[before[0]] > 1:
                counts[before[0]] -= 1
            else:
                del counts[before[0]]
        segment = step.segment.value
        counts[segment] = counts.get(segment, 0) + 1
        strip_cells.count(self.state.strip, step.position, before, step.strip_cell)

    def _on_node_started(self, event: Event) -> None:
        node = event.payload["node_id"]
        steps = self.node_steps(node)
        if not self.linter.any_started and self.state.step_count > len(self.steps):
            # From now on every unstarted finish of the job is a finding, also those of nodes
            # this fold was not given.
            raise NeedsFullReplay("first node_started of a job that has unloaded steps")
        facts = lint.node_facts(steps)
        step, before = self._step(event)
        step.started_at = event.ts
        step.started_event_id = event.event_id
        self._changed(step, before)
        self.linter.node_event(event, node, event.attempt, facts)

    def _on_node_finished(self, event: Event) -> None:
        node = event.payload["node_id"]
        facts = lint.node_facts(self.node_steps(node))
        stale = self.cancel.is_stale(event)
        step, before = self._step(event)
        if stale and step.result_type is not None:
            # The failure-code contract: a stale result never overwrites; it is kept beside the
            # attempt's.
            step.keep_stale(event)
            self._changed(step, before)
            return
        replaced = ""
        if step.result_type is not None:
            if not step.ignored_stale:
                replaced = step.finished_event_id
            step.history.append(step.result_record())
        self._set_result(step, event, stale)
        self._changed(step, before)
        if stale:
            return  # kept and shown (struck through), it changes nothing.
        step.marks["finished"] = self.linter.position
        mark = [self.linter.position, event.event_id]
        if step.result_type == ResultType.SUCCESS:
            step.marks.setdefault("success", mark)
            if not step.inferred:
                step.marks.setdefault("declared_success", mark)
        elif step.result_type == ResultType.PERMANENT_FAILURE and not step.inferred:
            # Inferred failures are not contract breaches: a later run is no rerun to lint.
            step.marks.setdefault("permanent", mark)
        self.linter.node_finished(
            event,
            node,
            step.attempt,
            facts,
            replaced_event=replaced,
            job_plan_hash=self.state.attributes.get("plan_hash", ""),
        )
        if step.result_type == ResultType.SUCCESS:
            self._recovered(node)
            if facts.first_success is None:
                step.completes = self.state.completed_count
                self.state.completed_count += 1
            self.state.payload_results.update(step.payload_results)
            self.state.cursor_node = node
        elif step.continue_on_error or step.handled:
            # The failure-report contract's declared continue-on-error, or a failure its caller
            # handled: the run goes on.
            self._recovered(node)
        else:
            self.failing.pop(node, None)
            self.failing[node] = step
            if node not in self.failing_began:
                self.failing_began.append(node)
        if step.error_type == "BoundaryViolation":
            self.boundary.setdefault(node, "raised a BoundaryViolation")
        job_hash = self.state.attributes.get("plan_hash", "")
        if job_hash and step.plan_hash and step.plan_hash != job_hash:
            self.boundary.setdefault(
                node, f"ran plan {step.plan_hash}, the job's plan is {job_hash}"
            )

    @staticmethod
    def _set_result(step: StepState, event: Event, stale: bool) -> None:
        payload = event.payload
        step.result_type = payload.get("result_type", ResultType.SUCCESS)
        step.finished_at = event.ts
        step.finished_event_id = event.event_id
        step.ignored_stale = stale
        for name, default in RESULT_DEFAULTS.items():
            value = payload.get(name, default)
            if name in RESULT_TYPES_OF and not isinstance(value, RESULT_TYPES_OF[name]):
                value = default
            setattr(step, name, value)
        for name in KEPT_FIELDS:
            if name in payload and (name != "span" or isinstance(payload[name], dict)):
                setattr(step, name, payload[name])
        extra = {k: v for k, v in payload.items() if k not in STEP_FIELDS}
        if extra:
            step.extra = {**step.extra, **extra}

    def _recovered(self, node: str) -> None:
        """``node``'s latest attempt is no longer a failure: it stops being a failing node."""
        self.failing.pop(node, None)
        if node in self.failing_began:
            self.failing_began.remove(node)

    def is_retrying(self, failure: StepState) -> bool:
        """A later attempt of the failing node has started and not finished."""
        return any(
            s.attempt > failure.attempt and s.is_running for s in self.node_steps(failure.node_id)
        )

    def _on_compensation_finished(self, event: Event) -> None:
        """Marks the attempt it names compensated, else the latest non-stale compensatable
        attempt (never a stale one)."""
        node = event.payload["node_id"]
        candidates = [
            s
            for s in self.node_steps(node)
            if s.result_type == ResultType.COMPENSATABLE_FAILURE and not s.ignored_stale
        ]
        named = event.payload.get("attempt")
        if named is not None:
            candidates = [s for s in candidates if s.attempt == named]
        step = max(candidates, key=lambda s: s.position, default=None)
        if step is None:
            return
        self.linter.compensated(node, step.attempt)
        if event.payload.get("result_type", ResultType.SUCCESS) == ResultType.SUCCESS:
            before = step.strip_cell
            step.compensated = True
            step.compensation_reason = event.payload.get("reason", "")
            self._changed(step, before)

    def _on_state_checkpointed(self, event: Event) -> None:
        node = touched_node(event)
        if node and isinstance(event.payload.get("state"), str):
            step = max(self.node_steps(node), key=lambda s: s.position, default=None)
            if step is not None and step.result_type is None:
                step.state = event.payload["state"]
                self._changed(step, step.strip_cell)

    def _on_cancel_requested(self, event: Event) -> None:
        self.cancel.seen = True
        self.state.cancel_reason = event.payload.get("reason", "")
        epoch = event.payload.get("epoch")
        if epoch is None:
            self.cancel.epochless = True
        else:
            self.cancel.epoch = max(epoch, self.cancel.epoch or 0)

    def _on_job_finished(self, event: Event) -> None:
        self.finished_status = event.payload["status"]
        self.state.finished_at = event.ts
        self.state.finish_code = event.payload.get("code", "")
        self.state.finish_reason = event.payload.get("reason", "")
        self.linter.job_finished(event.event_id)
        if self.finished_status == RunStatus.COMPLETED and self.triggered:
            assert event.ts is not None  # a stored event always has its time
            self.state.recoveries.append(
                Recovery(event.event_id, event.ts, frozenset(self.triggered))
            )

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

    # -- status and rules -----------------------------------------------------------------

    def _evaluate_rules(self, event: Event) -> None:
        failing = rules.active_failures(self)
        status = rules.run_status(self, failing)
        self.state.status = status
        holding = rules.holding(self, status, failing, self.config.max_retries)
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
        assert event.ts is not None  # a stored event always has its time
        self.state.escalation_triggers.append(
            EscalationTrigger(kind, node_id, severity, message, event.event_id, event.ts)
        )
        self.triggered.add((kind, node_id))

    # -- ending, stopping and resuming ----------------------------------------------------

    def finish(self) -> JobState:
        """The state after the events folded so far (the fold may go on afterwards)."""
        state = self.state
        state.steps = sorted(self.steps.values(), key=lambda s: s.position)
        state.changed_steps = sorted(self.changed.values(), key=lambda s: s.position)
        judged = self.by_node if self.loaded_nodes is None else self.loaded_nodes
        for node in judged:
            self.linter.judge(node, self.by_node.get(node, []))
        state.findings = self.linter.all_findings()
        active = {step.node_id for step in rules.active_failures(self)}
        state.failing_node_ids = [node for node in self.failing_began if node in active]
        state.failing_steps = [self.failing[node] for node in state.failing_node_ids]
        state.triggered = set(self.triggered)
        return state

    def snapshot(self) -> dict[str, Any]:
        """The job-level state as JSON-ready data, with the fold version (see ``resume``)."""
        return {"version": FOLD_VERSION, **self._snapshot_state()}

    def _snapshot_state(self) -> dict[str, Any]:
        state = self.state
        return {
            "last_key": _key_json(self.last_key),
            "job": {
                "status": state.status.value,
                **{name: _iso(getattr(state, name)) for name in SNAPSHOT_TIMES},
                **{name: getattr(state, name) for name in SNAPSHOT_FIELDS},
            },
            "failing": [[node, step.attempt] for node, step in self.failing.items()],
            "failing_began": self.failing_began,
            "cancel": [self.cancel.seen, self.cancel.epoch, self.cancel.epochless],
            "finished_status": self.finished_status,
            "degraded": self.degraded,
            "boundary": self.boundary,
            "holding": self._holding_json(),
            "triggered": sorted([k, n] for k, n in self.triggered),
            "lint": self.linter.snapshot(),
            "spans": self.trace.as_json() if self.trace is not None else None,
            "reopenable": self.reopenable,
        }

    @staticmethod
    def nodes_needed(snapshot: dict[str, Any], events: Iterable[Event]) -> set[str]:
        """The nodes whose steps ``resume`` needs to fold ``events`` onto ``snapshot``."""
        nodes = {node for node, _attempt in snapshot["failing"]}
        nodes.update(node for event in events if (node := touched_node(event)))
        return nodes

    @classmethod
    def resume(
        cls,
        job_id: str,
        snapshot: dict[str, Any],
        *,
        steps: Iterable[StepState],
        nodes: Iterable[str],
        payload_results: dict[str, Any],
        metadata: dict[str, Any],
        strip: dict[str, Any],
        config: ReplayConfig = DEFAULT_CONFIG,
    ) -> "Fold":
        """A fold that goes on where ``snapshot`` stopped. ``steps`` are every step of
        ``nodes`` (at least ``nodes_needed``); the lists and dicts after them are the Job
        row's (the snapshot does not repeat them)."""
        fold = cls(job_id, config)
        fold.loaded_nodes = set(nodes)
        for step in steps:
            fold.steps[(step.node_id, step.attempt)] = step
            fold.by_node.setdefault(step.node_id, []).append(step)
        for node_steps in fold.by_node.values():
            node_steps.sort(key=lambda s: s.position)
        ts, seq, rank, attempt, event_id = snapshot["last_key"]
        fold.last_key = (datetime.fromisoformat(ts), seq, rank, attempt, event_id)
        job = snapshot["job"]
        state = fold.state
        state.status = RunStatus(job["status"])
        state.payload_results = dict(payload_results)
        state.metadata = metadata
        state.strip = strip_cells.copy(strip)
        for name in SNAPSHOT_TIMES:
            setattr(state, name, _datetime(job[name]))
        for name in SNAPSHOT_FIELDS:
            setattr(state, name, job[name])
        fold.failing = {node: fold.steps[(node, attempt)] for node, attempt in snapshot["failing"]}
        fold.failing_began = list(snapshot["failing_began"])
        fold.cancel = rules.CancelFence(*snapshot["cancel"])
        fold.finished_status = snapshot["finished_status"]
        fold.degraded = snapshot["degraded"]
        fold.boundary = dict(snapshot["boundary"])
        fold.holding = {(k, n): (s, m) for k, n, s, m in snapshot["holding"]}
        fold.triggered = {(k, n) for k, n in snapshot["triggered"]}
        fold.linter = lint.Linter.restore(snapshot["lint"])
        if snapshot["spans"] is not None:
            fold.trace = growth.TraceSummary(**snapshot["spans"])
        fold.reopenable = snapshot["reopenable"]
        return fold


def all_after(snapshot: dict[str, Any], events: Iterable[Event]) -> bool:
    """Whether every one of ``events`` sorts after the last event folded into ``snapshot``."""
    ts, seq, rank, attempt, event_id = snapshot["last_key"]
    last = (datetime.fromisoformat(ts), seq, rank, attempt, event_id)
    return all(event_key(event) > last for event in events)


def _key_json(key: tuple | None) -> list | None:
    if key is None:
        return None
    ts, seq, rank, attempt, event_id = key
    return [ts.isoformat(), seq, rank, attempt, event_id]


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _datetime(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def snapshot_shape() -> str:
    """The shape of a snapshot, as text: its keys (an empty fold's snapshot, nested dicts
    included), the JobState fields it keeps with their types, and the fields and types of the
    records it holds (the trace summary, lint's findings, the cancel fence). The layout of a
    list inside it (``holding``, ``reopenable``) is code, not a declared shape: change it with
    a bump of FOLD_MEANING."""

    def keys(value: Any) -> Any:
        if not isinstance(value, dict):
            return None
        return {key: keys(inner) for key, inner in value.items()}

    kept = {*SNAPSHOT_TIMES, *SNAPSHOT_FIELDS}
    records = (growth.TraceSummary, lint.Finding)
    shape = (
        keys(Fold("shape")._snapshot_state()),
        [(f.name, str(f.type)) for f in fields(JobState) if f.name in kept],
        [[(f.name, str(f.type)) for f in fields(cls)] for cls in records],
        list(inspect.signature(rules.CancelFence).parameters),
    )
    return repr(shape)


def fold_version() -> str:
    """FOLD_MEANING and a digest of ``snapshot_shape``: a snapshot stored before either changed
    is of another version, and its job is replayed whole rather than resumed from it."""
    digest = hashlib.sha256(snapshot_shape().encode()).hexdigest()[:12]
    return f"{FOLD_MEANING}.{digest}"


FOLD_VERSION = fold_version()
