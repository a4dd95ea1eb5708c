"""Agent frameworks' spans as a job's story (docs/otlp.md, "Agent runs"): which spans are
steps, a run that raised under a root an instrumentation ended OK, usage counted once, an SDK's
retried model call, tool cards. The trees are those Pydantic AI, the OpenAI Agents SDK through
OpenInference, Strands and OpenLLMetry export (the producer tests run the libraries)."""

import json

from opentelemetry.proto.trace.v1.trace_pb2 import Status

from jobs.contract import otlp
from jobs.replay import walk
from tests.otlp_spans import ERROR, OK, attrs, request, root, sid, span


def failed(message: str) -> Status:
    return Status(code=Status.StatusCode.STATUS_CODE_ERROR, message=message)


def folded(*spans, resource=None) -> walk.Fold:
    """The fold of a whole trace, mapped as POST /v1/traces maps it."""
    traces = otlp.to_batch(request(*spans, resource=resource), max_events=10_000)
    assert traces.rejections == []
    return walk.Fold.of([event for _, event in traces.batch.events])


def steps_of(fold: walk.Fold) -> list[tuple]:
    state = fold.finish()
    return [(s.node_id, s.attempt, s.result_type, s.handled) for s in state.steps]


def calls_of(fold: walk.Fold) -> list[tuple]:
    return [(c.node_id, c.kind, c.name) for c in fold.state.calls]


def openinference(kind: str, **more):
    return attrs(openinference__span__kind=kind, **more)


def openai_agents_run(agent_status=None, tool_status=None) -> list:
    """The OpenAI Agents SDK's run through openinference-instrumentation-openai-agents: the
    trace (AGENT, always OK), the run (a CHAIN of the workflow's name), the agent, a turn (a
    CHAIN) with the model's response and a tool, a second turn with the answer."""
    return [
        root(name="weather workflow", end_ms=100, status=OK, attributes=openinference("AGENT")),
        span(
            name="weather workflow",
            span_id=sid(1),
            start_ms=1,
            end_ms=99,
            status=OK,
            attributes=openinference("CHAIN"),
        ),
        span(
            name="weather_agent",
            span_id=sid(2),
            parent=sid(1),
            start_ms=2,
            end_ms=98,
            status=agent_status or OK,
            attributes=openinference("AGENT", agent__name="weather_agent"),
        ),
        span(
            name="turn",
            span_id=sid(3),
            parent=sid(2),
            start_ms=3,
            end_ms=50,
            status=OK,
            attributes=openinference("CHAIN"),
        ),
        span(
            name="response",
            span_id=sid(4),
            parent=sid(3),
            start_ms=4,
            end_ms=20,
            status=OK,
            attributes=openinference(
                "LLM",
                llm__system="openai",
                llm__model_name="gpt-4o-mini",
                llm__token_count__prompt=101,
                llm__token_count__completion=11,
            ),
        ),
        span(
            name="get_weather",
            span_id=sid(5),
            parent=sid(3),
            start_ms=21,
            end_ms=30,
            status=tool_status or OK,
            attributes=openinference(
                "TOOL",
                tool__name="get_weather",
                input__value='{"city": "Paris"}',
                output__value="Sunny, 21C in Paris",
                tool__parameters='{"properties": {"city": {"type": "string"}}}',
            ),
        ),
        span(
            name="turn",
            span_id=sid(6),
            parent=sid(2),
            start_ms=51,
            end_ms=97,
            status=OK,
            attributes=openinference("CHAIN"),
        ),
        span(
            name="response",
            span_id=sid(7),
            parent=sid(6),
            start_ms=52,
            end_ms=96,
            status=OK,
            attributes=openinference(
                "LLM",
                llm__system="openai",
                llm__model_name="gpt-4o-mini",
                llm__token_count__prompt=102,
                llm__token_count__completion=12,
            ),
        ),
    ]


def test_an_openai_agents_run_is_its_agent_and_tools_not_one_step():
    fold = folded(*openai_agents_run())
    assert steps_of(fold) == [
        ("weather_agent", 1, "success", False),
        ("get_weather", 1, "success", False),
    ]
    # The run span only groups the agent: a call of the job; the turns are the agent's calls.
    assert calls_of(fold)[:2] == [
        ("", "agent", "weather workflow"),
        ("", "chain", "weather workflow"),
    ]
    assert ("weather_agent", "chain", "turn") in calls_of(fold)
    tool_step = next(s for s in fold.finish().steps if s.node_id == "get_weather")
    agent_step = next(s for s in fold.finish().steps if s.node_id == "weather_agent")
    assert tool_step.parent_span_id == agent_step.trace_span_id


def test_a_run_whose_agent_raised_under_a_root_ended_ok_failed_with_the_agents_reason():
    fold = folded(*openai_agents_run(failed("Max turns exceeded: {'max_turns': 2}")))
    state = fold.finish()
    assert (state.status, state.finish_reason) == ("failed", "Max turns exceeded: {'max_turns': 2}")
    # The agent's failure is the job's: not handled (its root did not end well after all).
    assert steps_of(fold)[0] == ("weather_agent", 1, "permanent_failure", False)
    assert state.root_failure.node_id == "weather_agent"


def test_a_failed_agent_followed_by_a_step_that_succeeded_is_a_run_that_recovered():
    spans = openai_agents_run(failed("Error in agent run"))
    spans.append(span(name="fallback", span_id=sid(9), parent=sid(1), start_ms=99, end_ms=99))
    assert folded(*spans).finish().status == "completed"


def test_a_handled_tool_failure_is_a_failed_step_of_a_run_that_completed():
    fold = folded(*openai_agents_run(tool_status=ERROR))
    assert fold.finish().status == "completed"
    assert ("get_weather", 1, "permanent_failure", True) in steps_of(fold)


def test_a_tool_card_shows_its_arguments_and_result_never_its_schema():
    fold = folded(*openai_agents_run())
    (tool,) = [c for c in fold.state.calls if c.kind == "tool"]
    assert tool.tool == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "result": "Sunny, 21C in Paris",
    }


def strands_run(retried=False) -> list:
    """Strands: the agent (the root) repeats its run's usage under its model calls' keys;
    event loop cycles hold a chat and a tool; ``retried``: the first chat answered 500 and
    Strands retried it in the same cycle."""
    usage = {"gen_ai__usage__input_tokens": 203, "gen_ai__usage__output_tokens": 23}
    chats = []
    if retried:
        chats.append(
            span(
                name="chat",
                span_id=sid(10),
                parent=sid(1),
                start_ms=2,
                end_ms=3,
                status=failed("Error code: 500"),
                attributes=attrs(
                    gen_ai__operation__name="chat",
                    gen_ai__system="strands-agents",
                    gen_ai__request__model="gpt-4o-mini",
                ),
            )
        )

    def chat(n, parent, start, tokens_in, tokens_out):
        return span(
            name="chat",
            span_id=sid(n),
            parent=parent,
            start_ms=start,
            end_ms=start + 5,
            status=OK,
            attributes=attrs(
                gen_ai__operation__name="chat",
                gen_ai__system="strands-agents",
                gen_ai__request__model="gpt-4o-mini",
                gen_ai__usage__input_tokens=tokens_in,
                gen_ai__usage__prompt_tokens=tokens_in,
                gen_ai__usage__output_tokens=tokens_out,
                gen_ai__usage__completion_tokens=tokens_out,
            ),
        )

    cycle = {"gen_ai__operation__name": "execute_event_loop_cycle"}
    return [
        root(
            name="invoke_agent weather_agent",
            end_ms=100,
            status=OK,
            attributes=attrs(
                gen_ai__operation__name="invoke_agent",
                gen_ai__system="strands-agents",
                gen_ai__request__model="gpt-4o-mini",
                **usage,
            ),
        ),
        span(
            name="execute_event_loop_cycle",
            span_id=sid(1),
            start_ms=1,
            end_ms=40,
            status=OK,
            attributes=attrs(**cycle),
        ),
        *chats,
        chat(2, sid(1), 5, 101, 11),
        span(
            name="execute_tool lookup_stock",
            span_id=sid(3),
            parent=sid(1),
            start_ms=20,
            end_ms=30,
            status=failed("stock service unavailable for ACME"),
            attributes=attrs(
                gen_ai__operation__name="execute_tool", gen_ai__tool__name="lookup_stock"
            ),
        ),
        span(
            name="execute_event_loop_cycle",
            span_id=sid(4),
            start_ms=41,
            end_ms=90,
            status=OK,
            attributes=attrs(**cycle),
        ),
        chat(5, sid(4), 42, 102, 12),
    ]


def test_strands_tools_are_steps_named_by_the_tool_and_cycles_only_group():
    fold = folded(*strands_run())
    assert steps_of(fold) == [
        ("chat", 1, "success", False),
        ("execute_tool lookup_stock", 1, "permanent_failure", True),
        ("chat #2", 1, "success", False),
    ]
    assert [c for c in calls_of(fold) if c[1] == "chain"] == [
        ("", "chain", "execute_event_loop_cycle"),
        ("", "chain", "execute_event_loop_cycle"),
    ]
    assert fold.finish().status == "completed"


def test_an_agents_repeated_run_total_is_counted_once():
    fold = folded(*strands_run())
    assert (fold.trace.input_tokens, fold.trace.output_tokens) == (203, 23)
    agent = fold.state.calls[0]
    assert (agent.kind, agent.input_tokens, agent.cost) == ("agent", None, None)
    assert agent.detail["usage_total"] == {
        "input_tokens": 203,
        "output_tokens": 23,
        "total_tokens": 226,
    }


def test_strands_calls_are_priced_under_the_provider_their_model_implies():
    fold = folded(*strands_run())
    chats = [c for c in fold.state.calls if c.kind == "llm"]
    assert {(c.provider, c.model) for c in chats} == {("openai", "gpt-4o-mini")}
    assert all(c.cost for c in chats)
    assert (fold.finish().attributes["provider"], fold.finish().attributes["model"]) == (
        "openai",
        "gpt-4o-mini",
    )


def test_a_model_nobody_prices_keeps_its_provider_counts_its_tokens_and_has_no_cost():
    fold = folded(
        root(
            name="invoke_agent weather_agent",
            end_ms=10,
            attributes=attrs(gen_ai__operation__name="invoke_agent"),
        ),
        span(
            name="chat scripted",
            span_id=sid(1),
            start_ms=1,
            end_ms=5,
            attributes=attrs(
                gen_ai__operation__name="chat",
                gen_ai__provider__name="function",
                gen_ai__request__model="scripted",
                gen_ai__usage__input_tokens=57,
                gen_ai__usage__output_tokens=5,
            ),
        ),
    )
    (chat,) = [c for c in fold.state.calls if c.kind == "llm"]
    assert (chat.provider, chat.model, chat.input_tokens, chat.cost) == (
        "function",
        "scripted",
        57,
        None,
    )
    assert fold.trace.input_tokens == 57


def test_a_model_call_strands_retried_is_the_second_attempt_of_its_step():
    fold = folded(*strands_run(retried=True))
    assert steps_of(fold)[:2] == [
        ("chat", 1, "retryable_failure", True),
        ("chat", 2, "success", False),
    ]


def retried_response(*statuses) -> list:
    """An agent's turn whose model responses (siblings of one request) ended ``statuses``."""
    spans = openai_agents_run()[:4]
    for n, status in enumerate(statuses):
        is_error = status == ERROR
        usage = (
            {}
            if is_error
            else {
                "llm__token_count__prompt": 102,
                "llm__token_count__completion": 12,
                "llm__model_name": "gpt-4o-mini",
            }
        )
        spans.append(
            span(
                name="response",
                span_id=sid(20 + n),
                parent=sid(3),
                start_ms=4 + 10 * n,
                end_ms=10 + 10 * n,
                status=failed("Error getting response: 500") if is_error else status,
                attributes=openinference("LLM", llm__system="openai", **usage),
            )
        )
    return spans


def test_an_sdks_retried_model_call_is_attempts_of_one_call():
    fold = folded(*retried_response(ERROR, OK))
    first, second = [c for c in fold.state.calls if c.kind == "llm"]
    assert (first.detail["attempt_of"], first.detail["attempt"]) == (sid(21).hex(), 1)
    assert second.status == "ok"
    assert [(a["attempt"], a["reason"]) for a in second.detail["attempts"]] == [
        (1, "Error getting response: 500")
    ]
    assert fold.finish().status == "completed"


def test_a_model_call_that_failed_on_every_attempt_is_a_failed_call():
    fold = folded(*retried_response(ERROR, ERROR, ERROR))
    *earlier, last = [c for c in fold.state.calls if c.kind == "llm"]
    assert last.status == "error"
    assert [a["attempt"] for a in last.detail["attempts"]] == [1, 2]
    assert [c.detail["attempt_of"] for c in earlier] == [last.span_id, last.span_id]


def test_pydantic_ais_fallback_attempt_is_an_attempt_of_the_chat_that_answered():
    fold = folded(
        root(
            name="invoke_agent weather_agent",
            end_ms=50,
            attributes=attrs(gen_ai__operation__name="invoke_agent"),
        ),
        span(
            name="chat scripted",
            span_id=sid(1),
            start_ms=1,
            end_ms=40,
            attributes=attrs(
                gen_ai__operation__name="chat",
                gen_ai__request__model="scripted",
                gen_ai__usage__input_tokens=51,
                gen_ai__usage__output_tokens=12,
            ),
        ),
        span(
            name="model request attempt scripted",
            span_id=sid(2),
            parent=sid(1),
            start_ms=2,
            end_ms=3,
            status=failed("ModelHTTPError: status_code: 500"),
            attributes=attrs(
                gen_ai__request__model="scripted", pydantic_ai__model_request__attempt=0
            ),
        ),
    )
    assert steps_of(fold) == [("chat scripted", 1, "success", False)]
    chat, attempt = fold.state.calls[1:]
    assert attempt.detail["attempt_of"] == chat.span_id
    assert [a["reason"] for a in chat.detail["attempts"]] == ["ModelHTTPError: status_code: 500"]


def test_openllmetry_decorators_are_steps_and_a_tools_card_reads_its_entity_io():
    fold = folded(
        root(
            name="weather_workflow.workflow",
            end_ms=100,
            attributes=attrs(traceloop__span__kind="workflow"),
        ),
        span(
            name="weather_agent.agent",
            span_id=sid(1),
            start_ms=1,
            end_ms=80,
            attributes=attrs(traceloop__span__kind="agent", gen_ai__agent__name="weather_agent"),
        ),
        span(
            name="get_weather.tool",
            span_id=sid(2),
            parent=sid(1),
            start_ms=2,
            end_ms=3,
            attributes=attrs(
                traceloop__span__kind="tool",
                gen_ai__tool__name="get_weather",
                traceloop__entity__input=json.dumps({"args": [], "kwargs": {"city": "Paris"}}),
                traceloop__entity__output=json.dumps("Sunny, 21C in Paris"),
            ),
        ),
        span(
            name="format_answer.task",
            span_id=sid(3),
            start_ms=81,
            end_ms=90,
            attributes=attrs(traceloop__span__kind="task"),
        ),
    )
    assert [s[0] for s in steps_of(fold)] == [
        "weather_agent.agent",
        "get_weather.tool",
        "format_answer.task",
    ]
    (tool,) = [c for c in fold.state.calls if c.kind == "tool"]
    assert tool.tool == {
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "result": "Sunny, 21C in Paris",
    }


def test_a_trace_jobs_events_are_its_spans_not_the_events_made_of_them():
    spans = openai_agents_run()
    assert folded(*spans).finish().event_count == len(spans)
