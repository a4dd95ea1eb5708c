"""A Strands agent (strands-agents, its OpenAI model provider, its own OpenTelemetry tracing
with the default settings) answering one question with one tool call, against the fake
OpenAI-compatible server in ``tests/producers/fake_openai.py``; its spans go to a traceviz.

    .venv-producers/strands/bin/python tests/producers/strands/run.py --url URL --token TOKEN

(or TRACEVIZ_URL and TRACEVIZ_TOKEN in the environment). Prints one JSON line: the trace id,
the agent's answer and the names of the spans exported.
"""

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fake_openai import FakeOpenAI, Reply, ToolCall
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from strands import Agent, tool
from strands.models.openai import OpenAIModel
from strands.telemetry import StrandsTelemetry

QUESTION = "Where is order 42?"
SYSTEM_PROMPT = "You answer questions about orders."
REPLIES = [
    Reply(tool_call=ToolCall("call_1", "lookup_order", {"order": 42}), prompt_tokens=120),
    Reply(text="Order 42 ships tomorrow from Lyon.", prompt_tokens=160, completion_tokens=12),
]


@tool
def lookup_order(order: int) -> str:
    """Where an order is.

    Args:
        order: the order number
    """
    return f"Order {order}: packed, ships tomorrow from Lyon."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("TRACEVIZ_URL"))
    parser.add_argument("--token", default=os.environ.get("TRACEVIZ_TOKEN"))
    args = parser.parse_args()
    if not args.url or not args.token:
        parser.error("--url and --token (or TRACEVIZ_URL and TRACEVIZ_TOKEN) are required")
    fake = FakeOpenAI(REPLIES).start()
    telemetry = StrandsTelemetry().setup_otlp_exporter(
        endpoint=f"{args.url.rstrip('/')}/v1/traces",
        headers={"Authorization": f"Bearer {args.token}"},
    )
    exported = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(exported))
    try:
        model = OpenAIModel(
            client_args={"api_key": "sk-fake", "base_url": fake.base_url},
            model_id="gpt-4o-mini",
        )
        agent = Agent(
            model=model, tools=[lookup_order], system_prompt=SYSTEM_PROMPT, callback_handler=None
        )
        answer = agent(QUESTION)
    finally:
        telemetry.tracer_provider.force_flush()
        fake.stop()
    spans = exported.get_finished_spans()
    print(
        json.dumps(
            {
                "trace_id": format(spans[0].context.trace_id, "032x") if spans else "",
                "answer": str(answer).strip(),
                "spans": [span.name for span in spans],
                "model_requests": len(fake.requests),
            }
        )
    )


if __name__ == "__main__":
    main()
