"""Calls inside a step (DESIGN.md section 3b): what an LLM, tool, retriever... span says, in one
shape whatever convention its producer followed (OpenInference's ``llm.*``, the ``gen_ai.*``
semantic conventions, Celery's publishing). Pure.

Tokens come from the span; cost from genai-prices (a maintained price table with its own data,
no network), never from prices typed here. Inputs, outputs and messages were bounded and
redacted at ingest like every other text.
"""

import functools
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from genai_prices import Usage, calc_price

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
}
PROVIDER_KEYS = ("gen_ai.provider.name", "llm.provider", "gen_ai.system", "llm.system")
MODEL_KEYS = ("gen_ai.response.model", "llm.model_name", "gen_ai.request.model")
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "llm.token_count.prompt")
OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "llm.token_count.completion")
TOTAL_TOKEN_KEYS = ("llm.token_count.total",)
OPENINFERENCE_MESSAGE = re.compile(r"^llm\.(input|output)_messages\.(\d+)\.message\.(.+)$")
LEGACY_GEN_AI_MESSAGE = re.compile(r"^gen_ai\.(prompt|completion)\.(\d+)\.(role|content)$")
TOOL_CALL = re.compile(r"^tool_calls\.(\d+)\.tool_call\.(?:function\.)?(name|arguments|id)$")
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
        "tool.parameters",
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
    )


def kind_of(span: Any) -> str:
    attrs = span.attrs
    if kind := KIND_BY_OPENINFERENCE.get(str(attrs.get(OPENINFERENCE_KIND, "")).upper()):
        return kind
    if kind := KIND_BY_GEN_AI_OPERATION.get(str(attrs.get("gen_ai.operation.name", ""))):
        return kind
    if attrs.get("celery.action") == "apply_async":
        return "publish"
    if any(key in attrs for key in MODEL_KEYS):
        return "llm"
    return "span"


def call_record(span: Any, step: Any, position: int, failure: tuple[str, str, str]) -> CallRecord:
    """``span`` as a call of ``step`` (None: of the job), ``failure`` its (reason, exception
    type, stack)."""
    attrs = span.attrs
    provider, model = first_text(attrs, PROVIDER_KEYS), first_text(attrs, MODEL_KEYS)
    tokens_in = first_int(attrs, INPUT_TOKEN_KEYS)
    tokens_out = first_int(attrs, OUTPUT_TOKEN_KEYS)
    total = first_int(attrs, TOTAL_TOKEN_KEYS)
    if total is None and tokens_in is not None and tokens_out is not None:
        total = tokens_in + tokens_out
    reason, exception_type, stack = failure
    detail: dict[str, Any] = {
        "attributes": {k: v for k, v in attrs.items() if not _shown_apart(k)},
        "events": [e for e in span.events if e.get("name") != "exception"],
    }
    if stack:
        detail["stack"] = stack
    if span.links:
        detail["links"] = span.links
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
        total_tokens=total,
        cost=cost_usd(provider, model, tokens_in or 0, tokens_out or 0)
        if (tokens_in or tokens_out) and model
        else None,
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
    for key in keys:
        value = attrs.get(key)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


@functools.lru_cache(maxsize=4096)
def cost_usd(provider: str, model: str, input_tokens: int, output_tokens: int) -> float | None:
    """The call's price in USD from genai-prices, None when it does not know the model."""
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    for provider_id in (provider or None, None):
        try:
            price = calc_price(usage, model_ref=model, provider_id=provider_id)
        except LookupError:
            continue
        return float(price.total_price)
    return None


def _value(attrs: dict[str, Any], side: str) -> dict[str, Any] | None:
    value = attrs.get(f"{side}.value")
    if value is None:
        return None
    return {"value": value, "mime_type": attrs.get(f"{side}.mime_type") or ""}


def _tool(attrs: dict[str, Any]) -> dict[str, Any] | None:
    name = first_text(attrs, ("tool.name", "gen_ai.tool.name"))
    if not name:
        return None
    tool = {"name": name}
    arguments = attrs.get("tool.parameters") or attrs.get("gen_ai.tool.call.arguments")
    if arguments is not None:
        tool["arguments"] = arguments
    if (result := attrs.get("gen_ai.tool.call.result")) is not None:
        tool["result"] = result
    return tool


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
    for key in sorted(legacy):
        (slots.input if key[0] == 0 else slots.output).append(legacy[key])
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
    message = {"direction": direction, "role": role, "content": parts_text(parts)}
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
    if part.get("type") == "tool_call_response" and "response" in part:
        response = part["response"]
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
