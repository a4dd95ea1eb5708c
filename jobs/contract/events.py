"""The event contract v1 (docs/contract.md): one event, its validation, and event order.

Pure: plain decoded data in, ``Event`` objects and field-level errors out. Nothing here raises
for a bad event; the same bad input always gets the same messages. Request bodies (media types,
gzip, NDJSON, batch limits) are ``bodies``' concern.
"""

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeGuard

import msgspec
import orjson

from jobs.contract import ids

MAX_ID_CHARS = 200
MAX_REASON_BYTES = 64 * 1024
# The contract's numeric bounds, in one place: validation refuses what falls outside them (a
# field error), and what reads stored values (replay, pages, periodic tasks) may rely on them.
# docs/contract.md lists them.
MAX_SMALL_INT = 2**62
MAX_ATTEMPT = 1_000_000
MAX_STEP_INDEX = 10_000_000
MAX_DURATION_MS = 10**12
# A call's token count: far past any model's context, small enough that the sums of a job's,
# a provider's or a day's calls stay within a BIGINT, and a call's cost within its column.
MAX_TOKENS = 10**12
# Payloads nest at most this deep (the payload object is level 1): deeper ones are refused, so
# redaction, storage and pages never recurse without bound.
MAX_PAYLOAD_DEPTH = 64
# A producer's failure fingerprint (``fingerprint``, ``traceviz.fingerprint``): at most this many
# strings of 1 to MAX_ID_CHARS characters each.
MAX_FINGERPRINT_ELEMENTS = 16
MIN_TS_YEAR, MAX_TS_YEAR = 1970, 8999
TS_RANGE_MESSAGE = f"must fall in the years {MIN_TS_YEAR} to {MAX_TS_YEAR} (UTC)"
TRUNCATION_MARKER = "… [truncated {dropped} bytes]"
CUT_MARKER = "… [+{dropped} chars]"
# An integer attribute sent as digits longer than this is past every bound (it is not read).
MAX_DIGITS = 20
PAST_EVERY_BOUND = 10**MAX_DIGITS


# Event order within a job (docs/contract.md): ts, seq, this rank, attempt, event_id.
TYPE_RANK = {
    "job_started": 0,
    "node_started": 1,
    "node_finished": 2,
    "compensation_finished": 3,
    "state_checkpointed": 4,
    "cancel_requested": 5,
    "escalation_raised": 6,
    "graph.next_step.parse_invalid": 7,
    "graph.next_step.degraded": 7,
    "job_finished": 8,
}
OTHER_TYPE_RANK = 9
PLANNER_TYPES = frozenset({"graph.next_step.parse_invalid", "graph.next_step.degraded"})
SPAN_KINDS = ("internal", "server", "client", "producer", "consumer", "unspecified")


@dataclass(frozen=True, slots=True)
class FieldError:
    field: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


@dataclass(frozen=True, slots=True)
class Event:
    """One valid event. ``ts`` is None when the producer sent none (ingest uses receive time).
    ``masked``: the payload paths redaction masked (``redaction.redacted``), once it ran."""

    type: str
    job_id: str
    event_id: str
    ts: datetime | None
    seq: int | None
    payload: dict[str, Any]
    masked: tuple[str, ...] = ()

    @property
    def attempt(self) -> int:
        """The payload's attempt (validation bounds it on every type), else 1."""
        value = self.payload.get("attempt")
        return value if _is_int(value) else 1


@dataclass(frozen=True, slots=True)
class UnreadableItem:
    """An item of a body that could not be decoded (an NDJSON line that is not JSON);
    ``validate`` reports it as a field error of that item."""

    message: str


# --- validation ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Check:
    """One field's rule. Called with a value, it answers None or the field's error message.

    ``json_schema`` states the same rule as a JSON Schema fragment: the API document's event
    schema is built from these (``jobs.contract.schema``), so it says what validation does. One
    difference JSON Schema cannot express: it counts ``1.0`` as an integer, the contract does not.
    ``compiled`` states it as a msgspec type, which ``validate`` checks in C
    (``compiled_payload``): the type accepts exactly what ``accepts`` does, or, when ``exact``
    is false, more, and ``accepts`` then decides.
    """

    accepts: Callable[[Any], bool]
    message: str
    json_schema: dict[str, Any]
    compiled: Any = Any
    exact: bool = True

    def __call__(self, value: Any) -> str | None:
        return None if self.accepts(value) else self.message


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(lo: int, hi: int = MAX_SMALL_INT) -> Check:
    message = (
        f"must be an integer >= {lo}"
        if hi == MAX_SMALL_INT
        else f"must be an integer from {lo} to {hi}"
    )
    # msgspec bounds an int within 64 bits; past them it checks the type, and this the bounds.
    within_64_bits = lo >= -(2**63) and hi < 2**63
    return Check(
        lambda value: _is_int(value) and lo <= value <= hi,
        message,
        {"type": "integer", "minimum": lo, "maximum": hi},
        Annotated[int, msgspec.Meta(ge=lo, le=hi)] if within_64_bits else int,
        exact=within_64_bits,
    )


def number(lo: float, hi: float) -> Check:
    def accepts(value: Any) -> bool:
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and lo <= value <= hi
        )

    return Check(
        accepts,
        f"must be a number from {lo:g} to {hi:g}",
        {"type": "number", "minimum": lo, "maximum": hi},
        # msgspec reads an int as a float too, and refuses NaN and infinities past the bounds.
        Annotated[float, msgspec.Meta(ge=lo, le=hi)],
    )


def string(min_chars: int = 0, max_chars: int = MAX_ID_CHARS) -> Check:
    message = (
        f"must be a string of {min_chars} to {max_chars} characters"
        if min_chars
        else f"must be a string of at most {max_chars} characters"
    )
    lengths = {"minLength": min_chars} if min_chars else {}
    return Check(
        lambda value: isinstance(value, str) and min_chars <= len(value) <= max_chars,
        message,
        {"type": "string", **lengths, "maxLength": max_chars},
        Annotated[str, msgspec.Meta(min_length=min_chars, max_length=max_chars)],
    )


def one_of(*choices: str) -> Check:
    return Check(
        lambda value: value in choices,
        "must be one of " + ", ".join(choices),
        {"type": "string", "enum": list(choices)},
        Literal[choices],
    )


def hex_id(chars: int) -> Check:
    """A trace or span id as OTLP/JSON writes it: ``chars`` lowercase hex digits."""
    return Check(
        lambda value: (
            isinstance(value, str) and len(value) == chars and HEX.fullmatch(value) is not None
        ),
        f"must be {chars} lowercase hex digits",
        {"type": "string", "pattern": f"^[0-9a-f]{{{chars}}}$"},
        # The lengths too: a regular expression's "$" also matches before a final newline.
        Annotated[
            str,
            msgspec.Meta(min_length=chars, max_length=chars, pattern=f"^[0-9a-f]{{{chars}}}$"),
        ],
    )


def _is_timestamp(value: Any) -> bool:
    return parse_timestamp(value) is not None


text = Check(lambda value: isinstance(value, str), "must be a string", {"type": "string"}, str)
timestamp = Check(
    _is_timestamp,
    "must be an RFC 3339 timestamp with an offset",
    {"type": "string", "format": "date-time"},
    str,
    exact=False,
)
# Not compiled: msgspec would copy a dict or a list to check its type (and take a tuple for a
# list); ``accepts`` is one isinstance.
obj = Check(
    lambda value: isinstance(value, dict), "must be an object", {"type": "object"}, exact=False
)
array = Check(
    lambda value: isinstance(value, list), "must be an array", {"type": "array"}, exact=False
)
boolean = Check(
    lambda value: isinstance(value, bool), "must be true or false", {"type": "boolean"}, bool
)
anything = Check(lambda value: True, "", {})


def _is_fingerprint(value: Any) -> bool:
    return (
        isinstance(value, list)
        and 0 < len(value) <= MAX_FINGERPRINT_ELEMENTS
        and all(isinstance(part, str) and 0 < len(part) <= MAX_ID_CHARS for part in value)
    )


# A producer's failure fingerprint: the strings that name the failure's group, where
# "{{ default }}" stands for the one traceviz computes (docs/failures.md).
fingerprint = Check(
    _is_fingerprint,
    f"must be a list of 1 to {MAX_FINGERPRINT_ELEMENTS} strings of 1 to {MAX_ID_CHARS} characters",
    {
        "type": "array",
        "minItems": 1,
        "maxItems": MAX_FINGERPRINT_ELEMENTS,
        "items": {"type": "string", "minLength": 1, "maxLength": MAX_ID_CHARS},
    },
    exact=False,  # not compiled (a list, as ``array``): ``accepts`` decides
)


HEX = re.compile(r"[0-9a-f]+")
IDENT = string(1)
NAME = string()
SEQ = integer(0)
RESULT_TYPES = one_of("success", "retryable_failure", "permanent_failure", "compensatable_failure")
ATTEMPT = integer(1, MAX_ATTEMPT)
REQUIRED = "required"

NODE_FIELDS: dict[str, Check] = {
    "node_id": IDENT,
    "step_index": integer(0, MAX_STEP_INDEX),
    "attempt": ATTEMPT,
    "trace_span_id": NAME,
    "parent_span_id": NAME,
    "epoch": integer(0),
    "step_epoch": integer(0),
}
PLANNER_FIELDS: dict[str, Check] = {
    "correlation_id": NAME,
    "cycle": integer(0),
    "attempt": ATTEMPT,
    "attempts": integer(0, MAX_ATTEMPT),
    "provider": NAME,
    "model": NAME,
    "parse_error_type": NAME,
    "validation_errors": array,
    "raw_output_preview": text,
    "reason": text,
    "status": NAME,
    "schema": NAME,
}

# Per type: the payload fields the contract names, their checks, and which are required.
PAYLOAD_FIELDS: dict[str, dict[str, Check]] = {
    "job_started": {
        "name": NAME,
        "workflow": NAME,
        "correlation_id": NAME,
        "session_id": NAME,
        "provider": NAME,
        "model": NAME,
        "plan_hash": NAME,
        "retry_of": IDENT,
        "metadata": obj,
    },
    "node_started": NODE_FIELDS,
    "node_finished": {
        **NODE_FIELDS,
        "payload_results": obj,
        "duration_ms": number(0, MAX_DURATION_MS),
        "state": NAME,
        "result_type": RESULT_TYPES,
        "reason": text,
        "failure_code": NAME,
        "error_type": NAME,
        "tool": NAME,
        "source": NAME,
        "plan_hash": NAME,
        "continue_on_error": boolean,
        "context": obj,
        "audit_trail": array,
        "exception_type": NAME,
        "stack": text,
        "fingerprint": fingerprint,
    },
    "state_checkpointed": {"node_id": NAME, "state": anything},
    "compensation_finished": {
        "node_id": IDENT,
        "attempt": ATTEMPT,
        "result_type": one_of("success", "permanent_failure"),
        "reason": text,
    },
    "cancel_requested": {"reason": text, "epoch": integer(0)},
    "job_finished": {
        "status": one_of("completed", "failed", "cancelled"),
        "code": NAME,
        "reason": text,
    },
    "graph.next_step.parse_invalid": PLANNER_FIELDS,
    "graph.next_step.degraded": PLANNER_FIELDS,
    "escalation_raised": {
        "kind": NAME,
        "message": text,
        "node_id": NAME,
        "severity": one_of("low", "medium", "high", "critical"),
    },
    # One OpenTelemetry span, as POST /v1/traces stores it (docs/otlp.md; the event's
    # ts is the span's start). Replay decides what it means (job, step or call).
    "span": {
        "trace_id": hex_id(32),
        "span_id": hex_id(16),
        "parent_span_id": hex_id(16),
        "remote_parent": boolean,
        "local_parent": boolean,
        "name": NAME,
        "kind": one_of(*SPAN_KINDS),
        "end": timestamp,
        "status": obj,
        "attributes": obj,
        "events": array,
        "links": array,
        "resource": obj,
        "scope": obj,
        "dropped": obj,
    },
    # One OpenTelemetry log record, as POST /v1/logs stores it (docs/otlp.md; the event's ts is
    # the record's time, ``time_unix_nano`` its full precision). Replay attaches it to its span.
    "log": {
        "trace_id": hex_id(32),
        "span_id": hex_id(16),
        "time_unix_nano": integer(0, 2**64 - 1),
        "severity_text": NAME,
        "severity_number": integer(0, 24),
        "event_name": NAME,
        "body": anything,
        "attributes": obj,
        "resource": obj,
        "scope": obj,
        "dropped": obj,
    },
}
# An event's attempt orders it among events of equal ts, seq and type, whatever its type (event
# order), and is stored in a column of its own: every type that carries one gets its check, the
# types the table does not name too.
OTHER_TYPE_FIELDS: dict[str, Check] = {"attempt": ATTEMPT}
PAYLOAD_FIELDS = {
    event_type: {**checks, "attempt": checks.get("attempt", ATTEMPT)}
    for event_type, checks in PAYLOAD_FIELDS.items()
}
REQUIRED_PAYLOAD_FIELDS: dict[str, tuple[str, ...]] = {
    "span": ("trace_id", "span_id", "end"),
    "node_started": ("node_id",),
    "node_finished": ("node_id",),
    "compensation_finished": ("node_id",),
    "job_finished": ("status",),
}
CONTEXT_FIELDS: dict[str, Check] = {
    "expected_arguments": obj,
    "actual_arguments": obj,
    "step_definition": obj,
}
# Free text that may be long: kept, but cut at MAX_REASON_BYTES with a visible marker once
# redacted (``bounded_long_text``).
LONG_TEXT_FIELDS = ("reason", "message", "stack")
# Span attributes replay reads as numbers (docs/otlp.md), with the bounds of the contract's
# fields they become: a span holding one past its bound is refused with a field error, from
# /v1/traces as from /api/v1/events, where it would overflow a column or a sum.
INPUT_TOKEN_KEYS = (
    "gen_ai.usage.input_tokens",
    "llm.token_count.prompt",
    "gen_ai.usage.prompt_tokens",
)
OUTPUT_TOKEN_KEYS = (
    "gen_ai.usage.output_tokens",
    "llm.token_count.completion",
    "gen_ai.usage.completion_tokens",
)
TOTAL_TOKEN_KEYS = ("llm.token_count.total", "gen_ai.usage.total_tokens")
SPAN_NUMBER_BOUNDS: dict[str, tuple[int, int]] = {
    "traceviz.attempt": (1, MAX_ATTEMPT),
    "traceviz.step_index": (0, MAX_STEP_INDEX),
    "traceviz.epoch": (0, MAX_SMALL_INT),
    "traceviz.step_epoch": (0, MAX_SMALL_INT),
    "celery.retries": (0, MAX_ATTEMPT - 1),
    **{key: (0, MAX_TOKENS) for key in INPUT_TOKEN_KEYS + OUTPUT_TOKEN_KEYS + TOTAL_TOKEN_KEYS},
}
ENVELOPE_FIELDS = frozenset({"type", "job_id", "event_id", "ts", "seq", "payload"})
REQUIRED_ENVELOPE_FIELDS = ("type", "job_id")


# --- the compiled contract ----------------------------------------------------------------
# The tables above as msgspec types, built from each check's ``compiled`` type: ``validate``
# accepts a valid item in C, and the checks themselves run only for what these do not decide.


def _struct(
    name: str, fields: dict[str, Any], required: tuple[str, ...], *, closed: bool = False
) -> type:
    """A msgspec Struct of ``fields`` (name: type), those not ``required`` optional; other keys
    are ignored (a payload is open) unless ``closed`` (an envelope's are errors)."""
    return msgspec.defstruct(
        name,
        [
            (field, kind) if field in required else (field, kind | msgspec.UnsetType, msgspec.UNSET)
            for field, kind in fields.items()
        ],
        kw_only=True,
        forbid_unknown_fields=closed,
    )


def _compiled_payload(event_type: str, checks: dict[str, Check]) -> tuple[type, bool]:
    """A type's payload as a Struct, and whether the envelope requires it (a payload left out
    is ``{}``, which lacks the required fields)."""
    required = REQUIRED_PAYLOAD_FIELDS.get(event_type, ())
    fields = {name: check.compiled for name, check in checks.items()}
    return _struct(f"Payload[{event_type}]", fields, required), bool(required)


def _envelope(event_type: str, checks: dict[str, Check]) -> tuple[type, tuple]:
    """The compiled envelope of an event of ``event_type`` with its payload, and the payload
    checks whose compiled type is not exact (``Check.exact``), which run after it."""
    payload, payload_required = _compiled_payload(event_type, checks)
    fields = {
        "type": IDENT.compiled,
        "job_id": IDENT.compiled,
        "event_id": IDENT.compiled,
        "ts": Any,  # ``parse_timestamp``
        "seq": SEQ.compiled,
        "payload": payload,
    }
    required = (*REQUIRED_ENVELOPE_FIELDS, *(("payload",) if payload_required else ()))
    envelope = _struct(f"Event[{event_type}]", fields, required, closed=True)
    return envelope, tuple((name, check) for name, check in checks.items() if not check.exact)


COMPILED: dict[str, tuple[type, tuple]] = {
    event_type: _envelope(event_type, checks) for event_type, checks in PAYLOAD_FIELDS.items()
}
OTHER_COMPILED = _envelope("other", OTHER_TYPE_FIELDS)


# ASCII digits only: RFC 3339's (Python's \d also matches other scripts' digits).
RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$",
    re.ASCII,
)


def parse_timestamp(value: Any) -> datetime | None:
    """An aware UTC datetime for an RFC 3339 string, or None when it is not one."""
    if not isinstance(value, str) or RFC3339.match(value) is None:
        return None
    # What the pattern admits, fromisoformat reads (a fraction past microseconds truncated),
    # but for a lowercase "z".
    if value[-1] == "z":
        value = value[:-1] + "Z"
    try:
        # An offset can carry a time at the calendar's edge past it (9999-12-31T23:59:59-23:59).
        return datetime.fromisoformat(value).astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def truncate_text(value: str, limit: int = MAX_REASON_BYTES) -> str:
    """``value`` cut to at most ``limit`` UTF-8 bytes, ending with a marker saying how much went."""
    encoded = value.encode("utf-8")
    if len(encoded) <= limit:
        return value
    marker_room = len(TRUNCATION_MARKER.format(dropped=len(encoded)).encode("utf-8"))
    kept = encoded[: limit - marker_room].decode("utf-8", errors="ignore")
    dropped = len(encoded) - len(kept.encode("utf-8"))
    return kept + TRUNCATION_MARKER.format(dropped=dropped)


def cut(value: str, max_chars: int = MAX_ID_CHARS) -> str:
    """``value`` in at most ``max_chars`` characters, ending with a marker saying how many went
    when it is cut: the marker counts in the length (a name, an id, a ``traceviz.*`` text)."""
    if len(value) <= max_chars:
        return value
    # Sized first for the most that could go; keeping more can shorten what the marker says.
    keep = max_chars - len(CUT_MARKER.format(dropped=len(value)))
    if keep <= 0:
        return value[:max_chars]
    while keep + 1 + len(CUT_MARKER.format(dropped=len(value) - keep - 1)) <= max_chars:
        keep += 1
    return value[:keep] + CUT_MARKER.format(dropped=len(value) - keep)


def attribute_int(value: Any) -> int | None:
    """An integer as attributes carry it: an int (not a bool), or ASCII digits with spaces
    around them; None for anything else. Digits past ``MAX_DIGITS`` read as
    ``PAST_EVERY_BOUND``, not converted."""
    if _is_int(value):
        return value
    if not isinstance(value, str):
        return None
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        return None
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= MAX_DIGITS else PAST_EVERY_BOUND


def bounded_attribute(attrs: dict[str, Any], key: str) -> int | None:
    """The span attribute ``key`` (one of ``SPAN_NUMBER_BOUNDS``) as an integer within its
    bounds; None when absent, not an integer, or out of them (a span stored before they were
    checked)."""
    value = attribute_int(attrs.get(key))
    lo, hi = SPAN_NUMBER_BOUNDS[key]
    return value if value is not None and lo <= value <= hi else None


FINGERPRINT_ATTRIBUTE = "traceviz.fingerprint"
SPAN_NUMBER_KEYS = frozenset(SPAN_NUMBER_BOUNDS)


def _span_attribute_errors(attrs: dict[str, Any]) -> Iterable[FieldError]:
    if FINGERPRINT_ATTRIBUTE in attrs and (error := fingerprint(attrs[FINGERPRINT_ATTRIBUTE])):
        yield FieldError(f"payload.attributes.{FINGERPRINT_ATTRIBUTE}", error)
    if SPAN_NUMBER_KEYS.isdisjoint(attrs):  # most spans carry none of them
        return
    for key, (lo, hi) in SPAN_NUMBER_BOUNDS.items():
        if key in attrs:
            value = attribute_int(attrs[key])
            if value is not None and not lo <= value <= hi:
                yield FieldError(
                    f"payload.attributes.{key}", f"must be an integer from {lo} to {hi}"
                )


def default_event_id(item: dict[str, Any], canonical: bytes | None = None) -> str:
    """Idempotency key for an event sent without one: a hash of the event exactly as sent.
    ``canonical``: the item as ``_encoded`` wrote it, when the caller has it."""
    if canonical is None:
        canonical = _encoded(item)
    if canonical is None:  # integers past 64 bits
        canonical = json.dumps(
            item, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8")
    return "sha256:" + hashlib.sha256(canonical).hexdigest()[:48]


def _encoded(item: Any) -> bytes | None:
    """``item`` as JSON with sorted keys (orjson, in C), or None where orjson refuses it: a lone
    surrogate, an integer past 64 bits... The default event id hashes it. Cheap upper bounds
    for the walks below: without a NUL escape in it the item holds no NUL, and objects and
    arrays nest no deeper than it has brackets."""
    try:
        return orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None


def _may_nest_deep(encoded: bytes | None) -> bool:
    return encoded is None or encoded.count(b"{") + encoded.count(b"[") > MAX_PAYLOAD_DEPTH


def nesting_depth(value: Any, limit: int = MAX_PAYLOAD_DEPTH) -> int:
    """How deep objects and arrays nest in ``value`` (a scalar is 0), counted without recursion
    and only up to ``limit + 1``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if depth > limit:
            return deepest
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return deepest


def loads_within_depth(text: str, limit: int = MAX_PAYLOAD_DEPTH) -> Any:
    """The JSON value ``text`` holds, or None when it is not JSON or its objects and arrays
    nest over ``limit`` deep: such a value, stored, could not be read back (the JSON writers
    of the columns and the API give up at a few hundred levels, Python's parser near a
    thousand). The caller keeps the text itself instead."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if text.count("{") + text.count("[") > limit and nesting_depth(value, limit) > limit:
        return None
    return value


def validate(item: Any, check_text: bool = True) -> tuple[Event | None, list[FieldError]]:
    """Validate one decoded item: an ``Event`` and no errors, or None and its field errors.

    ``check_text=False`` skips the NUL / lone-surrogate walk, for items decoded from JSON text
    that holds no ``\\u0000`` or surrogate escape (strict JSON has no other way to carry them).
    A valid item is accepted by the compiled contract (``_accepted``); any other goes through
    each field's check, which says what is wrong with it, in the same words every time.
    """
    if isinstance(item, dict) and (event := _accepted(item, check_text)) is not None:
        return event, []
    return _field_errors(item, check_text)


def _accepted(item: dict[str, Any], check_text: bool) -> Event | None:
    """The event ``item`` is when it is valid, else None (the field checks then say why): the
    compiled envelope and payload types check the fields' types and bounds in C, Python what
    they cannot say (timestamps, text, nesting, ids, span attributes)."""
    event_type = item.get("type")
    if type(event_type) is not str:
        return None
    envelope, python_checks = COMPILED.get(event_type, OTHER_COMPILED)
    try:
        msgspec.convert(item, envelope)
    except (msgspec.ValidationError, UnicodeEncodeError):  # a lone surrogate where a choice is
        return None
    payload = item.get("payload", {})
    for name, check in python_checks:
        if name in payload and not check.accepts(payload[name]):
            return None
    context = payload.get("context")
    if (
        event_type == "node_finished"
        and isinstance(context, dict)
        and any(name in context and check(context[name]) for name, check in CONTEXT_FIELDS.items())
    ):
        return None
    encoded = _encoded(item)
    if check_text and (encoded is None or b"\\u0000" in encoded) and ids.text_problems(item):
        return None
    ts = None
    if "ts" in item:
        ts = parse_timestamp(item["ts"])
        if ts is None or not MIN_TS_YEAR <= ts.year <= MAX_TS_YEAR:
            return None
    if _may_nest_deep(encoded) and nesting_depth(payload) > MAX_PAYLOAD_DEPTH:
        return None
    attrs = payload.get("attributes")
    if (
        event_type == "span"
        and isinstance(attrs, dict)
        and any(True for _error in _span_attribute_errors(attrs))
    ):
        return None
    if not ids.ids_valid(item, payload):
        return None
    return Event(
        type=event_type,
        job_id=item["job_id"],
        event_id=item.get("event_id") or default_event_id(item, encoded),
        ts=ts,
        seq=item.get("seq"),
        payload=payload,
    )


def _field_errors(item: Any, check_text: bool) -> tuple[Event | None, list[FieldError]]:
    """``validate`` by each field's check: every error of the item, by field."""
    if isinstance(item, UnreadableItem):
        return None, [FieldError("(line)", f"not JSON: {item.message}")]
    if not isinstance(item, dict):
        return None, [FieldError("(item)", "must be a JSON object")]
    encoded = _encoded(item)
    suspect_text = encoded is None or b"\\u0000" in encoded
    errors = (
        [FieldError(*problem) for problem in ids.text_problems(item)]
        if check_text and suspect_text
        else []
    )
    if errors:
        return None, errors
    event_type = item.get("type")
    for name in REQUIRED_ENVELOPE_FIELDS:
        if name not in item:
            errors.append(FieldError(name, REQUIRED))
        elif problem := IDENT(item[name]):
            errors.append(FieldError(name, problem))
    if "event_id" in item and (problem := IDENT(item["event_id"])):
        errors.append(FieldError("event_id", problem))
    ts = None
    if "ts" in item:
        ts = parse_timestamp(item["ts"])
        if ts is None:
            errors.append(FieldError("ts", "must be an RFC 3339 timestamp with an offset"))
        elif not MIN_TS_YEAR <= ts.year <= MAX_TS_YEAR:
            # An event's time places its rows in day partitions and chart buckets, which
            # overflow near the calendar's edges; no job runs there.
            errors.append(FieldError("ts", TS_RANGE_MESSAGE))
            ts = None
    if "seq" in item and (problem := SEQ(item["seq"])):
        errors.append(FieldError("seq", problem))
    if not ENVELOPE_FIELDS.issuperset(item):
        errors.extend(
            FieldError(name, "unknown envelope field: put extra data in payload")
            for name in sorted(set(item) - ENVELOPE_FIELDS)
        )
    payload = item.get("payload", {})
    if not isinstance(payload, dict):
        errors.append(FieldError("payload", "must be an object"))
    elif _may_nest_deep(encoded) and nesting_depth(payload) > MAX_PAYLOAD_DEPTH:
        errors.append(
            FieldError("payload", f"must not nest objects and arrays over {MAX_PAYLOAD_DEPTH} deep")
        )
    elif isinstance(event_type, str):
        errors.extend(_payload_errors(event_type, payload))
    errors.extend(FieldError(*problem) for problem in ids.id_errors(item, payload))
    if errors:
        return None, errors
    event = Event(
        type=item["type"],
        job_id=item["job_id"],
        event_id=item.get("event_id") or default_event_id(item),
        ts=ts,
        seq=item.get("seq"),
        payload=payload,
    )
    return event, []


def _payload_errors(event_type: str, payload: dict[str, Any]) -> Iterable[FieldError]:
    checks = PAYLOAD_FIELDS.get(event_type, OTHER_TYPE_FIELDS)
    for name in REQUIRED_PAYLOAD_FIELDS.get(event_type, ()):
        if name not in payload:
            yield FieldError(f"payload.{name}", REQUIRED)
    # A payload names a few of its type's fields: check those, report in the table's order.
    problems = {
        name: problem
        for name, value in payload.items()
        if (check := checks.get(name)) is not None and (problem := check(value))
    }
    if problems:
        for name in checks:
            if name in problems:
                yield FieldError(f"payload.{name}", problems[name])
    attrs = payload.get("attributes")
    if event_type == "span" and isinstance(attrs, dict):
        yield from _span_attribute_errors(attrs)
    context = payload.get("context")
    if "context" in checks and isinstance(context, dict):
        for name, check in CONTEXT_FIELDS.items():
            if name in context and (problem := check(context[name])):
                yield FieldError(f"payload.context.{name}", problem)


def bounded_long_text(payload: dict[str, Any]) -> dict[str, Any]:
    """``payload`` with its long text fields (``LONG_TEXT_FIELDS``) cut to MAX_REASON_BYTES with
    a marker. Ingest cuts redacted payloads (``redaction.redact_payload``): a secret that
    straddles the cut is masked whole."""
    cut = {}
    for name in LONG_TEXT_FIELDS:
        value = payload.get(name)
        # A text of at most a quarter of the bound in characters is within it in UTF-8 bytes.
        if isinstance(value, str) and len(value) * 4 > MAX_REASON_BYTES:
            cut[name] = truncate_text(value)
    return {**payload, **cut} if cut else payload


def order_key(ts: datetime, seq: int | None, event_type: str, attempt: int, event_id: str):
    """The total order of events within a job, independent of arrival (docs/contract.md)."""
    return (ts, seq or 0, TYPE_RANK.get(event_type, OTHER_TYPE_RANK), attempt, event_id)
