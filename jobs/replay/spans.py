"""OpenTelemetry spans as a job's story (docs/otlp.md). Pure.

``expand`` takes every ``span`` event of a job and returns the contract events replay folds
(job_started and job_finished from the job's root span, node_started and node_finished for each
step) and the calls made inside the steps. It looks at the whole trace at once, so what a span
means can depend on spans that arrived later (its parent, a later attempt) and still comes out
the same in any arrival order; the fold replays a job with spans whole (``walk.Fold.of``).

First match wins, and an explicit ``traceviz.*`` attribute always beats an inferred value:
- the root span (no parent; else the earliest span whose parent is not here) is the job; it
  failed when it ended in ERROR, or when the last outermost agent or workflow run under it
  raised and nothing after it succeeded (``raised_run``);
- a span is a step when it sets ``traceviz.node_id``, is a LangGraph node, is a Celery run, is
  a unit of an agent framework (a tool execution, an agent below the root, an OpenLLMetry task,
  tool, agent or workflow: ``is_unit``), or is any other non-root span not marked as a call;
  spans OpenInference, ``gen_ai.*`` or Celery's publishing mark (LLM, retriever, chain...) are
  calls of their nearest step ancestor (a marked span with no step above it is a step, so
  nothing goes unseen), but for a wrapper that only groups steps (``_grouping``), a call of
  the job whose children are placed as if it were not there;
- a call's usage that repeats the calls below it is a total, not counted (``usage_totals``),
  and a model call an SDK retried is one call with attempts (``model_call_attempts``);
- attempts: ``traceviz.attempt``, ``celery.retries`` + 1, else by order under the same parent
  (after a failed sibling of the same node: the next attempt; after a successful one: a new
  iteration, ``name #2``); two spans never share (node, attempt);
- result types: ``traceviz.result_type``, Celery's ``celery.state``, else status: ERROR is a
  permanent failure when no later attempt of the node exists and retryable when one does;
  an ERROR step whose parent step (or the root) ended without error was handled.

``growth`` sums up what the trace decided that later spans' meaning can depend on, and expands
a live trace's new spans onto that summary when it can show the whole trace would give the same.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from jobs.contract.events import (
    MAX_ID_CHARS,
    MAX_PAYLOAD_DEPTH,
    Event,
    bounded_attribute,
    cut,
    loads_within_depth,
    nesting_depth,
    parse_timestamp,
    truncate_text,
)
from jobs.replay import calls as call_data
from jobs.replay import content
from jobs.replay.failures import ResultType

PREFIX = "traceviz."
RESULT_TYPES = frozenset(ResultType)
CELERY_RESULTS = {
    "RETRY": ResultType.RETRYABLE_FAILURE,
    "FAILURE": ResultType.PERMANENT_FAILURE,
    "SUCCESS": ResultType.SUCCESS,
}
# Celery states a run ends in that end its task for good (a retry is never terminal).
TERMINAL_CELERY_STATES = frozenset({"SUCCESS", "FAILURE"})
STRING_FIELDS = ("failure_code", "error_type", "tool", "source", "plan_hash", "state")
INT_FIELDS = ("step_index", "epoch", "step_epoch")
JSON_OBJECT_FIELDS = ("payload_results", "context")
TRACEBACK = "Traceback (most recent call last)"
STATUS_CODES = frozenset({"ok", "error", "unset"})
# The OTel SDK's default service.name when the producer set none: not a workflow name.
UNKNOWN_SERVICE = "unknown_service"


@dataclass(slots=True)
class SpanView:
    """A stored span, read defensively: a ``span`` event may come from any producer."""

    event_id: str
    trace_id: str
    span_id: str
    parent_id: str
    remote_parent: bool
    # Its SDK says the parent is a span of the same process: it will be exported too.
    local_parent: bool
    name: str
    kind: str
    start: datetime
    end: datetime
    status_code: str
    status_message: str
    attrs: dict[str, Any]
    events: list[dict[str, Any]]
    links: list[dict[str, Any]]
    resource: dict[str, Any]
    scope: dict[str, Any]
    dropped: dict[str, Any]
    # The paths ingest masked in the span (``Event.masked``).
    masked: tuple[str, ...] = ()
    # Filled by expand.
    is_step: bool = False
    step_parent: "SpanView | None" = None
    under_root: bool = False
    node_id: str = ""
    attempt: int = 1
    # On the job's root: an agent or workflow run under it raised (``raised_run``), whatever
    # the root's own status says.
    raised: bool = False

    @property
    def error(self) -> bool:
        return self.status_code == "error"

    def text(self, key: str) -> str | None:
        value = self.attrs.get(key)
        return value if isinstance(value, str) and value else None

    def number(self, key: str) -> int | None:
        """The attribute ``key`` (one the contract bounds) within its bounds, else None."""
        return bounded_attribute(self.attrs, key)


@dataclass(slots=True)
class Expansion:
    events: list[Event] = field(default_factory=list)
    calls: list[call_data.CallRecord] = field(default_factory=list)
    # The trace as expand decided it: its spans in start order (classified and numbered), its
    # root, and whether each span came once, as the OTLP endpoint stores it (``is_canonical``).
    spans: list[SpanView] = field(default_factory=list)
    root: SpanView | None = None
    regular: bool = True
    # The spans log records name, and those that are not here (yet): their records wait.
    logged_spans: set[str] = field(default_factory=set)
    orphan_logs: list[str] = field(default_factory=list)


def read_span(event: Event) -> SpanView | None:
    """The span a ``span`` event holds, or None when its payload cannot be used."""
    payload = event.payload
    end = parse_timestamp(payload.get("end"))
    trace_id, span_id = payload.get("trace_id"), payload.get("span_id")
    if end is None or not isinstance(trace_id, str) or not isinstance(span_id, str):
        return None
    if event.ts is None:  # a stored event always has its time
        return None
    status = _dict(payload.get("status"))
    parent = payload.get("parent_span_id")
    return SpanView(
        event_id=event.event_id,
        trace_id=trace_id,
        span_id=span_id,
        # A span that names itself as its parent has none.
        parent_id=parent if isinstance(parent, str) and parent != span_id else "",
        remote_parent=payload.get("remote_parent") is True,
        local_parent=payload.get("local_parent") is True,
        name=_text(payload.get("name")) or "(unnamed span)",
        kind=_text(payload.get("kind")) or "unspecified",
        start=event.ts,
        end=max(end, event.ts),
        # The mapping writes one of these; an event sent to /api/v1/events may say anything.
        status_code=code if (code := status.get("code")) in STATUS_CODES else "unset",
        status_message=_text(status.get("message")),
        attrs=_dict(payload.get("attributes")),
        events=[e for e in _list(payload.get("events")) if isinstance(e, dict)],
        links=[link for link in _list(payload.get("links")) if isinstance(link, dict)],
        resource=_dict(payload.get("resource")),
        scope=_dict(payload.get("scope")),
        dropped=_dict(payload.get("dropped")),
        masked=event.masked,
    )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def expand(
    job_id: str, span_events: Iterable[Event], log_events: Iterable[Event] = ()
) -> Expansion:
    """The contract events and calls a job's spans stand for; its log records (``log``
    events) go to their span's call or step (``content.step_entries``)."""
    spans: dict[str, SpanView] = {}
    regular = True
    for event in span_events:
        span = read_span(event)
        if span is not None:
            regular = regular and span.span_id not in spans and is_canonical(event, span)
            spans.setdefault(span.span_id, span)
    logs = content.logs_by_span(log_events)
    if not spans:
        return Expansion(logged_spans=set(logs) - {""}, orphan_logs=sorted(set(logs) - {""}))
    ordered = sorted(spans.values(), key=lambda s: (s.start, s.span_id))
    root = _job_root(ordered, spans)
    classify(ordered, spans, root)
    steps = [span for span in ordered if span.is_step]
    if root is not None:
        root.raised = raised_run(root, steps) is not None
    number_attempts(steps)
    last_attempts = latest_attempts(steps)
    results = {span.span_id: step_result(span, last_attempts, root) for span in steps}
    logged = set(logs) - {""}
    expansion = Expansion(logged_spans=logged, orphan_logs=sorted(logged - set(spans)))
    shown, entries = content.step_entries(
        ordered, logs, lambda span: is_call(span) if span is not root else call_data.is_marked(span)
    )
    for span in steps:
        step_logs = entries.get(span.span_id, [])
        expansion.events.extend(step_events(job_id, span, results[span.span_id], step_logs))
    call_spans = [span for span in ordered if span is not root and is_call(span)]
    facts = call_facts(ordered, spans)
    expansion.calls = [
        call_of(span, position, shown.get(span.span_id, []), facts)
        for position, span in enumerate(call_spans)
    ]
    if root is not None:
        if call_data.is_marked(root):
            root_logs = shown.get(root.span_id, [])
            root_call = content.call_record(
                root, None, -1, failure_text(root), root_logs, root.span_id in facts.totals
            )
            expansion.calls.insert(0, root_call)
        expansion.events.extend(_job_events(job_id, root, steps, results, expansion.calls))
    expansion.spans, expansion.root, expansion.regular = ordered, root, regular
    return expansion


def latest_attempts(steps: Iterable[SpanView]) -> dict[str, int]:
    """Each node's highest attempt among ``steps`` (numbered)."""
    latest: dict[str, int] = {}
    for span in steps:
        latest[span.node_id] = max(span.attempt, latest.get(span.node_id, 0))
    return latest


def is_call(span: SpanView) -> bool:
    """Whether a classified span (not the root) is a call: every span that is not a step, and
    the marked spans that are steps (an LLM span with no step above it is both: its own step,
    and the call it made)."""
    return not span.is_step or call_data.is_marked(span)


@dataclass(frozen=True, slots=True)
class CallFacts:
    """What a call's record takes from the spans around it: the spans whose usage is the
    total of calls below them (``usage_totals``), and the model calls that are attempts of
    one call (``model_call_attempts``): by the call, its earlier attempts; by an earlier
    attempt, the call it is one of and its number."""

    totals: frozenset[str] = frozenset()
    attempts: dict[str, list[SpanView]] = field(default_factory=dict)
    attempt_of: dict[str, tuple[str, int]] = field(default_factory=dict)


def call_facts(spans: list[SpanView], tree: dict[str, SpanView]) -> CallFacts:
    """The ``CallFacts`` of classified ``spans`` (``tree``: every span known, by id)."""
    attempts = model_call_attempts([span for span in spans if is_call(span)], tree)
    attempt_of = {
        earlier.span_id: (span_id, number)
        for span_id, chain in attempts.items()
        for number, earlier in enumerate(chain, start=1)
    }
    return CallFacts(usage_totals(spans, tree), attempts, attempt_of)


def call_of(
    span: SpanView,
    position: int,
    logs: list | None = None,
    facts: CallFacts | None = None,
) -> call_data.CallRecord:
    """A call span's record: a call of itself when it is a step, else of its step ancestor;
    ``logs``: the GenAI content log records of its span; ``facts``: what the spans around it
    say of it (``call_facts``)."""
    facts = facts or CallFacts()
    step = span if span.is_step else span.step_parent
    total = span.span_id in facts.totals
    record = content.call_record(span, step, position, failure_text(span), logs or [], total)
    detail = dict(record.detail)
    if earlier := facts.attempts.get(span.span_id):
        detail["attempts"] = [
            _attempt_summary(attempt, number) for number, attempt in enumerate(earlier, start=1)
        ]
    if span.span_id in facts.attempt_of:
        detail["attempt_of"], detail["attempt"] = facts.attempt_of[span.span_id]
    return replace(record, detail=detail) if detail != record.detail else record


def _attempt_summary(span: SpanView, number: int) -> dict[str, Any]:
    reason, exception_type, _stack = failure_text(span)
    return {
        "attempt": number,
        "span_id": span.span_id,
        "status": span.status_code,
        "reason": reason,
        "exception_type": exception_type,
        "started_at": span.start.isoformat(),
        "duration_ms": (span.end - span.start).total_seconds() * 1000,
    }


def usage_totals(spans: Iterable[SpanView], tree: dict[str, SpanView]) -> frozenset[str]:
    """The spans whose tokens are a total, not a call's own: those with a span below them
    that states usage too. An agent's span repeats its run's total (Strands, under the same
    ``gen_ai.usage.*`` keys as its model calls); counted beside its calls, a job's tokens and
    cost would be counted twice."""
    spans = list(spans)
    above: set[str] = set()
    for span in spans:
        if not call_data.has_usage(span):
            continue
        for ancestor in _ancestors(span, tree):
            if ancestor.span_id in above:
                break
            above.add(ancestor.span_id)
    return frozenset(
        span.span_id for span in spans if span.span_id in above and call_data.has_usage(span)
    )


def model_call_attempts(
    calls: list[SpanView], tree: dict[str, SpanView]
) -> dict[str, list[SpanView]]:
    """By model call, the earlier attempts of the same request that an SDK retried, oldest
    first: a model call that failed without usage, followed under the same parent by a model
    call of the same name that starts after it ended (OpenAI Agents' runner retry, an app's
    retry), or below the call that answered (Pydantic AI's FallbackModel: "model request
    attempt" spans under its chat span). A chain whose every attempt failed ends in a failed
    call, with the others its attempts. A model call that is a step of its own (no step above
    it) is retried as its step's next attempt instead (Strands)."""
    models = sorted(
        (span for span in calls if call_data.kind_of(span) == "llm"),
        key=lambda s: (s.start, s.span_id),
    )
    # Model calls that are steps of their own are retried as their step's attempts.
    siblings = [span for span in models if not span.is_step]
    attempts: dict[str, list[SpanView]] = {}
    chains: dict[str, list[SpanView]] = {}
    for span in siblings:
        chain = chains.get(span.parent_id)
        last = chain[-1] if chain else None
        if (
            chain is not None
            and last is not None
            and _failed_attempt(last)
            and last.name == span.name
            and last.end <= span.start
        ):
            chain.append(span)
            continue
        if chain and len(chain) > 1:
            attempts[chain[-1].span_id] = chain[:-1]
        chains[span.parent_id] = [span]
    for chain in chains.values():
        if len(chain) > 1:
            attempts[chain[-1].span_id] = chain[:-1]
    chained = {span.span_id for chain in attempts.values() for span in chain}
    for span in siblings:
        parent = tree.get(span.parent_id)
        if (
            parent is not None
            and _failed_attempt(span)
            and span.span_id not in chained
            and call_data.is_marked(parent)
            and call_data.kind_of(parent) == "llm"
        ):
            attempts.setdefault(parent.span_id, []).append(span)
    return {
        span_id: sorted(chain, key=lambda s: (s.start, s.span_id))
        for span_id, chain in attempts.items()
    }


def _failed_attempt(span: SpanView) -> bool:
    return span.error and not call_data.has_usage(span)


def is_canonical(event: Event, span: SpanView) -> bool:
    """Whether the span came as the OTLP endpoint stores it: one event per span, its id made of
    the trace and span ids (a resend of the span is then the same event)."""
    return event.event_id == f"otlp:{span.trace_id}:{span.span_id}"


# --- the tree -----------------------------------------------------------------------------


def _job_root(ordered: list[SpanView], spans: dict[str, SpanView]) -> SpanView | None:
    """The trace's root span (no parent), else its earliest local root (a span whose parent
    did not reach traceviz: it lives in a service that does not export here), until a true
    root arrives. A span whose SDK says its parent is in the same process is no local root:
    that parent is exported too, later (a run still going exports its root last), so while
    every span is such a one the job's root has not come (None)."""
    true_roots = [span for span in ordered if not span.parent_id]
    if true_roots:
        return true_roots[0]
    local_roots = [span for span in ordered if span.parent_id not in spans]
    if not local_roots:
        # Parent ids that go round in a circle (a producer's bug): the earliest span.
        return ordered[0]
    return next((span for span in local_roots if not span.local_parent), None)


def _ancestors(span: SpanView, spans: dict[str, SpanView]) -> Iterable[SpanView]:
    seen = {span.span_id}
    parent = spans.get(span.parent_id)
    while parent is not None and parent.span_id not in seen:
        yield parent
        seen.add(parent.span_id)
        parent = spans.get(parent.parent_id)


def classify(ordered: list[SpanView], spans: dict[str, SpanView], root: SpanView | None) -> None:
    """Mark the steps, from the top of the trace down (a call needs its ancestors decided)."""
    depth = {span.span_id: sum(1 for _ in _ancestors(span, spans)) for span in ordered}
    grouping = _grouping(ordered, spans, root)
    for span in sorted(ordered, key=lambda s: (depth[s.span_id], s.start, s.span_id)):
        ancestors = list(_ancestors(span, spans))
        step_ancestor = next((a for a in ancestors if a.is_step), None)
        span.step_parent = step_ancestor
        span.under_root = any(ancestor is root for ancestor in ancestors)
        if span is root:
            span.is_step = _is_explicit_step(span) and bool(span.parent_id)
        elif _is_explicit_step(span) or is_unit(span) or not call_data.is_marked(span):
            # A unit is a step wherever it is; plain OpenTelemetry spans are steps.
            span.is_step = True
        else:
            span.is_step = (
                step_ancestor is None
                and span.span_id not in grouping
                and not _awaits_parent(span, ancestors, spans, root)
            )


def is_unit(span: SpanView) -> bool:
    """A span that is a step whatever is above it (the job's root aside): a unit a person
    would inspect or retry on its own. A tool execution (``gen_ai.operation.name``
    execute_tool, OpenInference TOOL), an agent invocation (invoke_agent, OpenInference AGENT;
    below the root: the root is the job), a task, tool, agent or workflow an OpenLLMetry
    decorator made (``traceloop.span.kind``)."""
    if span.text(call_data.TRACELOOP_KIND) in call_data.KIND_BY_TRACELOOP:
        return True
    return call_data.is_marked(span) and call_data.kind_of(span) in UNIT_KINDS


# The call kinds that are steps of their own (``is_unit``).
UNIT_KINDS = frozenset({"tool", "agent"})


def _is_event_loop_cycle(span: SpanView) -> bool:
    return span.text("gen_ai.operation.name") == "execute_event_loop_cycle"


def _grouping(
    ordered: list[SpanView], spans: dict[str, SpanView], root: SpanView | None
) -> set[str]:
    """The span ids of the wrappers: chains that only group steps (the OpenAI Agents SDK's
    run span, "Agent workflow", with the agents under it), and Strands' event loop cycles (a
    model call and the tools it asked for; always one, so that a run's model calls are each a
    step of their own, as Pydantic AI's are). A wrapper is neither step nor the step of what
    is under it: its children are placed as if it were not there, and it is kept as a call.
    A chain groups steps when an explicit step or a unit (``is_unit``) is below it."""
    above_units: set[str] = set()
    for span in ordered:
        if span is root or not (_is_explicit_step(span) or is_unit(span)):
            continue
        for ancestor in _ancestors(span, spans):
            if ancestor.span_id in above_units:
                break
            above_units.add(ancestor.span_id)
    return {
        span.span_id
        for span in ordered
        if call_data.is_marked(span)
        and call_data.kind_of(span) == "chain"
        and (_is_event_loop_cycle(span) or span.span_id in above_units)
    }


def _awaits_parent(
    span: SpanView, ancestors: list[SpanView], spans: dict[str, SpanView], root: SpanView | None
) -> bool:
    """Whether the top of ``span``'s branch waits for a parent its SDK says is in the same
    process (a step still running, or the run's root): a call there is the job's until that
    parent comes, as a step above it may (a marked span with no step above it is a step)."""
    top = ancestors[-1] if ancestors else span
    return top is not root and top.local_parent and top.parent_id not in spans


def _is_explicit_step(span: SpanView) -> bool:
    return bool(span.text(PREFIX + "node_id")) or _is_langgraph_node(span) or _is_celery_run(span)


def _is_langgraph_node(span: SpanView) -> bool:
    metadata = span.attrs.get("metadata")
    if isinstance(metadata, str) and "langgraph_node" in metadata:
        metadata = loads_within_depth(metadata)
    return isinstance(metadata, dict) and metadata.get("langgraph_node") == span.name


def _is_celery_run(span: SpanView) -> bool:
    return span.kind == "consumer" and bool(span.text("celery.task_name"))


# --- attempts -----------------------------------------------------------------------------


def base_node(span: SpanView) -> str:
    node = span.text(PREFIX + "node_id") or (
        span.text("celery.task_name") if _is_celery_run(span) else None
    )
    return _cut(node or span.name)


def _cut(value: str) -> str:
    return cut(value, MAX_ID_CHARS)


def explicit_attempt(span: SpanView) -> int | None:
    """``traceviz.attempt``, else a Celery run's retries so far + 1; None: by order."""
    attempt = span.number(PREFIX + "attempt")
    if attempt is not None:
        return attempt
    if _is_celery_run(span):
        return (span.number("celery.retries") or 0) + 1
    return None


def number_attempts(
    steps: list[SpanView],
    used: set[tuple[str, int]] | None = None,
    latest: dict[tuple[str, str], tuple[SpanView, int]] | None = None,
) -> None:
    """Give every step a node id and an attempt, in start order; no two share both. ``used``
    and ``latest`` are what earlier steps took: their (node, attempt), and by (parent span,
    base node) the latest sibling step and its iteration."""
    used = set() if used is None else used
    latest = {} if latest is None else latest
    for span in steps:
        base = base_node(span)
        explicit = explicit_attempt(span)
        previous = latest.get((span.parent_id, base))
        iteration, attempt = 1, explicit or 1
        if explicit is None and previous is not None:
            before, its_iteration = previous
            failed_before = _failed(before) and before.end <= span.start
            iteration = its_iteration if failed_before else its_iteration + 1
            attempt = before.attempt + 1 if failed_before else 1
        node = iteration_node(base, iteration)
        while (node, attempt) in used:
            iteration += 1
            node = iteration_node(base, iteration)
        used.add((node, attempt))
        span.node_id, span.attempt = node, attempt
        latest[(span.parent_id, base)] = (span, iteration)


def iteration_node(base: str, iteration: int) -> str:
    """``base``'s node id for its ``iteration``: the " #N" suffix survives a cut, so two
    iterations of a long name never share one."""
    if iteration == 1:
        return base
    suffix = f" #{iteration}"
    return cut(base, MAX_ID_CHARS - len(suffix)) + suffix


def _failed(span: SpanView) -> bool:
    state = span.text("celery.state")
    return span.error or state in ("RETRY", "FAILURE")


# --- results ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    result_type: str
    declared: bool
    handled: bool
    reason: str
    exception_type: str
    stack: str


def step_result(span: SpanView, last_attempts: dict[str, int], root: SpanView | None) -> Result:
    """The step's result; ``last_attempts``: each node's highest attempt."""
    reason, exception_type, stack = failure_text(span)
    explicit = span.text(PREFIX + "result_type")
    if explicit in RESULT_TYPES:
        return Result(explicit, True, False, reason, exception_type, stack)
    state = span.text("celery.state")
    if state in CELERY_RESULTS:
        return Result(CELERY_RESULTS[state], True, False, reason, exception_type, stack)
    if not span.error:
        return Result(ResultType.SUCCESS, False, False, reason, exception_type, stack)
    later = last_attempts[span.node_id] > span.attempt
    result_type = ResultType.RETRYABLE_FAILURE if later else ResultType.PERMANENT_FAILURE
    return Result(result_type, False, _handled(span, root), reason, exception_type, stack)


def _handled(span: SpanView, root: SpanView | None) -> bool:
    """An ERROR step whose parent step (or the root) ended without error: whatever called it
    dealt with the failure. Not across a message (a Celery run's parent published it), and not
    while the parent has not reached traceviz (it may still fail)."""
    if span.kind == "consumer" or span.remote_parent:
        return False
    parent = span.step_parent or (root if span.under_root else None)
    return parent is not None and not _failed(parent) and not parent.raised


def failure_text(span: SpanView) -> tuple[str, str, str]:
    """(one-line reason, exception type, stack trace) of a span: ``traceviz.reason``,
    ``celery.retry.reason``, the last exception event as "Type: first line", else the status
    description cut before any traceback; the stack apart."""
    exception = next((e for e in reversed(span.events) if e.get("name") == "exception"), None)
    attrs = _dict(exception.get("attributes")) if exception else {}
    exception_type = _text(attrs.get("exception.type"))
    message = _text(attrs.get("exception.message"))
    stack = _text(attrs.get("exception.stacktrace"))
    description, _, rest = span.status_message.partition(TRACEBACK)
    if not stack and rest:
        stack = TRACEBACK + rest
    reason = span.text(PREFIX + "reason") or span.text("celery.retry.reason") or ""
    if not reason and (exception_type or message):
        first_line = message.strip().splitlines()[0] if message.strip() else ""
        reason = ": ".join(part for part in (exception_type, first_line) if part)
    if not reason:
        reason = description.strip().splitlines()[0] if description.strip() else ""
    return truncate_text(reason), _cut(exception_type), truncate_text(stack)


# --- events -------------------------------------------------------------------------------


# The suffixes of the ids of the events replay makes of a span (``step_events``,
# ``_job_events``), after the span's own ``otlp:<trace>:<span>``.
MADE_SUFFIXES = (":started", ":finished", ":job_started", ":job_finished")
MADE_TYPES = frozenset({"node_started", "node_finished", "job_started", "job_finished"})


def _event(
    event_type: str, job_id: str, event_id: str, ts: datetime, payload: dict, masked: tuple = ()
) -> Event:
    return Event(event_type, job_id, event_id, ts, None, payload, masked)


def made_of_a_span(event: Event) -> bool:
    """Whether replay made ``event`` of a span: it stands for the span, which is the stored
    event (a job's events, as its page counts them, are its stored ones)."""
    return (
        event.type in MADE_TYPES
        and event.event_id.startswith("otlp:")
        and event.event_id.endswith(MADE_SUFFIXES)
    )


def step_events(
    job_id: str, span: SpanView, result: Result, logs: list[dict] | None = None
) -> list[Event]:
    """A step span's node_started and node_finished; ``logs``: the log records logged in it,
    its timed entries beside its span events (``content.step_entries``)."""
    parent = span.step_parent
    node = {
        "node_id": span.node_id,
        "attempt": span.attempt,
        "trace_span_id": span.span_id,
        "parent_span_id": parent.span_id if parent else "",
    }
    finished = {
        **node,
        "result_type": result.result_type,
        "duration_ms": (span.end - span.start).total_seconds() * 1000,
        "span": content.step_details(span, logs or [], is_call(span)),
    }
    if result.reason:
        finished["reason"] = result.reason
    if not result.declared:
        finished["inferred"] = True
    if result.handled:
        finished["handled"] = True
    if result.exception_type:
        finished["exception_type"] = result.exception_type
    if result.stack:
        finished["stack"] = result.stack
    for name in STRING_FIELDS:
        if value := span.text(PREFIX + name):
            finished[name] = _cut(value)
    for name in INT_FIELDS:
        number = span.number(PREFIX + name)
        if number is not None and number >= 0:
            finished[name] = number
    if isinstance(span.attrs.get(PREFIX + "continue_on_error"), bool):
        finished["continue_on_error"] = span.attrs[PREFIX + "continue_on_error"]
    for name in JSON_OBJECT_FIELDS:
        if (found := _json_object(span.attrs.get(PREFIX + name))) is not None:
            finished[name] = found
    # The producer's failure fingerprint (a string array; the contract checked its shape).
    if isinstance(custom := span.attrs.get(PREFIX + "fingerprint"), list) and custom:
        finished["fingerprint"] = custom
    prefix = f"otlp:{span.trace_id}:{span.span_id}"
    return [
        _event("node_started", job_id, f"{prefix}:started", span.start, node),
        _event("node_finished", job_id, f"{prefix}:finished", span.end, finished, span.masked),
    ]


def _json_object(value: Any) -> dict | None:
    """An object, as the attribute carries it or as JSON text; None for anything else, and for
    an object nested too deep to store and read back (the attribute keeps it as text)."""
    if isinstance(value, str):
        value = loads_within_depth(value)
    elif isinstance(value, dict) and nesting_depth(value) > MAX_PAYLOAD_DEPTH:
        return None
    return value if isinstance(value, dict) else None


def _job_events(
    job_id: str,
    root: SpanView,
    steps: list[SpanView],
    results: dict[str, Result],
    calls: list[call_data.CallRecord],
) -> list[Event]:
    prefix = f"otlp:{root.trace_id}:{root.span_id}"
    started = {"name": _cut(root.text(PREFIX + "job_name") or root.name), **_job_fields(root)}
    planners = {span.node_id for span in steps if planner_step(span)}
    provider, model = call_data.job_provider_model(calls, planners)
    if provider and "provider" not in started:
        started["provider"] = _cut(provider)
    if model and "model" not in started:
        started["model"] = _cut(model)
    for name, keys in (("session_id", SESSION_KEYS), ("correlation_id", CORRELATION_KEYS)):
        if name not in started and (value := _first_text([root, *steps], keys)):
            started[name] = _cut(value)
    out = [_event("job_started", job_id, f"{prefix}:job_started", root.start, started)]
    finished = _job_finish(root, steps, results)
    if finished is not None:
        at, payload = finished
        out.append(_event("job_finished", job_id, f"{prefix}:job_finished", at, payload))
    return out


SESSION_KEYS = (PREFIX + "session_id", "session.id", "gen_ai.conversation.id")
CORRELATION_KEYS = (PREFIX + "correlation_id", "messaging.message.id")


def _first_text(spans: list[SpanView], keys: tuple[str, ...]) -> str | None:
    for key in keys:
        for span in spans:
            if value := span_text(span, key):
                return value
    return None


def span_text(span: SpanView, key: str) -> str | None:
    return span.text(key) or _text(span.resource.get(key)) or None


def _job_fields(root: SpanView) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    service = _text(root.resource.get("service.name"))
    workflow = root.text(PREFIX + "workflow") or (
        service if not service.startswith(UNKNOWN_SERVICE) else ""
    )
    if workflow:
        fields["workflow"] = _cut(workflow)
    for name in ("plan_hash", "retry_of", "provider", "model"):
        if value := root.text(PREFIX + name):
            fields[name] = _cut(value)
    metadata = {k: v for k, v in root.resource.items() if k != "service.name"}
    metadata["otel.trace_id"] = root.trace_id
    if root.scope.get("name"):
        metadata["otel.scope"] = root.scope["name"]
    fields["metadata"] = metadata
    return fields


def _job_finish(
    root: SpanView, steps: list[SpanView], results: dict[str, Result]
) -> tuple[datetime, dict] | None:
    """When and how the job finished: its root's end (ERROR: failed with the root's reason),
    or, for a root that published a message (Celery apply_async), the terminal state of the
    last consumer run; None while that run is a retry (never terminal) or has not come."""
    if root.kind == "producer":
        runs = [span for span in steps if span.kind == "consumer"]
        if not runs:
            return None
        last = max(runs, key=lambda span: (span.start, span.span_id))
        state = last.text("celery.state")
        if state is not None and state not in TERMINAL_CELERY_STATES:
            return None
        result = results[last.span_id]
        if result.result_type == ResultType.RETRYABLE_FAILURE:
            return None
        if result.result_type == ResultType.SUCCESS:
            return last.end, {"status": "completed"}
        return last.end, _failed_payload(result.reason)
    failed = root if root.error else raised_run(root, steps)
    if failed is not None:
        reason, _exception_type, _stack = failure_text(failed)
        return root.end, _failed_payload(reason)
    return root.end, {"status": "completed"}


def is_run(span: SpanView) -> bool:
    """An agent or workflow run: an agent invocation (``invoke_agent``, OpenInference AGENT) or
    an OpenLLMetry ``@agent`` / ``@workflow``."""
    if span.text(call_data.TRACELOOP_KIND) in ("agent", "workflow"):
        return True
    return call_data.is_marked(span) and call_data.kind_of(span) == "agent"


def raised_run(root: SpanView, steps: list[SpanView]) -> SpanView | None:
    """The run under a root that ended OK or UNSET that raised: the outermost agent or
    workflow span under the root that starts last, when it ended in ERROR and no step that
    starts after it ended succeeded (the run did not recover). Some instrumentations end the
    root OK whatever happened (openinference-instrumentation-openai-agents does); the job then
    failed with that span's reason. None: no such run. ``steps``: the trace's classified steps
    (a run below the root is one)."""
    if root.error or root.kind == "producer":
        return None
    outermost = [
        span
        for span in steps
        if span.under_root and is_run(span) and not any(map(is_run, _step_ancestors(span)))
    ]
    last = max(outermost, key=lambda s: (s.start, s.span_id), default=None)
    if last is None or not last.error:
        return None
    recovered = any(not _failed(span) and span.start >= last.end for span in steps)
    return None if recovered else last


def _step_ancestors(span: SpanView) -> Iterable[SpanView]:
    parent = span.step_parent
    while parent is not None:
        yield parent
        parent = parent.step_parent


def _failed_payload(reason: str) -> dict:
    return {"status": "failed", "reason": reason} if reason else {"status": "failed"}


def planner_step(span: SpanView) -> bool:
    """A planner's step: named plan or planner, or it reported a planner event (the planner
    contract)."""
    tokens = set(re.split(r"[^a-z0-9]+", span.node_id.lower()))
    return bool(tokens & {"plan", "planner"}) or any(
        str(e.get("name", "")).startswith("graph.next_step.") for e in span.events
    )
