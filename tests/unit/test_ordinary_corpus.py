"""The ordinary-data corpus (tests/ordinary_corpus.py) survives redaction unchanged, as event
payloads and as span attributes; nothing of it is reported masked. The end-to-end pass through
both endpoints is tests/integration/test_ordinary_corpus_end_to_end.py."""

import pytest

from jobs.contract import otlp
from jobs.contract.redaction import is_secret_key, names_an_id, redact_payload, redact_text
from tests.ordinary_corpus import ORDINARY_SECTIONS, keys_and_values
from tests.otlp_spans import attrs, request, span


def keys_of(value) -> list[str]:
    if isinstance(value, dict):
        return [*value, *(key for child in value.values() for key in keys_of(child))]
    if isinstance(value, list):
        return [key for child in value for key in keys_of(child)]
    return []


def test_corpus_holds_over_three_hundred_keys_and_values_of_every_kind():
    assert len(keys_of(ORDINARY_SECTIONS)) >= 300
    assert len(keys_and_values(ORDINARY_SECTIONS)) >= 300
    for section in ORDINARY_SECTIONS.values():
        assert len(keys_and_values(section)) >= 25


def test_no_key_of_the_corpus_names_a_secret():
    assert [key for key in keys_of(ORDINARY_SECTIONS) if is_secret_key(key)] == []


@pytest.mark.parametrize("name", ORDINARY_SECTIONS)
def test_section_as_an_event_payload_comes_back_unchanged(name):
    payload = {
        "payload_results": ORDINARY_SECTIONS[name],
        "context": {"actual_arguments": ORDINARY_SECTIONS[name]},
        "audit_trail": [ORDINARY_SECTIONS[name]],
    }
    assert redact_payload(payload, 512) == (payload, ())


def test_every_text_that_is_not_an_id_survives_alone_and_in_a_sentence():
    for path, value in keys_and_values(ORDINARY_SECTIONS):
        key = path.rsplit(".", 1)[-1].split("[")[0]
        if isinstance(value, str) and not names_an_id(key):
            assert redact_text(value) == value, path
            assert redact_text(f"step said {value} (kept)") == f"step said {value} (kept)", path


@pytest.mark.parametrize("name", ORDINARY_SECTIONS)
def test_section_as_span_attributes_comes_back_unchanged(name):
    section = ORDINARY_SECTIONS[name]
    traces = otlp.to_batch(request(span(name=name, attributes=attrs(**section))), max_events=100)
    assert traces.rejections == []
    [(_index, event)] = traces.batch.events
    assert event.payload["attributes"] == section
    assert event.masked == ()
    assert "dropped" not in event.payload
