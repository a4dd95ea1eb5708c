"""A Strands agent (strands-agents, its OpenAI model provider, its own OpenTelemetry tracing with
the default settings: content as span events) against the fake OpenAI-compatible server in
``tests/producers/fake_openai.py``, its spans exported to a traceviz: the four runs of
``tests/producers/agent_runs.py``. The SDK's retry of a model call answered 500 is Strands' own
``ModelRetryStrategy`` (widened to server errors; the client's own retries off); the run that
raises gets a 500 for every model call.

    .venv-producers/strands/bin/python tests/producers/strands/run.py --url URL --token TOKEN
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import agent_runs
import openai
from fake_openai import FakeOpenAI
from strands import Agent, ModelRetryStrategy, tool
from strands.models.openai import OpenAIModel
from strands.telemetry import StrandsTelemetry


class RetryServerErrors(ModelRetryStrategy):
    """Strands' retry strategy (by default only for throttling) for server errors too."""

    def is_retryable(self, exception):
        return super().is_retryable(exception) or isinstance(exception, openai.InternalServerError)


@tool
def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: the city name
    """
    return agent_runs.get_weather(city)


@tool
def get_time(city: str) -> str:
    """Get the local time for a city.

    Args:
        city: the city name
    """
    return agent_runs.get_time(city)


@tool
def lookup_stock(symbol: str) -> str:
    """Look up a stock price.

    Args:
        symbol: the stock symbol
    """
    return agent_runs.lookup_stock(symbol)


def one_run(fake: FakeOpenAI, name: str) -> str:
    model = OpenAIModel(
        client_args={"api_key": "sk-fake", "base_url": fake.base_url, "max_retries": 0},
        model_id="gpt-4o-mini",
    )
    agent = Agent(
        model=model,
        name="weather_agent",
        system_prompt=agent_runs.SYSTEM_PROMPT,
        tools=[get_weather, get_time, lookup_stock],
        callback_handler=None,
        retry_strategy=RetryServerErrors(max_attempts=2, initial_delay=0),
    )
    return str(agent(agent_runs.PROMPTS[name]))


def main() -> None:
    args = agent_runs.arguments(__doc__.split("\n\n")[0])
    telemetry = StrandsTelemetry().setup_otlp_exporter(
        endpoint=f"{args.url.rstrip('/')}/v1/traces",
        headers={"Authorization": f"Bearer {args.token}"},
    )
    recorder = agent_runs.Recorder(telemetry.tracer_provider)
    for name in agent_runs.RUNS:
        fake = FakeOpenAI(agent_runs.REPLIES[name]).start()
        try:
            recorder.run(name, lambda fake=fake, name=name: one_run(fake, name), fake.statuses)
        finally:
            fake.stop()
    telemetry.tracer_provider.force_flush()
    recorder.report()


if __name__ == "__main__":
    main()
