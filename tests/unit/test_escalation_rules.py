"""Escalation triggers at the replay level (docs/contract.md): kind, attached node, severity
and the event after which the rule started to hold."""

import json

import pytest

from jobs.replay import strip
from jobs.replay.state import ReplayConfig
from jobs.replay.walk import Fold, build
from tests.factories import event, finished, parsed, started

DEFAULT_CONFIG = ReplayConfig()


def triggers(*items, config: ReplayConfig = DEFAULT_CONFIG) -> list[tuple]:
    with_ids = [item | {"event_id": item.get("event_id", f"e{i}")} for i, item in enumerate(items)]
    state = build(parsed(with_ids), config)
    return [(t.kind, t.node_id, t.severity, t.event_id) for t in state.escalation_triggers]


@pytest.mark.parametrize("error_type", ["auth", "permission"])
def test_paused_approval_triggers_user_action_on_the_failing_node(error_type):
    assert triggers(
        finished("n1", at=1), finished("n2", "permanent_failure", at=2, error_type=error_type)
    ) == [("user_action", "n2", "medium", "e1")]


@pytest.mark.parametrize("error_type", ["internal", "NotAClassifiedType"])
def test_failed_internal_triggers_internal(error_type):
    assert triggers(finished("n1", "permanent_failure", error_type=error_type)) == [
        ("internal", "n1", "high", "e0")
    ]


def test_paused_reconciliation_triggers_reconciliation():
    assert triggers(finished("n1", "permanent_failure", state="indeterminate")) == [
        ("reconciliation", "n1", "high", "e0")
    ]


@pytest.mark.parametrize("error_type", ["network", "logic", "PermanentError", None])
def test_other_statuses_trigger_no_status_escalation(error_type):
    extra = {"error_type": error_type} if error_type else {}
    assert triggers(finished("n1", "permanent_failure", **extra)) == []


def test_status_escalation_attaches_to_the_latest_failing_node():
    assert triggers(
        finished("n1", "permanent_failure", at=1),
        finished("n2", "retryable_failure", at=2, error_type="auth"),
    ) == [("user_action", "n2", "medium", "e1")]


def retries(count: int, node: str = "n1") -> list[dict]:
    return [finished(node, "retryable_failure", at=a, attempt=a) for a in range(1, count + 1)]


def test_retryable_attempt_over_max_retries_triggers_max_retries_exceeded():
    assert triggers(*retries(6)) == [("max_retries_exceeded", "n1", "medium", "e5")]


def test_retryable_attempt_at_max_retries_triggers_nothing():
    assert triggers(*retries(5)) == []


def test_max_retries_comes_from_the_replay_config():
    assert triggers(*retries(3), config=ReplayConfig(max_retries=2)) == [
        ("max_retries_exceeded", "n1", "medium", "e2")
    ]


def test_ingest_replay_config_reads_traceviz_max_retries(settings):
    from jobs.ingest.projection import replay_config

    settings.TRACEVIZ_MAX_RETRIES = 7
    assert replay_config() == ReplayConfig(max_retries=7)


def test_permanent_failure_after_many_retries_is_not_max_retries_exceeded():
    assert triggers(*retries(5), finished("n1", "permanent_failure", at=6, attempt=6)) == []


def test_error_type_boundary_violation_triggers_boundary_violation():
    assert triggers(finished("n1", "permanent_failure", error_type="BoundaryViolation")) == [
        ("boundary_violation", "n1", "high", "e0")
    ]


def test_plan_hash_mismatch_triggers_boundary_violation_not_contract_violation():
    assert triggers(
        event("job_started", at=0, plan_hash="p1"), finished("n1", at=1, plan_hash="p2")
    ) == [("boundary_violation", "n1", "high", "e1")]


def test_matching_plan_hash_triggers_nothing():
    assert (
        triggers(event("job_started", at=0, plan_hash="p1"), finished("n1", at=1, plan_hash="p1"))
        == []
    )


def test_duplicate_success_triggers_contract_violation():
    assert triggers(finished("n1", at=1), finished("n1", at=2, attempt=2)) == [
        ("contract_violation", "n1", "high", "e1")
    ]


def test_rerun_after_permanent_triggers_contract_violation():
    assert triggers(finished("n1", "permanent_failure", at=1), started("n1", at=2, attempt=2)) == [
        ("contract_violation", "n1", "high", "e1")
    ]


def test_contract_violation_says_the_nodes_first_violation_also_after_a_resume():
    """The rule reads each node's first violation; a fold resumed from its snapshot knows it
    (and a second violation of the node is no new trigger)."""
    items = parsed(
        [
            finished("n1", at=1, event_id="e0"),
            finished("n1", at=2, attempt=2, event_id="e1"),
            finished("n1", at=3, attempt=3, event_id="e2"),
        ]
    )
    head = Fold.of(items[:2])
    snapshot = json.loads(json.dumps(head.snapshot()))
    steps = head.finish().steps
    resumed = Fold.resume(
        "j1",
        snapshot,
        steps=steps,
        nodes={"n1"},
        payload_results={},
        metadata={},
        strip=strip.empty(),
    )
    resumed.apply(items[2])
    first = "Node n1 succeeded twice (attempts 1 and 2): its side effect may have happened twice"
    for fold in (resumed, Fold.of(items)):
        assert fold.holding[("contract_violation", "n1")] == ("high", first)
    assert [t.event_id for t in resumed.finish().escalation_triggers] == []
    assert [(t.kind, t.event_id) for t in build(items).escalation_triggers] == [
        ("contract_violation", "e1")
    ]


def test_warning_and_info_findings_trigger_nothing():
    assert (
        triggers(
            event("job_finished", at=1, status="completed"),  # then result_after_finish
            finished("n1", at=2, attempt=3),  # attempt_gap
        )
        == []
    )


def test_escalation_raised_triggers_raised_with_its_node_and_severity():
    state = build(
        parsed(
            [
                event(
                    "escalation_raised",
                    at=1,
                    event_id="r1",
                    kind="budget",
                    message="over budget",
                    node_id="n4",
                    severity="critical",
                )
            ]
        )
    )
    (trigger,) = state.escalation_triggers
    assert (trigger.kind, trigger.node_id, trigger.severity, trigger.message, trigger.event_id) == (
        "raised",
        "n4",
        "critical",
        "over budget",
        "r1",
    )


def test_escalation_raised_without_node_or_severity_attaches_to_the_job_at_medium():
    assert triggers(event("escalation_raised", at=1, kind="budget")) == [
        ("raised", "", "medium", "e0")
    ]


def test_each_escalation_raised_event_is_its_own_trigger():
    assert triggers(
        event("escalation_raised", at=1, kind="a"), event("escalation_raised", at=2, kind="b")
    ) == [("raised", "", "medium", "e0"), ("raised", "", "medium", "e1")]


def test_rule_that_keeps_holding_triggers_once():
    assert triggers(
        finished("n1", "retryable_failure", at=1, error_type="auth"),
        finished("n2", at=2),
        finished("n1", "retryable_failure", at=3, attempt=2, error_type="auth"),
    ) == [("user_action", "n1", "medium", "e0")]


def test_rule_that_stops_holding_and_holds_again_triggers_again():
    assert triggers(
        finished("n1", "retryable_failure", at=1, error_type="auth"),
        finished("n1", at=2, attempt=2),
        finished("n1", "retryable_failure", at=3, attempt=3, error_type="auth"),
    ) == [("user_action", "n1", "medium", "e0"), ("user_action", "n1", "medium", "e2")]


def test_job_finished_stops_a_status_rule_from_holding():
    assert triggers(
        finished("n1", "retryable_failure", at=1, error_type="auth"),
        event("job_finished", at=2, status="failed"),
        finished("n1", "retryable_failure", at=3, attempt=2, error_type="auth"),
    ) == [("user_action", "n1", "medium", "e0")]


def test_stale_failure_triggers_nothing():
    assert (
        triggers(
            event("cancel_requested", at=1, epoch=2),
            finished("n1", "permanent_failure", at=2, epoch=1, error_type="BoundaryViolation"),
        )
        == []
    )


def test_trigger_carries_the_event_time_and_a_message():
    state = build(
        parsed(
            [
                finished(
                    "n1",
                    "permanent_failure",
                    at=3,
                    error_type="auth",
                    reason="Gmail.send: token expired",
                )
            ]
        )
    )
    (trigger,) = state.escalation_triggers
    assert trigger.ts.isoformat() == "2026-03-02T09:00:03+00:00"
    assert trigger.message == (
        "Node n1 needs a person (approval or re-auth) (auth): Gmail.send: token expired"
    )
