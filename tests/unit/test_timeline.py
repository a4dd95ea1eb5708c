"""The job page's waterfall layout (jobs.web.timeline): pure, so tested without a database."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from jobs.web import timeline

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def step(node_id: str, position: int, span: str = "", parent: str = "", attempt: int = 1):
    return SimpleNamespace(
        node_id=node_id,
        attempt=attempt,
        position=position,
        segment="ok",
        result_type="success",
        ignored_stale=False,
        started_at=T0 + timedelta(seconds=position),
        finished_at=T0 + timedelta(seconds=position + 1),
        duration_ms=1000.0,
        trace_span_id=span,
        parent_span_id=parent,
    )


def tree_steps() -> list:
    """root > (a > a1, b), an orphan, and c <-> d, a parent cycle."""
    return [
        step("root", 0, "s-root"),
        step("a", 1, "s-a", "s-root"),
        step("a1", 2, "s-a1", "s-a"),
        step("b", 3, "s-b", "s-root"),
        step("orphan", 4, "s-o", "s-missing"),
        step("c", 5, "s-c", "s-d"),
        step("d", 6, "s-d", "s-c"),
        step("a", 7, "s-a", "s-root", attempt=2),
    ]


def shape(rows) -> list[tuple[str, int]]:
    return [(row.node_id, row.depth) for row in rows]


def test_waterfall_orders_nodes_depth_first_with_cycles_as_roots():
    whole = timeline.waterfall(tree_steps())
    assert shape(whole.rows) == [
        ("root", 0),
        ("a", 1),
        ("a1", 2),
        ("b", 1),
        ("orphan", 0),
        ("c", 0),
        ("d", 1),
    ]
    assert whole.node_count == 7
    assert [len(row.bars) for row in whole.rows][:2] == [1, 2]


def test_waterfall_windows_are_slices_of_the_whole_order():
    steps = tree_steps()
    whole = shape(timeline.waterfall(steps).rows)
    for cut in range(len(whole) + 1):
        first = timeline.waterfall(steps, stop=cut)
        rest = timeline.waterfall(steps, start=cut)
        assert shape(first.rows) + shape(rest.rows) == whole
        assert first.node_count == rest.node_count == len(whole)
