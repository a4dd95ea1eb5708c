"""The example streams in tests/examples conclude what their README says, and the folder holds
exactly the streams its README lists."""

import json
import re
from pathlib import Path

import pytest

from jobs.replay.walk import build
from tests.factories import parsed

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def replay_example(name: str):
    return build(parsed(read_events(EXAMPLES / name)))


def listed_streams(readme: Path) -> list[str]:
    """The .ndjson files named in the first column of the README's table."""
    return re.findall(r"^\| ([\w.-]+\.ndjson) \|", readme.read_text(), re.MULTILINE)


def test_examples_hold_every_stream_their_readme_lists_and_nothing_else():
    listed = listed_streams(EXAMPLES / "README.md")
    assert listed
    assert sorted(listed) == sorted(path.name for path in EXAMPLES.glob("*.ndjson"))
    for name in listed:
        assert parsed(read_events(EXAMPLES / name)), name


def test_retry_then_permanent_fails_with_build_completed():
    state = replay_example("retry-then-permanent.ndjson")
    assert state.status == "failed"
    assert state.completed_node_ids == ["build"]
    assert state.cursor_node == "build"
    upload = [(s.attempt, s.segment) for s in state.steps if s.node_id == "upload"]
    assert upload == [(1, "retryable"), (2, "failed")]


def test_compensatable_failure_is_compensated_and_never_completed():
    state = replay_example("compensatable.ndjson")
    assert state.status == "failed"
    assert state.completed_node_ids == ["create_release"]
    (upload,) = [s for s in state.steps if s.node_id == "upload_assets"]
    assert upload.compensated and upload.segment == "failed"


def test_result_after_cancel_is_ignored_stale():
    state = replay_example("cancel-with-stale-result.ndjson")
    assert state.status == "cancelled"
    assert state.completed_node_ids == ["shard-1"]
    assert state.payload_results == {"rows": 10}
    (shard2,) = [s for s in state.steps if s.node_id == "shard-2"]
    assert shard2.ignored_stale and shard2.segment == "ok"


def test_planner_degraded_fails_with_last_validation_error():
    state = replay_example("planner-degraded.ndjson")
    assert state.status == "failed"
    assert state.last_validation_error == {
        "reason": "next_step_parse_failed",
        "attempts": 2,
        "schema": "NextStepProposal",
        "provider": "anthropic",
        "model": "claude-x",
    }
    assert (state.planner_parse_invalid, state.planner_degraded) == (2, 1)


def test_expired_token_pauses_for_approval_with_user_action():
    state = replay_example("auth-needs-user.ndjson")
    assert state.status == "paused:approval"
    assert [(t.kind, t.node_id) for t in state.escalation_triggers] == [
        ("user_action", "gmail.send")
    ]


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.ndjson")))
def test_examples_have_no_findings(name):
    assert replay_example(name).findings == []
