"""Fixtures the integration tests share."""

import uuid

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from jobs.models import IngestToken


@pytest.fixture
def exporting(live_server):
    """``exporting(service)``: a TracerProvider that sends every span to the live server as it
    ends, the way the README's snippets set one up."""
    _token, raw = IngestToken.issue(f"otel-{uuid.uuid4().hex[:6]}")
    providers = []

    def make(service: str) -> TracerProvider:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPSpanExporter(
            endpoint=f"{live_server.url}/v1/traces",
            headers={"Authorization": f"Bearer {raw}"},
            timeout=10,
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        provider.shutdown()
