"""OpenLLMetry (traceloop-sdk) pointed at a traceviz: a ``@workflow`` that runs an ``@agent``
(its own loop over the OpenAI client, which traceloop's OpenAI instrumentation traces, and
``@tool`` functions) then a ``@task``, the model the fake OpenAI-compatible server in
``tests/producers/fake_openai.py``: the four runs of ``tests/producers/agent_runs.py``. The
model call answered 500 is retried by the application (the client's own retries off); the run
that raises gets a 500 for every model call.

    .venv-producers/openllmetry/bin/python tests/producers/openllmetry/run.py \\
        --url URL --token TOKEN
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# No usage telemetry or metrics to traceloop's own backend (no network here).
os.environ["TRACELOOP_TELEMETRY"] = "false"
os.environ["TRACELOOP_METRICS_ENABLED"] = "false"

import agent_runs
import openai
from fake_openai import FakeOpenAI
from opentelemetry import trace
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import agent, task, tool, workflow

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {argument: {"type": "string"}},
                "required": [argument],
            },
        },
    }
    for name, description, argument in (
        ("get_weather", "Get the current weather for a city.", "city"),
        ("get_time", "Get the local time for a city.", "city"),
        ("lookup_stock", "Look up a stock price.", "symbol"),
    )
]


@tool(name="get_weather")
def get_weather(city: str) -> str:
    return agent_runs.get_weather(city)


@tool(name="get_time")
def get_time(city: str) -> str:
    return agent_runs.get_time(city)


@tool(name="lookup_stock")
def lookup_stock(symbol: str) -> str:
    return agent_runs.lookup_stock(symbol)


TOOL_FUNCTIONS = {"get_weather": get_weather, "get_time": get_time, "lookup_stock": lookup_stock}


def ask(client: openai.OpenAI, messages: list, retries: int):
    """One model call; on a server error the application retries it, ``retries`` times."""
    for attempt in range(retries + 1):
        try:
            return (
                client.chat.completions.create(model="gpt-4o-mini", messages=messages, tools=TOOLS)
                .choices[0]
                .message
            )
        except openai.InternalServerError:
            if attempt == retries:
                raise
    raise AssertionError("unreachable")


@agent(name="weather_agent")
def weather_agent(client: openai.OpenAI, prompt: str, retries: int) -> str:
    messages = [
        {"role": "system", "content": agent_runs.SYSTEM_PROMPT},
        {"role": "user", "content": prompt},
    ]
    for _turn in range(5):
        message = ask(client, messages, retries)
        if not message.tool_calls:
            return message.content
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            try:
                function = TOOL_FUNCTIONS[call.function.name]
                result = function(**json.loads(call.function.arguments))
            except ValueError as error:  # the agent hands a tool's failure to the model
                result = f"Error: {error}"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    raise RuntimeError("max turns (5) exceeded")


@task(name="format_answer")
def format_answer(text: str) -> str:
    return text.strip()


@workflow(name="weather_workflow")
def weather_workflow(client: openai.OpenAI, prompt: str, retries: int) -> str:
    return format_answer(weather_agent(client, prompt, retries))


def main() -> None:
    args = agent_runs.arguments(__doc__.split("\n\n")[0])
    Traceloop.init(
        app_name="weather-service",
        api_endpoint=args.url.rstrip("/"),
        headers={"Authorization": f"Bearer {args.token}"},
        disable_batch=True,
        telemetry_enabled=False,
    )
    provider = trace.get_tracer_provider()
    recorder = agent_runs.Recorder(provider)
    for name in agent_runs.RUNS:
        fake = FakeOpenAI(agent_runs.REPLIES[name]).start()
        client = openai.OpenAI(base_url=fake.base_url, api_key="sk-fake", max_retries=0)
        retries = 1 if name in ("retried", "raises") else 0
        try:
            recorder.run(
                name,
                lambda client=client, name=name, retries=retries: weather_workflow(
                    client, agent_runs.PROMPTS[name], retries
                ),
                fake.statuses,
            )
        finally:
            fake.stop()
    provider.force_flush()
    recorder.report()


if __name__ == "__main__":
    main()
