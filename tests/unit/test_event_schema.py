"""The event schema of the API document against the contract it is built from (issue 11): for
every field of every known type, of the context and of the envelope, the schema and
``events.validate`` accept and refuse the same values, boundaries included."""

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from jobs.contract import events, schema

VALIDATOR = Draft202012Validator(
    schema.event_schema(), format_checker=Draft202012Validator.FORMAT_CHECKER
)
# Every bound and choice docs/contract.md names, whatever the schema says, so a bound the
# schema lost is still probed; plus one value of each JSON type.
FIXED_PROBES = [
    None,
    True,
    False,
    -1,
    0,
    1,
    1_000_000,
    1_000_001,
    10_000_000,
    10_000_001,
    10**12,
    10**12 + 1,
    events.MAX_SMALL_INT,
    events.MAX_SMALL_INT + 1,
    -0.5,
    0.5,
    10**12 + 0.5,
    "",
    "x",
    "x" * events.MAX_ID_CHARS,
    "x" * (events.MAX_ID_CHARS + 1),
    "success",
    "retryable_failure",
    "permanent_failure",
    "compensatable_failure",
    "completed",
    "failed",
    "cancelled",
    "low",
    "critical",
    "bogus",
    [],
    ["a"],
    {},
    {"a": 1},
]


def probes(fragment: dict[str, Any]) -> list[Any]:
    """The fixed probes and each bound the fragment states, on it and one past it."""
    found = list(FIXED_PROBES)
    for key, nudge in (("minimum", -1), ("maximum", 1)):
        if key in fragment:
            found += [fragment[key], fragment[key] + nudge]
    for key, nudge in (("minLength", -1), ("maxLength", 1)):
        if key in fragment:
            found += ["y" * fragment[key], "y" * max(fragment[key] + nudge, 0)]
    found += [*fragment.get("enum", ()), *(choice + "!" for choice in fragment.get("enum", ()))]
    return found


def valid_value(fragment: dict[str, Any]) -> Any:
    if "enum" in fragment:
        return fragment["enum"][0]
    return {"string": "n1", "integer": 1, "number": 1, "boolean": True, "array": []}.get(
        fragment.get("type"), {}
    )


def required_payload(event_type: str) -> dict[str, Any]:
    fields = events.PAYLOAD_FIELDS[event_type]
    return {
        name: valid_value(fields[name].json_schema)
        for name in events.REQUIRED_PAYLOAD_FIELDS.get(event_type, ())
    }


def disagreements(items: list[dict]) -> list[tuple[Any, bool, list]]:
    """Items the schema and the contract judge differently, with the contract's errors."""
    found = []
    for item in items:
        event, errors = events.validate(item)
        if (event is not None) != VALIDATOR.is_valid(item):
            found.append((item, VALIDATOR.is_valid(item), [e.as_dict() for e in errors]))
    return found


PAYLOAD_ROWS = [(t, name) for t, fields in events.PAYLOAD_FIELDS.items() for name in fields]


@pytest.mark.parametrize(("event_type", "name"), PAYLOAD_ROWS)
def test_schema_and_contract_agree_on_every_payload_field(event_type, name):
    fragment = events.PAYLOAD_FIELDS[event_type][name].json_schema
    base = {"type": event_type, "job_id": "j1"}
    items = [
        {**base, "payload": {**required_payload(event_type), name: value}}
        for value in probes(fragment)
    ]
    assert disagreements(items) == []


@pytest.mark.parametrize("name", sorted(events.CONTEXT_FIELDS))
def test_schema_and_contract_agree_on_every_context_field(name):
    fragment = events.CONTEXT_FIELDS[name].json_schema
    items = [
        {
            "type": "node_finished",
            "job_id": "j1",
            "payload": {"node_id": "n1", "context": {name: v}},
        }
        for v in probes(fragment)
    ]
    assert disagreements(items) == []


@pytest.mark.parametrize(
    ("name", "check"),
    [
        ("type", events.IDENT),
        ("job_id", events.IDENT),
        ("event_id", events.IDENT),
        ("seq", events.SEQ),
    ],
)
def test_schema_and_contract_agree_on_every_envelope_field(name, check):
    items = [{"type": "custom", "job_id": "j1", name: v} for v in probes(check.json_schema)]
    assert disagreements(items) == []


def test_schema_and_contract_agree_on_timestamps():
    good = ["2026-03-02T10:00:00Z", "2026-03-02T10:00:00.123456789+01:00"]
    bad = ["2026-03-02", "yesterday", "2026-03-02T10:00:00", 1_700_000_000]
    items = [{"type": "custom", "job_id": "j1", "ts": ts} for ts in good + bad]
    assert disagreements(items) == []
    assert [VALIDATOR.is_valid(item) for item in items] == [True] * 2 + [False] * 4


@pytest.mark.parametrize(
    "item",
    [
        {"type": "custom.thing", "job_id": "j1", "payload": {"attempt": 0, "k": [1]}},
        {"type": "node_started", "job_id": "j1", "payload": {"node_id": "n1", "vendor": {}}},
        {"type": "node_started", "job_id": "j1"},
        {"type": "t", "job_id": "j1", "extra": 1},
        {"type": "t", "job_id": "j1", "payload": []},
        {"type": "t"},
        {"job_id": "j1"},
        {"type": "t", "job_id": "j\x00"},
    ],
)
def test_schema_and_contract_agree_on_whole_events(item):
    assert disagreements([item]) == []


def test_each_known_type_has_its_own_branch_and_every_branch_the_whole_envelope():
    branches = schema.event_schema()["oneOf"]
    assert [branch["title"] for branch in branches[:-1]] == list(events.PAYLOAD_FIELDS)
    assert all(set(branch["properties"]) == events.ENVELOPE_FIELDS for branch in branches)


@pytest.mark.parametrize(
    ("check", "fragment"),
    [
        (events.integer(1, 1_000_000), {"type": "integer", "minimum": 1, "maximum": 1_000_000}),
        (events.integer(0), {"type": "integer", "minimum": 0, "maximum": events.MAX_SMALL_INT}),
        (events.number(0, 10**12), {"type": "number", "minimum": 0, "maximum": 10**12}),
        (events.string(1), {"type": "string", "minLength": 1, "maxLength": 200}),
        (events.string(), {"type": "string", "maxLength": 200}),
        (events.one_of("a", "b"), {"type": "string", "enum": ["a", "b"]}),
        (events.text, {"type": "string"}),
        (events.obj, {"type": "object"}),
        (events.array, {"type": "array"}),
        (events.boolean, {"type": "boolean"}),
        (events.anything, {}),
    ],
)
def test_each_check_states_its_rule_as_json_schema(check, fragment):
    assert check.json_schema == fragment
