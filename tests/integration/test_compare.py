"""Compare two runs (docs/compare.md): the page, the JSON API, the run picked without ``b``,
and the comparison read back from stored rows whatever order and batching events came in."""

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.contract import bodies
from jobs.ingest.store import store_batch
from jobs.management.demo import etl_run
from jobs.models import Event, FailureGroup, IngestToken, Job, Step
from jobs.replay import compare
from jobs.web import compare as compare_view
from jobs.web.compare_schemas import comparison_body
from tests.factories import event, finished, started, store, user
from tests.strategies import comparable_runs

pytestmark = pytest.mark.django_db

YESTERDAY = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
TODAY = YESTERDAY + timedelta(days=1)


@pytest.fixture
def etl():
    """Yesterday's ETL run completed with rules v12; today's, with v13, wrote 120,000 rows
    instead of 118,500 and failed on a duplicate key."""
    store(etl_run("etl-yesterday", YESTERDAY, "v12"))
    store(etl_run("etl-today", TODAY, "v13"))
    return "etl-today", "etl-yesterday"


@pytest.fixture
def engineer(client):
    client.force_login(user("eng", "engineer"))
    return client


def api(client, **query):
    return client.get("/api/v1/compare", query)


def by_node(answer: dict) -> dict:
    return {node["node_id"]: node for node in answer["nodes"]}


def test_the_api_names_the_first_divergence_and_every_node(engineer, etl):
    response = api(engineer, a="etl-today", b="etl-yesterday")
    assert response.status_code == 200
    answer = response.json()
    assert answer["a"]["job_id"] == "etl-today" and answer["b"]["job_id"] == "etl-yesterday"
    assert answer["b_picked"] is None
    assert answer["first_divergence"] == {"node_id": "transform", "kind": "arguments"}
    nodes = by_node(answer)
    assert [node["node_id"] for node in answer["nodes"]] == [
        "extract",
        "transform",
        "load",
        "report",
    ]
    assert {key: node["change"] for key, node in nodes.items()} == {
        "extract": "same",
        "transform": "changed",
        "load": "new_failure",
        "report": "only_in_b",
    }
    transform = nodes["transform"]
    assert transform["differences"] == ["arguments", "payload_results"]
    assert [(row["key"], row["status"], row["b"], row["a"]) for row in transform["arguments"]] == [
        ("dedupe_on", "changed", '["id"]', '["id","day"]'),
        ("rules", "changed", '"v12"', '"v13"'),
    ]
    assert [(r["key"], r["b"], r["a"]) for r in transform["payload_results"]] == [
        ("rows_written", "118500", "120000")
    ]
    load = nodes["load"]
    assert load["a"]["result_type"] == "permanent_failure"
    assert load["a"]["reason"].startswith("duplicate key value")
    assert load["b"]["result_type"] == "success"
    assert load["slower"] is True and load["duration_delta_ms"] == 3100.0
    (sql,) = load["definition"]
    assert "-WHERE day = :day" in sql["text_diff"] and "+WHERE day >= :day - 1" in sql["text_diff"]
    assert nodes["report"]["a"] is None and nodes["report"]["b"]["attempts"] == 1


def test_without_b_the_api_picks_the_latest_earlier_completed_run(engineer, etl):
    store(etl_run("etl-older-failure", YESTERDAY + timedelta(hours=6), "v13"))
    store(etl_run("etl-later-success", TODAY + timedelta(hours=1), "v12"))
    answer = api(engineer, a="etl-today").json()
    assert answer["b"]["job_id"] == "etl-yesterday"
    assert answer["b_picked"] == "the latest earlier run of nightly-etl that completed"


def test_without_a_completed_earlier_run_the_latest_earlier_run_is_picked(engineer):
    store(etl_run("etl-1", YESTERDAY, "v13"))
    store(etl_run("etl-2", YESTERDAY + timedelta(hours=1), "v13"))
    store(etl_run("etl-3", TODAY, "v13"))
    answer = api(engineer, a="etl-3").json()
    assert answer["b"]["job_id"] == "etl-2"
    assert "no earlier run of it completed" in answer["b_picked"]
    assert answer["first_divergence"] is None


def test_a_run_compared_with_itself_has_no_divergence(engineer, etl):
    answer = api(engineer, a="etl-today", b="etl-today").json()
    assert answer["first_divergence"] is None
    assert {node["change"] for node in answer["nodes"]} == {"same"}
    assert answer["totals"] == {
        "input_tokens_delta": 0,
        "output_tokens_delta": 0,
        "cost_delta": None,
    }


def test_the_api_refuses_a_missing_a_and_unknown_jobs_clearly(engineer, etl):
    missing = api(engineer, b="etl-today")
    assert missing.status_code == 400
    assert missing.json() == {"error": "a is required: the id of the job to compare"}
    unknown = api(engineer, a="nope", b="etl-today")
    assert (unknown.status_code, unknown.json()) == (404, {"error": "no job 'nope'"})
    unknown_b = api(engineer, a="etl-today", b="gone/with/slashes")
    assert unknown_b.json() == {"error": "no job 'gone/with/slashes'"}
    assert unknown_b.status_code == 404


def test_nothing_to_pick_is_a_404_saying_why(engineer, etl):
    answer = api(engineer, a="etl-yesterday")
    assert answer.status_code == 404
    assert answer.json()["error"] == (
        "nothing to compare 'etl-yesterday' with: no run of nightly-etl started before this one"
    )
    store([event("job_started", "loner", 0), finished("n1", job_id="loner")])
    answer = api(engineer, a="loner")
    assert answer.status_code == 404
    assert "names no workflow" in answer.json()["error"]


def test_the_api_takes_a_bearer_token(client, etl):
    _token, raw = IngestToken.issue("compare-tool")
    response = client.get("/api/v1/compare", {"a": "etl-today"}, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200
    assert response.json()["first_divergence"]["node_id"] == "transform"


def test_job_ids_with_slashes_travel_in_the_query_string(engineer):
    store(etl_run("team/etl/1", YESTERDAY, "v12"))
    store(etl_run("team/etl/2", TODAY, "v13"))
    answer = api(engineer, a="team/etl/2", b="team/etl/1").json()
    assert (answer["a"]["job_id"], answer["b"]["job_id"]) == ("team/etl/2", "team/etl/1")


def test_the_page_opens_on_the_first_divergence_and_lists_every_difference(engineer, etl):
    response = engineer.get("/compare/", {"a": "etl-today", "b": "etl-yesterday"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "data-first-divergence" in page
    assert 'id="first-divergence"' in page
    first = response.context["first"]
    assert (first.node_id, first.kind) == ("transform", "arguments")
    assert response.context["first_card"]["node_id"] == "transform"
    sections = {
        s["id"]: [i["node_id"] for i in s["items"]] for s in response.context["differences"]
    }
    assert sections == {
        "new-failures": ["load"],
        "fixed": [],
        "only-in-a": [],
        "only-in-b": ["report"],
        "arguments": ["transform"],
        "results": ["transform"],
        "definitions": ["load"],
        "models": [],
        "slower": ["load"],
        "tokens": [],
    }
    assert "rules: &quot;v12&quot; → &quot;v13&quot;" in page
    assert 'class="diff-add">+WHERE day &gt;= :day - 1</span>' in page
    assert "1.1 s → 4.2 s (3.8x)" in page
    # The node both runs ran alike is folded, not a card.
    cards = [item["node_id"] for item in response.context["items"] if not item["gap"]]
    assert cards == ["transform", "load", "report"]


def test_the_page_says_which_run_it_picked(engineer, etl):
    response = engineer.get("/compare/", {"a": "etl-today"})
    assert response.status_code == 200
    assert b"was picked for you: the latest earlier run of nightly-etl that completed" in (
        response.content
    )
    assert response.context["b"].job_id == "etl-yesterday"


def test_the_page_answers_a_missing_a_and_an_unknown_job_with_the_form(engineer, etl):
    missing = engineer.get("/compare/")
    assert missing.status_code == 400
    assert b"a is required" in missing.content and b'name="a"' in missing.content
    unknown = engineer.get("/compare/", {"a": "etl-today", "b": "nope"})
    assert unknown.status_code == 404
    assert b"no job &#x27;nope&#x27;" in unknown.content


def test_the_page_of_two_alike_runs_says_so(engineer, etl):
    response = engineer.get("/compare/", {"a": "etl-today", "b": "etl-today"})
    assert response.context["first"] is None
    assert b"No divergence" in response.content
    assert b"data-first-divergence" not in response.content


def test_the_job_page_links_compare_and_its_workflow_runs(engineer, etl):
    page = engineer.get("/jobs/etl-today/").content.decode()
    assert 'href="/compare/?a=etl-today">Compare with the last good run</a>' in page
    assert 'href="/?show=all&amp;workflow=nightly-etl"' in page
    runs = engineer.get("/", {"show": "all", "workflow": "nightly-etl"}).content.decode()
    assert "etl-today" in runs and "etl-yesterday" in runs


@pytest.mark.speed_guard
def test_the_page_reads_the_same_number_of_queries_whatever_the_size(engineer, etl):
    def run(job_id: str, nodes: int, start: datetime, result: str) -> list[dict]:
        items = [event("job_started", job_id, 0, workflow="wide")]
        for n in range(nodes):
            items += [started(f"n{n}", job_id, n), finished(f"n{n}", result, job_id, n + 0.5)]
        return [
            item | {"ts": (start + timedelta(seconds=i)).isoformat()}
            for i, item in enumerate(items)
        ]

    def queries(a: str, b: str) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert engineer.get("/compare/", {"a": a, "b": b}).status_code == 200
        return len(captured)

    store(run("small-a", 3, TODAY, "permanent_failure"))
    store(run("small-b", 3, YESTERDAY, "success"))
    store(run("big-a", 40, TODAY, "permanent_failure"))
    store(run("big-b", 40, YESTERDAY, "success"))
    assert queries("small-a", "small-b") == queries("big-a", "big-b")


# Event order and batching (docs/compare.md): the comparison of two stored runs is the same
# whatever order their events arrived in and however they were batched.


def clear() -> None:
    for model in (Event, Step, Job, FailureGroup):
        model.objects.all().delete()


def deliver(items: list[dict], sizes: list[int]) -> None:
    start = 0
    index = 0
    while start < len(items):
        size = sizes[index % len(sizes)]
        batch = bodies.parse_items(items[start : start + size], max_events=100_000)
        store_batch(batch)
        start += size
        index += 1


def stored_comparison(a: str = "a", b: str = "b") -> str:
    runs = [compare_view.load_run(Job.objects.get(job_id=job_id)) for job_id in (a, b)]
    comparison = compare.compare(*runs)
    job_a, job_b = Job.objects.get(job_id=a), Job.objects.get(job_id=b)
    answer = comparison_body(comparison, job_a, job_b, None)
    return json.dumps(answer, sort_keys=True)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data(), runs=comparable_runs())
def test_property_arrival_order_and_batching_change_nothing(db, data, runs):
    a_events, b_events = runs
    items = a_events + b_events
    clear()
    deliver(items, [len(items)])
    in_order = stored_comparison()
    clear()
    sizes = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    deliver(data.draw(st.permutations(items)), sizes)
    assert stored_comparison() == in_order
    itself = compare_view.load_run(Job.objects.get(job_id="a"))
    assert compare.compare(itself, itself).first_divergence is None


def store_trace(trace_id: str, model: str) -> str:
    """A trace whose step ``plan`` makes one LLM call with ``model``; returns its job id."""
    from tests.otlp_spans import llm_span, root, sid, span, store_spans

    spans = [
        root(end_ms=900),
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=100),
        llm_span(sid(2), sid(1), model, 10),
    ]
    for built in spans:
        built.trace_id = bytes.fromhex(trace_id)
    store_spans(*spans)
    return trace_id


def test_a_model_change_and_its_cost_are_a_difference_with_transcripts_side_by_side(engineer):
    a = store_trace("a" * 32, "gpt-4o")
    b = store_trace("b" * 32, "gpt-4o-mini")
    answer = api(engineer, a=a, b=b).json()
    assert answer["first_divergence"] == {"node_id": "plan", "kind": "model"}
    plan = by_node(answer)["plan"]
    assert (plan["a"]["models"], plan["b"]["models"]) == (["openai/gpt-4o"], ["openai/gpt-4o-mini"])
    assert (plan["input_tokens_delta"], plan["output_tokens_delta"]) == (0, 0)
    assert plan["cost_delta"] is not None and float(plan["cost_delta"]) > 0
    assert float(answer["totals"]["cost_delta"]) == float(plan["cost_delta"])
    page = engineer.get("/compare/", {"a": a, "b": b})
    card = page.context["first_card"]
    (pair,) = card["calls"]
    (side_a, call_a), (side_b, call_b) = pair
    assert (side_a, call_a["model"], side_b, call_b["model"]) == (
        "a",
        "openai/gpt-4o",
        "b",
        "openai/gpt-4o-mini",
    )
    assert [m["content"] for m in call_a["messages"]] == ["plan the release", "1. build 2. upload"]
    models = next(s for s in page.context["differences"] if s["id"] == "models")
    assert [item["text"] for item in models["items"]] == ["openai/gpt-4o-mini → openai/gpt-4o"]
