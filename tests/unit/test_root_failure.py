"""One rule for the root failure: read off stored steps (``root_failure_of``, the job page's
rows and its one query) it is the attempt replay's ``JobState.root_failure`` names."""

import pytest

from jobs.replay import walk
from jobs.replay.state import root_failure_of
from tests.factories import event, finished, parsed, started

CASES = {
    "retried then failed for good": [
        started("pay", "j1", 1),
        finished("pay", "retryable_failure", "j1", 2, reason="Timeout"),
        started("pay", "j1", 3, attempt=2),
        finished("pay", "permanent_failure", "j1", 4, attempt=2, reason="declined"),
        finished("ship", "success", "j1", 5),
    ],
    "two failing nodes: the first to fail": [
        finished("load", "retryable_failure", "j1", 1, reason="Timeout"),
        finished("save", "permanent_failure", "j1", 2, reason="disk full"),
        finished("load", "retryable_failure", "j1", 3, attempt=2, reason="Timeout"),
    ],
    "a failure that recovered: none": [
        finished("load", "retryable_failure", "j1", 1, reason="Timeout"),
        finished("load", "success", "j1", 2, attempt=2),
    ],
}


@pytest.mark.parametrize("items", CASES.values(), ids=CASES.keys())
def test_the_root_failure_read_off_the_steps_is_replays(items):
    state = walk.build(parsed([event("job_started", "j1", 0), *items]))
    expected = state.root_failure
    failing = state.failing_node_ids[0] if state.failing_node_ids else ""
    found = root_failure_of(failing, state.steps)
    found_key = (found.node_id, found.attempt) if found else None
    expected_key = (expected.node_id, expected.attempt) if expected else None
    assert found_key == expected_key
    assert expected_key is not None or items is CASES["a failure that recovered: none"]
