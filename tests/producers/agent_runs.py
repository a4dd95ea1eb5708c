"""What every agent framework's producer script runs (tests/producers/NAME/run.py): one weather
agent in four runs, each its own trace and so its own job in traceviz, exported span by span
(as each ends) to the live server over OTLP/HTTP. Standard library and the OpenTelemetry SDK
only, which every producer's environment has.

The four runs (``RUNS``):
- ``two_tools``: the model calls get_weather, then get_time, then answers;
- ``tool_fails``: the model calls lookup_stock, which raises; the agent hands the error back to
  the model, which answers;
- ``retried``: the model's first answer is an HTTP 500 and the SDK retries the call;
- ``raises``: the run raises (how depends on the framework).

The script prints one JSON line: by run, its trace id, its outcome (``ok: answer`` or ``raised
Type``), the HTTP statuses the fake model answered, and the run's total usage as the framework's
own root span states it (None when it states none).
"""

import argparse
import json
import os
from collections.abc import Callable
from typing import Any

from fake_openai import Reply, ToolCall
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

RUNS = ("two_tools", "tool_fails", "retried", "raises")
SYSTEM_PROMPT = "You are a helpful weather assistant."
PROMPTS = {
    "two_tools": "What's the weather and time in Paris?",
    "tool_fails": "What's ACME trading at?",
    "retried": "Hello",
    "raises": "What's the weather in Paris?",
}
ANSWERS = {
    "two_tools": "It is sunny and 21C in Paris, local time 14:05.",
    "tool_fails": "Sorry, the stock service is unavailable.",
    "retried": "Hello! How can I help?",
}
WEATHER = "Sunny, 21C in Paris"
STOCK_ERROR = "stock service unavailable for ACME"
# The fake model's scripts: its usage is (100 + n, 10 + n) for its n-th answer of a run.
REPLIES = {
    "two_tools": [
        Reply(
            tool_call=ToolCall("call_1", "get_weather", {"city": "Paris"}),
            prompt_tokens=101,
            completion_tokens=11,
        ),
        Reply(
            tool_call=ToolCall("call_2", "get_time", {"city": "Paris"}),
            prompt_tokens=102,
            completion_tokens=12,
        ),
        Reply(text=ANSWERS["two_tools"], prompt_tokens=103, completion_tokens=13),
    ],
    "tool_fails": [
        Reply(
            tool_call=ToolCall("call_1", "lookup_stock", {"symbol": "ACME"}),
            prompt_tokens=101,
            completion_tokens=11,
        ),
        Reply(text=ANSWERS["tool_fails"], prompt_tokens=102, completion_tokens=12),
    ],
    "retried": [
        Reply(status=500),
        Reply(text=ANSWERS["retried"], prompt_tokens=102, completion_tokens=12),
    ],
    # Every answer a 500: the run raises.
    "raises": [Reply(status=500)],
}
# The usage keys a framework's root span states its run's total under.
TOTAL_KEYS = (
    ("gen_ai.aggregated_usage.input_tokens", "gen_ai.aggregated_usage.output_tokens"),
    ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
)


def get_weather(city: str) -> str:
    return f"Sunny, 21C in {city}"


def get_time(city: str) -> str:
    return f"14:05 in {city}"


def lookup_stock(symbol: str) -> str:
    raise ValueError(f"stock service unavailable for {symbol}")


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", default=os.environ.get("TRACEVIZ_URL"))
    parser.add_argument("--token", default=os.environ.get("TRACEVIZ_TOKEN"))
    args = parser.parse_args()
    if not args.url or not args.token:
        parser.error("--url and --token (or TRACEVIZ_URL and TRACEVIZ_TOKEN) are required")
    return args


def exporter(args: argparse.Namespace) -> OTLPSpanExporter:
    """An OTLP/HTTP exporter to the traceviz at ``args.url``, with its ingest token."""
    return OTLPSpanExporter(
        endpoint=f"{args.url.rstrip('/')}/v1/traces",
        headers={"Authorization": f"Bearer {args.token}"},
        timeout=30,
    )


class Recorder:
    """Keeps a copy of the spans a TracerProvider exports, to report each run's trace id and
    the total its root span states."""

    def __init__(self, provider: TracerProvider):
        self.provider = provider
        self.memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(self.memory))
        self.runs: dict[str, dict[str, Any]] = {}

    def run(self, name: str, body: Callable[[], Any], statuses: list[int]) -> None:
        """Run ``body`` as run ``name`` and record it."""
        self.memory.clear()
        try:
            outcome = f"ok: {str(body()).strip()}"
        except Exception as error:
            outcome = f"raised {type(error).__name__}"
        self.provider.force_flush()
        spans = self.memory.get_finished_spans()
        roots = [span for span in spans if span.parent is None]
        root = roots[-1] if roots else None
        self.runs[name] = {
            "trace_id": format(root.context.trace_id, "032x") if root else "",
            "outcome": outcome,
            "statuses": list(statuses),
            "total": _total(dict(root.attributes or {})) if root else None,
            "spans": len(spans),
        }

    def report(self) -> None:
        print(json.dumps({"runs": self.runs}))


def _total(attributes: dict[str, Any]) -> list[int] | None:
    for input_key, output_key in TOTAL_KEYS:
        if input_key in attributes:
            return [attributes[input_key], attributes.get(output_key)]
    return None
