"""A live trace's spans, exported as they end, are expanded onto the stored trace (replay.growth)
where that is exact, and the rows are the same as a replay of the whole trace whatever way the
spans arrive and however their folds are coalesced. Since a trace replayed whole gives those
rows too, the tests also count how each request was folded (``deliver``'s paths, the
projections counter): a run in the shapes growth takes must be grown."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags

from jobs.contract import otlp
from jobs.ingest import failure_groups, parity, projector
from jobs.ingest.store import store_batch
from jobs.models import Call, Job, ProjectionMark
from tests.integration.test_incremental_projection import (
    HYPOTHESIS,
    clear,
    projection_rows,
    projections,
)
from tests.otlp_spans import (
    ERROR,
    ROOT_ID,
    attrs,
    llm_span,
    request,
    root,
    sid,
    span,
    store_spans,
)

pytestmark = pytest.mark.django_db


def end_order(spans: list) -> list:
    """Spans in the order an SDK exports them: as they end, the root last."""
    return sorted(spans, key=lambda s: (s.end_time_unix_nano, not s.parent_span_id))


def deliver(spans: list, sizes: list[int], *, checked: bool = False) -> list[str]:
    """Store ``spans`` in requests of ``sizes`` (in turn); ``checked``: after each request, the
    rows are what a replay of every span stored so far gives. Returns each request's path: how
    its fold went ("full": the trace replayed whole; "grown": its new spans expanded onto the
    stored trace, then folded onto the snapshot; the job's spans are never folded any other
    way) or "none" (nothing to fold)."""
    start, index, paths = 0, 0, []
    while start < len(spans):
        size = sizes[index % len(sizes)]
        before = (projections("full"), projections("incremental"))
        result = store_spans(*spans[start : start + size])
        full, incremental = projections("full") - before[0], projections("incremental") - before[1]
        # A request that re-homes a trace folds two jobs: "full" when either was replayed.
        paths.append("full" if full else "grown" if incremental else "none")
        start, index = start + size, index + 1
        if checked:
            for job_id in result.job_ids:
                assert parity.differences(job_id) == []
    return paths


def request_ends(spans: list, sizes: list[int]) -> list[int]:
    """Where each request of ``deliver(spans, sizes)`` ends in ``spans``."""
    ends, index = [], 0
    while not ends or ends[-1] < len(spans):
        ends.append(min((ends[-1] if ends else 0) + sizes[index % len(sizes)], len(spans)))
        index += 1
    return ends


def call_rows() -> list[tuple]:
    fields = [f.attname for f in Call._meta.concrete_fields if f.attname not in ("id", "job_id")]
    return sorted(Call.objects.values_list("job__job_id", *fields))


def rows() -> tuple:
    return (*projection_rows(), call_rows())


def agent_run(steps: int, *, calls_every: int = 1) -> list:
    """A run's spans: a root and ``steps`` steps one after another (agent / tools, as a
    LangGraph loop names them), each agent step with an LLM call inside."""
    spans, at = [], 0
    for index in range(steps):
        name = "agent" if index % 2 == 0 else "tools"
        spans.append(span(name=name, span_id=sid(100 + index), start_ms=at, end_ms=at + 40))
        if name == "agent" and index % calls_every == 0:
            spans.append(llm_span(sid(500 + index), sid(100 + index), "gpt-4o-mini", at + 5))
        at += 50
    return [root(end_ms=at + 10), *spans]


def test_a_trace_exported_as_it_runs_grows_without_replaying_the_whole_job():
    spans = end_order(agent_run(12))
    # Each export holds whole steps (an LLM call ends inside its step, so comes first).
    deliver(spans[:3], [3])
    first_calls = dict(Call.objects.values_list("span_id", "id"))
    for start in range(3, len(spans) - 1, 3):
        store_spans(*spans[start : start + 3])
    assert (projections("full"), projections("incremental")) == (1, 5)
    # The calls stored earlier are the same rows: growing a trace appends its new calls.
    assert {k: v for k, v in Call.objects.values_list("span_id", "id") if k in first_calls} == (
        first_calls
    )
    job = Job.objects.get()
    assert parity.differences(job.job_id) == []
    assert (job.input_tokens, job.output_tokens) == (6_000, 3_000)
    store_spans(spans[-1])  # the root: the job is now the run, replayed whole once
    assert (projections("full"), projections("incremental")) == (2, 5)
    job = Job.objects.get()
    assert [s.node_id for s in job.steps.order_by("position")][:4] == [
        "agent",
        "tools",
        "agent #2",
        "tools #2",
    ]
    assert (job.status, job.step_count, job.input_tokens) == ("completed", 12, 6_000)
    assert parity.differences(job.job_id) == []
    grown = rows()
    clear()
    store_spans(*spans)
    assert rows() == grown


@pytest.mark.speed_guard
def test_a_node_looping_for_long_reads_only_its_latest_iterations():
    spans = end_order(agent_run(40))
    deliver(spans[:-4], [3])
    before = projections("incremental")
    with CaptureQueriesContext(connection) as queries:
        store_spans(*spans[-4:-1])  # "tools #20" and the LLM call and step of "agent #20"
    assert projections("incremental") == before + 1
    # The stored steps of a base that ran 20 times are read by name, its latest iterations
    # only, not all of them by prefix.
    assert not [query["sql"] for query in queries if "LIKE" in query["sql"]]
    job = Job.objects.get()
    assert job.steps.order_by("-position").values_list("node_id", flat=True)[0] == "tools #20"
    assert parity.differences(job.job_id) == []


def test_a_step_arriving_after_its_call_replays_the_job():
    spans = end_order(agent_run(4))
    # The first export ends between an LLM call and its step: the call was a step of its own
    # until its parent came.
    store_spans(*spans[:2])
    store_spans(*spans[2:])
    assert (projections("full"), projections("incremental")) == (2, 0)
    assert parity.differences(Job.objects.get().job_id) == []


def test_a_step_after_its_call_adopts_it_when_the_sdk_says_it_is_coming():
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    spans = end_order(agent_run(4))
    for built in spans:
        built.flags = local
    store_spans(*spans[:2])  # the first LLM call and its agent step: a new job
    store_spans(spans[2])  # the tools step
    store_spans(spans[3])  # the next LLM call: the job's while its step runs
    assert Call.objects.get(span_id=spans[3].span_id.hex()).node_id == ""
    store_spans(spans[4])  # its step takes it
    assert Call.objects.get(span_id=spans[3].span_id.hex()).node_id == "agent #2"
    assert (projections("full"), projections("incremental")) == (1, 3)
    assert "ChatOpenAI" not in Job.objects.get().steps.values_list("node_id", flat=True)
    assert parity.differences(Job.objects.get().job_id) == []


def langgraph_node(name: str, span_id: bytes, start_ms: int, end_ms: int, **fields):
    """A LangGraph node's span as OpenInference exports it: a step, and a call (a chain)."""
    return span(
        name=name,
        span_id=span_id,
        start_ms=start_ms,
        end_ms=end_ms,
        attributes=attrs(**node_attributes(name)),
        flags=SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK,
        **fields,
    )


def test_a_langgraph_node_after_the_llm_call_inside_it_grows_the_trace():
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    spans = []
    for turn in range(3):
        at = 100 * turn
        node = langgraph_node("agent", sid(10 + turn), at, at + 60)
        call = llm_span(sid(20 + turn), sid(10 + turn), "gpt-4o-mini", at + 5)
        call.flags = local
        spans += [call, node]
    for built in spans:  # one span a request, as a SimpleSpanProcessor exports them
        store_spans(built)
    # The node's span is a call that starts before the LLM call stored before it: the LLM
    # call moves up one place, and nothing is replayed after the first step.
    assert (projections("full"), projections("incremental")) == (2, 4)
    job = Job.objects.get()
    assert list(Call.objects.order_by("position").values_list("position", "kind", "node_id")) == [
        (0, "chain", "agent"),
        (1, "llm", "agent"),
        (2, "chain", "agent #2"),
        (3, "llm", "agent #2"),
        (4, "chain", "agent #3"),
        (5, "llm", "agent #3"),
    ]
    assert job.input_tokens == 3_000
    assert parity.differences(job.job_id) == []
    store_spans(root(end_ms=300))
    job = Job.objects.get()
    assert (job.status, job.model, job.step_count) == ("completed", "gpt-4o-mini", 3)
    grown = rows()
    clear()
    store_spans(*spans, root(end_ms=300))
    assert rows() == grown


def test_parallel_calls_ending_out_of_order_keep_their_places_while_they_wait():
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    search = {"attributes": attrs(openinference__span__kind="RETRIEVER"), "flags": local}
    first = span(name="search", span_id=sid(2), parent=sid(1), start_ms=10, end_ms=60, **search)
    second = span(name="search", span_id=sid(3), parent=sid(1), start_ms=20, end_ms=40, **search)
    node = langgraph_node("retrieve", sid(1), 5, 70)
    # The second call ends first; the first, which started before it, comes a request later.
    for built in (langgraph_node("plan", sid(4), 0, 4), second, first, node):
        result = store_spans(built)
        assert parity.differences(result.job_ids[0]) == []
    assert (projections("full"), projections("incremental")) == (1, 3)
    assert list(Call.objects.order_by("position").values_list("span_id", "node_id")) == [
        (sid(4).hex(), "plan"),
        (sid(1).hex(), "retrieve"),
        (sid(2).hex(), "retrieve"),
        (sid(3).hex(), "retrieve"),
    ]


def test_a_node_starting_before_a_call_of_a_stored_step_replays_the_trace():
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    first = span(name="search", span_id=sid(1), start_ms=0, end_ms=100, flags=local)
    call = llm_span(sid(2), sid(1), "gpt-4o-mini", 50)
    call.flags = local
    store_spans(call, first)
    # A parallel branch's node, started while "search" ran, before its LLM call.
    store_spans(langgraph_node("summarize", sid(3), 40, 120))
    assert (projections("full"), projections("incremental")) == (2, 0)
    assert list(Call.objects.order_by("position").values_list("name", flat=True)) == [
        "summarize",
        "ChatOpenAI",
    ]
    assert parity.differences(Job.objects.get().job_id) == []


def test_a_retry_of_the_last_stored_failure_grows_the_trace_and_turns_it_retryable():
    spans = [
        span(name="prepare", span_id=sid(1), start_ms=0, end_ms=40),
        span(name="fetch", span_id=sid(2), start_ms=50, end_ms=90, status=ERROR),
        span(name="fetch", span_id=sid(3), start_ms=100, end_ms=150),
    ]
    store_spans(*spans[:2])  # the run's root has not come: "prepare" stands in for it
    job = Job.objects.get()
    assert job.steps.get(node_id="fetch").result_type == "permanent_failure"
    assert (job.has_failed, job.has_retryable) == (True, False)
    store_spans(spans[2])
    assert (projections("full"), projections("incremental")) == (1, 1)
    job = Job.objects.get()
    assert [(s.attempt, s.result_type) for s in job.steps.filter(node_id="fetch")] == [
        (1, "retryable_failure"),
        (2, "success"),
    ]
    assert (job.has_failed, job.has_retryable) == (False, True)
    assert parity.differences(job.job_id) == []


def test_a_retry_of_a_failure_that_is_not_the_last_event_replays_the_trace():
    spans = [
        span(name="prepare", span_id=sid(1), start_ms=0, end_ms=40),
        span(name="fetch", span_id=sid(2), start_ms=50, end_ms=90, status=ERROR),
        span(name="log", span_id=sid(3), parent=sid(2), start_ms=60, end_ms=95),
        span(name="fetch", span_id=sid(4), start_ms=100, end_ms=150),
    ]
    store_spans(*spans[:3])  # a step inside the failed one ended after it
    store_spans(spans[3])
    assert (projections("full"), projections("incremental")) == (2, 0)
    job = Job.objects.get()
    assert job.steps.get(node_id="fetch", attempt=1).result_type == "retryable_failure"
    assert parity.differences(job.job_id) == []


def test_retries_past_the_limit_escalate_as_a_replay_of_the_whole_trace_does():
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    attempts = [
        span(name="fetch", span_id=sid(10 + n), start_ms=100 * n, end_ms=100 * n + 50, flags=local)
        for n in range(8)
    ]
    for failed in attempts[:7]:
        failed.status.CopyFrom(ERROR)
    for attempt in attempts:  # each attempt in an export of its own, as it ends
        store_spans(attempt)
    job = Job.objects.get()
    assert (projections("full"), projections("incremental")) == (1, 7)
    assert list(job.escalations.values_list("kind", "node_id")) == [
        ("max_retries_exceeded", "fetch")
    ]
    assert (job.status, job.step_count, job.has_failed) == ("running", 8, False)
    assert parity.differences(job.job_id) == []
    grown = rows()
    clear()
    store_spans(*attempts)
    assert rows() == grown


def test_the_first_llm_call_names_the_jobs_model_by_a_full_replay():
    store_spans(
        span(name="prepare", span_id=sid(1), start_ms=0, end_ms=40),
        span(name="tools", span_id=sid(2), start_ms=50, end_ms=90),
    )
    assert Job.objects.get().model == ""
    store_spans(
        llm_span(sid(4), sid(3), "gpt-4.1", 105),
        span(name="agent", span_id=sid(3), start_ms=100, end_ms=140),
    )
    assert (projections("full"), projections("incremental")) == (2, 0)
    assert Job.objects.get().model == "gpt-4.1"
    assert parity.differences(Job.objects.get().job_id) == []


# --- any trace, any delivery ------------------------------------------------------------------


NODE = {"openinference__span__kind": "CHAIN"}


def node_attributes(name: str) -> dict:
    """What OpenInference sets on a LangGraph node's span (``attrs`` keys)."""
    return {**NODE, "metadata": f'{{"langgraph_node": "{name}"}}'}


@st.composite
def traces(draw) -> list:
    """A run's spans: steps one after another under the root (names repeat: iterations and
    retries), some failing, some with LLM calls or a nested step inside, some naming a
    session, planner or explicit attempt."""
    spans, at, ids = [], 0, iter(range(1, 10_000))
    # The SDK says the parents are in the same process (the root is coming), or says nothing.
    flags = draw(st.sampled_from([0, SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK]))
    for _ in range(draw(st.integers(1, 9))):
        step_id = sid(next(ids))
        length = draw(st.integers(20, 60))
        fields = {}
        if draw(st.booleans()):
            fields["status"] = ERROR
        extra = draw(
            st.sampled_from(
                [{}, {}, {"session__id": "s-1"}, {"traceviz__attempt": 2}, {"tool": "x"}, NODE]
            )
        )
        name = draw(st.sampled_from(["agent", "tools", "plan", "fetch"]))
        if extra is NODE:  # a LangGraph node's span, as OpenInference marks it: a call too
            extra = node_attributes(name)
        spans.append(
            span(
                name=name,
                span_id=step_id,
                start_ms=at,
                end_ms=at + length,
                attributes=attrs(**extra) if extra else None,
                flags=flags,
                **fields,
            )
        )
        inside = draw(st.sampled_from(["none", "llm", "llm", "step", "llm and step"]))
        if "llm" in inside:
            model = draw(st.sampled_from(["gpt-4o-mini", "gpt-4.1"]))
            call = llm_span(sid(next(ids)), step_id, model, at + 2)
            call.flags = flags
            spans.append(call)
        if "step" in inside:
            spans.append(
                span(
                    name="inner",
                    span_id=sid(next(ids)),
                    parent=step_id,
                    start_ms=at + 10,
                    end_ms=at + 15,
                    flags=flags,
                )
            )
        at += length + draw(st.integers(0, 10))
    spans.append(root(end_ms=at + 5))
    return spans


@HYPOTHESIS
@given(data=st.data(), spans=traces())
def test_grown_shuffled_and_rebuilt_traces_give_identical_rows(db, data, spans):
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    clear()
    deliver(end_order(spans), sizes, checked=True)
    grown = rows()
    assert failure_groups.differences() == []

    clear()
    deliver(data.draw(st.permutations(spans)), sizes)
    assert rows() == grown

    call_command("rebuild_projections", stdout=None, stderr=None)
    assert rows() == grown


@st.composite
def live_runs(draw) -> list:
    """A run in the shapes ``replay.growth`` takes without replaying it, as an SDK that flags
    its spans exports it while it runs: steps one after another under the root (names repeat:
    a loop's iterations, and a failed step retried by the next one), an LLM call of one model
    inside the first step and some later ones. (A step inside another ends before it, so the
    outer one in a later request is a parent stored spans wait for: a replay. Steps that touch
    put the next one's start before the last one's finish in event order: a replay too.)"""
    spans, at, ids = [], 0, iter(range(1, 10_000))
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    count = draw(st.integers(2, 10))
    for index in range(count):
        step_id, length = sid(next(ids)), draw(st.integers(20, 60))
        name = draw(st.sampled_from(["agent", "tools", "fetch"]))
        retried = index > 0 and index < count - 1 and draw(st.integers(0, 4)) == 0
        fields = {"status": ERROR} if retried else {}
        spans.append(
            span(name=name, span_id=step_id, start_ms=at, end_ms=at + length, flags=local, **fields)
        )
        if index == 0 or (not retried and draw(st.booleans())):
            call = llm_span(sid(next(ids)), step_id, "gpt-4o-mini", at + 2)
            call.flags = local
            spans.append(call)
        at += length + draw(st.integers(1, 10))
        if retried:  # the next step is its retry
            spans.append(
                span(name=name, span_id=sid(next(ids)), start_ms=at, end_ms=at + 30, flags=local)
            )
            at += 40
    return [*spans, root(end_ms=at + 5)]


@HYPOTHESIS
@given(data=st.data(), spans=live_runs())
def test_a_run_streamed_as_it_runs_is_grown_after_its_first_step_and_replays_the_same(
    db, data, spans
):
    """Growth is taken, not only exact: every request after the one that stores the run's
    first step is grown onto the stored trace (a trace replayed whole on each request would
    give the same rows, so parity alone cannot tell), until the root comes."""
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    clear()
    ordered = end_order(spans)
    paths = deliver(ordered[:-1], sizes, checked=True)
    # The request that stores the first step (its LLM call, which ends first, may come before).
    first = next(
        i for i, end in enumerate(request_ends(ordered, sizes)) if ordered.index(spans[0]) < end
    )
    assert paths[first + 1 :] == ["grown"] * (len(paths) - first - 1)
    deliver(ordered[-1:], [1], checked=True)
    grown = rows()
    clear()
    store_spans(*spans)
    assert rows() == grown


@HYPOTHESIS
@given(data=st.data(), live=st.booleans())
def test_spans_appended_and_folded_in_any_interleaving_have_the_rows_of_a_replay(db, data, live):
    """Requests answered at once or after their fold (``Prefer: respond-async``), with projector
    runs in between: a fold takes whatever requests came since the last one, grown onto the
    stored trace or replayed, and the rows end as a replay of the whole trace gives them. A
    run in the shapes growth takes is replayed by two folds at most before its root comes (one
    of its first LLM call alone, one of its first step), however its requests were folded."""
    spans = data.draw(live_runs() if live else traces())
    clear()
    ordered, start = end_order(spans), 0
    before = projections("full")
    while start < len(ordered) - 1:
        size = data.draw(st.integers(1, 4))
        sent = ordered[start : min(start + size, len(ordered) - 1)]
        batch = otlp.to_batch(request(*sent), max_events=10_000).batch
        store_batch(batch, project=data.draw(st.booleans()))
        start += len(sent)
        if data.draw(st.booleans()):
            projector.project_dirty()
    projector.project_dirty()
    if live:
        assert projections("full") - before <= 2
    store_batch(otlp.to_batch(request(ordered[-1]), max_events=10).batch, project=False)
    projector.project_dirty()
    assert not ProjectionMark.objects.dirty().exists()
    assert parity.differences(Job.objects.get().job_id) == []
    folded = rows()
    clear()
    store_spans(*spans)
    assert rows() == folded


@st.composite
def trees(draw) -> list:
    """A run's spans as a tree: each span's children inside its time, one after another or
    overlapping (parallel branches), each a plain step, a LangGraph node, an LLM call or a tool
    call, some failing, with names that repeat (iterations, retries)."""
    flags = draw(st.sampled_from([0, SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK]))
    ids, spans, budget = iter(range(1, 10_000)), [], [draw(st.integers(4, 16))]

    def children(parent: bytes, start: int, end: int, depth: int) -> None:
        at = start + 1
        for _ in range(draw(st.integers(2, 8) if depth == 0 else st.integers(0, 3))):
            if budget[0] == 0 or at + 8 >= end:
                return
            budget[0] -= 1
            span_id, name = sid(next(ids)), draw(st.sampled_from(["agent", "tools", "fetch"]))
            kind = draw(st.sampled_from(["step", "step", "node", "llm", "tool"]))
            length = 5 if kind == "llm" else draw(st.integers(6, min(60, end - at - 1)))
            fields = {"status": ERROR} if draw(st.integers(0, 3)) == 0 else {}
            if kind == "llm":
                built = llm_span(span_id, parent, "gpt-4o-mini", at)
                built.status.CopyFrom(fields.get("status", built.status))
            else:
                extra = {
                    "step": {},
                    "node": node_attributes(name),
                    "tool": {"openinference__span__kind": "TOOL"},
                }[kind]
                built = span(
                    name=name,
                    span_id=span_id,
                    parent=parent,
                    start_ms=at,
                    end_ms=at + length,
                    attributes=attrs(**extra) if extra else None,
                    **fields,
                )
            built.flags = flags
            spans.append(built)
            if kind in ("step", "node") and depth < 3:
                children(span_id, at, at + length, depth + 1)
            parallel = draw(st.sampled_from([False, False, True]))
            at += draw(st.integers(1, length)) if parallel else length + draw(st.integers(0, 5))

    children(ROOT_ID, 0, 1_000, 0)
    return [*spans, root(end_ms=1_000)]


@HYPOTHESIS
@given(data=st.data(), spans=trees())
def test_any_tree_streamed_as_it_ends_has_the_rows_of_its_replay_after_every_request(
    db, data, spans
):
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=4))
    clear()
    deliver(end_order(spans), sizes, checked=True)
    grown = rows()
    clear()
    store_spans(*spans)
    assert rows() == grown


def test_a_failure_its_step_already_gives_is_no_job_failure_when_the_fold_loads_other_steps():
    """Found by the property above: a fold that loads only some of a job's steps still knows
    the reasons of the others' failures, so it records no job-level failure that a full replay
    would not (each request's rows are checked against a replay)."""
    call = llm_span(sid(3), sid(2), "gpt-4o-mini", 3)
    call.status.CopyFrom(ERROR)
    deliver(
        [
            call,
            span(name="agent", span_id=sid(5), parent=sid(4), start_ms=9, end_ms=15, status=ERROR),
            span(name="agent", span_id=sid(4), parent=sid(2), start_ms=8, end_ms=18),
            span(name="agent", span_id=sid(6), parent=sid(2), start_ms=19, end_ms=25),
        ],
        [1],
        checked=True,
    )
