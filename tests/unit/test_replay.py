"""Replay rules: the step-result contract and docs/contract.md, each with a minimal stream (the
event order replay folds in: test_replay_order.py)."""

import pytest

from jobs.replay.walk import build
from tests.factories import event, finished, parsed, started


def replay(*items):
    return build(parsed(list(items)))


def steps(state) -> list[tuple]:
    return [(s.node_id, s.attempt, s.result_type, s.segment) for s in state.steps]


def cancel(at: float, epoch: int | None = None, **payload):
    if epoch is not None:
        payload["epoch"] = epoch
    return event("cancel_requested", at=at, reason="operator", **payload)


def job_finished(status: str, at: float = 9):
    return event("job_finished", at=at, status=status)


# --- completion (the step-result contract) ------------------------------------------------------


def test_missing_result_type_counts_as_success():
    state = replay(finished("n1", None, payload_results={"a": 1}))
    assert state.completed_node_ids == ["n1"]
    assert steps(state) == [("n1", 1, "success", "ok")]
    assert state.payload_results == {"a": 1}


@pytest.mark.parametrize(
    "result_type", ["retryable_failure", "permanent_failure", "compensatable_failure"]
)
def test_only_success_completes_a_node(result_type):
    state = replay(finished("n1", result_type, payload_results={"partial": True}))
    assert state.completed_node_ids == []
    assert state.cursor_node == ""
    assert state.payload_results == {}


def test_completed_node_ids_are_in_completion_order():
    state = replay(finished("n2", at=1), finished("n3", at=3), finished("n1", at=2))
    assert state.completed_node_ids == ["n2", "n1", "n3"]


def test_node_that_succeeds_twice_is_completed_once():
    state = replay(finished("n1", at=1), finished("n2", at=2), finished("n1", at=3, attempt=2))
    assert state.completed_node_ids == ["n1", "n2"]


def test_payload_results_shallow_merge_with_the_later_key_winning():
    state = replay(
        finished("n1", at=1, payload_results={"a": 1, "b": {"x": 1}}),
        finished("n2", at=2, payload_results={"b": {"y": 2}, "c": 3}),
    )
    assert state.payload_results == {"a": 1, "b": {"y": 2}, "c": 3}


def test_cursor_node_is_the_last_completed_node():
    state = replay(
        finished("n1", at=1), finished("n2", at=2), finished("n3", "retryable_failure", at=3)
    )
    assert state.cursor_node == "n2"


def test_cursor_node_moves_back_to_a_node_completed_again():
    state = replay(finished("n1", at=1), finished("n2", at=2), finished("n1", at=3, attempt=2))
    assert (state.cursor_node, state.completed_node_ids) == ("n1", ["n1", "n2"])


def test_retryable_failure_then_success_completes_the_node():
    state = replay(
        started("n1", at=0),
        finished("n1", "retryable_failure", at=1, error_type="network"),
        started("n1", at=2, attempt=2),
        finished("n1", at=3, attempt=2),
    )
    assert state.completed_node_ids == ["n1"]
    assert steps(state) == [("n1", 1, "retryable_failure", "retryable"), ("n1", 2, "success", "ok")]
    assert state.failing_node_ids == []
    assert state.status == "running"


def test_started_attempt_without_finish_is_running():
    state = replay(started("n1", at=0))
    assert steps(state) == [("n1", 1, None, "running")]
    assert state.status == "running"


def test_compensatable_failure_never_completes_even_after_compensation():
    state = replay(
        finished("n1", "compensatable_failure", at=1, reason="partial"),
        event("compensation_finished", at=2, node_id="n1", result_type="success", reason="undone"),
    )
    (step,) = state.steps
    assert state.completed_node_ids == []
    assert (step.compensated, step.compensation_reason, step.segment) == (True, "undone", "failed")


def test_compensated_node_stays_failing_and_the_job_failed():
    state = replay(
        finished("n1", "compensatable_failure", at=1),
        event("compensation_finished", at=2, node_id="n1", result_type="success"),
    )
    assert state.failing_node_ids == ["n1"]
    assert state.status == "failed"


def test_failed_compensation_does_not_mark_compensated():
    state = replay(
        finished("n1", "compensatable_failure", at=1),
        event("compensation_finished", at=2, node_id="n1", result_type="permanent_failure"),
    )
    assert state.steps[0].compensated is False


# --- cancellation fence (the failure-code contract) ----------------------------------------------


@pytest.mark.parametrize(
    ("cancel_epoch", "finish_epoch"),
    [(2, 1), (2, None), (None, 5), (None, None)],
    ids=["lower-epoch", "finish-without-epoch", "cancel-without-epoch", "neither-has-epoch"],
)
def test_result_after_cancel_is_ignored_stale(cancel_epoch, finish_epoch):
    extra = {} if finish_epoch is None else {"epoch": finish_epoch}
    state = replay(
        finished("n1", at=1, payload_results={"a": 1}),
        cancel(at=2, epoch=cancel_epoch),
        finished("n2", at=3, payload_results={"b": 2}, **extra),
    )
    n2 = state.step("n2", 1)
    assert (n2.ignored_stale, n2.segment) == (True, "ok")
    assert state.completed_node_ids == ["n1"]
    assert state.payload_results == {"a": 1}
    assert state.cursor_node == "n1"


@pytest.mark.parametrize(
    ("result_type", "segment"),
    [("retryable_failure", "retryable"), ("permanent_failure", "failed")],
)
def test_stale_failure_keeps_its_segment_and_has_no_effect(result_type, segment):
    state = replay(
        cancel(at=1, epoch=2), finished("n1", result_type, at=2, epoch=1, error_type="auth")
    )
    step = state.step("n1", 1)
    assert (step.ignored_stale, step.segment) == (True, segment)
    assert state.failing_node_ids == []
    assert state.status == "cancelling"
    assert state.escalation_triggers == []


def test_result_with_the_cancels_epoch_or_higher_is_not_stale():
    state = replay(
        cancel(at=1, epoch=2), finished("n1", at=2, epoch=2), finished("n2", at=3, epoch=3)
    )
    assert [s.ignored_stale for s in state.steps] == [False, False]
    assert state.completed_node_ids == ["n1", "n2"]


def test_result_before_the_cancel_in_event_order_is_not_stale():
    state = replay(finished("n1", at=1), cancel(at=2, epoch=5))
    assert state.step("n1", 1).ignored_stale is False
    assert state.completed_node_ids == ["n1"]


def test_highest_cancel_epoch_fences():
    state = replay(cancel(at=1, epoch=3), cancel(at=2, epoch=1), finished("n1", at=3, epoch=2))
    assert state.step("n1", 1).ignored_stale is True


def test_step_epoch_is_kept_but_not_compared():
    state = replay(cancel(at=1, epoch=2), finished("n1", at=2, epoch=2, step_epoch=0))
    step = state.step("n1", 1)
    assert (step.ignored_stale, step.step_epoch) == (False, 0)


def test_cancel_without_job_finished_is_cancelling():
    state = replay(finished("n1", at=1), cancel(at=2))
    assert state.status == "cancelling"
    assert state.cancel_reason == "operator"


def test_cancel_then_job_finished_cancelled_is_cancelled():
    state = replay(cancel(at=2), job_finished("cancelled", at=3))
    assert state.status == "cancelled"


# --- run status, rules 1-5 in priority order ------------------------------------------------


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_rule1_job_finished_sets_the_status(status):
    state = replay(
        finished("n1", "permanent_failure", at=1, error_type="auth"), job_finished(status)
    )
    assert state.status == status


def test_rule1_job_finished_wins_over_cancel():
    assert replay(cancel(at=1), job_finished("failed", at=2)).status == "failed"


def test_rule1_cancelling_wins_over_a_failing_node():
    state = replay(finished("n1", "permanent_failure", at=1, error_type="auth"), cancel(at=2))
    assert state.status == "cancelling"


def test_rule2_indeterminate_latest_failing_node_is_paused_reconciliation():
    state = replay(
        finished("n1", "permanent_failure", at=1, state="indeterminate", error_type="auth")
    )
    assert state.status == "paused:reconciliation"


def test_rule2_applies_only_to_the_latest_failing_node():
    state = replay(
        finished("n1", "permanent_failure", at=1, state="indeterminate"),
        finished("n2", "retryable_failure", at=2, error_type="network"),
    )
    assert state.status == "paused:transient"


@pytest.mark.parametrize(
    ("error_type", "status"),
    [
        ("auth", "paused:approval"),
        ("permission", "paused:approval"),
        ("network", "paused:transient"),
        ("TransientError", "paused:transient"),
        ("logic", "failed:logic"),
        ("ValidationError", "failed:logic"),
        ("internal", "failed:internal"),
        ("PermanentError", "failed"),
        ("BoundaryViolation", "failed"),
        ("SomethingElse", "failed:internal"),
    ],
)
def test_rule3_latest_failing_nodes_error_type_decides_the_status(error_type, status):
    state = replay(finished("n1", "retryable_failure", at=1, error_type=error_type))
    assert state.status == status


def test_rule3_uses_the_latest_failing_node_in_event_order():
    auth_last = replay(
        finished("n1", "retryable_failure", at=1, error_type="network"),
        finished("n2", "permanent_failure", at=2, error_type="auth"),
    )
    network_last = replay(
        finished("n2", "permanent_failure", at=1, error_type="auth"),
        finished("n1", "retryable_failure", at=2, error_type="network"),
    )
    assert (auth_last.status, network_last.status) == ("paused:approval", "paused:transient")


def test_rule3_error_type_wins_over_degraded_planner():
    state = replay(
        event("graph.next_step.degraded", at=1, attempts=2),
        finished("n1", "retryable_failure", at=2, error_type="auth"),
    )
    assert state.status == "paused:approval"


def test_rule3_failing_node_without_error_type_falls_through_to_degraded():
    state = replay(
        finished("n1", "retryable_failure", at=1),
        event("graph.next_step.degraded", at=2, attempts=2),
    )
    assert state.status == "failed"


def test_rule3_latest_failing_node_without_error_type_falls_through_to_rule5():
    state = replay(
        finished("n1", "permanent_failure", at=1, error_type="network"),
        finished("n2", "retryable_failure", at=2),
    )
    assert state.status == "failed"


def test_rule4_degraded_planner_fails_with_last_validation_error():
    state = replay(
        event("job_started", at=0, provider="anthropic", model="claude-x"),
        event(
            "graph.next_step.parse_invalid", at=1, attempt=1, provider="anthropic", model="claude-x"
        ),
        event(
            "graph.next_step.degraded",
            at=2,
            attempts=2,
            provider="anthropic",
            model="claude-x",
            reason="next_step_parse_failed",
            status="failed",
        ),
    )
    assert state.status == "failed"
    assert state.last_validation_error == {
        "reason": "next_step_parse_failed",
        "attempts": 2,
        "schema": "NextStepProposal",
        "provider": "anthropic",
        "model": "claude-x",
    }


def test_rule4_degraded_without_attempts_counts_parse_invalid_events():
    state = replay(
        event("graph.next_step.parse_invalid", at=1, attempt=1),
        event("graph.next_step.parse_invalid", at=2, attempt=2),
        event("graph.next_step.parse_invalid", at=3, attempt=3),
        event("graph.next_step.degraded", at=4),
    )
    assert state.last_validation_error["attempts"] == 3
    assert state.last_validation_error["reason"] == "next_step_parse_failed"


@pytest.mark.parametrize("result_type", ["permanent_failure", "compensatable_failure"])
def test_rule5_terminal_failure_without_error_type_is_failed(result_type):
    assert replay(finished("n1", result_type)).status == "failed"


def test_rule5_terminal_failure_anywhere_wins_over_a_later_retryable_one():
    state = replay(
        finished("n1", "permanent_failure", at=1), finished("n2", "retryable_failure", at=2)
    )
    assert state.status == "failed"


def test_rule5_retryable_failure_without_error_type_is_paused_transient():
    assert replay(finished("n1", "retryable_failure")).status == "paused:transient"


def test_rule5_no_failing_node_is_running():
    assert replay(started("n1", at=0), finished("n1", at=1)).status == "running"


def test_job_is_never_completed_without_job_finished():
    state = replay(
        event("job_started", at=0),
        finished("n1", at=1),
        finished("n2", at=2),
        event("state_checkpointed", at=3, node_id="n2", state="done"),
    )
    assert state.status == "running"
    assert state.completed_node_ids == ["n1", "n2"]


def test_continue_on_error_failure_shows_failed_but_makes_no_node_failing():
    state = replay(
        finished("n1", "permanent_failure", at=1, continue_on_error=True, error_type="auth"),
        finished("n2", at=2),
    )
    assert state.step("n1", 1).segment == "failed"
    assert state.failing_node_ids == []
    assert state.status == "running"
    assert state.escalation_triggers == []


def test_continue_on_error_failure_clears_an_earlier_failure_of_the_node():
    state = replay(
        finished("n1", "retryable_failure", at=1),
        finished("n1", "retryable_failure", at=2, attempt=2, continue_on_error=True),
    )
    assert (state.failing_node_ids, state.status) == ([], "running")


def test_failing_nodes_exclude_nodes_that_recovered():
    state = replay(
        finished("n1", "retryable_failure", at=1, failure_code="adapter_timeout"),
        finished("n1", at=2, attempt=2),
        finished("n2", "permanent_failure", at=3, reason="404"),
    )
    assert state.failing_node_ids == ["n2"]
    assert (state.root_failure.node_id, state.root_failure.reason) == ("n2", "404")


def test_recovered_job_has_no_root_failure():
    state = replay(finished("n1", "retryable_failure", at=1), finished("n1", at=2, attempt=2))
    assert state.root_failure is None


def test_state_checkpointed_sets_the_state_of_a_running_attempt():
    state = replay(
        started("n1", at=0), event("state_checkpointed", at=1, node_id="n1", state="indeterminate")
    )
    assert state.step("n1", 1).state == "indeterminate"


def test_job_started_sets_attributes_and_metadata():
    state = replay(
        event(
            "job_started",
            at=0,
            name="release",
            workflow="wf",
            provider="openai",
            model="gpt",
            plan_hash="p1",
            retry_of="j0",
            metadata={"team": "x"},
        )
    )
    assert state.attributes == {
        "name": "release",
        "workflow": "wf",
        "provider": "openai",
        "model": "gpt",
        "plan_hash": "p1",
        "retry_of": "j0",
    }
    assert state.metadata == {"team": "x"}


def test_unknown_event_types_are_counted_and_change_nothing():
    state = replay(finished("n1", at=1), event("custom.thing", at=2, anything=1))
    assert (state.event_count, state.status, state.completed_node_ids) == (2, "running", ["n1"])


def test_unknown_payload_keys_of_a_finish_are_kept_on_the_step():
    state = replay(finished("n1", at=1, vendor={"k": 1}))
    assert state.step("n1", 1).extra == {"vendor": {"k": 1}}


def test_replay_of_no_events_is_an_error():
    with pytest.raises(ValueError, match="at least one event"):
        build([])


# --- issue 12's rulings (docs/contract.md) --------------------------------------------


def test_stale_result_never_overwrites_an_attempt_that_finished():
    state = replay(
        finished("n1", at=1, payload_results={"a": 1}, event_id="ok"),
        cancel(at=2, epoch=2),
        finished("n1", "permanent_failure", at=3, epoch=1, reason="late", event_id="late"),
    )
    step = state.step("n1", 1)
    assert (step.result_type, step.ignored_stale, step.finished_event_id) == (
        "success",
        False,
        "ok",
    )
    assert step.payload_results == {"a": 1}
    assert [(h["event_id"], h["why"], h["result_type"]) for h in step.history] == [
        ("late", "stale", "permanent_failure")
    ]
    assert state.completed_node_ids == ["n1"]


def test_stale_attempt_is_never_the_root_failure():
    state = replay(
        finished("n1", "permanent_failure", at=1, reason="the real one", failure_code="x"),
        cancel(at=2, epoch=2),
        finished("n1", "permanent_failure", at=3, attempt=2, epoch=1, reason="stale one"),
    )
    root = state.root_failure
    assert (root.attempt, root.reason, root.failure_code) == (1, "the real one", "x")
    assert state.failed_at == state.step("n1", 1).finished_at


def test_started_retry_is_running_not_paused():
    state = replay(
        finished("n1", "retryable_failure", at=1, error_type="network"),
        started("n1", at=2, attempt=2),
    )
    assert state.status == "running"
    assert state.failing_node_ids == []
    assert state.root_failure is None


def test_retry_that_fails_again_makes_the_node_failing_again():
    state = replay(
        finished("n1", "retryable_failure", at=1, error_type="network"),
        started("n1", at=2, attempt=2),
        finished("n1", "retryable_failure", at=3, attempt=2, error_type="network"),
    )
    assert state.status == "paused:transient"
    assert (state.failing_node_ids, state.root_failure.attempt) == (["n1"], 2)


def test_compensation_marks_the_attempt_it_names():
    state = replay(
        finished("n1", "compensatable_failure", at=1),
        finished("n1", "compensatable_failure", at=2, attempt=2),
        event("compensation_finished", at=3, node_id="n1", attempt=1, result_type="success"),
    )
    assert [(s.attempt, s.compensated) for s in state.steps] == [(1, True), (2, False)]


def test_compensation_never_marks_a_stale_attempt():
    state = replay(
        finished("n1", "compensatable_failure", at=1),
        cancel(at=2, epoch=2),
        finished("n1", "compensatable_failure", at=3, attempt=2, epoch=1),
        event("compensation_finished", at=4, node_id="n1", result_type="success"),
    )
    assert [(s.attempt, s.ignored_stale, s.compensated) for s in state.steps] == [
        (1, False, True),
        (2, True, False),
    ]


def test_finish_without_state_keeps_a_checkpointed_indeterminate():
    state = replay(
        started("n1", at=0),
        event("state_checkpointed", at=1, node_id="n1", state="indeterminate"),
        finished("n1", "permanent_failure", at=2, reason="timeout mid-write"),
    )
    assert state.step("n1", 1).state == "indeterminate"
    assert state.status == "paused:reconciliation"


def test_finish_that_leaves_fields_out_keeps_the_attempts_earlier_values():
    state = replay(
        started("n1", at=0, step_index=4, trace_span_id="s1"),
        finished("n1", "retryable_failure", at=1, tool="crm", duration_ms=12, reason="503"),
        finished("n1", at=2),
    )
    step = state.step("n1", 1)
    assert (step.step_index, step.trace_span_id, step.tool, step.duration_ms) == (
        4,
        "s1",
        "crm",
        12,
    )
    # A new finish replaces the attempt's result as a whole: the old reason is history.
    assert (step.result_type, step.reason) == ("success", "")
    assert [(h["why"], h["reason"]) for h in step.history] == [("replaced", "503")]


def test_recovery_is_decided_by_replay_whatever_the_batching():
    state = replay(
        finished("n1", "retryable_failure", at=1, error_type="auth", event_id="f1"),
        finished("n1", at=2, attempt=2),
        job_finished("completed", at=3) | {"event_id": "done"},
    )
    assert [(r.event_id, r.escalations) for r in state.recoveries] == [
        ("done", frozenset({("user_action", "n1")}))
    ]


def test_completed_job_without_escalations_records_no_recovery():
    assert replay(finished("n1", at=1), job_finished("completed", at=2)).recoveries == []
