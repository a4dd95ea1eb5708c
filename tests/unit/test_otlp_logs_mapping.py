"""OTLP log records as events (jobs/contract/otlp_logs.py): one ``log`` event per record, of
the job its trace belongs to (as spans decide it), kept whole and bounded; what cannot be
read, and what belongs to no job, is rejected with the reason."""

import base64
import json

import pytest
from google.protobuf import json_format

from jobs.contract import otlp, otlp_logs
from jobs.contract.bodies import BodyError
from tests.otlp_spans import CHILD_ID, TRACE_ID, attrs, log_record, logs_request


def mapped(*records, resource=None):
    return otlp_logs.to_batch(logs_request(*records, resource=resource), 10_000)


def only_event(logs):
    assert logs.rejections == []
    ((_, event),) = logs.batch.events
    return event


def test_a_record_is_a_log_event_of_its_traces_job():
    record = log_record(
        "gen_ai.user.message",
        {"content": "Where is 42?"},
        attributes=attrs(gen_ai__system="openai"),
    )
    event = only_event(mapped(record))
    assert (event.type, event.job_id) == ("log", TRACE_ID.hex())
    assert event.event_id.startswith(f"otlp-log:{TRACE_ID.hex()}:")
    assert event.ts.isoformat() == "2026-03-02T09:00:00.001000+00:00"
    assert event.payload == {
        "trace_id": TRACE_ID.hex(),
        "span_id": CHILD_ID.hex(),
        "time_unix_nano": 1_772_442_000_001_000_000,
        "severity_number": 9,
        "event_name": "gen_ai.user.message",
        "body": {"content": "Where is 42?"},
        "attributes": {"gen_ai.system": "openai"},
        "resource": {},
        "scope": {},
    }


def test_traceviz_job_id_names_the_job_as_it_does_for_spans():
    named = log_record("a", attributes=attrs(traceviz__job_id="nightly-7"))
    same_trace = log_record("b", at_ms=2)
    first, second = (e for _, e in mapped(named, same_trace).batch.events)
    assert (first.job_id, second.job_id) == ("nightly-7", "nightly-7")
    by_resource = only_event(mapped(log_record("c"), resource=attrs(traceviz__job_id="run-9")))
    assert by_resource.job_id == "run-9"


def test_a_record_of_no_trace_needs_a_job_id():
    unplaced = log_record("startup", trace_id=b"", span_id=b"")
    logs = mapped(unplaced)
    assert logs.batch.events == []
    assert logs.rejections == [f"log record #0 'startup': {otlp_logs.NO_JOB}"]
    placed = only_event(mapped(unplaced, resource=attrs(traceviz__job_id="run-9")))
    assert (placed.job_id, "trace_id" in placed.payload) == ("run-9", False)
    assert placed.event_id.startswith("otlp-log:no-trace:")


def test_an_unreadable_record_is_rejected_and_the_others_kept():
    bad = log_record("bad", span_id=b"\x01\x02")
    logs = mapped(bad, log_record("good"))
    assert logs.rejected_records == 1
    assert logs.rejections == ["log record span 0102 'bad': span_id must be 8 bytes, not all zero"]
    assert [e.payload["event_name"] for _, e in logs.batch.events] == ["good"]
    assert logs.error_message == logs.rejections[0]


def test_a_resent_record_has_the_same_event_id_in_protobuf_and_json():
    request = logs_request(log_record("gen_ai.choice", {"message": {"content": "ok"}}))
    binary = otlp_logs.decode_request(request.SerializeToString(), otlp.PROTOBUF)
    document = json_format.MessageToDict(request)
    for resource in document["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    record[key] = base64.b64decode(record[key]).hex()
    from_json = otlp_logs.decode_request(json.dumps(document).encode(), otlp.JSON)
    ids = [only_event(otlp_logs.to_batch(r, 10)).event_id for r in (binary, from_json)]
    assert ids[0] == ids[1]


def test_json_ids_must_be_hex():
    body = json.dumps(
        {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "not hex"}]}]}]}
    ).encode()
    with pytest.raises(BodyError) as raised:
        otlp_logs.decode_request(body, otlp.JSON)
    assert raised.value.status == 400
    assert "resourceLogs[0].scopeLogs[0].logRecords[0].traceId is not hex" in raised.value.message


def test_a_long_body_is_cut_with_a_marker():
    event = only_event(mapped(log_record("big", "x" * 100_000)))
    assert len(event.payload["body"].encode()) <= otlp.MAX_VALUE_BYTES
    assert event.payload["body"].endswith("bytes]")
    assert event.payload["dropped"] == {"cut": ["body"]}


def test_more_records_than_a_request_may_map_is_413():
    with pytest.raises(BodyError) as raised:
        otlp_logs.to_batch(logs_request(log_record("a"), log_record("b")), max_events=1)
    assert raised.value.status == 413


def test_a_secret_straddling_the_body_cut_is_masked_whole_and_its_paths_recorded():
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    near_the_cut = "x" * (otlp.MAX_VALUE_BYTES - 60)
    record = log_record(
        "app.log",
        f"{near_the_cut} {token} " + "y" * 1000,
        attributes=attrs(db_password="hunter2", tests_passed=1843),
    )
    event = only_event(mapped(record))
    assert event.payload["body"].startswith(f"{near_the_cut} [REDACTED]")
    assert "ghp_" not in event.payload["body"]
    assert event.payload["attributes"] == {"db_password": "[REDACTED]", "tests_passed": 1843}
    assert set(event.masked) == {"body", "attributes.db_password"}
