"""Real agent frameworks, each in its own environment (tests/producers/NAME, built by ``make
producers``), exporting span by span to the live traceviz: Pydantic AI's own instrumentation,
the OpenAI Agents SDK through OpenInference, Strands' own tracing, and OpenLLMetry
(traceloop-sdk). Each producer runs the same weather agent four times
(tests/producers/agent_runs.py), four jobs: a run with two tool calls, a tool that fails and is
handled, a model call answered 500 then retried by the SDK, a run that raises. What a user sees
is asserted: status, steps, attempts, reasons, tokens and cost counted once (the header, the
steps' calls, the API and the dashboard's sums), tool cards, failure groups and ``/metrics``
(docs/otlp.md, "Agent runs")."""

import json
from collections import Counter as Tally

import pytest
from django.db.models import Sum
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from jobs.ingest import counters
from jobs.models import Call, FailureGroupJob, Job, Step
from jobs.replay.calls import cost_usd
from tests import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.producers]

WEATHER = "Sunny, 21C in Paris"
TIME = "14:05 in Paris"
OUTCOMES = {
    "two_tools": "ok: It is sunny and 21C in Paris, local time 14:05.",
    "tool_fails": "ok: Sorry, the stock service is unavailable.",
    "retried": "ok: Hello! How can I help?",
}


def jobs_of(run: dict) -> dict[str, Job]:
    """The four runs' jobs, by run; each run did what its script says."""
    runs = run["runs"]
    for name, outcome in OUTCOMES.items():
        assert runs[name]["outcome"] == outcome, (name, runs[name])
    assert runs["raises"]["outcome"].startswith("raised ")
    return {name: Job.objects.get(job_id=runs[name]["trace_id"]) for name in runs}


def steps_of(job: Job) -> list[tuple]:
    return list(
        job.steps.order_by("position").values_list("node_id", "attempt", "result_type", "handled")
    )


def statuses(jobs: dict[str, Job]) -> dict[str, str]:
    return {name: job.status for name, job in jobs.items()}


def grouped(job: Job) -> list[str]:
    """The nodes of the job's failures that are in a failure group."""
    return sorted(FailureGroupJob.objects.filter(job=job).values_list("group__node_id", flat=True))


def tool_of(job: Job, node_id: str) -> dict:
    """A tool step's card: its name, arguments (parsed) and result."""
    (call,) = Call.objects.filter(job=job, node_id=node_id, kind="tool")
    return {**call.tool, "arguments": json.loads(call.tool["arguments"])}


def llm_attempts(job: Job) -> list[tuple]:
    """The job's model calls an SDK retried: (its attempts' reasons, its own status)."""
    return [
        ([attempt["reason"] for attempt in call.detail["attempts"]], call.status)
        for call in Call.objects.filter(job=job, kind="llm").order_by("position")
        if call.detail.get("attempts")
    ]


def api_job(client, token: str, job: Job) -> dict:
    response = client.get(f"/api/v1/jobs/{job.job_id}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 200
    return json.loads(response.content)


def counted_once(client, token: str, job: Job, tokens: tuple[int, int]) -> None:
    """The job's tokens are ``tokens`` in its header, summed over its steps' calls, in the
    dashboard's LLM sums and in the API, and its cost is theirs at gpt-4o-mini's price."""
    assert (job.input_tokens, job.output_tokens) == tokens
    calls = Call.objects.filter(job=job)
    assert (
        sum(c.input_tokens or 0 for c in calls),
        sum(c.output_tokens or 0 for c in calls),
    ) == tokens
    dashboard = calls.filter(kind="llm").exclude(provider="", model="")
    summed = dashboard.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"))
    assert (summed["i"] or 0, summed["o"] or 0) == tokens
    api = api_job(client, token, job)
    assert (api["input_tokens"], api["output_tokens"], api["unpriced_calls"]) == (*tokens, 0)
    if tokens == (0, 0):
        assert job.cost is None
    else:
        price = cost_usd("openai", "gpt-4o-mini", *tokens)
        assert float(job.cost) == pytest.approx(price, abs=1e-7)
        assert float(api["cost"]) == pytest.approx(price, abs=1e-7)


def metrics_count_every_step(client, jobs: dict[str, Job]) -> None:
    """``traceviz_steps_finished_total`` counted each step of the runs once, by result."""
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1")
    scraped = {
        sample.labels["result_type"]: sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
        if sample.name == counters.STEPS
    }
    steps = Tally(Step.objects.filter(job__in=jobs.values()).values_list("result_type", flat=True))
    assert scraped == {result_type: float(count) for result_type, count in steps.items()}


def failed_needs_attention(client, jobs: dict[str, Job]) -> None:
    """The run that raised is in the jobs list's default "needs attention" view; the others
    are not."""
    client.force_login(factories.user("eng", "engineer"))
    page = client.get(reverse("jobs:jobs")).content.decode()
    shown = {name for name, job in jobs.items() if job.job_id in page}
    assert shown == {"raises"}


def test_pydantic_ai_runs_tell_their_story(run_producer, client, otel_token):
    run = run_producer("pydantic_ai")
    jobs = jobs_of(run)
    totals = {name: tuple(run["runs"][name]["total"] or (0, 0)) for name in jobs}
    assert statuses(jobs) == {
        "two_tools": "completed",
        "tool_fails": "completed",
        "retried": "completed",
        "raises": "failed",
    }
    # Model turns directly under the agent are steps of their own; so are tools.
    assert steps_of(jobs["two_tools"]) == [
        ("chat gpt-4o-mini", 1, "success", False),
        ("execute_tool get_weather", 1, "success", False),
        ("chat gpt-4o-mini #2", 1, "success", False),
        ("execute_tool get_time", 1, "success", False),
        ("chat gpt-4o-mini #3", 1, "success", False),
    ]
    assert tool_of(jobs["two_tools"], "execute_tool get_weather") == {
        "name": "get_weather",
        "arguments": {"city": "Paris"},
        "result": WEATHER,
    }
    # ModelRetry handed the tool's error to the model: a failed tool step, handled.
    assert steps_of(jobs["tool_fails"])[1] == (
        "execute_tool lookup_stock",
        1,
        "permanent_failure",
        True,
    )
    assert tool_of(jobs["tool_fails"], "execute_tool lookup_stock")["result"] == (
        "stock service unavailable for ACME"
    )
    assert grouped(jobs["tool_fails"]) == ["execute_tool lookup_stock"]
    # FallbackModel's failed attempt is an attempt of the chat call that answered.
    assert steps_of(jobs["retried"]) == [("chat gpt-4o-mini", 1, "success", False)]
    ((reasons, status),) = llm_attempts(jobs["retried"])
    assert status == "unset" and reasons[0].startswith(
        "pydantic_ai.exceptions.ModelHTTPError: status_code: 500"
    )
    raised = jobs["raises"]
    assert raised.finish_reason.startswith("pydantic_ai.exceptions.ModelHTTPError")
    assert steps_of(raised) == [("chat gpt-4o-mini", 1, "permanent_failure", False)]
    assert grouped(raised) == ["chat gpt-4o-mini"]
    # The agent's run total (gen_ai.aggregated_usage.*) is what traceviz counts, once.
    for name, job in jobs.items():
        counted_once(client, otel_token, job, totals[name])
    assert totals["two_tools"][0] > 0
    metrics_count_every_step(client, jobs)
    failed_needs_attention(client, jobs)


def test_openai_agents_runs_tell_their_story(run_producer, client, otel_token):
    jobs = jobs_of(run_producer("openai_agents"))
    # OpenInference ends the root OK whatever happened: the agent's error fails the run.
    assert statuses(jobs) == {
        "two_tools": "completed",
        "tool_fails": "completed",
        "retried": "completed",
        "raises": "failed",
    }
    # The agent is a step, its tools steps nested in it; the run span ("weather workflow")
    # only groups and its turns are the agent's calls.
    assert steps_of(jobs["two_tools"]) == [
        ("weather_agent", 1, "success", False),
        ("get_weather", 1, "success", False),
        ("get_time", 1, "success", False),
    ]
    agent, weather = Step.objects.filter(job=jobs["two_tools"]).order_by("position")[:2]
    assert weather.parent_span_id == agent.trace_span_id
    assert list(
        Call.objects.filter(job=jobs["two_tools"], node_id="").values_list("kind", "name")
    ) == [("agent", "weather workflow"), ("chain", "weather workflow")]
    # The tool card shows the arguments (input.value), never the schema (tool.parameters).
    assert tool_of(jobs["two_tools"], "get_weather") == {
        "name": "get_weather",
        "arguments": {"city": "Paris"},
        "result": WEATHER,
    }
    assert tool_of(jobs["two_tools"], "get_time")["result"] == TIME
    lookup = steps_of(jobs["tool_fails"])[1]
    assert lookup == ("lookup_stock", 1, "permanent_failure", True)
    assert grouped(jobs["tool_fails"]) == ["lookup_stock"]
    # The runner retried the call answered 500: one call, its failed attempt inside it.
    assert llm_attempts(jobs["retried"]) == [
        (["Error getting response: {'error': 'Error code: 500 - fake upstream failure'}"], "ok")
    ]
    (agent_step,) = api_job(client, otel_token, jobs["retried"])["steps"]
    failed, answered = [call for call in agent_step["calls"] if call["kind"] == "llm"]
    assert failed["attempt_of"] == answered["span_id"]
    assert [a["status"] for a in answered["attempts"]] == ["error"]
    raised = jobs["raises"]
    assert (raised.finish_reason, raised.failing_node_id) == (
        "Max turns exceeded: {'max_turns': 2}",
        "weather_agent",
    )
    assert steps_of(raised)[0] == ("weather_agent", 1, "permanent_failure", False)
    assert grouped(raised) == ["weather_agent"]
    expected = {
        "two_tools": (306, 36),
        "tool_fails": (203, 23),
        "retried": (102, 12),
        "raises": (200, 20),
    }
    for name, job in jobs.items():
        counted_once(client, otel_token, job, expected[name])
    metrics_count_every_step(client, jobs)
    failed_needs_attention(client, jobs)


def transcript(call: Call) -> list[tuple]:
    return [(m["direction"], m["role"], m["content"]) for m in call.messages]


def test_strands_runs_tell_their_story(run_producer, client, otel_token):
    run = run_producer("strands")
    jobs = jobs_of(run)
    assert statuses(jobs) == {
        "two_tools": "completed",
        "tool_fails": "completed",
        "retried": "completed",
        "raises": "failed",
    }
    # Event loop cycles only group: the model calls and the tools are the steps.
    assert steps_of(jobs["two_tools"]) == [
        ("chat", 1, "success", False),
        ("execute_tool get_weather", 1, "success", False),
        ("chat #2", 1, "success", False),
        ("execute_tool get_time", 1, "success", False),
        ("chat #3", 1, "success", False),
    ]
    assert tool_of(jobs["two_tools"], "execute_tool get_weather") == {
        "name": "get_weather",
        "arguments": {"city": "Paris"},
        "result": WEATHER,
    }
    # Strands writes content as span events: the last model call read the whole turn.
    (answering,) = Call.objects.filter(job=jobs["two_tools"], node_id="chat #3")
    read = transcript(answering)
    assert read[0] == ("in", "system", "You are a helpful weather assistant.")
    assert ("in", "tool", WEATHER) in read and ("in", "tool", TIME) in read
    assert read[-1] == ("out", "assistant", "It is sunny and 21C in Paris, local time 14:05.")
    assert steps_of(jobs["tool_fails"])[1] == (
        "execute_tool lookup_stock",
        1,
        "permanent_failure",
        True,
    )
    assert grouped(jobs["tool_fails"]) == ["execute_tool lookup_stock"]
    # Strands' retry strategy retried the model call in the same cycle: the model call is a
    # step of its own, so the retry is its step's second attempt.
    assert steps_of(jobs["retried"]) == [
        ("chat", 1, "retryable_failure", True),
        ("chat", 2, "success", False),
    ]
    first = Step.objects.get(job=jobs["retried"], node_id="chat", attempt=1)
    assert first.reason.startswith("openai.InternalServerError: Error code: 500")
    raised = jobs["raises"]
    assert raised.finish_reason.startswith("openai.InternalServerError: Error code: 500")
    assert steps_of(raised) == [
        ("chat", 1, "retryable_failure", False),
        ("chat", 2, "permanent_failure", False),
    ]
    assert grouped(raised) == ["chat"]
    # The agent's span repeats the run's total under its calls' keys: counted once. Strands
    # names itself as the provider; the model's (openai) prices the calls.
    for name, job in jobs.items():
        counted_once(client, otel_token, job, tuple(run["runs"][name]["total"] or (0, 0)))
    assert (jobs["two_tools"].input_tokens, jobs["two_tools"].provider) == (306, "openai")
    job_calls = api_job(client, otel_token, jobs["two_tools"])["calls"]
    (agent,) = [call for call in job_calls if call["kind"] == "agent"]
    assert (agent["kind"], agent["input_tokens"], agent["usage_total"]) == (
        "agent",
        None,
        {"input_tokens": 306, "output_tokens": 36, "total_tokens": 342},
    )
    metrics_count_every_step(client, jobs)
    failed_needs_attention(client, jobs)


def test_openllmetry_runs_tell_their_story(run_producer, client, otel_token):
    jobs = jobs_of(run_producer("openllmetry"))
    assert statuses(jobs) == {
        "two_tools": "completed",
        "tool_fails": "completed",
        "retried": "completed",
        "raises": "failed",
    }
    # @agent, @tool and @task are steps (the @workflow at the root is the job).
    assert steps_of(jobs["two_tools"]) == [
        ("weather_agent.agent", 1, "success", False),
        ("get_weather.tool", 1, "success", False),
        ("get_time.tool", 1, "success", False),
        ("format_answer.task", 1, "success", False),
    ]
    assert tool_of(jobs["two_tools"], "get_weather.tool") == {
        "name": "get_weather",
        "arguments": {"city": "Paris"},
        "result": WEATHER,
    }
    assert steps_of(jobs["tool_fails"])[1] == ("lookup_stock.tool", 1, "permanent_failure", True)
    assert grouped(jobs["tool_fails"]) == ["lookup_stock.tool"]
    # The application retried the call answered 500: one call, its failed attempt inside it.
    assert llm_attempts(jobs["retried"]) == [
        (["openai.InternalServerError: Error code: 500 - fake upstream failure"], "unset")
    ]
    # Every attempt failed: a failed call, and the run with it.
    raised = jobs["raises"]
    assert llm_attempts(raised) == [
        (["openai.InternalServerError: Error code: 500 - fake upstream failure"], "error")
    ]
    assert (raised.failing_node_id, raised.finish_reason) == (
        "weather_agent.agent",
        "openai.InternalServerError: Error code: 500 - fake upstream failure",
    )
    assert grouped(raised) == ["weather_agent.agent"]
    expected = {
        "two_tools": (306, 36),
        "tool_fails": (203, 23),
        "retried": (102, 12),
        "raises": (0, 0),
    }
    for name, job in jobs.items():
        counted_once(client, otel_token, job, expected[name])
    metrics_count_every_step(client, jobs)
    failed_needs_attention(client, jobs)
