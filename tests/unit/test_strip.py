"""The jobs list's mini-bar counts (jobs.replay.strip): every step counted, bounded cells."""

from jobs.replay import strip


def test_every_step_is_counted_in_at_most_max_cells():
    counted = strip.empty()
    for position in range(10_000):
        cell = ["failed", False] if position == 9_999 else ["ok", False]
        strip.count(counted, position, None, cell)
    assert len(counted["cells"]) <= strip.MAX_CELLS
    assert strip.totals(counted) == {"ok": 9_999, "failed": 1}
    assert strip.worst(counted["cells"][-1]) == "failed"
    assert [strip.worst(cell) for cell in counted["cells"]].count("failed") == 1


def test_a_step_that_changes_moves_one_count():
    counted = strip.empty()
    strip.count(counted, 0, None, ["running", False])
    strip.count(counted, 0, ["running", False], ["retryable", False])
    strip.count(counted, 1, None, ["ok", True])
    assert strip.totals(counted) == {"retryable": 1, "stale": 1}
    assert strip.worst(counted["cells"][0]) == "retryable"


def test_counts_are_the_same_whatever_the_order_steps_change_in():
    forward, backward = strip.empty(), strip.empty()
    for position in range(300):
        strip.count(forward, position, None, ["running", False])
        strip.count(forward, position, ["running", False], ["ok", False])
    for position in reversed(range(300)):
        strip.count(backward, position, None, ["ok", False])
    assert forward == backward
