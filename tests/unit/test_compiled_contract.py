"""The compiled contract (msgspec types built from the checks' tables) against the checks
themselves: ``validate`` accepts an item by the compiled types and reports a refused one by the
field checks, so the two must accept exactly the same items, and a valid item must take the
compiled way."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.contract import events
from tests.unit.test_event_schema import PAYLOAD_ROWS, probes, required_payload


def agree(item: Any) -> None:
    """The compiled way accepts ``item`` exactly when the field checks find no error, and then
    makes the same event."""
    compiled = events._accepted(item, True) if isinstance(item, dict) else None
    checked, errors = events._field_errors(item, True)
    assert (compiled is not None) == (checked is not None), (item, errors)
    if compiled is not None:
        assert compiled == checked


@pytest.mark.parametrize(("event_type", "name"), PAYLOAD_ROWS)
def test_compiled_and_field_checks_agree_on_every_bound_of_every_payload_field(event_type, name):
    fragment = events.PAYLOAD_FIELDS[event_type][name].json_schema
    for value in [*probes(fragment), 1.0, 2**63, 2**64, -(2**63) - 1, float("nan"), "a\n"]:
        agree(
            {
                "type": event_type,
                "job_id": "j1",
                "payload": {**required_payload(event_type), name: value},
            }
        )


@pytest.mark.parametrize("event_type", [*events.PAYLOAD_FIELDS, "custom.thing"])
def test_a_valid_event_of_each_type_is_accepted_by_the_compiled_types(event_type):
    payload = required_payload(event_type) if event_type in events.PAYLOAD_FIELDS else {}
    if event_type == "span":
        payload |= {"trace_id": "a" * 32, "span_id": "b" * 16, "end": "2026-03-02T10:00:00Z"}
    item = {"type": event_type, "job_id": "j1", "ts": "2026-03-02T10:00:00Z", "payload": payload}
    assert events._accepted(item, True) is not None
    assert events.validate(item)[0] == events._field_errors(item, True)[0]


def test_a_hex_id_with_a_final_newline_is_refused_by_both():
    span = {"trace_id": "a" * 32 + "\n", "span_id": "b" * 16, "end": "2026-03-02T10:00:00Z"}
    item = {"type": "span", "job_id": "j1", "payload": span}
    assert events._accepted(item, True) is None
    assert events.validate(item)[1] == [
        events.FieldError("payload.trace_id", "must be 32 lowercase hex digits")
    ]


JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.sampled_from(
        ["", "x" * 200, "x" * 201, "success", "2026-03-02T10:00:00Z", "a" * 32, "\ud800", "n\x00"]
    )
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children)
    ),
    max_leaves=8,
)


@st.composite
def items(draw) -> Any:
    event_type = draw(st.sampled_from([*events.PAYLOAD_FIELDS, "custom.thing", "", 3, "\ud800"]))
    fields = events.PAYLOAD_FIELDS.get(event_type, events.OTHER_TYPE_FIELDS)
    names = draw(st.lists(st.sampled_from([*fields, "context", "other"]), max_size=4))
    payload = {name: draw(JSON_VALUES) for name in names}
    item: dict[str, Any] = {"type": event_type, "job_id": draw(st.sampled_from(["j1", "", 7]))}
    if draw(st.booleans()):
        item["payload"] = payload if draw(st.integers(0, 9)) else draw(JSON_VALUES)
    for name in draw(st.lists(st.sampled_from(["event_id", "ts", "seq", "extra"]), max_size=2)):
        item[name] = draw(JSON_VALUES)
    return item


@settings(max_examples=400, deadline=None)
@given(items())
def test_compiled_and_field_checks_agree_on_any_item(item):
    agree(item)
