"""An OTLP resource (and instrumentation scope) is stored once, referenced by its spans, and
read back unchanged by the API, the export and replay (issue 34: a 12 KB resource copied into
every span of an export made the database grow hundreds of times what was sent)."""

import json
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from jobs.contract import otlp
from jobs.ingest import retention
from jobs.ingest.purge import purge_text
from jobs.ingest.store import store_batch
from jobs.models import Event, Job, SpanResource
from tests.factories import user
from tests.otlp_spans import CHILD_ID, ROOT_ID, attrs, request, root, span, store_spans

pytestmark = pytest.mark.django_db

LABELS = {f"k8s__pod__label{index}": "v" * 300 for index in range(40)}


def _resource():
    return attrs(service__name="crm-sync", deployment__environment="prod", **LABELS)


def _stored_payload_texts() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload FROM jobs_event WHERE type = 'span'")
        return [row[0] if isinstance(row[0], str) else json.dumps(row[0]) for row in cursor]


def test_a_resource_is_stored_once_and_its_spans_reference_it():
    spans = [root(), *(span(name=f"s{n}", span_id=bytes([1, n + 1] * 4)) for n in range(20))]
    store_spans(*spans, resource=_resource())
    assert SpanResource.objects.count() == 1  # the scope has no name: nothing to store
    texts = _stored_payload_texts()
    assert len(texts) == 21
    assert all("v" * 300 not in text and "$resource" in text for text in texts)
    read = Event.objects.filter(type="span").first().payload
    assert read["resource"]["service.name"] == "crm-sync"
    assert read["resource"]["k8s.pod.label0"] == "v" * 300
    assert Job.objects.get().workflow == "crm-sync"


def test_the_api_and_the_export_read_the_resource_back(client):
    store_spans(root(), span(), resource=_resource())
    client.force_login(user("resource-engineer", "engineer", "support"))
    job = Job.objects.get()
    exported = client.get(f"/jobs/{job.job_id}/events.json").json()
    spans = [item for item in exported if item["type"] == "span"]
    assert len(spans) == 2
    for item in spans:
        assert item["payload"]["resource"]["deployment.environment"] == "prod"
        assert "$resource" not in item["payload"].get("scope", {})  # an empty scope: left out
    api = client.get(f"/api/v1/jobs/{job.job_id}")
    assert api.status_code == 200
    assert "$resource" not in api.content.decode()


def test_a_resend_stores_nothing_twice():
    store_spans(root(), span(), resource=_resource())
    store_spans(root(), span(), resource=_resource())
    assert SpanResource.objects.count() == 1
    assert Event.objects.count() == 2


def test_purging_a_string_in_a_resource_scrubs_every_span_that_carried_it():
    resource = attrs(service__name="crm-sync", leaked__note="oops-LeakedValue-1234")
    store_spans(root(), span(span_id=CHILD_ID, parent=ROOT_ID), resource=resource)
    assert purge_text("LeakedValue-1234", dry_run=True).rows["SpanResource"] == 1
    purge_text("LeakedValue-1234", dry_run=False)
    assert not SpanResource.objects.filter(attributes__contains="LeakedValue").exists()
    for event in Event.objects.filter(type="span"):
        assert event.payload["resource"]["leaked.note"] == "oops-[PURGED]"
        assert event.payload["resource"]["service.name"] == "crm-sync"


def _trace(job_id: str, trace_id: bytes, resource, scope_name: str = "") -> None:
    """A trace of two spans, named as job ``job_id``, with its resource (and scope)."""
    spans = [root(), span()]
    for one in spans:
        one.trace_id = trace_id
        one.attributes.extend(attrs(traceviz__job_id=job_id))
    export = request(*spans, resource=resource)
    export.resource_spans[0].scope_spans[0].scope.name = scope_name
    traces = otlp.to_batch(export, max_events=10_000)
    assert traces.rejections == []
    store_batch(traces.batch)


def _digests() -> set[str]:
    return set(SpanResource.objects.values_list("digest", flat=True))


def test_retention_deletes_the_span_resources_no_event_references_any_more():
    _trace("gone", bytes([1] * 16), attrs(service__name="only-gone"))
    only_gone = _digests()
    _trace("gone-too", bytes([2] * 16), attrs(service__name="shared"), scope_name="gone.scope")
    shared_and_scope = _digests() - only_gone
    _trace("kept", bytes([3] * 16), attrs(service__name="shared"))
    kept_scope_only = _digests()
    _trace("kept-scope", bytes([4] * 16), [], scope_name="kept.scope")
    kept_scope = _digests() - kept_scope_only
    now = timezone.now() + timedelta(days=1)
    long_ago = now - timedelta(days=20)
    Job.objects.filter(job_id__in=["gone", "gone-too"]).update(last_received_at=long_ago)
    SpanResource.objects.update(first_seen=long_ago)
    # One first seen since the cutoff and referenced by nothing yet: a batch may be storing
    # the events that reference it.
    SpanResource.objects.create(digest="f" * 32, attributes={"service.name": "new"})

    result = retention.apply_retention(7, now)

    assert result.jobs == 2
    # "shared" is referenced by "kept" still; the scope only "gone-too" had goes.
    [shared] = shared_and_scope & _digests()
    assert SpanResource.objects.get(digest=shared).attributes == {"service.name": "shared"}
    assert _digests() == {shared, *kept_scope, "f" * 32}
    assert result.resources == len(only_gone) + len(shared_and_scope) - 1
    assert Event.objects.filter(job_id="kept").first().payload["resource"] == {
        "service.name": "shared"
    }
    assert Event.objects.filter(job_id="kept-scope").first().payload["scope"] == {
        "name": "kept.scope"
    }


def test_retention_keeps_every_span_resource_while_nothing_expires():
    _trace("t1", bytes([5] * 16), attrs(service__name="crm-sync"), scope_name="s")
    SpanResource.objects.update(first_seen=timezone.now() - timedelta(days=30))
    stored = _digests()

    result = retention.apply_retention(7, timezone.now())

    assert (result.jobs, result.resources) == (0, 0)
    assert _digests() == stored


@pytest.mark.postgres  # SQLite serialises writers: no batch writes while retention runs
@pytest.mark.django_db(transaction=True)
def test_retention_deletes_no_span_resource_while_a_batch_is_writing_one():
    """A batch being stored wrote its resources (one already stored does nothing) and has not
    committed its events yet: retention waits for it, then gives up till its next run rather
    than delete a resource those events are about to reference."""
    _trace("gone", bytes([6] * 16), attrs(service__name="reused-by-a-new-batch"))
    [digest] = _digests()
    long_ago = timezone.now() - timedelta(days=20)
    Job.objects.update(last_received_at=long_ago)
    assert retention.apply_retention(7).jobs == 1  # the resource is unreferenced now
    SpanResource.objects.update(first_seen=long_ago)
    batch = connections.create_connection("default")
    try:
        batch.set_autocommit(False)
        with batch.cursor() as cursor:
            cursor.execute(
                "INSERT INTO jobs_spanresource (digest, attributes, first_seen) "
                "VALUES (%s, '{}', now()) ON CONFLICT DO NOTHING",
                [digest],
            )
        assert retention.forget_resources(timezone.now()) == 0
        assert _digests() == {digest}
    finally:
        batch.rollback()
        batch.close()
    assert retention.forget_resources(timezone.now()) == 1
