"""A job's exported events import again with ``manage.py import_events`` and rebuild the same
job: the export writes the event contract (a missing ``seq`` stays missing, never ``null``)."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from jobs.models import Event, Job, Step
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db


def store_job():
    factories.store(
        [
            event("job_started", "rt-1", 0, provider="anthropic", model="claude-x"),
            started("fetch", "rt-1", 1),
            finished("fetch", "success", "rt-1", 2, payload_results={"rows": 3}),
            started("upload", "rt-1", 3, seq=7),
            finished(
                "upload",
                "permanent_failure",
                "rt-1",
                4,
                failure_code="tool_not_found",
                error_type="PermanentError",
                reason="no such tool",
            ),
            event("job_finished", "rt-1", 5, status="failed"),
        ]
    )


def job_snapshot():
    job = Job.objects.get(job_id="rt-1")
    steps = list(
        Step.objects.filter(job=job)
        .order_by("position")
        .values_list("node_id", "attempt", "result_type", "failure_code", "reason")
    )
    events = sorted(Event.objects.filter(job_id="rt-1").values_list("event_id", "ts", "seq"))
    return (job.status, job.completed_node_ids, job.payload_results, steps, events)


@pytest.mark.parametrize("extension", ["ndjson", "json"])
def test_exported_events_import_again_into_the_same_job(client, tmp_path, extension):
    store_job()
    before = job_snapshot()
    client.force_login(factories.user("erin", "engineer"))
    response = client.get(f"/jobs/rt-1/events.{extension}")
    assert response.status_code == 200
    exported = response.content
    lines = (
        [json.loads(line) for line in exported.decode().splitlines()]
        if extension == "ndjson"
        else json.loads(exported)
    )
    assert all(item.get("seq", 0) is not None for item in lines)
    assert [item["seq"] for item in lines if "seq" in item] == [7]

    Job.objects.filter(job_id="rt-1").delete()
    Event.objects.filter(job_id="rt-1").delete()
    path = tmp_path / f"rt-1.{extension}"
    path.write_bytes(exported)
    out = StringIO()
    call_command("import_events", str(path), stdout=out, stderr=StringIO())
    report = json.loads(out.getvalue())
    assert (report["stored"], report["rejected"], report["errors"]) == (len(lines), 0, [])
    assert job_snapshot() == before


def test_importing_an_export_twice_stores_nothing_new(client, tmp_path):
    store_job()
    client.force_login(factories.user("erin", "engineer"))
    path = tmp_path / "rt-1.ndjson"
    path.write_bytes(client.get("/jobs/rt-1/events.ndjson").content)
    out = StringIO()
    call_command("import_events", str(path), stdout=out, stderr=StringIO())
    report = json.loads(out.getvalue())
    assert (report["stored"], report["duplicates"], report["rejected"]) == (0, 6, 0)
