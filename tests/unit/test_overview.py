"""The job page's overview strip (jobs.web.overview): pure, so tested without a database."""

from types import SimpleNamespace

from jobs.web import overview, timeline


def step(node_id: str, position: int, segment: str = "ok", attempt: int = 1, span="", parent=""):
    return SimpleNamespace(
        node_id=node_id,
        attempt=attempt,
        position=position,
        segment=segment,
        ignored_stale=False,
        trace_span_id=span,
        parent_span_id=parent,
        step_key=f"{node_id}:{attempt}",
    )


def test_node_marks_put_failures_before_retries():
    assert overview.node_mark([step("a", 0, "failed")])[0] == "failed"
    mark, target = overview.node_mark([step("a", 0, "retryable"), step("a", 1, "ok", 2)])
    assert (mark, target.attempt) == ("retried", 2)
    assert overview.node_mark([step("a", 0, "running")])[0] == "running"
    assert overview.node_mark([step("a", 0)])[0] == "ok"


def test_a_big_job_is_bucketed_and_keeps_its_one_failure_and_the_root():
    steps = [step(f"n{i}", i, "failed" if i in (10, 4321) else "ok") for i in range(5000)]
    tree = timeline.node_tree(steps)
    strip = overview.overview(tree, root_key="n4321:1")
    assert (strip.node_count, strip.per_cell, len(strip.cells)) == (5000, 25, 200)
    failed = [cell for cell in strip.cells if cell.mark == "failed"]
    assert [cell.first for cell in failed] == [0, 4300]
    assert failed[1].target.node_id == "n4321"
    assert overview.outline(strip, 4300, 4499) == "left:86.000%;width:4.000%"


def test_a_collapsed_subtree_leaves_the_rows_and_its_node_stays():
    steps = [
        step("root", 0, span="r"),
        step("a", 1, span="a", parent="r"),
        step("a1", 2, span="a1", parent="a"),
        step("b", 3, span="b", parent="r"),
    ]
    tree = timeline.node_tree(steps)
    assert tree.descendants == [3, 1, 0, 0]
    assert [tree.order[p][0] for p in tree.rows(collapsed=frozenset({"a"}))] == ["root", "a", "b"]
    assert [tree.order[p][0] for p in tree.rows(shown={"a1", "b"})] == ["a1", "b"]
    assert [tree.order[p][0] for p in tree.rows(collapsed=frozenset({"root"}))] == ["root"]
