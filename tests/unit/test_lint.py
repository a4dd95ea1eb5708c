"""Contract lint findings (docs/contract.md): one minimal stream per kind, in order and
shuffled, with severity and message."""

import random

import pytest

from jobs.replay.walk import build
from tests.factories import event, finished, parsed, started


def ids(items: list[dict]) -> list[dict]:
    """Give every item an explicit event_id e0, e1, ... so findings can name them."""
    return [item | {"event_id": f"e{index}"} for index, item in enumerate(items)]


STREAMS = {
    "duplicate_success": (
        ids(
            [
                started("n1", at=0),
                finished("n1", at=1),
                started("n1", at=2, attempt=2),
                finished("n1", at=3, attempt=2),
            ]
        ),
        [
            (
                "duplicate_success",
                "error",
                "n1",
                [1, 2],
                ["e1", "e3"],
                "Node n1 succeeded twice (attempts 1 and 2): "
                "its side effect may have happened twice",
            )
        ],
    ),
    "rerun_after_permanent": (
        ids(
            [
                started("n1", at=0),
                finished("n1", "permanent_failure", at=1),
                started("n1", at=2, attempt=2),
            ]
        ),
        [
            (
                "rerun_after_permanent",
                "error",
                "n1",
                [1, 2],
                ["e1", "e2"],
                "Node n1 started again (attempt 2) after its permanent failure (attempt 1): "
                "a permanently failed step must not run again",
            )
        ],
    ),
    "uncompensated": (
        ids(
            [
                finished("n1", "compensatable_failure", at=1),
                event("job_finished", at=2, status="failed"),
            ]
        ),
        [
            (
                "uncompensated",
                "warning",
                "n1",
                [1],
                ["e0", "e1"],
                "Node n1 failed compensatably (attempt 1) and the job finished "
                "with no compensation: the partial commit may still be in place",
            )
        ],
    ),
    "result_after_finish": (
        ids([event("job_finished", at=1, status="completed"), finished("n1", at=2)]),
        [
            (
                "result_after_finish",
                "warning",
                "n1",
                [1],
                ["e0", "e1"],
                "Node n1 reported attempt 1 after the job had finished",
            )
        ],
    ),
    "finish_without_start": (
        ids([started("n1", at=0), finished("n1", at=1), finished("n2", at=2)]),
        [
            (
                "finish_without_start",
                "info",
                "n2",
                [1],
                ["e2"],
                "Node n2 finished attempt 1 with no node_started for it",
            )
        ],
    ),
    "attempt_gap": (
        ids([finished("n1", "retryable_failure", at=1), finished("n1", at=2, attempt=3)]),
        [("attempt_gap", "info", "n1", [3], ["e1"], "Node n1 has attempt 3 with no attempt 2")],
    ),
    "plan_hash_mismatch": (
        ids([event("job_started", at=0, plan_hash="p1"), finished("n1", at=1, plan_hash="p2")]),
        [
            (
                "plan_hash_mismatch",
                "error",
                "n1",
                [1],
                ["e1"],
                "Node n1 ran plan p2 but the job's plan is p1",
            )
        ],
    ),
}


def findings(items):
    return [
        (f.kind, f.severity, f.node_id, list(f.attempts), list(f.event_ids), f.message)
        for f in build(parsed(items)).findings
    ]


@pytest.mark.parametrize("kind", sorted(STREAMS))
def test_finding_is_reported_with_severity_and_message(kind):
    items, expected = STREAMS[kind]
    assert findings(items) == expected


@pytest.mark.parametrize("kind", sorted(STREAMS))
@pytest.mark.parametrize("seed", range(5))
def test_finding_is_the_same_whatever_the_delivery_order(kind, seed):
    items, expected = STREAMS[kind]
    shuffled = items[:]
    random.Random(seed).shuffle(shuffled)
    assert findings(shuffled) == expected


def test_rerun_after_permanent_is_reported_for_a_later_finish_too():
    items = ids([finished("n1", "permanent_failure", at=1), finished("n1", at=2, attempt=2)])
    assert [(f[0], f[5]) for f in findings(items) if f[0] == "rerun_after_permanent"] == [
        (
            "rerun_after_permanent",
            "Node n1 finished again (attempt 2) after its permanent failure (attempt 1): "
            "a permanently failed step must not run again",
        )
    ]


def test_compensation_before_finish_leaves_no_uncompensated_finding():
    items = ids(
        [
            finished("n1", "compensatable_failure", at=1),
            event("compensation_finished", at=2, node_id="n1", result_type="success"),
            event("job_finished", at=3, status="failed"),
        ]
    )
    assert findings(items) == []


def test_stale_success_is_not_a_duplicate_success():
    items = ids(
        [
            finished("n1", at=1),
            event("cancel_requested", at=2, epoch=2),
            finished("n1", at=3, attempt=2, epoch=1),
        ]
    )
    assert findings(items) == []


def test_success_repeated_in_the_same_attempt_is_not_a_duplicate_success():
    items = ids([finished("n1", at=1), finished("n1", at=2, reason="resent")])
    assert [f[0] for f in findings(items)] == ["refinished"]


def test_same_attempt_finished_again_is_refinished_not_a_rerun():
    items = ids(
        [
            finished("n1", "permanent_failure", at=1),
            finished("n1", "permanent_failure", at=2, reason="reported again"),
        ]
    )
    assert findings(items) == [
        (
            "refinished",
            "warning",
            "n1",
            [1],
            ["e0", "e1"],
            "Node n1 reported attempt 1 finished again: the later result replaces the earlier one",
        )
    ]
    assert build(parsed(items)).escalation_triggers == []


def test_attempt_gap_is_judged_over_the_whole_job():
    items = ids(
        [
            finished("n1", "retryable_failure", at=1),
            finished("n1", "retryable_failure", at=2, attempt=3),
            finished("n1", at=3, attempt=2),
        ]
    )
    assert [f[0] for f in findings(items)] == []


def test_stale_result_after_finish_is_not_reported():
    items = ids(
        [
            event("cancel_requested", at=1),
            event("job_finished", at=2, status="cancelled"),
            finished("n1", at=3),
        ]
    )
    assert findings(items) == []


def test_producer_that_never_sends_node_started_gets_no_finish_without_start():
    assert findings(ids([finished("n1", at=1), finished("n2", at=2)])) == []


def test_consecutive_attempts_are_not_an_attempt_gap():
    items = ids(
        [
            finished("n1", "retryable_failure", at=1),
            finished("n1", "retryable_failure", at=2, attempt=2),
            finished("n1", at=3, attempt=3),
        ]
    )
    assert findings(items) == []


def test_same_plan_hash_is_not_a_mismatch():
    items = ids([event("job_started", at=0, plan_hash="p1"), finished("n1", at=1, plan_hash="p1")])
    assert findings(items) == []


def test_findings_come_in_event_order():
    items = ids(
        [
            event("job_started", at=0, plan_hash="p1"),
            finished("n2", at=1, plan_hash="p2"),
            finished("n1", "permanent_failure", at=2),
            started("n1", at=3, attempt=2),
            event("job_finished", at=4, status="failed"),
            finished("n3", at=5),
        ]
    )
    # Findings of one event come by kind: each event's findings are in a fixed order too.
    assert [(f[0], f[2]) for f in findings(items)] == [
        ("finish_without_start", "n2"),
        ("plan_hash_mismatch", "n2"),
        ("finish_without_start", "n1"),
        ("rerun_after_permanent", "n1"),
        ("finish_without_start", "n3"),
        ("result_after_finish", "n3"),
    ]
