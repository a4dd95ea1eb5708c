"""Fixtures the integration tests share."""

import uuid

import pytest
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from jobs.models import IngestToken


@pytest.fixture
def otel_token(transactional_db) -> str:
    """An ingest token for the OpenTelemetry exporters of a test."""
    _token, raw = IngestToken.issue(f"otel-{uuid.uuid4().hex[:6]}")
    return raw


@pytest.fixture
def exporting(live_server, otel_token):
    """``exporting(service)``: a TracerProvider that sends every span to the live server as it
    ends, the way the README's snippets set one up."""
    providers = []

    def make(service: str) -> TracerProvider:
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPSpanExporter(
            endpoint=f"{live_server.url}/v1/traces",
            headers={"Authorization": f"Bearer {otel_token}"},
            timeout=10,
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        provider.shutdown()


@pytest.fixture
def exporting_logs(live_server, otel_token):
    """``exporting_logs(service)``: a LoggerProvider that sends every log record to the live
    server's /v1/logs as it is emitted, as the README says to point a logs exporter."""
    providers = []

    def make(service: str) -> LoggerProvider:
        provider = LoggerProvider(resource=Resource.create({"service.name": service}))
        exporter = OTLPLogExporter(
            endpoint=f"{live_server.url}/v1/logs",
            headers={"Authorization": f"Bearer {otel_token}"},
            timeout=10,
        )
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        providers.append(provider)
        return provider

    yield make
    for provider in providers:
        provider.shutdown()
