"""Calls inside a step (docs/otlp.md, "Calls"): what an LLM, tool, retriever... span says, in
one shape whatever convention its producer followed (OpenInference's ``llm.*``, the ``gen_ai.*``
semantic conventions, OpenLLMetry's ``traceloop.*``, Celery's publishing). Pure.

Tokens come from the span; cost from genai-prices (a maintained price table with its own data,
no network), never from prices typed here. A span's usage that repeats the total of the calls
below it (an agent's run total) is kept apart, never added to theirs (``call_record``'s
``total``). Inputs, outputs and messages were bounded and redacted at ingest like every other
text.
"""

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from genai_prices import Usage, calc_price
from genai_prices.data_snapshot import find_provider_by_id, get_snapshot

from jobs.contract import events
from jobs.contract.events import loads_within_depth

OPENINFERENCE_KIND = "openinference.span.kind"
# OpenInference's span kinds, and what gen_ai.operation.name says, as one vocabulary.
KIND_BY_OPENINFERENCE = {
    "LLM": "llm",
    "TOOL": "tool",
    "RETRIEVER": "retriever",
    "EMBEDDING": "embedding",
    "RERANKER": "reranker",
    "CHAIN": "chain",
    "AGENT": "agent",
    "GUARDRAIL": "guardrail",
    "EVALUATOR": "evaluator",
    "PROMPT": "prompt",
}
KIND_BY_GEN_AI_OPERATION = {
    "chat": "llm",
    "text_completion": "llm",
    "generate_content": "llm",
    "embeddings": "embedding",
    "execute_tool": "tool",
    "invoke_agent": "agent",
    "create_agent": "agent",
    # Strands' event loop cycle: a model call and the tools it asked for.
    "execute_event_loop_cycle": "chain",
}
# OpenLLMetry's decorators (``@workflow``, ``@task``, ``@agent``, ``@tool``) name what a span is.
TRACELOOP_KIND = "traceloop.span.kind"
KIND_BY_TRACELOOP = {"tool": "tool", "agent": "agent", "task": "task", "workflow": "workflow"}
PROVIDER_KEYS = ("gen_ai.provider.name", "llm.provider", "gen_ai.system", "llm.system")
MODEL_KEYS = ("gen_ai.response.model", "llm.model_name", "gen_ai.request.model")
# The first key a span has counts: the older ``prompt_tokens`` / ``completion_tokens`` that some
# SDKs write beside the current names (Strands) are the same tokens, never added to them. The
# contract bounds each (``SPAN_NUMBER_BOUNDS``).
INPUT_TOKEN_KEYS = events.INPUT_TOKEN_KEYS
OUTPUT_TOKEN_KEYS = events.OUTPUT_TOKEN_KEYS
TOTAL_TOKEN_KEYS = events.TOTAL_TOKEN_KEYS
# A call's price is held here (USD): a sum of ten of them still fits a job's cost column, so a
# price table's odd entry times MAX_TOKENS cannot overflow it.
MAX_CALL_COST = 10_000_000.0
OPENINFERENCE_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d{1,9})\.message\.(.+)$")
LEGACY_GEN_AI_MESSAGE = re.compile(r"^gen_ai\.(prompt|completion)\.(\d{1,9})\.(role|content)$")
TOOL_CALL = re.compile(r"^tool_calls\.(\d{1,9})\.tool_call\.(?:function\.)?(name|arguments|id)$")
CONTENT_TEXT = re.compile(r"^contents\.\d+\.message_content\.text$")
# Attributes a call shows in its own fields; the rest are its "other attributes".
SHOWN_APART = frozenset(
    {
        OPENINFERENCE_KIND,
        *PROVIDER_KEYS,
        *MODEL_KEYS,
        *INPUT_TOKEN_KEYS,
        *OUTPUT_TOKEN_KEYS,
        *TOTAL_TOKEN_KEYS,
        "input.value",
        "input.mime_type",
        "output.value",
        "output.mime_type",
        "tool.name",
        "gen_ai.tool.name",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.system_instructions",
        "gen_ai.operation.name",
    }
)
GEN_AI_MESSAGE_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
)


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call, as the Call row stores it. ``node_id`` is "" for a call of the job itself."""

    span_id: str
    parent_span_id: str
    node_id: str
    attempt: int | None
    position: int
    kind: str
    name: str
    status: str
    reason: str
    exception_type: str
    started_at: datetime
    finished_at: datetime
    duration_ms: float
    provider: str = ""
    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cost: float | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    input: dict[str, Any] | None = None
    output: dict[str, Any] | None = None
    tool: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def is_marked(span: Any) -> bool:
    """Whether a span's instrumentation marks it as a call (LLM, tool, retriever...)."""
    attrs = span.attrs
    return (
        OPENINFERENCE_KIND in attrs
        or "gen_ai.operation.name" in attrs
        or any(key in attrs for key in (*PROVIDER_KEYS, *MODEL_KEYS))
        or attrs.get("celery.action") == "apply_async"
        or attrs.get(TRACELOOP_KIND) == "tool"
    )


def kind_of(span: Any) -> str:
    attrs = span.attrs
    if kind := KIND_BY_OPENINFERENCE.get(str(attrs.get(OPENINFERENCE_KIND, "")).upper()):
        return kind
    if kind := KIND_BY_GEN_AI_OPERATION.get(str(attrs.get("gen_ai.operation.name", ""))):
        return kind
    if kind := KIND_BY_TRACELOOP.get(str(attrs.get(TRACELOOP_KIND, ""))):
        return kind
    if attrs.get("celery.action") == "apply_async":
        return "publish"
    if any(key in attrs for key in MODEL_KEYS):
        return "llm"
    return "span"


def has_usage(span: Any) -> bool:
    """Whether a span states tokens (its own, or a total of calls below it)."""
    attrs = span.attrs
    return (
        first_int(attrs, INPUT_TOKEN_KEYS) is not None
        or first_int(attrs, OUTPUT_TOKEN_KEYS) is not None
    )


def call_record(
    span: Any, step: Any, position: int, failure: tuple[str, str, str], total: bool = False
) -> CallRecord:
    """``span`` as a call of ``step`` (None: of the job), ``failure`` its (reason, exception
    type, stack). ``total``: the tokens the span states are the total of the calls below it
    (an agent's run total): kept in ``detail["usage_total"]``, not as the call's own tokens,
    so that every sum over calls counts each model call once."""
    attrs = span.attrs
    provider = events.cut(first_text(attrs, PROVIDER_KEYS))
    model = events.cut(first_text(attrs, MODEL_KEYS))
    tokens_in = first_int(attrs, INPUT_TOKEN_KEYS)
    tokens_out = first_int(attrs, OUTPUT_TOKEN_KEYS)
    total_tokens = first_int(attrs, TOTAL_TOKEN_KEYS)
    if total_tokens is None and tokens_in is not None and tokens_out is not None:
        total_tokens = tokens_in + tokens_out
    reason, exception_type, stack = failure
    detail: dict[str, Any] = {
        "attributes": {k: v for k, v in attrs.items() if not _shown_apart(k)},
        "events": [e for e in span.events if e.get("name") != "exception"],
    }
    if stack:
        detail["stack"] = stack
    if span.links:
        detail["links"] = span.links
    if total and (tokens_in is not None or tokens_out is not None):
        detail["usage_total"] = {
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "total_tokens": total_tokens,
        }
        tokens_in = tokens_out = total_tokens = None
    cost, provider = price(provider, model, tokens_in or 0, tokens_out or 0)
    return CallRecord(
        span_id=span.span_id,
        parent_span_id=span.parent_id,
        node_id=step.node_id if step is not None else "",
        attempt=step.attempt if step is not None else None,
        position=position,
        kind=kind_of(span),
        name=span.name,
        status=span.status_code,
        reason=reason,
        exception_type=exception_type,
        started_at=span.start,
        finished_at=span.end,
        duration_ms=(span.end - span.start).total_seconds() * 1000,
        provider=provider,
        model=model,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=total_tokens,
        cost=cost if tokens_in or tokens_out else None,
        messages=transcript(attrs),
        input=_value(attrs, "input"),
        output=_value(attrs, "output"),
        tool=_tool(attrs),
        detail=detail,
    )


def _shown_apart(key: str) -> bool:
    return (
        key in SHOWN_APART
        or OPENINFERENCE_MESSAGE.match(key) is not None
        or LEGACY_GEN_AI_MESSAGE.match(key) is not None
    )


def first_text(attrs: dict[str, Any], keys: tuple[str, ...]) -> str:
    return next((attrs[k] for k in keys if isinstance(attrs.get(k), str) and attrs[k]), "")


def first_int(attrs: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """The first of ``keys`` (token counts) that holds a count within the contract's bounds."""
    for key in keys:
        if (value := events.bounded_attribute(attrs, key)) is not None:
            return value
    return None


@functools.lru_cache(maxsize=4096)
def price(
    provider: str, model: str, input_tokens: int, output_tokens: int
) -> tuple[float | None, str]:
    """The call's price in USD from genai-prices (None when it does not know the model), and
    the provider the call is shown under: its own, or, when genai-prices knows no provider of
    that name (an SDK naming itself, as Strands does: ``strands-agents``), the provider it
    finds for the model (``gpt-4o-mini``: openai). When it cannot tell, the name stays."""
    if not model:
        return None, provider
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    if provider and knows_provider(provider):
        try:
            found = calc_price(usage, model_ref=model, provider_id=provider)
        except LookupError:
            pass
        else:
            return min(float(found.total_price), MAX_CALL_COST), provider
    try:
        found = calc_price(usage, model_ref=model)
    except LookupError:
        return None, provider
    cost = min(float(found.total_price), MAX_CALL_COST)
    return cost, provider if knows_provider(provider) else found.provider.id


@functools.lru_cache(maxsize=256)
def knows_provider(provider: str) -> bool:
    """Whether genai-prices has a provider of this name (its id or one of its aliases)."""
    return bool(provider) and find_provider_by_id(get_snapshot().providers, provider) is not None


def cost_usd(provider: str, model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The call's price in USD from genai-prices, None when it does not know the model."""
    return price(provider, model, input_tokens, output_tokens)[0]


def _value(attrs: dict[str, Any], side: str) -> dict[str, Any] | None:
    value = attrs.get(f"{side}.value")
    if value is None:
        return None
    return {"value": value, "mime_type": attrs.get(f"{side}.mime_type") or ""}


def _tool(attrs: dict[str, Any]) -> dict[str, Any] | None:
    """A tool span's name, arguments and result, each framework's key: ``gen_ai.tool.call.*``
    (the GenAI conventions, Pydantic AI), ``input.value`` / ``output.value`` (OpenInference's
    TOOL span), ``traceloop.entity.input`` / ``.output`` (OpenLLMetry's ``@tool``). Never the
    tool's schema (``tool.parameters``, ``gen_ai.tool.json_schema``): that is what it takes,
    not what it was given."""
    name = first_text(attrs, ("tool.name", "gen_ai.tool.name", "traceloop.entity.name"))
    if not name:
        return None
    tool = {"name": name}
    arguments = attrs.get("gen_ai.tool.call.arguments")
    result = attrs.get("gen_ai.tool.call.result")
    if attrs.get(TRACELOOP_KIND) == "tool":
        arguments = _traceloop_arguments(attrs.get("traceloop.entity.input"))
        result = _json_text(attrs.get("traceloop.entity.output"))
    elif str(attrs.get(OPENINFERENCE_KIND, "")).upper() == "TOOL":
        arguments = attrs.get("input.value") if arguments is None else arguments
        result = attrs.get("output.value") if result is None else result
    if arguments is not None:
        tool["arguments"] = arguments
    if result is not None:
        # A list of content blocks ([{"text": ...}]: Strands) reads as its text.
        tool["result"] = parts_text(result) if isinstance(result, str | list) else result
    return tool


def _json_text(value: Any) -> Any:
    """A JSON-encoded string (OpenLLMetry encodes a tool's return value) as the string."""
    if isinstance(value, str) and value.startswith('"'):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, str) else value
    return value


def _traceloop_arguments(value: Any) -> Any:
    """OpenLLMetry's ``{"args": [...], "kwargs": {...}}``: the keyword arguments alone when
    there are no positional ones (JSON text as it came otherwise)."""
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    if isinstance(parsed, dict) and not parsed.get("args") and "kwargs" in parsed:
        return json.dumps(parsed["kwargs"])
    return value


@dataclass(slots=True)
class Slots:
    """A transcript in its three parts (the system instructions, the messages a call read,
    those it wrote), oldest message first in each."""

    system: list[dict[str, Any]] = field(default_factory=list)
    input: list[dict[str, Any]] = field(default_factory=list)
    output: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, other: "Slots") -> None:
        self.system += other.system
        self.input += other.input
        self.output += other.output

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.system + self.input + self.output


def transcript(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages a call's attributes hold, oldest first: [{direction, role, content,
    tool_calls}], from OpenInference's flattened ``llm.*_messages`` or gen_ai's messages."""
    return transcript_slots(attrs).messages


def transcript_slots(attrs: dict[str, Any]) -> Slots:
    """``transcript`` in its slots (OpenInference's system messages are among its inputs)."""
    messages = _openinference_messages(attrs)
    if messages:
        return Slots(
            input=[m for m in messages if m["direction"] == "in"],
            output=[m for m in messages if m["direction"] == "out"],
        )
    return gen_ai_slots(attrs)


def _openinference_messages(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    found: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        match = OPENINFERENCE_MESSAGE.match(key)
        if match is None:
            continue
        side, index, rest = match.groups()
        message = found.setdefault(
            (0 if side == "input" else 1, int(index)),
            {"direction": "in" if side == "input" else "out", "role": "", "content": ""},
        )
        if rest == "role":
            message["role"] = str(value)
        elif rest == "content" or CONTENT_TEXT.match(rest):
            message["content"] = (message["content"] + "\n" + str(value)).strip("\n")
        elif tool_call := TOOL_CALL.match(rest):
            calls = message.setdefault("tool_calls", {})
            calls.setdefault(int(tool_call.group(1)), {})[tool_call.group(2)] = str(value)
    return [_finished(found[key]) for key in sorted(found)]


def _finished(message: dict[str, Any]) -> dict[str, Any]:
    if "tool_calls" in message:
        message["tool_calls"] = [message["tool_calls"][i] for i in sorted(message["tool_calls"])]
    return message


def gen_ai_slots(attrs: dict[str, Any]) -> Slots:
    """The gen_ai messages of ``attrs`` (span attributes, or those of a content event):
    ``gen_ai.system_instructions``, ``gen_ai.input.messages`` / ``gen_ai.output.messages``,
    else the older ``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``."""
    slots = Slots()
    if instructions := attrs.get("gen_ai.system_instructions"):
        content = parts_text(instructions)
        slots.system.append({"direction": "in", "role": "system", "content": content})
    for key, direction in (("gen_ai.input.messages", "in"), ("gen_ai.output.messages", "out")):
        found = [
            gen_ai_message(item, direction)
            for item in _json_list(attrs.get(key))
            if isinstance(item, dict)
        ]
        (slots.input if direction == "in" else slots.output).extend(found)
    if slots.system or slots.input or slots.output:
        return slots
    legacy: dict[tuple[int, int], dict[str, Any]] = {}
    for key, value in attrs.items():
        if match := LEGACY_GEN_AI_MESSAGE.match(key):
            side, index, part = match.groups()
            message = legacy.setdefault(
                (0 if side == "prompt" else 1, int(index)),
                {"direction": "in" if side == "prompt" else "out", "role": "", "content": ""},
            )
            message[part] = str(value)
    for slot in sorted(legacy):
        (slots.input if slot[0] == 0 else slots.output).append(legacy[slot])
    return slots


def _json_list(value: Any) -> list:
    if isinstance(value, str):
        value = loads_within_depth(value)
    return value if isinstance(value, list) else []


def gen_ai_message(item: dict[str, Any], direction: str) -> dict[str, Any]:
    """A gen_ai message ({role, parts}, or {role, content}): its text, and its tool call
    requests apart as OpenInference's flattened ones read (id, name, arguments as JSON text).
    A request is a ``tool_call`` part, or a Bedrock ``toolUse`` content block (Strands)."""
    parts = item.get("parts", item.get("content", ""))
    if isinstance(parts, str) and parts.startswith("["):
        parts = _json_list(parts) or parts
    requests = []
    if isinstance(parts, list):
        requests = [p for p in parts if _is_tool_call(p)]
        parts = [part for part in parts if not _is_tool_call(part)]
    role = str(item.get("role") or "")
    message: dict[str, Any] = {"direction": direction, "role": role, "content": parts_text(parts)}
    if requests:
        message["tool_calls"] = [tool_call_request(_tool_use(part)) for part in requests]
    return message


def _is_tool_call(part: Any) -> bool:
    return isinstance(part, dict) and (part.get("type") == "tool_call" or "toolUse" in part)


def _tool_use(part: dict[str, Any]) -> dict[str, Any]:
    """A Bedrock ``toolUse`` block ({toolUseId, name, input}) as a ``tool_call`` part."""
    use = part.get("toolUse")
    if not isinstance(use, dict):
        return part
    return {"id": use.get("toolUseId"), "name": use.get("name"), "arguments": use.get("input")}


def tool_call_request(part: dict[str, Any]) -> dict[str, str]:
    """A tool call request's id, name and arguments (JSON text), those it has."""
    request = {name: str(part[name]) for name in ("id", "name") if part.get(name) is not None}
    arguments = part.get("arguments")
    if arguments is not None:
        request["arguments"] = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return request


def parts_text(value: Any) -> str:
    """gen_ai message parts ([{type: text, content}, {type: tool_call_response, response},
    ...]), Bedrock content blocks ([{text}, {toolResult: {content: [...]}}]) or plain
    content, as text."""
    if isinstance(value, str):
        parsed = _json_list(value) if value.startswith("[") else None
        if not parsed:
            return value
        value = parsed
    if isinstance(value, list):
        return "\n".join(_part_text(part) for part in value)
    return json.dumps(value) if value is not None else ""


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return str(part)
    if text := part.get("content") or part.get("text"):
        return text if isinstance(text, str) else parts_text(text)
    if part.get("type") == "tool_call_response" and ("response" in part or "result" in part):
        # OpenLLMetry and Strands write the tool's answer as ``response``, Pydantic AI as
        # ``result``.
        response = part.get("response", part.get("result"))
        return response if isinstance(response, str) else parts_text(response)
    if isinstance(result := part.get("toolResult"), dict):
        return parts_text(result.get("content", ""))
    return json.dumps(part)


def job_provider_model(calls: list[CallRecord], planner_nodes: set[str]) -> tuple[str, str]:
    """The job's provider and model: its planner's first LLM call's, else its first LLM call's
    (never the last one's)."""
    llm = [call for call in calls if names_a_model(call)]
    planner = [call for call in llm if call.node_id in planner_nodes]
    first = min(planner or llm, key=lambda c: (c.started_at, c.position), default=None)
    return (first.provider, first.model) if first else ("", "")


def names_a_model(call: CallRecord) -> bool:
    """An LLM call that says which provider or model it used (the job's may come from it)."""
    return call.kind == "llm" and bool(call.provider or call.model)
