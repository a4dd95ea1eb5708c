"""What an id and a text may hold (docs/contract.md): ids are stored and shown as sent, in URLs
and filters, so what would break a URL, hide a credential or pass for another id is refused;
text may hold anything but NUL and lone surrogates. Pure, as the rest of the contract: values
in, (field path, problem) pairs out.
"""

import functools
import unicodedata
from collections.abc import Iterable
from typing import Any

from jobs.contract.secret_text import HEX_ID, contains_token

# Ids are stored and shown as sent, in URLs and filters: unlike text they are not masked.
ID_PAYLOAD_FIELDS = (
    "node_id",
    "retry_of",
    "correlation_id",
    "session_id",
    "trace_span_id",
    "parent_span_id",
)
# A span's attributes that replay makes ids of (``traceviz.job_id`` is the event's job_id).
SPAN_ID_ATTRIBUTES = tuple(
    f"traceviz.{name}" for name in ("node_id", "retry_of", "correlation_id", "session_id")
)
ID_FIELD_NAMES = frozenset(ID_PAYLOAD_FIELDS)
SPAN_ID_ATTRIBUTE_NAMES = frozenset(SPAN_ID_ATTRIBUTES)
CONTROL_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})


def text_problems(item: Any) -> list[tuple[str, str]]:
    """NUL characters and lone surrogates anywhere in the item: (field path, problem) pairs."""
    problems = []
    stack: list[tuple[str, Any]] = [("", item)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            problem = bad_text(value)
            if problem:
                problems.append((path or "(item)", problem))
        elif isinstance(value, dict):
            for key, child in value.items():
                child_path = f"{path}.{key}" if path else key
                problem = bad_text(key)
                if problem:
                    problems.append((child_path, f"key {problem}"))
                stack.append((child_path, child))
        elif isinstance(value, list):
            stack.extend((f"{path}[{i}]", child) for i, child in enumerate(value))
    return sorted(problems, key=lambda problem: problem[0])


def bad_text(value: str) -> str | None:
    if "\x00" in value:
        return "must not contain NUL characters"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode text (lone surrogate)"
    return None


# Ids repeat across a batch (its types, a job's id on each of its events, a node's on its
# start and finish): their answers are remembered.
@functools.lru_cache(maxsize=8192)
def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id (job, event, node, type...), or None. Only what breaks an
    id is refused: control characters and '.' or '..' path segments break the URLs pages build
    from ids, and a credential in a format nothing else has (``secret_text.contains_token``: a
    ghp_ or sk- key, an AKIA key id, a JWT, a private key, a URL password) would be stored and
    shown unmasked. An id that would look like another is refused too: one holding an invisible
    format character (Unicode's Cf: a right-to-left override, a zero-width space, a BOM...), or
    only spaces. Anything else an id may look like (digits that pass the Luhn check, a
    base64 word, ``session:1234``) is an ordinary id."""
    if HEX_ID.fullmatch(value):  # most OTLP ids, each new: skip every check below
        return None
    # Every character of CONTROL_CATEGORIES is unprintable: most ids skip the walk.
    if not value.isprintable() and any(
        unicodedata.category(char) in CONTROL_CATEGORIES for char in value
    ):
        return "must not contain control characters (newline, tab, ...)"
    if not value.isprintable() and any(unicodedata.category(char) == "Cf" for char in value):
        return (
            "must not contain invisible format characters (a bidirectional override or "
            "isolate, a zero-width character, a byte order mark): it would look like another id"
        )
    if value and value.isspace():
        return "must not be only spaces"
    if any(segment in (".", "..") for segment in value.split("/")):
        return "must not be '.' or '..' (nor have them as a '/' segment)"
    if contains_token(value):
        return (
            "carries a secret in a known credential format (an API key or token, a JWT, a "
            "private key, a URL password): send an id without it"
        )
    return None


def id_errors(item: dict[str, Any], payload: Any) -> Iterable[tuple[str, str]]:
    """The ids of an item that ``id_problem`` refuses: (field path, problem) pairs."""
    for name in ("type", "job_id", "event_id"):
        value = item.get(name)
        if isinstance(value, str) and (problem := id_problem(value)):
            yield name, problem
    if isinstance(payload, dict):
        # Most payloads name one id or none: the set test (in C) skips the others.
        if not ID_FIELD_NAMES.isdisjoint(payload):
            for name in ID_PAYLOAD_FIELDS:
                value = payload.get(name)
                if isinstance(value, str) and value and (problem := id_problem(value)):
                    yield f"payload.{name}", problem
        attrs = payload.get("attributes")
        if (
            item.get("type") == "span"
            and isinstance(attrs, dict)
            and not SPAN_ID_ATTRIBUTE_NAMES.isdisjoint(attrs)
        ):
            for key in SPAN_ID_ATTRIBUTES:
                value = attrs.get(key)
                if isinstance(value, str) and value and (problem := id_problem(value)):
                    yield f"payload.attributes.{key}", problem


def ids_valid(item: dict[str, Any], payload: dict[str, Any]) -> bool:
    """Whether ``id_errors`` finds nothing, for an item the compiled envelope accepted (its
    ids are strings): the same checks without building errors."""
    for name in ("type", "job_id", "event_id"):
        value = item.get(name)
        if value is not None and id_problem(value):
            return False
    for name in ID_FIELD_NAMES.intersection(payload):
        value = payload[name]
        if isinstance(value, str) and value and id_problem(value):
            return False
    attrs = payload.get("attributes")
    if item["type"] == "span" and isinstance(attrs, dict):
        for key in SPAN_ID_ATTRIBUTE_NAMES.intersection(attrs):
            value = attrs[key]
            if isinstance(value, str) and value and id_problem(value):
                return False
    return True
