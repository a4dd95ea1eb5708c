"""The event order replay folds a job's events in (docs/contract.md): by ts, then seq, type
rank, attempt and event_id, whatever order they arrived in."""

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.replay.walk import build
from tests.factories import finished, parsed, started
from tests.strategies import job_events
from tests.unit.test_replay import job_finished, replay


def test_events_are_replayed_by_ts_not_arrival():
    state = replay(finished("n1", at=5), finished("n2", at=1))
    assert state.completed_node_ids == ["n2", "n1"]


def test_equal_ts_is_ordered_by_seq_missing_counting_as_zero():
    state = replay(
        finished("n1", at=1, seq=2) | {"seq": 2},
        finished("n2", at=1) | {"seq": 1},
        finished("n3", at=1),
    )
    assert state.completed_node_ids == ["n3", "n2", "n1"]


def test_equal_ts_and_seq_is_ordered_by_type_rank():
    state = replay(job_finished("completed", at=1), finished("n1", at=1), started("n1", at=1))
    assert state.findings == []  # the finish came after the node, not before
    assert state.steps[0].started_at is not None
    assert state.status == "completed"


def test_equal_ts_seq_and_type_is_ordered_by_attempt():
    state = replay(
        finished("n1", at=1, attempt=2), finished("n1", "retryable_failure", at=1, attempt=1)
    )
    assert (state.status, state.completed_node_ids) == ("running", ["n1"])


def test_equal_ts_seq_type_and_attempt_is_ordered_by_event_id():
    a_fails = replay(
        finished("n1", at=1) | {"event_id": "b"},
        finished("n1", "retryable_failure", at=1) | {"event_id": "a"},
    )
    b_fails = replay(
        finished("n1", at=1) | {"event_id": "a"},
        finished("n1", "retryable_failure", at=1) | {"event_id": "b"},
    )
    assert (a_fails.step("n1", 1).result_type, b_fails.step("n1", 1).result_type) == (
        "success",
        "retryable_failure",
    )


def test_steps_are_listed_in_event_order():
    state = replay(finished("b", at=3), started("a", at=1), finished("a", at=2))
    assert [s.node_id for s in state.steps] == ["a", "b"]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), items=job_events())
def test_any_permutation_of_a_jobs_events_gives_the_same_state(data, items):
    shuffled = data.draw(st.permutations(items))
    assert build(parsed(shuffled)) == build(parsed(items))
