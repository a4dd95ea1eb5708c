"""An OTLP resource (and instrumentation scope) is stored once, referenced by its spans, and
read back unchanged by the API, the export and replay (issue 34: a 12 KB resource copied into
every span of an export made the database grow hundreds of times what was sent)."""

import json

import pytest
from django.db import connection

from jobs.ingest.purge import purge_text
from jobs.models import Event, Job, SpanResource
from tests.factories import user
from tests.otlp_spans import CHILD_ID, ROOT_ID, attrs, root, span, store_spans

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
        assert item["payload"]["scope"] == {} or "$resource" not in item["payload"]["scope"]
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
