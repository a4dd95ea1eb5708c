"""replay.growth: when new spans can be expanded without the stored trace, and when not."""

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags

from jobs.contract import otlp
from jobs.replay import growth, spans, walk
from tests.otlp_spans import ERROR, TRACE_ID, attrs, llm_span, request, root, sid, span
from tests.unit.test_fold_resume import comparable, stored, through_json


def span_events(*built):
    batch = otlp.to_batch(request(*built), max_events=1000).batch
    return [event for _index, event in batch.events if event.type == "span"]


def summary_of(*built) -> growth.TraceSummary:
    return growth.summarize(spans.expand("j1", span_events(*built)))


def snapshot_of(*built) -> dict:
    return walk.Fold.of(span_events(*built)).snapshot()


def grows(stored: tuple, *new) -> bool:
    """Whether ``new`` spans grow a trace of the ``stored`` ones (given every stored span and
    no stored step of their names, as when each step has a name of its own)."""
    growing = growth.Growth.start("j1", snapshot_of(*stored), span_events(*new))
    if growing is None:
        return False
    read = {v.span_id: v for v in map(spans.read_span, span_events(*stored))}
    if not growing.place(
        {span_id: read[span_id] for span_id in growing.wanted() if span_id in read}
    ):
        return False
    return growing.bases() is not None and growing.extend([], {}) is not None


def in_another_trace(built):
    built.trace_id = b"\x01" * 16
    return built


STORED = (
    span(name="prepare", span_id=sid(1), start_ms=0, end_ms=40),
    span(name="fetch", span_id=sid(2), start_ms=50, end_ms=90),
)


def test_a_streamed_trace_is_regular_and_waits_for_its_root():
    summary = summary_of(*STORED)
    assert summary.regular and summary.waiting == {}
    assert summary.pending == [root().span_id.hex()]
    assert (summary.last_step[1], summary.last_call) == (sid(2).hex(), None)
    assert (summary.calls, summary.provider_from) == (0, "")


def test_a_later_step_under_the_same_parent_can_grow_the_trace():
    later = span(name="store", span_id=sid(3), start_ms=100, end_ms=140)
    assert grows(STORED, later)
    growing = growth.Growth.start("j1", snapshot_of(*STORED), span_events(later))
    assert growing.wanted() == sorted({root().span_id.hex(), sid(1).hex()})


@pytest.mark.parametrize(
    "new",
    [
        pytest.param(root(end_ms=200), id="the root arrives"),
        pytest.param(span(name="early", span_id=sid(3), start_ms=20, end_ms=95), id="starts early"),
        pytest.param(
            in_another_trace(span(name="late", span_id=sid(3), start_ms=100)),
            id="another trace of the job",
        ),
    ],
)
def test_new_spans_that_change_the_stored_story_replay_the_trace(new):
    assert not grows(STORED, new)


def test_a_trace_waiting_for_its_root_grows_by_spans_under_the_same_process():
    local = {"flags": SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK}
    stored = summary_of(span(name="plan", span_id=sid(1), end_ms=40, **local))
    assert stored.root is None and stored.regular
    plan = span(name="plan", span_id=sid(1), end_ms=40, **local)
    assert grows((plan,), span(name="act", span_id=sid(2), start_ms=50, end_ms=60, **local))
    # A span that does not say where its parent is may be the trace's local root.
    assert not grows((plan,), span(name="act", span_id=sid(2), start_ms=50, end_ms=60))


def test_a_step_after_its_waiting_call_adopts_it():
    local = {"flags": SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK}
    first = span(name="plan", span_id=sid(1), end_ms=40, **local)
    call = llm_span(sid(3), sid(2), "gpt-4.1", 55)
    call.flags = local["flags"]
    summary = summary_of(first, call)
    # The call's step is still running: the call is the job's until it comes.
    assert summary.waiting == {sid(2).hex(): [[sid(3).hex(), 0]]}
    assert (summary.last_call[1], summary.settled_call) == (sid(3).hex(), None)
    expanded = spans.expand("j1", span_events(first, call)).spans
    assert [s.node_id for s in expanded if s.is_step] == ["plan"]
    step = span(name="act", span_id=sid(2), start_ms=50, end_ms=70, **local)
    assert grows((first, call), step)


def test_a_parent_the_stored_spans_wait_for_replays_the_trace():
    child = span(name="inner", span_id=sid(3), parent=sid(4), start_ms=60, end_ms=70)
    assert sid(4).hex() in summary_of(*STORED, child).pending
    parent = span(name="outer", span_id=sid(4), start_ms=100, end_ms=150)
    assert growth.Growth.start("j1", snapshot_of(*STORED, child), span_events(parent)) is None


def test_spans_sent_to_the_event_api_are_never_grown():
    [event] = span_events(STORED[0])
    renamed = type(event)(event.type, event.job_id, "my-own-id", event.ts, None, event.payload)
    expansion = spans.expand("j1", [renamed])
    assert not growth.summarize(expansion).regular


def test_a_celery_publish_root_is_never_grown():
    publish = root(kind=4, attributes=attrs(celery__action="apply_async"))  # PRODUCER
    run = span(name="run", span_id=sid(1), start_ms=10, kind=5, status=ERROR)
    assert not summary_of(publish, run).regular


def test_iterations_are_read_back_from_node_names():
    assert growth.iteration_of("agent", "agent") == 1
    assert growth.iteration_of("agent #12", "agent") == 12
    assert growth.iteration_of("agent #1", "agent") is None
    assert growth.iteration_of("agent #x", "agent") is None
    assert growth.iteration_of("agent #²", "agent") is None
    assert growth.iteration_of("agents", "agent") is None


def test_trace_ids_of_the_fixtures_are_one_trace():
    assert summary_of(*STORED).trace_id == TRACE_ID.hex()


def test_a_retry_of_the_jobs_last_failure_reopens_it_as_the_whole_trace_has_it():
    local = {"flags": SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK}
    attempts = [
        span(name="fetch", span_id=sid(n + 1), start_ms=100 * n, end_ms=100 * n + 50, **local)
        for n in range(7)
    ]
    for failed in attempts[:6]:
        failed.status.CopyFrom(ERROR)
    first = walk.Fold.of(span_events(*attempts[:6]))
    first_state = first.finish()
    snapshot = through_json(first.snapshot())
    # Attempt 6 failed for good so far (and within the retry limit of 5 it is not).
    assert (first_state.status, first_state.escalation_triggers) == ("failed", [])
    assert snapshot["reopenable"][:2] == ["fetch", 6]
    job_id = first_state.job_id

    growing = growth.Growth.start(job_id, snapshot, span_events(attempts[6]))
    assert growing.place({}) and growing.bases() == {"fetch"}
    stored_steps = [
        growth.StoredStep(s.node_id, s.attempt, s.trace_span_id, s.started_at)
        for s in first_state.steps
    ]
    siblings = {v.span_id: v for v in map(spans.read_span, span_events(*attempts[:6]))}
    grown = growing.extend(stored_steps, siblings)
    assert grown.reopens
    fold = walk.Fold.resume(
        job_id,
        snapshot,
        steps=[stored(s) for s in first_state.steps],
        nodes={"fetch"},
        payload_results={},
        metadata={},
        strip=through_json(first_state.strip),
    )
    fold.take_growth(grown)
    for event in walk.sort_events(grown.events):
        fold.apply(event)
    state = fold.finish()

    whole = walk.Fold.of(span_events(*attempts))
    expected = whole.finish()
    assert through_json(fold.snapshot()) == through_json(whole.snapshot())
    assert comparable(state) == comparable(expected)
    assert [(s.attempt, s.result_type) for s in state.changed_steps] == [
        (6, "retryable_failure"),
        (7, "success"),
    ]
    # Past the retry limit: the whole trace escalates at attempt 6's finish, and so does this.
    assert [t.kind for t in state.escalation_triggers] == ["max_retries_exceeded"]
    assert state.escalation_triggers == expected.escalation_triggers


def test_a_retry_of_an_earlier_failure_is_not_grown():
    prepare = span(name="prepare", span_id=sid(1), start_ms=0, end_ms=40)
    failed = span(name="fetch", span_id=sid(2), start_ms=50, end_ms=90, status=ERROR)
    later = span(name="store", span_id=sid(3), start_ms=95, end_ms=99)
    retry = span(name="fetch", span_id=sid(4), start_ms=100, end_ms=150)
    assert walk.Fold.of(span_events(prepare, failed)).snapshot()["reopenable"] is not None
    snapshot = walk.Fold.of(span_events(prepare, failed, later)).snapshot()
    assert snapshot["reopenable"] is None
    growing = growth.Growth.start("j1", snapshot, span_events(retry))
    read = {v.span_id: v for v in map(spans.read_span, span_events(prepare, failed))}
    assert growing.place({sid(1).hex(): read[sid(1).hex()]})
    stored_steps = [growth.StoredStep("fetch", 1, sid(2).hex(), read[sid(2).hex()].start)]
    assert growing.extend(stored_steps, read) is None
