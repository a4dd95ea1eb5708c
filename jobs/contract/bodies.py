"""Request bodies of the event contract (docs/contract.md): media types, gzip, JSON arrays
and NDJSON lines, and the per-request limits.

Pure: bytes in, a ``ParsedBatch`` of validated events and per-item errors out. Only a body that
cannot be read at all raises ``BodyError``; each item is validated by ``events.validate``.
"""

import json
import math
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import msgspec

from jobs.contract.events import Event, UnreadableItem, validate

JSON_TYPES = frozenset({"application/json"})
NDJSON_TYPES = frozenset({"application/x-ndjson", "application/ndjson", "application/jsonl"})
# The only ways strict JSON carries a NUL or a lone surrogate: their \\u escapes.
RISKY_ESCAPE = re.compile(rb"\\u(0000|[dD][89a-fA-F])")


class BodyError(Exception):
    """The whole body is refused: ``status`` is the HTTP status, ``message`` says why."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class ParsedBatch:
    """``events`` pairs each valid event with its index in the batch; ``errors`` the rest.
    ``redacted``: the events' payloads were redacted as they were made, with their masked paths
    (the OTLP mapping redacts a span before it bounds it); ingest then does not redact them
    again."""

    events: list[tuple[int, Event]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    redacted: bool = False

    @property
    def total(self) -> int:
        return len(self.events) + len(self.errors)


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";", 1)[0].strip().lower()


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo gzip/deflate, refusing (413) output beyond ``limit`` bytes while inflating.

    A gzip body of several members (concatenated gzip files, which ``gzip -c a b`` and some
    clients write) is read whole, member after member, as gzip readers do.
    """
    encoding = (content_encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding not in ("gzip", "deflate"):
        raise BodyError(415, f"unsupported Content-Encoding {encoding!r}: use gzip or identity")
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    out = bytearray()
    remaining = body
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(remaining, limit + 1 - len(out))
            while inflater.unconsumed_tail and len(out) <= limit:
                out += inflater.decompress(inflater.unconsumed_tail, limit + 1 - len(out))
        except zlib.error:
            raise BodyError(400, f"body is not valid {encoding} data") from None
        if len(out) > limit:
            raise BodyError(413, f"body inflates past the limit of {limit} bytes")
        if not inflater.eof:
            raise BodyError(400, f"body is not valid {encoding} data (truncated stream)")
        remaining = inflater.unused_data
        if encoding != "gzip" or not remaining.strip(b"\x00"):
            return bytes(out)


def decode_body(body: bytes, content_type: str | None) -> list[Any]:
    """Split a body into items: a JSON object, a JSON array, or NDJSON lines.

    An NDJSON line that is not JSON becomes an ``UnreadableItem`` (reported by index, the other
    lines still count); JSON that cannot be read at all raises ``BodyError``.
    """
    kind = media_type(content_type)
    if kind in NDJSON_TYPES:
        items = [_loads(line) for line in body.splitlines() if line.strip()]
    elif kind in JSON_TYPES or kind.endswith("+json"):
        document = _loads(body)
        if isinstance(document, UnreadableItem):
            raise BodyError(400, f"body is not JSON: {document.message}")
        if isinstance(document, dict):
            items = [document]
        elif isinstance(document, list):
            items = document
        else:
            raise BodyError(400, "body must be a JSON object or an array of objects")
    else:
        raise BodyError(
            415,
            "Content-Type must be application/json or application/x-ndjson"
            + (f", got {kind!r}" if kind else ""),
        )
    if not items:
        raise BodyError(400, "no events in body")
    return items


def _loads(raw: bytes) -> Any:
    """The JSON value ``raw`` holds, or an ``UnreadableItem`` saying why it holds none. msgspec
    reads strict JSON in C to the same values Python's decoder gives; what it refuses (not
    JSON, not UTF-8, a byte order mark, a number past a double, nesting past its limit) is
    read again by Python's decoder, whose messages say where the problem is."""
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError):
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return UnreadableItem(f"not valid UTF-8 at byte {exc.start}")
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        return UnreadableItem(f"{exc.msg} at line {exc.lineno} column {exc.colno}")
    except ValueError as exc:
        return UnreadableItem(str(exc))
    except RecursionError:
        return UnreadableItem("nested too deeply")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _finite_float(literal: str) -> float:
    """A JSON number as a float; one too large for a double (1e400) would become infinity,
    which no JSON column can store, so it is refused like the Infinity literal."""
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number {literal[:40]} is out of range")
    return value


# One decoder for every body: json.loads with hooks would build a new decoder per call.
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def parse_items(items: list[Any], max_events: int, check_text: bool = True) -> ParsedBatch:
    """Validate every item of a batch; a batch over ``max_events`` is refused whole (413)."""
    if len(items) > max_events:
        raise BodyError(
            413, f"batch has {len(items)} events; the limit is {max_events} events per request"
        )
    batch = ParsedBatch()
    for index, item in enumerate(items):
        event, errors = validate(item, check_text)
        if event is None:
            batch.errors.append({"index": index, "errors": [e.as_dict() for e in errors]})
        else:
            batch.events.append((index, event))
    return batch


def parse_body(body: bytes, content_type: str | None, max_events: int) -> ParsedBatch:
    """Decode and validate a whole request body; see ``decode_body`` and ``parse_items``."""
    check_text = RISKY_ESCAPE.search(body) is not None
    return parse_items(decode_body(body, content_type), max_events, check_text)
