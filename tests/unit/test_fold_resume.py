"""A fold stopped after any event and resumed from its snapshot (through JSON, with only the
steps of the nodes the remaining events need) ends exactly where a full replay ends."""

import copy
import json
from dataclasses import dataclass, replace
from unittest import mock

import pytest
from hypothesis import event as hypothesis_event
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.replay import growth, lint, walk
from jobs.replay.state import completed_node_ids
from jobs.replay.walk import Fold, NeedsFullReplay, build, sort_events
from tests.factories import event, finished, parsed, started
from tests.strategies import job_events


def through_json(value):
    """What storing a value in a JSON column and reading it back gives."""
    return json.loads(json.dumps(value))


def stored(step):
    """A step as its Step row gives it back: its JSON columns through JSON."""
    return replace(
        copy.deepcopy(step),
        payload_results=through_json(step.payload_results),
        context=through_json(step.context),
        audit_trail=through_json(step.audit_trail),
        extra=through_json(step.extra),
        history=through_json(step.history),
        marks=through_json(step.marks),
    )


def resumed(events, cut: int):
    """Fold ``events[:cut]``, snapshot, resume with only the needed steps, fold the rest."""
    head, tail = events[:cut], events[cut:]
    first = Fold.of(head)
    first_state = first.finish()
    snapshot = through_json(first.snapshot())
    nodes = Fold.nodes_needed(snapshot, tail)
    fold = Fold.resume(
        head[0].job_id,
        snapshot,
        steps=[stored(s) for s in first_state.steps if s.node_id in nodes],
        nodes=nodes,
        payload_results=through_json(first_state.payload_results),
        metadata=through_json(first_state.metadata),
        strip=through_json(first_state.strip),
    )
    for item in tail:
        fold.apply(item)
    return first_state, fold


def comparable(state) -> dict:
    return {
        "status": state.status,
        "completed_count": state.completed_count,
        "cursor_node": state.cursor_node,
        "payload_results": state.payload_results,
        "attributes": state.attributes,
        "findings": state.findings,
        "failing_node_ids": state.failing_node_ids,
        "root": state.root_failure,
        "failed_at": state.failed_at,
        "counts": (state.event_count, state.step_count, state.max_attempt),
        "segments": {k: v for k, v in state.segment_counts.items() if v},
        "strip": state.strip,
        "times": (state.started_at, state.finished_at, state.last_event_at),
        "finish": (state.finish_code, state.finish_reason, state.cancel_reason),
        "planner": (state.planner_parse_invalid, state.planner_degraded),
        "validation": state.last_validation_error,
        "triggered": state.triggered,
    }


@settings(max_examples=300, deadline=None)
@given(items=job_events(min_size=2, max_size=20), data=st.data())
def test_resumed_fold_ends_where_a_full_replay_ends(items, data):
    events = sort_events(parsed(items))
    cut = data.draw(st.integers(1, len(events) - 1))
    whole = Fold.of(events)
    expected = whole.finish()
    try:
        first_state, fold = resumed(events, cut)
    except NeedsFullReplay:
        hypothesis_event("needs a full replay")
        return
    state = fold.finish()
    assert comparable(state) == comparable(expected)
    steps = {(s.node_id, s.attempt): s for s in first_state.steps}
    steps.update({(s.node_id, s.attempt): s for s in state.changed_steps})
    assert sorted(steps.values(), key=lambda s: s.position) == [stored(s) for s in expected.steps]
    assert completed_node_ids(steps.values()) == expected.completed_node_ids
    assert first_state.escalation_triggers + state.escalation_triggers == (
        expected.escalation_triggers
    )
    assert first_state.recoveries + state.recoveries == expected.recoveries
    assert through_json(fold.snapshot()) == through_json(whole.snapshot())


def test_resume_reads_only_the_nodes_it_was_given():
    events = sort_events(parsed([finished("n1", at=1), finished("n2", at=2)]))
    first = Fold.of(events[:1])
    fold = Fold.resume(
        "j1",
        first.snapshot(),
        steps=[],
        nodes={"n2"},
        payload_results={},
        metadata={},
        strip={"per": 1, "cells": []},
    )
    fold.apply(events[1])
    with pytest.raises(RuntimeError, match="n1"):
        fold.node_steps("n1")


def test_first_node_started_after_unloaded_finishes_needs_a_full_replay():
    events = sort_events(parsed([finished("n1", at=1), started("n2", at=2)]))
    first = Fold.of(events[:1])
    fold = Fold.resume(
        "j1",
        first.snapshot(),
        steps=[],
        nodes={"n2"},
        payload_results={},
        metadata={},
        strip={"per": 1, "cells": []},
    )
    with pytest.raises(NeedsFullReplay):
        fold.apply(events[1])
    # The full replay judges n1's unstarted finish.
    assert [f.kind for f in build(events).findings] == ["finish_without_start"]


def test_event_sorting_before_the_last_one_folded_is_refused():
    events = sort_events(parsed([event("job_started", at=0), finished("n1", at=1)]))
    fold = Fold.of(events[1:])
    with pytest.raises(ValueError, match="does not come after"):
        fold.apply(events[0])


def test_the_rules_holding_are_stored_the_same_whichever_order_they_were_found_in():
    """A full replay and an incremental fold can find the same rules in another order (a
    hypothesis parity run found two boundary violations stored as n3, n2 against n2, n3)."""
    fold = Fold.of(
        parsed(
            [
                event("job_started", at=0, plan_hash="p1"),
                finished("n2", at=1, plan_hash="p2"),
                finished("n3", at=2, plan_hash="p2"),
            ]
        )
    )
    fold.finish()
    assert len(fold.holding) == 2
    snapshot = through_json(fold.snapshot())
    fold.holding = dict(reversed(fold.holding.items()))
    assert through_json(fold.snapshot()) == snapshot


# --- the fold version -----------------------------------------------------------------------


@dataclass(slots=True)
class WiderSummary(growth.TraceSummary):
    """A trace summary with one field more, as a later version of the code might have it."""

    adopted_calls: int = 0


@dataclass(frozen=True, slots=True)
class RetypedFinding(lint.Finding):
    """A finding whose position became a text."""

    position: str  # type: ignore[assignment]


SNAPSHOT_STATE = Fold._snapshot_state


def with_a_key_more(fold: Fold) -> dict:
    return {**SNAPSHOT_STATE(fold), "paused_since": None}


@pytest.mark.parametrize(
    "change",
    [
        mock.patch.object(growth, "TraceSummary", WiderSummary),
        mock.patch.object(lint, "Finding", RetypedFinding),
        mock.patch.object(walk, "SNAPSHOT_FIELDS", (*walk.SNAPSHOT_FIELDS, "failed_at")),
        mock.patch.object(Fold, "_snapshot_state", with_a_key_more),
    ],
    ids=["a field more in the trace summary", "a field's type", "a job field more", "a key more"],
)
def test_a_snapshot_of_another_shape_is_of_another_fold_version(change):
    """A shape change that nobody bumped FOLD_MEANING for still changes the version, so a
    snapshot stored before it is replayed whole rather than resumed into the wrong shape."""
    with change:
        assert walk.fold_version() != walk.FOLD_VERSION


def test_the_fold_version_is_the_same_computed_again():
    assert walk.fold_version() == walk.FOLD_VERSION
    assert walk.FOLD_VERSION.startswith(f"{walk.FOLD_MEANING}.")
    assert Fold.of(parsed([event("job_started", at=0)])).snapshot()["version"] == walk.FOLD_VERSION
