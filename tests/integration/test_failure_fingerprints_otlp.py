"""A producer's failure fingerprint and version through POST /v1/traces, exported by the real
OpenTelemetry SDK (docs/otlp.md "Fingerprints", docs/failures.md)."""

import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from jobs.escalations import group_lifecycle
from jobs.models import FailureGroup, IngestToken, Step

pytestmark = pytest.mark.django_db(transaction=True)


def run(job_id: str, node: str, reason: str, fingerprint=None, version: str = "1.0") -> list:
    """A run whose step ``node`` fails with ``reason``, recorded by the SDK."""
    memory = InMemorySpanExporter()
    resource = Resource.create(
        {"service.name": "etl", "service.version": version, "traceviz.job_id": job_id}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("etl")
    attributes = {"traceviz.node_id": node, "traceviz.result_type": "permanent_failure"}
    if fingerprint is not None:
        attributes["traceviz.fingerprint"] = fingerprint
    with (
        tracer.start_as_current_span("run", context=Context()),
        tracer.start_as_current_span(node, attributes=attributes) as span,
    ):
        span.set_status(Status(StatusCode.ERROR, reason))
    provider.shutdown()
    return list(memory.get_finished_spans())


def export(live_server, spans) -> None:
    _token, raw = IngestToken.issue(f"otel-{spans[0].context.trace_id % 10_000}")
    sender = OTLPSpanExporter(
        endpoint=f"{live_server.url}/v1/traces",
        headers={"Authorization": f"Bearer {raw}"},
        timeout=10,
    )
    assert sender.export(spans) == SpanExportResult.SUCCESS


def group_of(job_id: str, node: str) -> FailureGroup:
    return Step.objects.filter(job__job_id=job_id, node_id=node).get().failure_group


def test_a_span_fingerprint_groups_failures_of_different_nodes(live_server):
    export(live_server, run("o1", "load", "connection refused", ["warehouse-down"]))
    export(live_server, run("o2", "store", "socket closed", ["warehouse-down"]))
    export(live_server, run("o3", "store", "socket closed"))
    assert group_of("o1", "load") == group_of("o2", "store") != group_of("o3", "store")


def test_the_default_element_stands_for_the_computed_fingerprint(live_server):
    export(live_server, run("d1", "load", "timeout", ["{{ default }}", "eu"]))
    export(live_server, run("d2", "load", "timeout", ["{{ default }}", "eu"]))
    export(live_server, run("d3", "load", "timeout", ["{{ default }}", "us"]))
    export(live_server, run("d4", "load", "timeout"))
    groups = [group_of(job_id, "load") for job_id in ("d1", "d2", "d3", "d4")]
    assert groups[0] == groups[1] and len({g.pk for g in groups}) == 3


def test_a_span_with_a_bad_fingerprint_is_rejected_and_the_others_stored(live_server):
    export(live_server, run("b1", "load", "timeout", ["x" * 201]))
    assert not Step.objects.filter(job__job_id="b1", node_id="load").exists()


def test_a_service_version_decides_a_regression_of_a_group_resolved_in_a_version(live_server):
    export(live_server, run("v1", "load", "timeout", version="2.3"))
    group = group_of("v1", "load")
    group_lifecycle.resolve(group, in_version="2.4")
    export(live_server, run("v2", "load", "timeout", version="2.4"))
    group.refresh_from_db()
    assert group.status == "resolved"
    export(live_server, run("v3", "load", "timeout", version="2.5"))
    group.refresh_from_db()
    assert group.is_regressed
    assert "in version 2.5" in group.entries.last().note
