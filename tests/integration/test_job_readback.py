"""Everything a producer sent can be read back from GET /api/v1/jobs/<id> (issue 32): a job sent
as events (its metadata, a step's exception type and stack) and a job sent as a trace (its
calls with provider, model, tokens, cost and transcript, a tool's arguments and result, span
events, links to the jobs they point at), in answers the OpenAPI document describes, read in a
number of queries that does not grow with the job."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from jobs.contract.redaction import MASK
from jobs.replay.calls import cost_usd
from jobs.web.schemas import API_STACK_BYTES
from tests.factories import event, finished, store
from tests.integration.test_openapi_document import documented_errors, served_document
from tests.otlp_spans import (
    ERROR,
    ROOT_ID,
    START,
    TRACE_ID,
    attrs,
    exception_event,
    gen_ai_chat_span,
    llm_span,
    root,
    sid,
    span,
    store_spans,
)

pytestmark = pytest.mark.django_db

UPSTREAM_TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
ABSENT_TRACE = bytes.fromhex("1" * 32)
STACK = (
    "Traceback (most recent call last):\n"
    '  File "agent.py", line 12, in search\n'
    "TimeoutError: search timed out"
)


SEARCH_REQUEST = {"type": "tool_call", "id": "call_1", "name": "search", "arguments": {"q": "x"}}


def auth(token: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def read_job(client, token: str, job_id: str) -> dict:
    response = client.get(f"/api/v1/jobs/{job_id}", **auth(token))
    assert response.status_code == 200, response.content
    return json.loads(response.content)


def in_trace(trace_id: bytes, *spans: Span) -> list[Span]:
    for each in spans:
        each.trace_id = trace_id
    return list(spans)


def store_upstream_job() -> None:
    """A job of another trace, which the spans below link to."""
    store_spans(
        *in_trace(UPSTREAM_TRACE, root(name="import", attributes=attrs(traceviz__job_id="up-1")))
    )


def store_trace_job() -> None:
    """An agent run: a planning step with two LLM calls (one of a model without a known price),
    a span event and two links; an acting step with a chat that asked for a tool, the tool's
    execution (a step of its own, nested in it), and which then raised."""
    store_upstream_job()
    store_spans(
        root(
            name="answer",
            end_ms=100,
            attributes=attrs(openinference__span__kind="AGENT", traceviz__job_id="agent-1"),
        ),
        span(
            name="plan",
            span_id=sid(2),
            start_ms=1,
            end_ms=40,
            attributes=attrs(traceviz__node_id="plan"),
            span_events=[
                Span.Event(
                    name="cache.miss", time_unix_nano=START + 2_000_000, attributes=attrs(key="q1")
                )
            ],
            links=[
                Span.Link(trace_id=UPSTREAM_TRACE, span_id=ROOT_ID),
                Span.Link(trace_id=ABSENT_TRACE, span_id=sid(9)),
            ],
        ),
        llm_span(sid(3), sid(2), "gpt-4o", 5),
        llm_span(sid(4), sid(2), "house-model-7", 20),
        span(
            name="act",
            span_id=sid(5),
            start_ms=41,
            end_ms=90,
            status=ERROR,
            attributes=attrs(traceviz__node_id="act"),
            span_events=[exception_event("TimeoutError", "search timed out", STACK)],
        ),
        span(
            name="execute_tool search",
            span_id=sid(6),
            parent=sid(5),
            start_ms=42,
            end_ms=89,
            attributes=attrs(
                gen_ai__operation__name="execute_tool",
                gen_ai__tool__name="search",
                gen_ai__tool__call__arguments='{"q": "release notes"}',
                gen_ai__tool__call__result="3 hits",
            ),
        ),
        gen_ai_chat_span(
            sid(7),
            sid(5),
            start_ms=43,
            asked=[{"role": "user", "parts": [{"type": "text", "content": "find the notes"}]}],
            answered=[{"role": "assistant", "parts": [SEARCH_REQUEST]}],
        ),
        resource=attrs(
            service__name="support-agent",
            service__version="1.4.2",
            deployment__environment="prod",
        ),
    )


def test_an_event_job_reads_back_its_metadata_exception_type_and_stack(client, ingest_token):
    stack = 'Traceback (most recent call last):\n  File "build.py", line 3\nValueError: bad'
    store(
        [
            event(
                "job_started",
                "ev-1",
                at=0,
                workflow="release",
                metadata={"git_sha": "abc123", "pr": 42, "db_password": "hunter2-horse"},
            ),
            finished(
                "build",
                "permanent_failure",
                "ev-1",
                at=1,
                reason="ValueError: bad",
                exception_type="ValueError",
                stack=stack,
                tool="compiler",
                context={"expected_arguments": {"target": "x86"}},
            ),
        ]
    )
    job = read_job(client, ingest_token, "ev-1")
    assert job["metadata"] == {"git_sha": "abc123", "pr": 42, "db_password": MASK}
    (step,) = job["steps"]
    assert (step["exception_type"], step["stack"], step["tool"], step["context"]) == (
        "ValueError",
        stack,
        "compiler",
        {"expected_arguments": {"target": "x86"}},
    )
    assert (step["calls"], step["events"], step["links"], step["span"]) == ([], [], [], None)
    assert (job["input_tokens"], job["output_tokens"], job["cost"], job["unpriced_calls"]) == (
        0,
        0,
        None,
        0,
    )
    assert job["calls"] == []


def test_a_long_stack_is_cut_with_a_visible_marker(client, ingest_token):
    frames = "".join(f'  File "deep.py", line {n}, in f{n}\n' for n in range(2000))
    store(
        [
            event("job_started", "ev-2", at=0),
            finished("n1", "permanent_failure", "ev-2", at=1, stack=frames),
        ]
    )
    assert len(frames.encode()) > API_STACK_BYTES
    (step,) = read_job(client, ingest_token, "ev-2")["steps"]
    kept, marker = step["stack"].split("… [truncated ")
    assert frames.startswith(kept)
    assert len(step["stack"].encode()) <= API_STACK_BYTES
    assert marker.endswith(" bytes]")


def test_a_trace_job_reads_back_its_calls_with_tokens_cost_and_transcript(client, ingest_token):
    store_trace_job()
    job = read_job(client, ingest_token, "agent-1")
    assert job["metadata"] == {
        "service.version": "1.4.2",
        "deployment.environment": "prod",
        "otel.trace_id": TRACE_ID.hex(),
    }
    priced = cost_usd("openai", "gpt-4o", 1000, 500)
    assert (job["input_tokens"], job["output_tokens"], job["unpriced_calls"]) == (2000, 1000, 1)
    assert job["cost"] == f"{priced:.8f}"
    plan, _act, _search = job["steps"]
    gpt, house = plan["calls"]
    assert {k: gpt[k] for k in ("kind", "name", "provider", "model", "status")} == {
        "kind": "llm",
        "name": "ChatOpenAI",
        "provider": "openai",
        "model": "gpt-4o",
        "status": "unset",
    }
    assert (gpt["input_tokens"], gpt["output_tokens"], gpt["total_tokens"]) == (1000, 500, 1500)
    assert (gpt["cost"], house["cost"], house["model"]) == (
        f"{priced:.8f}",
        None,
        "house-model-7",
    )
    asked, answered = gpt["messages"]
    assert asked == {
        "direction": "in",
        "role": "user",
        "content": "plan the release",
        "tool_calls": [],
    }
    assert (answered["direction"], answered["role"], answered["content"]) == (
        "out",
        "assistant",
        "1. build 2. upload",
    )
    assert (gpt["started_at"], gpt["duration_ms"]) == ("2026-03-02T09:00:00.005Z", 5.0)
    # The root span is an agent run: a call of the job itself.
    (agent,) = job["calls"]
    assert (agent["kind"], agent["name"]) == ("agent", "answer")


def test_a_trace_job_reads_back_its_tool_call_span_events_links_and_exception(client, ingest_token):
    store_trace_job()
    plan, act, search = read_job(client, ingest_token, "agent-1")["steps"]
    # The tool's execution is a step of its own, nested in act's, and its own call.
    assert (search["node_id"], search["parent_span_id"]) == ("execute_tool search", sid(5).hex())
    (tool,) = search["calls"]
    (chat,) = act["calls"]
    assert (tool["kind"], tool["tool"]) == (
        "tool",
        {"name": "search", "arguments": '{"q": "release notes"}', "result": "3 hits"},
    )
    assert chat["messages"][1]["tool_calls"] == [
        {"id": "call_1", "name": "search", "arguments": '{"q": "x"}'}
    ]
    assert (act["exception_type"], act["stack"], act["reason"]) == (
        "TimeoutError",
        STACK,
        "TimeoutError: search timed out",
    )
    assert plan["events"] == [
        {"name": "cache.miss", "ts": "2026-03-02T09:00:00.002000Z", "attributes": {"key": "q1"}}
    ]
    assert plan["links"] == [
        {
            "trace_id": UPSTREAM_TRACE.hex(),
            "span_id": ROOT_ID.hex(),
            "job_id": "up-1",
            "attributes": {},
        },
        {"trace_id": ABSENT_TRACE.hex(), "span_id": sid(9).hex(), "job_id": None, "attributes": {}},
    ]
    assert (plan["span"]["name"], plan["span"]["kind"], act["span"]["status"]) == (
        "plan",
        "unspecified",
        "error",
    )


def test_the_answers_match_the_document(client, ingest_token):
    store_trace_job()
    store([event("job_started", "ev-3", at=0, metadata={"git_sha": "abc123"})])
    document = served_document(client)
    for job_id in ("agent-1", "ev-3"):
        response = client.get(f"/api/v1/jobs/{job_id}", **auth(ingest_token))
        assert documented_errors(document, "/api/v1/jobs/{job_id}", "get", response) == []
    listed = client.get("/api/v1/jobs?meta=git_sha:abc123", **auth(ingest_token))
    assert documented_errors(document, "/api/v1/jobs", "get", listed) == []


def agent_trace(trace_id: bytes, job_id: str, steps: int) -> list[Span]:
    """A trace of ``steps`` steps, each with two LLM calls and a link to the upstream job."""
    spans = [root(name="run", end_ms=10_000, attributes=attrs(traceviz__job_id=job_id))]
    for n in range(steps):
        step_id = sid(100 + n)
        spans += [
            span(
                name=f"step-{n}",
                span_id=step_id,
                start_ms=1 + 100 * n,
                end_ms=90 + 100 * n,
                attributes=attrs(traceviz__node_id=f"step-{n}"),
                links=[Span.Link(trace_id=UPSTREAM_TRACE, span_id=ROOT_ID)],
            ),
            llm_span(sid(1000 + 2 * n), step_id, "gpt-4o", 2 + 100 * n),
            llm_span(sid(1001 + 2 * n), step_id, "gpt-4o-mini", 10 + 100 * n),
        ]
    return in_trace(trace_id, *spans)


@pytest.mark.speed_guard
def test_reading_a_job_costs_the_same_queries_whatever_its_steps_and_calls(
    client, ingest_token, django_assert_num_queries
):
    store_upstream_job()
    store_spans(*agent_trace(bytes.fromhex("a" * 32), "small", steps=1))
    store_spans(*agent_trace(bytes.fromhex("b" * 32), "big", steps=12))
    with CaptureQueriesContext(connection) as small:
        assert len(read_job(client, ingest_token, "small")["steps"]) == 1
    with django_assert_num_queries(len(small.captured_queries)):
        big = read_job(client, ingest_token, "big")
    assert [len(step["calls"]) for step in big["steps"]] == [2] * 12
    assert {link["job_id"] for step in big["steps"] for link in step["links"]} == {"up-1"}
