"""Two runs of a workflow side by side (docs/compare.md): which node did they first go different
ways at, and what else differs.

Pure: the caller hands over each run's steps (attempts, as replay made them) and calls; nothing
here reads a table. ``a`` is the run looked into (today's failure) and ``b`` the run it is set
against (the last good one), so "new failure" fails in ``a`` and not in ``b``, "added" is a key
``a`` has and ``b`` has not, and text diffs go from ``b`` to ``a``.

Nodes align by node id. A loop's iterations are nodes of their own (a span run again under the
same parent is ``name #2``, ``name #3``: ``jobs.replay.spans``), so iteration 2 of one run meets
iteration 2 of the other. A node's outcome is its latest attempt replay did not ignore as
stale; its duration, tokens and cost add up all its attempts.
"""

import difflib
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import Any

import orjson

from jobs.replay import failures
from jobs.replay.failures import ResultType, Segment
from jobs.replay.signatures import normalise_reason
from jobs.replay.state import JobState

# A node is slower when it took more than this many times as long as in the other run...
SLOWER_FACTOR = 2
# ... and more than this much longer (a 2 ms step taking 5 ms is not news).
SLOWER_BY_MS = 1000.0
# A changed value longer than this as JSON, or spread over lines, also gets a text diff.
LONG_VALUE_CHARS = 80
# A text diff reads this many lines of each value at most (a 64 KiB reason stays quick).
MAX_DIFF_LINES = 400
RUNNING = "running"


class Change(StrEnum):
    """What became of a node, from ``b`` to ``a``."""

    SAME = "same"
    CHANGED = "changed"
    NEW_FAILURE = "new_failure"
    FIXED = "fixed"
    ONLY_IN_A = "only_in_a"
    ONLY_IN_B = "only_in_b"


class Facet(StrEnum):
    """A part of a node whose difference makes the runs diverge there, in the order the first
    divergence names them. Duration, tokens and cost are reported, never a divergence: they
    differ on every run."""

    RESULT = "result"
    ARGUMENTS = "arguments"
    PAYLOAD_RESULTS = "payload_results"
    MODEL = "model"
    DEFINITION = "definition"


class KeyStatus(StrEnum):
    SAME = "same"
    CHANGED = "changed"
    ADDED = "added"  # in a, not in b
    REMOVED = "removed"  # in b, not in a


@dataclass(frozen=True, slots=True)
class RunStep:
    """One attempt of one node, as replay made it (a Step row or a ``StepState``).
    ``result_type`` "" or None is a running attempt (a success when it has finished).
    ``payload_results`` and ``context`` are objects, or their stored JSON text (read only when
    the two runs' texts differ: two runs of one producer mostly store the same text)."""

    node_id: str
    attempt: int
    position: int
    result_type: str | None = None
    reason: str = ""
    failure_code: str = ""
    error_type: str = ""
    ignored_stale: bool = False
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = None
    payload_results: Any = field(default_factory=dict)
    context: Any = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """The result type, "running" for an attempt with no finish."""
        if self.result_type:
            return self.result_type
        return ResultType.SUCCESS.value if self.finished_at else RUNNING

    @property
    def took_ms(self) -> float | None:
        """How long the attempt took: as sent, else from its start and finish."""
        if self.duration_ms is not None:
            return self.duration_ms
        if self.started_at and self.finished_at:
            return (self.finished_at - self.started_at).total_seconds() * 1000
        return None


@dataclass(frozen=True, slots=True)
class RunCall:
    """A call a step made (an LLM or tool call, from a span); ``node_id`` "" is the job's own."""

    node_id: str
    attempt: int | None
    position: int
    kind: str
    name: str
    status: str = ""
    provider: str = ""
    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: Decimal | None = None
    messages: Sequence[Any] = ()

    @property
    def model_name(self) -> str:
        """``provider/model``, the model alone without a provider, "" without a model."""
        if not self.model:
            return ""
        return f"{self.provider}/{self.model}" if self.provider else self.model


@dataclass(frozen=True, slots=True)
class Run:
    job_id: str
    status: str
    steps: Sequence[RunStep]
    calls: Sequence[RunCall] = ()


@dataclass(frozen=True)
class NodeSide:
    """One run's view of a node. Its payload results and context are read (and kept) when
    first asked for: most nodes compare by their stored text alone."""

    node_id: str
    first_position: int
    attempts: int
    final_attempt: int
    result_type: str  # "running" when the latest attempt has not finished
    reason: str
    failure_code: str
    error_type: str
    duration_ms: float | None
    payload_stored: Any  # an object, or its JSON text
    context_stored: Any
    calls: tuple[RunCall, ...]
    models: tuple[str, ...]
    input_tokens: int
    output_tokens: int
    cost: Decimal | None

    @cached_property
    def payload_results(self) -> dict[str, Any]:
        return _object_or_none(_parsed(self.payload_stored)) or {}

    @cached_property
    def context(self) -> dict[str, Any]:
        return _object_or_none(_parsed(self.context_stored)) or {}

    @property
    def expected_arguments(self) -> dict[str, Any] | None:
        return _object_or_none(self.context.get("expected_arguments"))

    @property
    def actual_arguments(self) -> dict[str, Any] | None:
        return _object_or_none(self.context.get("actual_arguments"))

    @property
    def definition(self) -> dict[str, Any] | None:
        return _object_or_none(self.context.get("step_definition"))

    @property
    def segment(self) -> Segment:
        return failures.segment_for(None if self.result_type == RUNNING else self.result_type)

    @property
    def failed(self) -> bool:
        """The latest attempt failed (retryable, permanent or compensatable)."""
        return self.result_type not in (ResultType.SUCCESS, RUNNING)


@dataclass(frozen=True, slots=True)
class KeyChange:
    """One top-level key of an object in both runs; values as JSON text ("" when absent)."""

    key: str
    status: KeyStatus
    a: str
    b: str
    text_diff: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Divergence:
    node_id: str
    kind: str  # a Facet, or only_in_a / only_in_b


@dataclass(frozen=True)
class NodeComparison:
    node_id: str
    change: Change
    differences: tuple[Facet, ...]
    a: NodeSide | None
    b: NodeSide | None

    @property
    def diverges(self) -> bool:
        return self.change is not Change.SAME

    @property
    def divergence_kind(self) -> str | None:
        if self.change in (Change.ONLY_IN_A, Change.ONLY_IN_B):
            return self.change.value
        return self.differences[0].value if self.differences else None

    @property
    def slower(self) -> bool:
        """``a`` took more than twice as long as ``b`` and more than a second longer."""
        if self.a is None or self.b is None:
            return False
        took, before = self.a.duration_ms, self.b.duration_ms
        if took is None or before is None:
            return False
        return took > SLOWER_FACTOR * before and took - before > SLOWER_BY_MS

    @property
    def duration_delta_ms(self) -> float | None:
        if self.a is None or self.b is None:
            return None
        if self.a.duration_ms is None or self.b.duration_ms is None:
            return None
        return self.a.duration_ms - self.b.duration_ms

    @property
    def input_tokens_delta(self) -> int:
        return _side_total(self.a, "input_tokens") - _side_total(self.b, "input_tokens")

    @property
    def output_tokens_delta(self) -> int:
        return _side_total(self.a, "output_tokens") - _side_total(self.b, "output_tokens")

    @property
    def cost_delta(self) -> Decimal | None:
        return _cost_delta(self.a.cost if self.a else None, self.b.cost if self.b else None)

    @property
    def token_or_cost_changed(self) -> bool:
        return bool(self.input_tokens_delta or self.output_tokens_delta or self.cost_delta)

    def arguments(self, *, include_same: bool = False) -> list[KeyChange]:
        """The actual arguments key by key (the keys that differ, unless ``include_same``)."""
        return self._keys(Facet.ARGUMENTS, "actual_arguments", include_same)

    def expected_arguments(self, *, include_same: bool = False) -> list[KeyChange]:
        return self._keys(Facet.ARGUMENTS, "expected_arguments", include_same)

    def payload_results(self, *, include_same: bool = False) -> list[KeyChange]:
        return self._keys(Facet.PAYLOAD_RESULTS, "payload_results", include_same)

    def definition(self, *, include_same: bool = False) -> list[KeyChange]:
        return self._keys(Facet.DEFINITION, "definition", include_same)

    def _keys(self, facet: Facet, name: str, include_same: bool) -> list[KeyChange]:
        both = self.a is not None and self.b is not None
        if both and not include_same and facet not in self.differences:
            return []  # alike: no key differs
        return key_changes(
            getattr(self.a, name) if self.a else None,
            getattr(self.b, name) if self.b else None,
            include_same=include_same,
        )


@dataclass(frozen=True)
class Totals:
    input_tokens: int
    output_tokens: int
    cost: Decimal | None


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    nodes: tuple[NodeComparison, ...]
    a_totals: Totals
    b_totals: Totals

    @cached_property
    def first_divergence(self) -> Divergence | None:
        """The first node, in the aligned order (``a``'s event order, with the nodes only ``b``
        has after the node they follow in ``b``), whose result, arguments, payload results,
        model or step definition differ, or that one run has and the other has not."""
        for node in self.nodes:
            if node.diverges:
                return Divergence(node.node_id, node.divergence_kind or "")
        return None

    def having(self, change: Change) -> list[NodeComparison]:
        return [node for node in self.nodes if node.change is change]

    def differing_in(self, facet: Facet) -> list[NodeComparison]:
        return [node for node in self.nodes if facet in node.differences]

    @cached_property
    def slower(self) -> list[NodeComparison]:
        return [node for node in self.nodes if node.slower]

    @cached_property
    def token_or_cost_changes(self) -> list[NodeComparison]:
        return [node for node in self.nodes if node.token_or_cost_changed]

    @property
    def input_tokens_delta(self) -> int:
        return self.a_totals.input_tokens - self.b_totals.input_tokens

    @property
    def output_tokens_delta(self) -> int:
        return self.a_totals.output_tokens - self.b_totals.output_tokens

    @property
    def cost_delta(self) -> Decimal | None:
        return _cost_delta(self.a_totals.cost, self.b_totals.cost)


def compare(a: Run, b: Run) -> Comparison:
    """``a`` set against ``b``, node by node in the aligned order (see
    ``Comparison.first_divergence``). The result depends only on the steps and calls given,
    never on the order they are listed in: steps are read by position, calls by position."""
    sides_a, order_a = _sides(a)
    sides_b, order_b = _sides(b)
    nodes = tuple(
        _node(node_id, sides_a.get(node_id), sides_b.get(node_id))
        for node_id in aligned_order(order_a, order_b)
    )
    return Comparison(a.job_id, b.job_id, nodes, _totals(a.calls), _totals(b.calls))


def aligned_order(order_a: Sequence[str], order_b: Sequence[str]) -> list[str]:
    """Every node of both runs: ``a``'s in its order, and each node only ``b`` has where ``b``
    ran it: after the node both runs have that it follows in ``b`` and the nodes only ``a``
    ran after that one, before the next node both have (as a diff lists a changed stretch)."""
    in_a, in_b = set(order_a), set(order_b)
    after: dict[str | None, list[str]] = defaultdict(list)
    anchor: str | None = None
    for node_id in order_b:
        if node_id in in_a:
            anchor = node_id
        else:
            after[anchor].append(node_id)
    merged: list[str] = []
    anchor = None
    for node_id in order_a:
        if node_id in in_b:
            merged.extend(after.pop(anchor, ()))
            anchor = node_id
        merged.append(node_id)
    for nodes in after.values():  # the last shared node's (all of b's when none is shared)
        merged.extend(nodes)
    return merged


def key_changes(
    a: Any, b: Any, *, include_same: bool = False, long_chars: int = LONG_VALUE_CHARS
) -> list[KeyChange]:
    """Two objects key by key, keys in sorted order. A
    value that is not an object compares whole, as the key "(value)"; None is "absent". Keys
    alike in both are left out unless ``include_same``. A changed value longer than
    ``long_chars`` as JSON, or spread over lines, carries a unified diff from ``b`` to ``a``."""
    if a is None and b is None:
        return []
    a_keys, b_keys = _as_object(a), _as_object(b)
    rows = []
    # Sorted: a stored object's key order depends on how its row was written (PostgreSQL's
    # jsonb orders keys its own way), and a comparison must not.
    for key in sorted(a_keys.keys() | b_keys.keys()):
        if key not in b_keys:
            rows.append(KeyChange(key, KeyStatus.ADDED, _json(a_keys[key]), ""))
        elif key not in a_keys:
            rows.append(KeyChange(key, KeyStatus.REMOVED, "", _json(b_keys[key])))
        elif _same_value(a_keys[key], b_keys[key]):
            if include_same:
                text = _json(a_keys[key])
                rows.append(KeyChange(key, KeyStatus.SAME, text, text))
        else:
            new, old = a_keys[key], b_keys[key]
            rows.append(
                KeyChange(
                    key,
                    KeyStatus.CHANGED,
                    _json(new),
                    _json(old),
                    text_diff(old, new, long_chars=long_chars),
                )
            )
    return rows


def text_diff(old: Any, new: Any, *, long_chars: int = LONG_VALUE_CHARS) -> tuple[str, ...]:
    """A unified diff (difflib) from ``old`` to ``new``, strings as their lines and anything
    else as indented JSON; () when both are short as JSON and neither is a string of several
    lines (the two values say it all)."""
    compact = (_json(old), _json(new))
    multi_line = any(isinstance(value, str) and "\n" in value for value in (old, new))
    if max(map(len, compact)) <= long_chars and not multi_line:
        return ()
    old_text, new_text = _diff_text(old), _diff_text(new)
    old_lines = old_text.splitlines()[:MAX_DIFF_LINES]
    new_lines = new_text.splitlines()[:MAX_DIFF_LINES]
    return tuple(
        line.rstrip("\n")
        for line in difflib.unified_diff(old_lines, new_lines, "b", "a", lineterm="", n=2)
    )


def _diff_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _as_object(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(key): item for key, item in value.items()}
    return {"(value)": value}


def _same_value(a: Any, b: Any) -> bool:
    """Equal as JSON text with sorted keys (so True and 1 differ, as 1 and 1.0 do)."""
    return _json(a) == _json(b)


def _json(value: Any) -> str:
    """Canonical JSON text: keys sorted, no spaces after separators, non-ASCII kept."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except (orjson.JSONEncodeError, TypeError):  # an integer past 64 bits
        return json.dumps(
            value, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":")
        )


def _parsed(stored: Any) -> Any:
    """A stored value: JSON text read (orjson, the stdlib for integers past 64 bits), else as
    it is."""
    if not isinstance(stored, str):
        return stored
    try:
        return orjson.loads(stored)
    except orjson.JSONDecodeError:
        return json.loads(stored)


def _object_or_none(value: Any) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, Mapping) else None


def _sides(run: Run) -> tuple[dict[str, NodeSide], list[str]]:
    """Each node's side, and the nodes in the order of their first attempt."""
    attempts: dict[str, list[RunStep]] = defaultdict(list)
    for step in sorted(run.steps, key=lambda step: (step.position, step.node_id, step.attempt)):
        attempts[step.node_id].append(step)
    calls: dict[str, list[RunCall]] = defaultdict(list)
    for call in sorted(run.calls, key=lambda call: (call.position, call.node_id, call.name)):
        if call.node_id:
            calls[call.node_id].append(call)
    sides = {node_id: _side(steps, calls.get(node_id, [])) for node_id, steps in attempts.items()}
    return sides, list(attempts)


def _side(steps: list[RunStep], calls: list[RunCall]) -> NodeSide:
    if len(steps) == 1:  # most nodes: one attempt
        shown = steps
        took = steps[0].took_ms
        duration = took
    else:
        shown = [step for step in steps if not step.ignored_stale] or steps
        durations = [took for step in shown if (took := step.took_ms) is not None]
        duration = sum(durations) if durations else None
    final = shown[-1]
    if calls:
        costs = [call.cost for call in calls if call.cost is not None]
        models = tuple(sorted({call.model_name for call in calls if call.model_name}))
        input_tokens = sum(call.input_tokens or 0 for call in calls)
        output_tokens = sum(call.output_tokens or 0 for call in calls)
        cost = sum(costs, Decimal(0)) if costs else None
    else:
        models, input_tokens, output_tokens, cost = (), 0, 0, None
    return NodeSide(
        final.node_id,
        steps[0].position,
        len(steps),
        final.attempt,
        final.outcome,
        final.reason or "",
        final.failure_code or "",
        final.error_type or "",
        duration,
        final.payload_results,
        final.context,
        tuple(calls),
        models,
        input_tokens,
        output_tokens,
        cost,
    )


def _result_differs(a: NodeSide, b: NodeSide) -> bool:
    """Two results differ in result type, failure code or error type, or in their reasons once
    the run-to-run parts (ids, numbers, quoted values) are blanked out."""
    if (a.result_type, a.failure_code, a.error_type) != (
        b.result_type,
        b.failure_code,
        b.error_type,
    ):
        return True
    return a.reason != b.reason and normalise_reason(a.reason) != normalise_reason(b.reason)


def _same_stored(a: Any, b: Any) -> bool:
    """Both stored as the same JSON text: equal without reading them."""
    return isinstance(a, str) and a == b


def _arguments_differ(a: NodeSide, b: NodeSide) -> bool:
    if _same_stored(a.context_stored, b.context_stored):
        return False
    return _json(a.expected_arguments) != _json(b.expected_arguments) or _json(
        a.actual_arguments
    ) != _json(b.actual_arguments)


def _payload_results_differ(a: NodeSide, b: NodeSide) -> bool:
    if _same_stored(a.payload_stored, b.payload_stored):
        return False
    return _json(a.payload_results) != _json(b.payload_results)


def _definition_differs(a: NodeSide, b: NodeSide) -> bool:
    if _same_stored(a.context_stored, b.context_stored):
        return False
    return _json(a.definition) != _json(b.definition)


# Whether a facet differs between a node's two sides, in the order a divergence names them.
FACET_DIFFERS = {
    Facet.RESULT: _result_differs,
    Facet.ARGUMENTS: _arguments_differ,
    Facet.PAYLOAD_RESULTS: _payload_results_differ,
    Facet.MODEL: lambda a, b: a.models != b.models,
    Facet.DEFINITION: _definition_differs,
}


def _node(node_id: str, a: NodeSide | None, b: NodeSide | None) -> NodeComparison:
    if a is None or b is None:
        change = Change.ONLY_IN_B if a is None else Change.ONLY_IN_A
        return NodeComparison(node_id, change, (), a, b)
    differences = tuple(facet for facet, differs in FACET_DIFFERS.items() if differs(a, b))
    if a.failed and not b.failed:
        change = Change.NEW_FAILURE
    elif b.failed and not a.failed:
        change = Change.FIXED
    elif differences:
        change = Change.CHANGED
    else:
        change = Change.SAME
    return NodeComparison(node_id, change, differences, a, b)


def _totals(calls: Iterable[RunCall]) -> Totals:
    calls = list(calls)
    costs = [call.cost for call in calls if call.cost is not None]
    return Totals(
        input_tokens=sum(call.input_tokens or 0 for call in calls),
        output_tokens=sum(call.output_tokens or 0 for call in calls),
        cost=sum(costs, Decimal(0)) if costs else None,
    )


def _side_total(side: NodeSide | None, name: str) -> int:
    return getattr(side, name) if side is not None else 0


def _cost_delta(a: Decimal | None, b: Decimal | None) -> Decimal | None:
    """``a - b``, a missing cost counting as none spent; None when neither run has one."""
    if a is None and b is None:
        return None
    return (a or Decimal(0)) - (b or Decimal(0))


def run_of(job_id: str, state: JobState) -> Run:
    """A run as replay left it (a full replay's state: every step and call)."""
    steps = [
        RunStep(
            node_id=step.node_id,
            attempt=step.attempt,
            position=step.position,
            result_type=step.result_type,
            reason=step.reason,
            failure_code=step.failure_code,
            error_type=step.error_type or step.exception_type,
            ignored_stale=step.ignored_stale,
            started_at=step.started_at,
            finished_at=step.finished_at,
            duration_ms=step.duration_ms,
            payload_results=step.payload_results,
            context=step.context,
        )
        for step in state.steps
    ]
    calls = [
        RunCall(
            node_id=call.node_id,
            attempt=call.attempt,
            position=call.position,
            kind=call.kind,
            name=call.name,
            status=call.status,
            provider=call.provider,
            model=call.model,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            cost=None if call.cost is None else Decimal(str(call.cost)),
            messages=tuple(call.messages),
        )
        for call in state.calls
    ]
    return Run(job_id, state.status.value, steps, calls)
