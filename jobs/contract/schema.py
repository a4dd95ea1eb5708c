"""The event contract v1 as JSON Schema (draft 2020-12, as OpenAPI 3.1 takes it), built from
``events``' own tables so the API document cannot say anything validation does not.

Pure: plain dicts out. Each known type gets its own branch (its payload fields, their checks'
fragments, its required fields); any other type gets an open payload, because unknown types are
stored, not rejected (docs/contract.md). Every branch keeps unknown payload keys.
"""

from typing import Any

from jobs.contract import events

# The text walk of ``events.validate`` refuses NUL in every string of an event, so every string
# the schema names says so. (Lone surrogates are refused too; JSON Schema cannot say that.)
NO_NUL = "^[^\\x00]*$"
TIMESTAMP = {
    "type": "string",
    "format": "date-time",
    "description": (
        f"RFC 3339 with an offset, in the years {events.MIN_TS_YEAR} to {events.MAX_TS_YEAR}"
        " (UTC); default: receive time"
    ),
}


def _no_nul(fragment: dict[str, Any]) -> dict[str, Any]:
    """A string fragment that also refuses NUL (a pattern of its own already does, as a hex
    id's; a timestamp's format does)."""
    if fragment.get("type") == "string" and not {"enum", "pattern", "format"} & fragment.keys():
        return {**fragment, "pattern": NO_NUL}
    return dict(fragment)


def payload_schema(event_type: str) -> dict[str, Any]:
    """The payload of a known type: its named fields' checks, its required fields; open."""
    checks = events.PAYLOAD_FIELDS[event_type]
    properties = {name: _no_nul(check.json_schema) for name, check in checks.items()}
    if "context" in properties:
        # ``_payload_errors`` checks the context's own fields when the context is an object.
        properties["context"]["properties"] = {
            name: _no_nul(check.json_schema) for name, check in events.CONTEXT_FIELDS.items()
        }
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required := events.REQUIRED_PAYLOAD_FIELDS.get(event_type):
        schema["required"] = list(required)
    return {**schema, "additionalProperties": True}


def _other_payload_schema() -> dict[str, Any]:
    """The payload of any other type: open, with the fields every type's payload is checked on."""
    properties = {name: dict(check.json_schema) for name, check in events.OTHER_TYPE_FIELDS.items()}
    return {"type": "object", "properties": properties, "additionalProperties": True}


def _envelope(type_schema: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    required = list(events.REQUIRED_ENVELOPE_FIELDS)
    if "required" in payload:
        required.append("payload")  # its default, {}, lacks the required fields
    properties = {
        "type": type_schema,
        "job_id": _no_nul(events.IDENT.json_schema),
        "event_id": _no_nul(events.IDENT.json_schema),
        "ts": TIMESTAMP,
        "seq": dict(events.SEQ.json_schema),
        "payload": payload,
    }
    return {
        "type": "object",
        "required": required,
        "properties": properties,
        "additionalProperties": False,  # unknown envelope fields are errors: data goes in payload
    }


def event_schema() -> dict[str, Any]:
    """One event: a branch per known type (``PAYLOAD_FIELDS``' order), then any other type."""
    known = [
        {"title": event_type, **_envelope({"const": event_type}, payload_schema(event_type))}
        for event_type in events.PAYLOAD_FIELDS
    ]
    other_type = {**_no_nul(events.IDENT.json_schema), "not": {"enum": list(events.PAYLOAD_FIELDS)}}
    other = {
        "title": "any other type (stored and shown raw)",
        **_envelope(other_type, _other_payload_schema()),
    }
    return {
        "description": "An event of contract v1. Text may not contain NUL characters.",
        "oneOf": [*known, other],
    }
