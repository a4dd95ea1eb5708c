"""A live trace's new spans, expanded onto what its stored spans decided (DESIGN.md sections 2
and 3b). Pure.

``spans.expand`` reads a job's whole trace, because what a span means can depend on spans that
arrive after it. An instrumented producer exports a run's spans as they end, every few seconds,
so expanding the whole trace for each export would make a batch cost the length of the job.
``summarize`` keeps, in the fold's snapshot, what the trace decided that spans still to come can
change (``TraceSummary``); ``Growth`` expands a batch's new spans alone when the whole trace's
expansion is then the stored one's plus theirs:
- the trace is one trace whose spans were each stored once, under the OTLP endpoint's event id,
  and its root is not a Celery publish (whose job ends with its last run);
- every new span starts after every stored one, so stored steps keep their attempts, calls
  their positions, and the job its provider, model, session and correlation ids (unless a new
  span brings the first of them, or a better key);
- no new span is a parent some stored span is waiting for, a root, or the child of a stored span
  other than the job's root;
- no new step is another attempt of a stored node (it could turn a stored failure retryable).
Anything else, and the caller replays the job whole, which is always exact; the parity tests
feed the same spans through both.
"""

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from jobs.contract.events import MAX_ID_CHARS, Event
from jobs.replay import calls as call_data
from jobs.replay import spans
from jobs.replay.spans import CORRELATION_KEYS, SESSION_KEYS, Expansion, SpanView

# More missing parents than this, and the trace is expanded whole on every batch.
MAX_PENDING = 64
# The stored steps of a base node whose spans ``Growth.extend`` may look at to find a new
# step's latest sibling: the latest few (the caller reads their spans).
SIBLINGS_READ = 3


@dataclass(slots=True)
class TraceSummary:
    """What a job's spans decided that the meaning of spans still to come can depend on, and
    the totals of its calls. A trace that is not ``regular`` is expanded whole on every batch."""

    regular: bool
    trace_id: str
    # The job's root span: [span id, start, whether it has no parent]; None while it has not
    # come (every span's parent is missing and in the same process: ``spans._job_root``).
    root: list | None
    # [start, span id] of the span that starts last (spans are ordered by both).
    last: list
    # Parent ids of spans here whose parent has not arrived.
    pending: list[str]
    # How many call spans the trace has (the root's aside): the next call's position.
    calls: int
    # Where the job's provider and model come from: "planner", "llm" (no planner's call), "".
    provider_from: str
    # Index in SESSION_KEYS / CORRELATION_KEYS of the key that gave the value (len: none did).
    session_key: int
    correlation_key: int
    input_tokens: int = 0
    output_tokens: int = 0
    # The calls' costs summed in call order (None: no call was priced).
    cost: float | None = None

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def add_calls(self, calls: list[call_data.CallRecord]) -> None:
        """Add calls' tokens and cost to the totals, in call order."""
        for call in calls:
            self.input_tokens += call.input_tokens or 0
            self.output_tokens += call.output_tokens or 0
            if call.cost is not None:
                self.cost = (self.cost or 0) + call.cost


def summarize(expansion: Expansion) -> TraceSummary | None:
    """The summary of a whole trace's expansion (None: no span could be read)."""
    root, ordered = expansion.root, expansion.spans
    if not ordered:
        return None
    known = {span.span_id for span in ordered}
    pending = sorted({s.parent_id for s in ordered if s.parent_id and s.parent_id not in known})
    trace = [root, *expansion.steps] if root is not None else expansion.steps
    summary = TraceSummary(
        regular=expansion.regular
        and len({span.trace_id for span in ordered}) == 1
        # A root whose parent is here: parent ids that go round in a circle.
        and (root is None or (root.parent_id not in known and root.kind != "producer"))
        and len(pending) <= MAX_PENDING,
        trace_id=ordered[0].trace_id,
        root=[root.span_id, root.start.isoformat(), not root.parent_id] if root else None,
        last=[ordered[-1].start.isoformat(), ordered[-1].span_id],
        pending=pending,
        calls=expansion.call_count,
        provider_from=_provider_from(
            expansion.calls, {s.node_id for s in expansion.steps if spans.planner_step(s)}
        ),
        session_key=_first_key(trace, SESSION_KEYS),
        correlation_key=_first_key(trace, CORRELATION_KEYS),
    )
    summary.add_calls(expansion.calls)
    return summary


def _provider_from(calls: list[call_data.CallRecord], planners: set[str]) -> str:
    """Where ``call_data.job_provider_model`` takes the job's provider and model from."""
    llm = [call for call in calls if _names_a_model(call)]
    if any(call.node_id in planners for call in llm):
        return "planner"
    return "llm" if llm else ""


def _names_a_model(call: call_data.CallRecord) -> bool:
    return call.kind == "llm" and bool(call.provider or call.model)


def _first_key(trace: list[SpanView], keys: tuple[str, ...]) -> int:
    """The index of the first of ``keys`` a span of ``trace`` has a text for (the key whose
    value ``spans`` gives the job), ``len(keys)`` when none has."""
    return next(
        (i for i, key in enumerate(keys) if any(spans.span_text(s, key) for s in trace)),
        len(keys),
    )


@dataclass(frozen=True, slots=True)
class StoredStep:
    """A stored step of a base node a new step has (``Growth.bases``), as its row has it."""

    node_id: str
    attempt: int
    span_id: str
    started_at: datetime


@dataclass(slots=True)
class Grown:
    """The new spans' events and calls, and the trace's summary with them."""

    events: list[Event]
    calls: list[call_data.CallRecord]
    summary: TraceSummary


class Growth:
    """New spans onto a stored trace, in the steps the caller reads storage in between:
    ``start`` (None: expand the whole trace), read the spans ``wanted`` names and ``place`` the
    new spans under them, read the stored steps of their ``bases`` and the spans of the
    latest of them, then ``extend``."""

    def __init__(self, job_id: str, summary: TraceSummary, new: dict[str, SpanView]):
        self.job_id, self.summary, self.new = job_id, summary, new
        self.root: SpanView | None = None
        self.missing: set[str] = set()

    @classmethod
    def start(
        cls, job_id: str, summary: dict[str, Any] | None, span_events: list[Event]
    ) -> "Growth | None":
        """A growth of the trace ``summary`` (a snapshot's) by these new span events, or None
        when they cannot be expanded alone."""
        trace = TraceSummary(**summary) if summary else None
        if trace is None or not trace.regular:
            return None
        new: dict[str, SpanView] = {}
        for event in span_events:
            span = spans.read_span(event)
            if span is None:
                continue  # expand skips it too
            if (
                span.span_id in new
                or not spans.is_canonical(event, span)
                or span.trace_id != trace.trace_id
                or not span.parent_id
                or span.span_id in trace.pending
                # With no root yet, a span that may be a local root would become the job's.
                or (trace.root is None and not span.local_parent)
            ):
                return None
            new[span.span_id] = span
        last = (datetime.fromisoformat(trace.last[0]), trace.last[1])
        if any((span.start, span.span_id) <= last for span in new.values()):
            return None
        return cls(job_id, trace, new)

    def wanted(self) -> list[str]:
        """The span ids to read from storage: the root, and the new spans' parents."""
        parents = {span.parent_id for span in self.new.values()} - set(self.new)
        root = {self.summary.root[0]} if self.summary.root else set()
        return sorted(parents | root)

    def place(self, stored: dict[str, SpanView]) -> bool:
        """Decide the new spans' place in the tree, given the ``wanted`` spans that were
        stored; False when a new span hangs under a stored span other than the root."""
        root_id = self.summary.root[0] if self.summary.root else None
        tree = dict(self.new)
        if root_id is not None:
            if (root := stored.get(root_id)) is None:
                return False
            self.root = tree[root_id] = root
        for span in self.new.values():
            if span.parent_id in stored and span.parent_id != root_id:
                return False
            if span.parent_id not in self.new and span.parent_id not in stored:
                self.missing.add(span.parent_id)
        spans.classify(sorted(tree.values(), key=_order), tree, self.root)
        return self.root is None or all(s.step_parent is not self.root for s in self.new.values())

    def steps(self) -> list[SpanView]:
        return [span for span in sorted(self.new.values(), key=_order) if span.is_step]

    def bases(self) -> set[str] | None:
        """The new steps' base nodes, whose stored steps ``extend`` needs (None: a base too
        long to number without cutting it)."""
        bases = {spans.base_node(span) for span in self.steps()}
        return None if any(len(base) > MAX_ID_CHARS - 12 for base in bases) else bases

    def siblings_to_read(self, stored_steps: list[StoredStep]) -> list[str]:
        """The span ids of the latest ``SIBLINGS_READ`` stored steps of each base node."""
        newest_first = _newest_first(stored_steps)
        return [
            step.span_id
            for base in sorted(self.bases() or ())
            for step in [s for s in newest_first if iteration_of(s.node_id, base) is not None][
                :SIBLINGS_READ
            ]
        ]

    def extend(self, stored_steps: list[StoredStep], siblings: dict[str, SpanView]) -> Grown | None:
        """The new spans' events and calls. ``stored_steps``: every stored step whose node is
        one of ``bases`` or an iteration of one ("base #2"); ``siblings``: the spans of the
        latest ``SIBLINGS_READ`` of each base's. None: expand the whole trace."""
        steps = self.steps()
        used = {(step.node_id, step.attempt) for step in stored_steps}
        latest = self._latest_siblings(steps, stored_steps, siblings)
        if latest is None:
            return None
        spans.number_attempts(steps, used, latest)
        if {step.node_id for step in steps} & {step.node_id for step in stored_steps}:
            return None  # another attempt of a stored node
        last_attempts: dict[str, int] = {}
        for span in steps:
            last_attempts[span.node_id] = max(span.attempt, last_attempts.get(span.node_id, 0))
        root, summary = self.root, self.summary
        events = []
        for span in steps:
            result = spans.step_result(span, last_attempts, root)
            events.extend(spans.step_events(self.job_id, span, result))
        ordered = sorted(self.new.values(), key=_order)
        call_spans = [s for s in ordered if not s.is_step or call_data.is_marked(s)]
        calls = [
            call_data.call_record(
                span, span if span.is_step else span.step_parent, position, spans.failure_text(span)
            )
            for position, span in enumerate(call_spans, start=summary.calls)
        ]
        if not self._keeps_job_fields(steps, calls):
            return None
        pending = sorted(set(summary.pending) | self.missing)
        if len(pending) > MAX_PENDING:
            return None
        grown = TraceSummary(**summary.as_json())
        grown.last = [ordered[-1].start.isoformat(), ordered[-1].span_id] if ordered else grown.last
        grown.pending, grown.calls = pending, summary.calls + len(call_spans)
        grown.add_calls(calls)
        return Grown(events, calls, grown)

    def _latest_siblings(
        self,
        steps: list[SpanView],
        stored_steps: list[StoredStep],
        siblings: dict[str, SpanView],
    ) -> dict[tuple[str, str], tuple[SpanView, int]] | None:
        """The latest stored sibling of each new step (same parent span, same base node) with
        its iteration, as ``spans.number_attempts`` keeps them; None when it is not among the
        spans read."""
        latest: dict[tuple[str, str], tuple[SpanView, int]] = {}
        newest_first = _newest_first(stored_steps)
        for span in steps:
            base = spans.base_node(span)
            if (span.parent_id, base) in latest:
                continue
            for step in newest_first:
                iteration = iteration_of(step.node_id, base)
                if iteration is None:
                    continue
                sibling = siblings.get(step.span_id)
                if sibling is None:
                    return None
                if sibling.parent_id == span.parent_id and spans.base_node(sibling) == base:
                    sibling.attempt = step.attempt
                    latest[(span.parent_id, base)] = (sibling, iteration)
                    break
        return latest

    def _keeps_job_fields(self, steps: list[SpanView], calls: list[call_data.CallRecord]) -> bool:
        """Whether the job's provider, model, session and correlation ids stay as the stored
        spans gave them (new spans start after the stored ones: they can only fill a gap)."""
        summary = self.summary
        planners = {span.node_id for span in steps if spans.planner_step(span)}
        llm = [call for call in calls if _names_a_model(call)]
        if summary.provider_from == "" and llm:
            return False
        if summary.provider_from == "llm" and any(call.node_id in planners for call in llm):
            return False
        return not any(
            spans.span_text(span, key)
            for span in steps
            for keys, found in (
                (SESSION_KEYS, summary.session_key),
                (CORRELATION_KEYS, summary.correlation_key),
            )
            for key in keys[:found]
        )


def _order(span: SpanView) -> tuple:
    return (span.start, span.span_id)


def _newest_first(stored_steps: list[StoredStep]) -> list[StoredStep]:
    return sorted(stored_steps, key=lambda s: (s.started_at, s.span_id), reverse=True)


def iteration_of(node_id: str, base: str) -> int | None:
    """The iteration ``node_id`` is of ``base`` ("base", "base #2"...), None: not one."""
    if node_id == base:
        return 1
    number = node_id.removeprefix(base + " #")
    if number == node_id or not (number.isascii() and number.isdigit()) or int(number) < 2:
        return None  # not a name spans gives an iteration
    return int(number)
