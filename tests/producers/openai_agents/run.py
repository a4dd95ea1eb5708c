"""The OpenAI Agents SDK (openai-agents) traced by OpenInference's instrumentation
(openinference-instrumentation-openai-agents), its model the fake OpenAI-compatible server in
``tests/producers/fake_openai.py`` through the Chat Completions API, its spans exported to a
traceviz: the four runs of ``tests/producers/agent_runs.py``. The SDK's retry of a model call
answered 500 is its runner's (``ModelSettings.retry``, the client's own retries off); the run
that raises exceeds its maximum number of turns (``MaxTurnsExceeded``).

    .venv-producers/openai_agents/bin/python tests/producers/openai_agents/run.py \\
        --url URL --token TOKEN
"""

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agent_runs
from agent_runs import REPLIES, Reply, ToolCall
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_trace_processors,
)
from agents.retry import ModelRetrySettings, retry_policies
from fake_openai import FakeOpenAI
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

WORKFLOW = "weather workflow"
RETRY_ON_500 = ModelSettings(
    retry=ModelRetrySettings(
        max_retries=2,
        backoff={"initial_delay": 0.01, "jitter": False},
        policy=retry_policies.http_status([500]),
    )
)
SCRIPTS = {
    **REPLIES,
    # The model asks for a tool on every turn: the run exceeds its two turns.
    "raises": [Reply(tool_call=ToolCall("call_1", "get_weather", {"city": "Paris"}))],
}


@function_tool
def get_weather(city: str) -> str:
    """Get the current weather for a city."""
    return agent_runs.get_weather(city)


@function_tool
def get_time(city: str) -> str:
    """Get the local time for a city."""
    return agent_runs.get_time(city)


@function_tool
def lookup_stock(symbol: str) -> str:
    """Look up a stock price."""
    return agent_runs.lookup_stock(symbol)


def one_run(fake: FakeOpenAI, name: str) -> str:
    client = AsyncOpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)
    agent = Agent(
        name="weather_agent",
        instructions=agent_runs.SYSTEM_PROMPT,
        model=OpenAIChatCompletionsModel("gpt-4o-mini", client),
        tools=[get_weather, get_time, lookup_stock],
        model_settings=RETRY_ON_500 if name == "retried" else ModelSettings(),
    )
    result = asyncio.run(
        Runner.run(
            agent,
            agent_runs.PROMPTS[name],
            run_config=RunConfig(workflow_name=WORKFLOW),
            max_turns=2 if name == "raises" else 10,
        )
    )
    return result.final_output


def main() -> None:
    args = agent_runs.arguments(__doc__.split("\n\n")[0])
    provider = TracerProvider(resource=Resource.create({"service.name": "weather-service"}))
    provider.add_span_processor(SimpleSpanProcessor(agent_runs.exporter(args)))
    recorder = agent_runs.Recorder(provider)
    # No span goes to OpenAI's own tracing backend (no network here).
    set_trace_processors([])
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    for name in agent_runs.RUNS:
        fake = FakeOpenAI(SCRIPTS[name]).start()
        try:
            recorder.run(name, lambda fake=fake, name=name: one_run(fake, name), fake.statuses)
        finally:
            fake.stop()
    provider.shutdown()
    recorder.report()


if __name__ == "__main__":
    main()
