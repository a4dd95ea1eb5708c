"""A Pydantic AI agent (pydantic-ai-slim, its native OpenTelemetry instrumentation) whose model is
a ``FunctionModel`` answering from a script (no network, no real LLM; named gpt-4o-mini, so the
calls are priced as that model), its spans exported to a traceviz: the four runs of
``tests/producers/agent_runs.py``. The failing tool raises ``ModelRetry`` (Pydantic AI's way to
hand a tool's error back to the model); the model call answered 500 is retried by a
``FallbackModel``; the run that raises gets a 500 for every model call.

    .venv-producers/pydantic_ai/bin/python tests/producers/pydantic_ai/run.py \\
        --url URL --token TOKEN
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agent_runs
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import ModelHTTPError
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

MODEL = "gpt-4o-mini"


def scripted(replies: list[agent_runs.Reply]) -> FunctionModel:
    """A model answering the n-th request of a run with ``replies[n]`` (the last one again past
    the end), as the fake OpenAI server does: text, a tool call, or an HTTP error."""
    count = {"requests": 0}

    def answer(messages, info: AgentInfo) -> ModelResponse:
        reply = replies[min(count["requests"], len(replies) - 1)]
        count["requests"] += 1
        if reply.status != 200:
            raise ModelHTTPError(reply.status, MODEL, body={"error": "fake upstream failure"})
        if reply.tool_call is not None:
            call = reply.tool_call
            return ModelResponse(parts=[ToolCallPart(call.name, call.arguments, call.call_id)])
        return ModelResponse(parts=[TextPart(reply.text)])

    return FunctionModel(answer, model_name=MODEL)


def weather_agent(model) -> Agent:
    agent = Agent(model, name="weather_agent", instructions=agent_runs.SYSTEM_PROMPT)

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        return agent_runs.get_weather(city)

    @agent.tool_plain
    def get_time(city: str) -> str:
        """Get the local time for a city."""
        return agent_runs.get_time(city)

    @agent.tool_plain
    def lookup_stock(symbol: str) -> str:
        """Look up a stock price."""
        try:
            return agent_runs.lookup_stock(symbol)
        except ValueError as error:
            raise ModelRetry(str(error)) from error

    return agent


def one_run(name: str) -> str:
    replies = agent_runs.REPLIES[name]
    if name == "retried":
        failing, answering = scripted(replies[:1]), scripted(replies[1:])
        model = FallbackModel(failing, answering)
    else:
        model = scripted(replies)
    return weather_agent(model).run_sync(agent_runs.PROMPTS[name]).output


def main() -> None:
    args = agent_runs.arguments(__doc__.split("\n\n")[0])
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-service"}))
    provider.add_span_processor(SimpleSpanProcessor(agent_runs.exporter(args)))
    recorder = agent_runs.Recorder(provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    for name in agent_runs.RUNS:
        recorder.run(name, lambda name=name: one_run(name), [])
    provider.shutdown()
    recorder.report()


if __name__ == "__main__":
    main()
