"""The import_events command: a JSON or NDJSON file of events stored as ingest stores them
(rows equal to a replay), rejects reported by index, duplicates stored once, unreadable
files refused."""

import json

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job
from tests.factories import event, finished, started
from tests.integration.test_projection import assert_parity

pytestmark = pytest.mark.django_db


def run_import(path) -> tuple[dict, str | None]:
    from io import StringIO

    out = StringIO()
    try:
        call_command("import_events", str(path), stdout=out, stderr=StringIO())
        failure = None
    except CommandError as error:
        failure = str(error)
    return json.loads(out.getvalue()), failure


STREAM = [
    event("job_started", "imp", at=0),
    started("n1", "imp", at=1),
    finished("n1", "success", "imp", at=2),
]


def test_import_events_reads_a_json_file(tmp_path):
    path = tmp_path / "events.json"
    path.write_text(json.dumps(STREAM))
    report, failure = run_import(path)
    assert (report["stored"], report["rejected"], failure) == (3, 0, None)
    assert Job.objects.get(job_id="imp").completed_node_ids == ["n1"]
    assert_parity("imp")


def test_import_events_reads_an_ndjson_file(tmp_path):
    path = tmp_path / "events.ndjson"
    path.write_text("\n".join(json.dumps(item) for item in STREAM))
    report, failure = run_import(path)
    assert (report["received"], report["stored"], failure) == (3, 3, None)


def test_import_events_reports_rejects_and_fails(tmp_path):
    path = tmp_path / "events.ndjson"
    path.write_text("\n".join([json.dumps(STREAM[0]), "nope", json.dumps({"type": "t"})]))
    report, failure = run_import(path)
    assert (report["stored"], report["rejected"]) == (1, 2)
    assert [e["index"] for e in report["errors"]] == [1, 2]
    assert failure == "2 of 3 events rejected"


def test_import_events_reports_indexes_across_batches(tmp_path):
    path = tmp_path / "events.json"
    items = [event("custom", "imp", at=i, event_id=f"e{i}") for i in range(5)]
    items[3]["seq"] = -1
    path.write_text(json.dumps(items))
    from io import StringIO

    out = StringIO()
    with pytest.raises(CommandError):
        call_command("import_events", str(path), "--batch", "2", stdout=out, stderr=StringIO())
    assert [e["index"] for e in json.loads(out.getvalue())["errors"]] == [3]


def test_import_events_twice_stores_duplicates_once(tmp_path):
    path = tmp_path / "events.json"
    path.write_text(json.dumps(STREAM))
    run_import(path)
    report, failure = run_import(path)
    assert (report["stored"], report["duplicates"], failure) == (0, 3, None)


def test_import_events_of_an_unreadable_file_fails(tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("import_events", str(tmp_path / "missing.json"))


def test_import_events_of_a_file_that_is_not_json_fails(tmp_path):
    path = tmp_path / "events.json"
    path.write_text("{nope")
    with pytest.raises(CommandError, match="body is not JSON"):
        call_command("import_events", str(path))
