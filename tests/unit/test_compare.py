"""Comparing two runs (jobs.replay.compare): pure, so tested without a database."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.replay import compare
from jobs.replay.compare import Change, Facet, KeyStatus, Run, RunCall, RunStep
from jobs.replay.walk import build
from tests.factories import parsed
from tests.strategies import comparable_runs, job_events

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def step(node_id: str, position: int, result_type: str = "success", **fields) -> RunStep:
    return RunStep(
        node_id=node_id,
        attempt=fields.pop("attempt", 1),
        position=position,
        result_type=result_type,
        finished_at=T0 + timedelta(seconds=position),
        **fields,
    )


def run(job_id: str, *steps: RunStep, calls=()) -> Run:
    return Run(job_id, "completed", list(steps), list(calls))


def llm(node_id: str, position: int, model: str = "gpt-4o", **fields) -> RunCall:
    return RunCall(node_id, 1, position, "llm", "chat", provider="openai", model=model, **fields)


def nodes_by_id(comparison) -> dict:
    return {node.node_id: node for node in comparison.nodes}


def test_a_run_compared_with_itself_has_no_divergence():
    today = run("t", step("extract", 0), step("load", 1, "permanent_failure", reason="dup"))
    comparison = compare.compare(today, today)
    assert comparison.first_divergence is None
    assert {node.change for node in comparison.nodes} == {Change.SAME}


def test_the_first_divergence_is_the_first_node_in_a_order_that_differs():
    yesterday = run(
        "y",
        step("extract", 0, context={"step_definition": {"rules": "v12"}}),
        step("transform", 1, payload_results={"rows": 118500}),
        step("load", 2),
    )
    today = run(
        "t",
        step("extract", 0, context={"step_definition": {"rules": "v13"}}),
        step("transform", 1, payload_results={"rows": 120000}),
        step("load", 2, "permanent_failure", reason="duplicate key value (id)=(42)"),
    )
    comparison = compare.compare(today, yesterday)
    assert comparison.first_divergence == compare.Divergence("extract", "definition")
    changes = {node.node_id: node.change for node in comparison.nodes}
    assert changes == {
        "extract": Change.CHANGED,
        "transform": Change.CHANGED,
        "load": Change.NEW_FAILURE,
    }
    assert [n.node_id for n in comparison.differing_in(Facet.PAYLOAD_RESULTS)] == ["transform"]


def test_a_divergence_names_the_first_facet_that_differs_in_the_brief_order():
    before = run(
        "b", step("n", 0, payload_results={"x": 1}, context={"actual_arguments": {"q": 1}})
    )
    after = run("a", step("n", 0, payload_results={"x": 2}, context={"actual_arguments": {"q": 2}}))
    node = compare.compare(after, before).nodes[0]
    assert node.differences == (Facet.ARGUMENTS, Facet.PAYLOAD_RESULTS)
    assert node.divergence_kind == "arguments"


def test_a_failure_only_in_a_is_new_and_one_only_in_b_is_fixed():
    good = run("good", step("n1", 0), step("n2", 1))
    bad = run("bad", step("n1", 0, "retryable_failure", reason="timeout"), step("n2", 1))
    assert compare.compare(bad, good).nodes[0].change is Change.NEW_FAILURE
    assert compare.compare(good, bad).nodes[0].change is Change.FIXED
    assert compare.compare(bad, good).first_divergence == compare.Divergence("n1", "result")


def test_two_failures_whose_reasons_differ_only_in_ids_and_numbers_are_the_same_result():
    one = run("1", step("load", 0, "permanent_failure", reason="duplicate key (id)=(4211)"))
    two = run("2", step("load", 0, "permanent_failure", reason="duplicate key (id)=(977)"))
    assert compare.compare(one, two).first_divergence is None
    other = run("3", step("load", 0, "permanent_failure", reason="disk full"))
    assert compare.compare(one, other).nodes[0].change is Change.CHANGED


def test_nodes_only_one_run_has_are_listed_where_they_ran():
    a = run("a", step("n1", 0), step("n2", 1), step("n4", 2))
    b = run("b", step("n0", 0), step("n1", 1), step("n3", 2), step("n4", 3))
    comparison = compare.compare(a, b)
    assert [(n.node_id, n.change) for n in comparison.nodes] == [
        ("n0", Change.ONLY_IN_B),
        ("n1", Change.SAME),
        ("n2", Change.ONLY_IN_A),
        ("n3", Change.ONLY_IN_B),
        ("n4", Change.SAME),
    ]
    assert comparison.first_divergence == compare.Divergence("n0", "only_in_b")


def test_loop_iterations_align_by_their_iteration_node():
    a = run("a", step("agent", 0), step("agent #2", 1), step("agent #3", 2, "permanent_failure"))
    b = run("b", step("agent", 0), step("agent #2", 1))
    changes = [(n.node_id, n.change) for n in compare.compare(a, b).nodes]
    assert changes == [
        ("agent", Change.SAME),
        ("agent #2", Change.SAME),
        ("agent #3", Change.ONLY_IN_A),
    ]


def test_a_node_outcome_is_its_latest_attempt_not_ignored_as_stale():
    retried = run(
        "a",
        step("n", 0, "retryable_failure", reason="timeout", duration_ms=400.0),
        step("n", 1, attempt=2, duration_ms=600.0),
        step("n", 2, "permanent_failure", attempt=3, ignored_stale=True),
    )
    side = compare.compare(retried, retried).nodes[0].a
    assert (side.result_type, side.attempts, side.final_attempt) == ("success", 3, 2)
    assert side.duration_ms == 1000.0


def test_a_running_attempt_is_neither_a_success_nor_a_failure():
    running = run("a", RunStep("n", 1, 0, result_type=""))
    done = run("b", step("n", 0))
    node = compare.compare(running, done).nodes[0]
    assert (node.a.result_type, node.a.failed, node.change) == ("running", False, Change.CHANGED)


def test_a_step_is_slower_past_twice_the_time_and_a_second_more():
    def pair(a_ms, b_ms):
        a = run("a", step("n", 0, duration_ms=a_ms))
        b = run("b", step("n", 0, duration_ms=b_ms))
        return compare.compare(a, b).nodes[0]

    assert pair(3000.0, 1000.0).slower
    assert not pair(1900.0, 900.0).slower  # over twice, but a second more, not over it
    assert not pair(2500.0, 1500.0).slower  # a second more, not twice
    assert not pair(5.0, 1.0).slower
    assert pair(3000.0, 1000.0).change is Change.SAME  # a duration is never a divergence


def test_duration_falls_back_to_start_and_finish():
    timed = RunStep("n", 1, 0, "success", started_at=T0, finished_at=T0 + timedelta(seconds=3))
    node = compare.compare(run("a", timed), run("b", step("n", 0, duration_ms=500.0))).nodes[0]
    assert node.a.duration_ms == 3000.0
    assert node.slower and node.duration_delta_ms == 2500.0


def test_model_changes_token_and_cost_deltas():
    a = run(
        "a",
        step("plan", 0),
        calls=[
            llm("plan", 1, "gpt-4o-mini", input_tokens=100, output_tokens=20, cost=Decimal("0.01")),
            RunCall("", None, 2, "llm", "root", input_tokens=5, output_tokens=5),
        ],
    )
    b = run(
        "b",
        step("plan", 0),
        calls=[llm("plan", 1, "gpt-4o", input_tokens=80, output_tokens=30, cost=Decimal("0.05"))],
    )
    comparison = compare.compare(a, b)
    node = comparison.nodes[0]
    assert node.differences == (Facet.MODEL,)
    assert (node.a.models, node.b.models) == (("openai/gpt-4o-mini",), ("openai/gpt-4o",))
    assert (node.input_tokens_delta, node.output_tokens_delta) == (20, -10)
    assert node.cost_delta == Decimal("-0.04")
    # The job's own calls count in the totals, not in any node.
    assert (comparison.input_tokens_delta, comparison.output_tokens_delta) == (25, -5)
    assert comparison.cost_delta == Decimal("-0.04")
    assert comparison.first_divergence == compare.Divergence("plan", "model")


def test_cost_is_none_when_neither_run_priced_anything():
    a = run("a", step("n", 0), calls=[llm("n", 1, input_tokens=3)])
    comparison = compare.compare(a, a)
    assert comparison.cost_delta is None and comparison.nodes[0].cost_delta is None


def test_key_changes_key_by_key():
    rows = compare.key_changes(
        {"table": "orders", "rules": "v13", "batch": 500},
        {"table": "orders", "rules": "v12", "mode": "upsert"},
        include_same=True,
    )
    assert [(row.key, row.status, row.a, row.b) for row in rows] == [
        ("batch", KeyStatus.ADDED, "500", ""),
        ("mode", KeyStatus.REMOVED, "", '"upsert"'),
        ("rules", KeyStatus.CHANGED, '"v13"', '"v12"'),
        ("table", KeyStatus.SAME, '"orders"', '"orders"'),
    ]
    assert [row.key for row in compare.key_changes({"a": 1}, {"a": 1, "b": 2})] == ["b"]


def test_a_value_that_is_not_an_object_compares_whole():
    rows = compare.key_changes([1, 2], [1], include_same=True)
    assert [(row.key, row.status) for row in rows] == [("(value)", KeyStatus.CHANGED)]
    assert compare.key_changes(None, None) == []
    assert [row.status for row in compare.key_changes({"x": 1}, None)] == [KeyStatus.ADDED]


def test_long_values_get_a_text_diff_and_short_ones_do_not():
    old = "SELECT id, name\nFROM orders\nWHERE day = :day\n"
    new = "SELECT id, name\nFROM orders\nWHERE day >= :day\n"
    (row,) = compare.key_changes({"sql": new}, {"sql": old})
    assert "-WHERE day = :day" in row.text_diff and "+WHERE day >= :day" in row.text_diff
    assert row.text_diff[:2] == ("--- b", "+++ a")
    (short,) = compare.key_changes({"n": 2}, {"n": 1})
    assert short.text_diff == ()
    (nested,) = compare.key_changes({"cfg": {"k": list(range(30))}}, {"cfg": {"k": [1]}})
    assert any(line.startswith("+") and "29" in line for line in nested.text_diff)


def test_steps_and_calls_listed_in_any_order_compare_the_same():
    steps = [step("n1", 0), step("n2", 1, "permanent_failure", reason="x"), step("n3", 2)]
    calls = [llm("n1", 3, input_tokens=1), llm("n2", 4, "o3", input_tokens=2)]
    a = compare.compare(run("a", *steps, calls=calls), run("b", step("n1", 0)))
    b = compare.compare(
        run("a", *reversed(steps), calls=list(reversed(calls))), run("b", step("n1", 0))
    )
    assert a.nodes == b.nodes


def comparison_facts(comparison) -> tuple:
    return (
        comparison.first_divergence,
        [(n.node_id, n.change, n.differences, n.a, n.b) for n in comparison.nodes],
        comparison.a_totals,
        comparison.b_totals,
    )


@settings(max_examples=150, deadline=None)
@given(events=job_events("a", max_size=16))
def test_property_a_run_compared_with_itself_never_diverges(events):
    state = build(parsed(events))
    comparison = compare.compare(compare.run_of("a", state), compare.run_of("a", state))
    assert comparison.first_divergence is None
    assert all(node.change is Change.SAME for node in comparison.nodes)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), runs=comparable_runs())
def test_property_a_comparison_does_not_depend_on_the_order_events_arrived_in(data, runs):
    a_events, b_events = runs
    in_order = compare.compare(
        compare.run_of("a", build(parsed(a_events))), compare.run_of("b", build(parsed(b_events)))
    )
    shuffled = compare.compare(
        compare.run_of("a", build(parsed(data.draw(st.permutations(a_events))))),
        compare.run_of("b", build(parsed(data.draw(st.permutations(b_events))))),
    )
    assert comparison_facts(in_order) == comparison_facts(shuffled)
