"""A live trace's new spans, expanded onto what its stored spans decided (docs/architecture.md
and 3b). Pure.

``spans.expand`` reads a job's whole trace, because what a span means can depend on spans that
arrive after it. An instrumented producer exports a run's spans as they end, every few seconds,
so expanding the whole trace for each export would make a batch cost the length of the job.
``summarize`` keeps, in the fold's snapshot, what the trace decided that spans still to come can
change (``TraceSummary``); ``Growth`` expands a batch's new spans alone when the whole trace's
expansion is then the stored one's plus theirs:
- the trace is one trace whose spans were each stored once, under the OTLP endpoint's event id,
  and its root is not a Celery publish (whose job ends with its last run);
- every new step starts after every stored step, so stored steps keep their attempts, and the
  job its provider, model, session and correlation ids (unless a new span brings the first of
  them, or a better key);
- every new call starts after every stored call, or after every stored call but those still
  waiting for their parent (a LangGraph node's span is a call too, and ends after the LLM call
  inside it): those move up by the new calls that start before them, which must name no model
  and cost nothing (the job's model is its first LLM call's, its cost summed in call order);
- no new span is a root, a span that would stand in for one, a parent that a stored step (or
  a stored call with spans under it) waits for, a span stored log records wait for, or the
  child of a stored span other than the root; a stored call that waited alone for a new span
  is adopted (its step changes, nothing else about it);
- no new step is another attempt of a stored node (it could turn a stored failure retryable),
  except of the node whose failure is the job's last event (``walk.Fold.reopenable``): that
  failure then turns retryable (``Grown.reopens``), and nothing before it changes.
Anything else, and the caller replays the job whole, which is always exact; the parity tests
feed the same spans through both.
"""

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from jobs.contract.events import MAX_ID_CHARS, Event
from jobs.replay import calls as call_data
from jobs.replay import spans
from jobs.replay.spans import CORRELATION_KEYS, SESSION_KEYS, Expansion, SpanView

# More missing parents than this, and the trace is expanded whole on every batch.
MAX_PENDING = 64
# More base nodes that ran more than once than this, and every batch reads all the stored
# iterations of the bases its new steps have.
MAX_LOOPING = 64
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
    # [start, span id] of the step, and of the call, that starts last (None: none yet), and of
    # the call that starts last of those that do not wait for their parent (``waiting``).
    last_step: list | None
    last_call: list | None
    settled_call: list | None
    # Parents that spans here wait for (they are not here): those some step or some call with
    # spans under it waits for, and by parent the calls (with their positions) that wait alone.
    pending: list[str]
    waiting: dict[str, list[list]]
    # How many call spans the trace has (the root's aside): the next call's position.
    calls: int
    # Where the job's provider and model come from: "planner", "llm" (no planner's call), "".
    provider_from: str
    # Index in SESSION_KEYS / CORRELATION_KEYS of the key that gave the value (len: none did).
    session_key: int
    correlation_key: int
    # By base node that ran more than once, its highest iteration ("agent #12": 12), or None
    # when a step of it had an explicit attempt (its iterations are then not in start order).
    # A base missing from it has one iteration at most. None: more than MAX_LOOPING such bases.
    iterations: dict[str, int | None] | None
    # Whether a span below the root is an agent or workflow run (``spans.is_run``): once the
    # root is here, the job's outcome can then depend on spans still to come.
    runs: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    # The calls' costs summed in call order (None: no call was priced).
    cost: float | None = None
    # Spans that stored log records name and that have not come (their records are read with
    # the whole trace when they do: ``Growth.start``), and the waiting calls that have records
    # (a growth that would rewrite one expands the whole trace: ``Growth.extend``).
    log_spans: list[str] = field(default_factory=list)

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
    steps = [span for span in ordered if span.is_step]
    # The calls' positions (the root's call, when it is one, comes first at -1).
    positions = {call.span_id: call.position for call in expansion.calls if call.position >= 0}
    pending, waiting = _waits(
        [s for s in ordered if s.parent_id and s.parent_id not in known], positions, ordered
    )
    trace = [root, *steps] if root is not None else steps
    waits = {span_id for calls in waiting.values() for span_id, _position in calls}
    summary = TraceSummary(
        regular=expansion.regular
        and len({span.trace_id for span in ordered}) == 1
        # A root whose parent is here: parent ids that go round in a circle.
        and (root is None or (root.parent_id not in known and root.kind != "producer"))
        and len(pending) + len(waiting) <= MAX_PENDING
        and len(expansion.orphan_logs) <= MAX_PENDING,
        trace_id=ordered[0].trace_id,
        root=[root.span_id, root.start.isoformat(), not root.parent_id] if root else None,
        last_step=_key(steps),
        last_call=_key([span for span in ordered if span.span_id in positions]),
        settled_call=_key(
            [s for s in ordered if s.span_id in positions and s.span_id not in waits]
        ),
        pending=sorted(pending),
        waiting=waiting,
        calls=len(positions),
        provider_from=_provider_from(
            expansion.calls, {span.node_id for span in steps if spans.planner_step(span)}
        ),
        session_key=_first_key(trace, SESSION_KEYS),
        correlation_key=_first_key(trace, CORRELATION_KEYS),
        iterations=_loops({}, steps),
        log_spans=sorted({*expansion.orphan_logs, *(waits & expansion.logged_spans)}),
        runs=any(spans.is_run(span) for span in ordered if span is not root),
    )
    summary.add_calls(expansion.calls)
    return summary


def _loops(
    iterations: dict[str, int | None] | None, steps: list[SpanView]
) -> dict[str, int | None] | None:
    """A summary's ``iterations`` with these (numbered) steps added."""
    if iterations is None:
        return None
    loops = dict(iterations)
    for span in steps:
        base = spans.base_node(span)
        iteration = iteration_of(span.node_id, base)
        if spans.explicit_attempt(span) is not None or iteration is None:
            loops[base] = None
        elif iteration > 1 and (highest := loops.get(base, 0)) is not None:
            loops[base] = max(highest, iteration)
    return loops if len(loops) <= MAX_LOOPING else None


def _waits(
    orphans: list[SpanView], positions: dict[str, int], trace: list[SpanView]
) -> tuple[set[str], dict[str, list[list]]]:
    """The parents ``orphans`` (spans whose parent is not here, in start order) wait for: those
    a step or a call with spans under it waits for, and by parent the calls that wait alone,
    with their positions. ``trace``: the spans to look for children among."""
    parents = {span.parent_id for span in trace}
    pending: set[str] = set()
    waiting: dict[str, list[list]] = {}
    for span in orphans:
        if span.span_id in positions and not span.is_step and span.span_id not in parents:
            waiting.setdefault(span.parent_id, []).append([span.span_id, positions[span.span_id]])
        else:
            pending.add(span.parent_id)
    return pending, {parent: calls for parent, calls in waiting.items() if parent not in pending}


def _key(trace: list[SpanView]) -> list | None:
    last = max(trace, key=_order, default=None)
    return [last.start.isoformat(), last.span_id] if last is not None else None


def _provider_from(calls: list[call_data.CallRecord], planners: set[str]) -> str:
    """Where ``call_data.job_provider_model`` takes the job's provider and model from."""
    llm = [call for call in calls if call_data.names_a_model(call)]
    if any(call.node_id in planners for call in llm):
        return "planner"
    return "llm" if llm else ""


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
    # The new steps retry the failure the job's last event was: fold them onto it reopened.
    reopens: bool = False
    # How many span events the growth added (each one of the job's events; ``events`` are
    # made of them).
    spans: int = 0


class Growth:
    """New spans onto a stored trace, in the steps the caller reads storage in between:
    ``start`` (None: expand the whole trace), read the spans ``wanted`` names and ``place`` the
    new spans under them, read the stored steps of their ``bases`` and the spans of the
    latest of them (``siblings_to_read``), then ``extend``."""

    def __init__(
        self,
        job_id: str,
        summary: TraceSummary,
        new: dict[str, SpanView],
        reopenable: tuple[str, int] | None = None,
    ):
        self.job_id, self.summary, self.new = job_id, summary, new
        # The (node, attempt) whose failure is the job's last event (``walk.Fold.reopenable``).
        self.reopenable = reopenable
        # The new spans in start order, and (once placed) those that are steps.
        self.ordered = sorted(new.values(), key=_order)
        self.steps: list[SpanView] = []
        self.root: SpanView | None = None
        # New spans whose parent is not stored either, and the stored calls whose parent came
        # (with their positions): the calls are now its, or its step's.
        self.orphans: list[SpanView] = []
        self.adopted: list[tuple[SpanView, int]] = []
        # Every stored call still waiting for its parent, with its position, when a new span
        # starts before the latest stored call (new calls may then come before them; ``place``
        # fills it in).
        self.waiting_calls: list[tuple[SpanView, int]] | None = (
            None if _after(self.ordered, summary.last_call) else []
        )
        # By base node read only in part (``step_names``), the lowest iteration read.
        self.floors: dict[str, int] = {}
        # What the new calls' records take from the spans around them (``place``).
        self.facts = spans.CallFacts()
        # The new span events, read or not: each is one of the job's events.
        self.span_events = len(new)

    @classmethod
    def start(
        cls, job_id: str, snapshot: dict[str, Any], span_events: list[Event]
    ) -> "Growth | None":
        """A growth of the trace a fold ``snapshot`` keeps by these new span events, or None
        when they cannot be expanded alone."""
        summary, reopenable = snapshot["spans"], snapshot["reopenable"]
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
                or span.span_id in trace.log_spans
            ):
                return None
            new[span.span_id] = span
        growing = cls(job_id, trace, new, tuple(reopenable[:2]) if reopenable else None)
        growing.span_events = len(span_events)
        return growing

    def wanted(self) -> list[str]:
        """The span ids to read from storage: the root, the new spans' parents, and the calls
        that waited for one of the new spans (every waiting call, when a new span starts before
        the latest stored call)."""
        parents = {span.parent_id for span in self.new.values()} - set(self.new)
        root = {self.summary.root[0]} if self.summary.root else set()
        waiting = self.summary.waiting
        waited = {
            span_id
            for parent in (
                waiting if self.waiting_calls is not None else set(self.new) & set(waiting)
            )
            for span_id, _position in waiting[parent]
        }
        return sorted(parents | root | waited)

    def place(self, stored: dict[str, SpanView]) -> bool:
        """Decide the new spans' place in the tree, given the ``wanted`` spans that were
        stored; False when that changes what a stored span is, or when a new span hangs under
        a stored span other than the root."""
        root_id = self.summary.root[0] if self.summary.root else None
        tree = dict(self.new)
        if root_id is not None:
            if (root := stored.get(root_id)) is None:
                return False
            self.root = tree[root_id] = root
        for parent, calls in self.summary.waiting.items():
            if parent not in self.new and self.waiting_calls is None:
                continue
            for span_id, position in calls:
                if (call := stored.get(span_id)) is None:
                    return False
                tree[span_id] = call
                if parent in self.new:
                    self.adopted.append((call, position))
                if self.waiting_calls is not None:
                    self.waiting_calls.append((call, position))
        for span in self.ordered:
            if span.parent_id in stored and span.parent_id != root_id:
                return False
            if span.parent_id not in self.new and span.parent_id not in stored:
                self.orphans.append(span)
                if not span.local_parent and not self._after_root(span):
                    return False  # a local root before the job's: it would be the job's
        spans.classify(sorted(tree.values(), key=_order), tree, self.root)
        if not self._keeps_outcome_and_usage(tree):
            return False
        self.steps = [span for span in self.ordered if span.is_step]
        placed = [*self.new.values(), *(call for call, _position in self.adopted)]
        read = self.adopted if self.waiting_calls is None else self.waiting_calls
        return not any(call.is_step for call, _position in read) and (
            self.root is None or all(span.step_parent is not self.root for span in placed)
        )

    def _keeps_outcome_and_usage(self, tree: dict[str, SpanView]) -> bool:
        """Whether the new spans leave the job's outcome, the stored calls' usage and their
        attempts as they are: with the root here, no agent or workflow run is (or comes)
        below it (the job fails when its last run raised: ``spans.raised_run``), and no new
        span states usage below a root that states some (the root's would turn a total); no
        model call the new spans retry was stored."""
        new = self.new.values()
        if self.root is not None:
            if self.summary.runs or any(spans.is_run(span) for span in new):
                return False
            if call_data.has_usage(self.root) and any(map(call_data.has_usage, new)):
                return False
        self.facts = spans.call_facts(sorted(tree.values(), key=_order), tree)
        for span_id, earlier in self.facts.attempts.items():
            chain = [span_id, *(span.span_id for span in earlier)]
            if any(link not in self.new for link in chain):
                return False
        return True

    def _after_root(self, span: SpanView) -> bool:
        """Whether the job's root stays its root beside ``span``, a local root: a true root,
        or a stand-in that starts before it."""
        if self.summary.root is None:
            return False
        span_id, start, true_root = self.summary.root
        return true_root or _order(span) > _key_order([start, span_id])

    def bases(self) -> set[str] | None:
        """The new steps' base nodes, whose stored steps ``extend`` needs (None: a base too
        long to number without cutting it)."""
        bases = {spans.base_node(span) for span in self.steps}
        return None if any(len(base) > MAX_ID_CHARS - 12 for base in bases) else bases

    def step_names(self) -> dict[str, list[str] | None]:
        """By base node of the new steps, the node names whose stored steps ``extend`` needs:
        the base itself when it ran once at most; its latest SIBLINGS_READ iterations when it
        ran more (a step's iteration is its rank by start: the newest steps are the highest
        iterations); None: every iteration of it (``iterations`` does not say)."""
        loops = self.summary.iterations
        names: dict[str, list[str] | None] = {}
        for base in self.bases() or ():
            highest = loops.get(base, 1) if loops is not None else None
            if highest is None:
                names[base] = None
                continue
            self.floors[base] = max(highest - SIBLINGS_READ + 1, 1)
            names[base] = [
                spans.iteration_node(base, i) for i in range(highest, self.floors[base] - 1, -1)
            ]
        return names

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
        steps, ordered = self.steps, self.ordered
        call_spans = [span for span in ordered if spans.is_call(span)]
        summary = self.summary
        if not _after(steps, summary.last_step):
            return None  # it would renumber stored steps
        placed = self._call_positions(call_spans)
        if placed is None:
            return None  # it would renumber stored calls other than the waiting ones
        positions, moved = placed
        used = {(step.node_id, step.attempt) for step in stored_steps}
        latest = self._latest_siblings(steps, stored_steps, siblings)
        if latest is None:
            return None
        spans.number_attempts(steps, used, latest)
        for span in steps:
            base = spans.base_node(span)
            if (iteration_of(span.node_id, base) or 0) < self.floors.get(base, 1):
                return None  # numbered among iterations that were not read
        reopens = self._reopens(steps, stored_steps)
        if reopens is None:
            return None  # another attempt of a stored node
        last_attempts = spans.latest_attempts(steps)
        events = []
        for span in steps:
            result = spans.step_result(span, last_attempts, self.root)
            events.extend(spans.step_events(self.job_id, span, result))
        calls = [
            spans.call_of(span, positions[span.span_id], facts=self.facts) for span in call_spans
        ]
        if moved and any(
            call.position < max(moved.values())
            and (call_data.names_a_model(call) or call.cost is not None)
            for call in calls
        ):
            return None  # before a stored call: the job's model or cost sum could change
        # The stored calls whose record changes: the adopted (their step), the moved (their
        # position).
        adopted = {call.span_id for call, _position in self.adopted}
        stored = {
            call.span_id: (call, p) for call, p in [*(self.waiting_calls or ()), *self.adopted]
        }
        rewritten_ids = [span_id for span_id in stored if span_id in adopted or span_id in moved]
        if set(rewritten_ids) & set(summary.log_spans):
            return None  # a call whose log records are part of its record
        rewritten = [
            spans.call_of(
                stored[span_id][0], moved.get(span_id, stored[span_id][1]), facts=self.facts
            )
            for span_id in rewritten_ids
        ]
        if not self._keeps_job_fields(steps, calls, rewritten):
            return None
        adopters = [*ordered, *(call for call, _position in self.adopted)]
        new_pending, new_waiting = _waits(self.orphans, positions, adopters)
        pending = set(summary.pending) | new_pending
        waiting = {
            parent: [[span_id, moved.get(span_id, position)] for span_id, position in entries]
            for parent, entries in summary.waiting.items()
            if parent not in self.new
        }
        for parent, more in new_waiting.items():
            # In start order, as the whole trace lists them (a later call may start earlier).
            waiting[parent] = sorted([*waiting.get(parent, []), *more], key=lambda call: call[1])
        waiting = {parent: calls for parent, calls in waiting.items() if parent not in pending}
        if len(pending) + len(waiting) > MAX_PENDING:
            return None
        # The calls that no longer wait: the new ones that do not, the adopted, and those whose
        # parent a new step now waits for too (read, or the trace is expanded whole).
        still = {span_id for entries in waiting.values() for span_id, _position in entries}
        left = [s for e in summary.waiting.values() for s, _position in e if s not in still]
        if any(span_id not in stored for span_id in left):
            return None
        settled = [span for span in call_spans if span.span_id not in still]
        settled += [stored[span_id][0] for span_id in left]
        grown = TraceSummary(**summary.as_json())
        grown.last_step = _key(steps) or summary.last_step
        grown.last_call = _latest(_key(call_spans), summary.last_call)
        grown.settled_call = _latest(_key(settled), summary.settled_call)
        grown.pending, grown.waiting = sorted(pending), waiting
        grown.calls = summary.calls + len(call_spans)
        grown.iterations = _loops(summary.iterations, steps)
        grown.runs = summary.runs or any(spans.is_run(span) for span in ordered)
        grown.add_calls(calls)
        return Grown(events, calls + rewritten, grown, reopens, self.span_events)

    def _call_positions(
        self, call_spans: list[SpanView]
    ) -> tuple[dict[str, int], dict[str, int]] | None:
        """The new calls' positions, and the new positions of the stored calls that start after
        one of them (by span id). Only calls still waiting for their parent may: every other
        stored call starts before ``summary.settled_call``, and the waiting ones were read (a
        call's position is its rank by start). None when a new call starts before a settled
        one."""
        summary = self.summary
        if _after(call_spans, summary.last_call):
            return {s.span_id: i for i, s in enumerate(call_spans, start=summary.calls)}, {}
        if self.waiting_calls is None or not _after(call_spans, summary.settled_call):
            return None
        first = _order(call_spans[0])
        tail = [(call, position) for call, position in self.waiting_calls if _order(call) > first]
        base = summary.calls - len(tail)
        if sorted(position for _call, position in tail) != list(range(base, summary.calls)):
            return None
        merged = sorted([*call_spans, *(call for call, _position in tail)], key=_order)
        positions = {span.span_id: base + i for i, span in enumerate(merged)}
        moved = {call.span_id: positions.pop(call.span_id) for call, _position in tail}
        return positions, moved

    def _reopens(self, steps: list[SpanView], stored_steps: list[StoredStep]) -> bool | None:
        """Whether the new (numbered) steps retry the stored failure that is the job's last
        event; None when they are other attempts of a stored node."""
        again = {step.node_id for step in steps} & {step.node_id for step in stored_steps}
        if not again:
            return False
        if self.reopenable is None or again != {self.reopenable[0]}:
            return None
        node, attempt = self.reopenable
        stored = max(step.attempt for step in stored_steps if step.node_id == node)
        retries = min(step.attempt for step in steps if step.node_id == node)
        return True if stored == attempt < retries else None

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

    def _keeps_job_fields(
        self,
        steps: list[SpanView],
        calls: list[call_data.CallRecord],
        rewritten: list[call_data.CallRecord],
    ) -> bool:
        """Whether the job's provider, model, session and correlation ids stay as the stored
        spans gave them: new spans start after the stored ones, so they can only fill a gap,
        and a stored call a planner step adopts (``rewritten``) may be the planner's first."""
        summary = self.summary
        planners = {span.node_id for span in steps if spans.planner_step(span)}
        llm = [call for call in calls if call_data.names_a_model(call)]
        if summary.provider_from == "" and llm:
            return False
        if summary.provider_from == "llm" and any(call.node_id in planners for call in llm):
            return False
        if any(call.node_id in planners for call in rewritten):
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


def _key_order(key: list) -> tuple:
    """A [start, span id] key (``_key``) as ``_order`` orders spans."""
    return (datetime.fromisoformat(key[0]), key[1])


def _latest(*keys: list | None) -> list | None:
    """The latest of [start, span id] keys (None: none)."""
    return max((key for key in keys if key is not None), key=_key_order, default=None)


def _after(trace: list[SpanView], last: list | None) -> bool:
    """Whether every span of ``trace`` starts after ``last`` ([start, span id])."""
    if last is None:
        return True
    key = _key_order(last)
    return all(_order(span) > key for span in trace)


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
