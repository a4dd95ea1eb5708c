"""Bytes stored per byte received: OTLP traces (a small resource and a 12 KB one), the event API,
and the worst case per byte (OTLP spans of a one-letter name and nothing else, 30 a request or a
lone root span a request), each on a fresh PostgreSQL database, through the ingest views in this
process.

For each shape: sends its requests, then prints the bytes received (request bodies as sent,
protobuf for OTLP, JSON for the event API), the bytes the database grew by (every table of the
app with its indexes and TOAST, partitions summed into their table) and their ratio, and the
growth by table. Target: <= 3 x; no request shape may exceed 10 x (bench/README.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_storage \
        .venv/bin/python bench/storage.py
"""

import argparse
import json
import os
import random
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from load import recreate_database
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status

ROOT = Path(__file__).resolve().parent.parent
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def attribute(key: str, value) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def resource_attributes(size: int, rng: random.Random) -> list[KeyValue]:
    """What an SDK's resource carries (service, SDK, host, process), padded to about ``size``
    bytes with Kubernetes-style labels (a 12 KB resource is a pod's labels and annotations)."""
    attrs = [
        attribute("service.name", "crm-sync"),
        attribute("telemetry.sdk.name", "opentelemetry"),
        attribute("telemetry.sdk.language", "python"),
        attribute("telemetry.sdk.version", "1.27.0"),
        attribute("host.name", "worker-7d9f8b6c5-x2x4z"),
        attribute("process.pid", 4242),
    ]
    index = 0
    while sum(len(kv.SerializeToString()) for kv in attrs) < size:
        value = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789-") for _ in range(120))
        attrs.append(attribute(f"k8s.pod.annotation.example.com/label-{index}", value))
        index += 1
    return attrs


def trace(steps: int, start: datetime, rng: random.Random) -> list[Span]:
    """A job's trace: a root, ``steps`` step spans, an LLM call span in every third step."""
    trace_id, root_id = rng.randbytes(16), rng.randbytes(8)
    at = int(start.timestamp() * 1e9)
    flags = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    spans = []
    for index in range(steps):
        step_id = rng.randbytes(8)
        spans.append(
            Span(
                trace_id=trace_id,
                span_id=step_id,
                parent_span_id=root_id,
                flags=flags,
                name=f"step-{index}",
                start_time_unix_nano=at,
                end_time_unix_nano=at + 40_000_000,
                attributes=[
                    attribute("step.index", index),
                    attribute("http.request.method", "GET"),
                    attribute(
                        "url.full", f"https://api.example.com/orders/{rng.randint(1, 10**6)}"
                    ),
                ],
            )
        )
        if index % 3 == 0:
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=rng.randbytes(8),
                    parent_span_id=step_id,
                    flags=flags,
                    name="chat gpt-4o-mini",
                    start_time_unix_nano=at + 1_000_000,
                    end_time_unix_nano=at + 30_000_000,
                    attributes=[
                        attribute("gen_ai.operation.name", "chat"),
                        attribute("gen_ai.request.model", "gpt-4o-mini"),
                        attribute("gen_ai.usage.input_tokens", 1200),
                        attribute("gen_ai.usage.output_tokens", 300),
                    ],
                )
            )
        at += 50_000_000
    spans.append(
        Span(
            trace_id=trace_id,
            span_id=root_id,
            flags=flags,
            name="sync-orders",
            start_time_unix_nano=int(start.timestamp() * 1e9),
            end_time_unix_nano=at,
            status=Status(code=Status.StatusCode.STATUS_CODE_OK),
        )
    )
    return spans


def otlp_bodies(jobs: int, steps: int, resource_bytes: int, rng: random.Random) -> list[bytes]:
    """One export request per job (its trace, with its resource), as an SDK's batch sends it."""
    bodies = []
    for job in range(jobs):
        message = ExportTraceServiceRequest()
        resource_spans = message.resource_spans.add()
        resource_spans.resource.attributes.extend(resource_attributes(resource_bytes, rng))
        scope = resource_spans.scope_spans.add()
        scope.scope.name = "opentelemetry.instrumentation.requests"
        scope.spans.extend(trace(steps, START + timedelta(seconds=job), rng))
        bodies.append(message.SerializeToString())
    return bodies


def tiny_otlp_bodies(jobs: int, spans: int, rng: random.Random) -> list[bytes]:
    """The smallest spans a request can hold (the worst case per byte): one export a job, no
    resource, no scope, ``spans`` spans of a one-letter name and no attributes, under a root."""
    bodies = []
    for job in range(jobs):
        message = ExportTraceServiceRequest()
        scope = message.resource_spans.add().scope_spans.add()
        trace_id, root_id = rng.randbytes(16), rng.randbytes(8)
        at = int((START + timedelta(seconds=job)).timestamp() * 1e9)
        scope.spans.append(
            Span(
                trace_id=trace_id,
                span_id=root_id,
                name="r",
                start_time_unix_nano=at,
                end_time_unix_nano=at + spans + 1,
            )
        )
        for index in range(spans):
            scope.spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=rng.randbytes(8),
                    parent_span_id=root_id,
                    name=chr(ord("a") + index % 26),
                    start_time_unix_nano=at + index,
                    end_time_unix_nano=at + index + 1,
                )
            )
        bodies.append(message.SerializeToString())
    return bodies


def event_bodies(jobs: int, steps: int, rng: random.Random) -> list[bytes]:
    """One request per job: job_started, a start and finish per step, job_finished."""
    bodies = []
    for job in range(jobs):
        job_id = f"job-{job:06d}"
        at = START + timedelta(seconds=job)
        events = [
            {
                "type": "job_started",
                "job_id": job_id,
                "ts": at.isoformat(),
                "payload": {"name": "sync-orders", "workflow": "crm-sync"},
            }
        ]
        for index in range(steps):
            node = {"node_id": f"step-{index}", "attempt": 1, "step_index": index}
            at += timedelta(milliseconds=50)
            events.append(
                {"type": "node_started", "job_id": job_id, "ts": at.isoformat(), "payload": node}
            )
            events.append(
                {
                    "type": "node_finished",
                    "job_id": job_id,
                    "ts": (at + timedelta(milliseconds=40)).isoformat(),
                    "payload": {
                        **node,
                        "result_type": "success",
                        "duration_ms": 40,
                        "payload_results": {"order": rng.randint(1, 10**6), "status": "synced"},
                    },
                }
            )
        events.append(
            {
                "type": "job_finished",
                "job_id": job_id,
                "ts": (at + timedelta(seconds=1)).isoformat(),
                "payload": {"status": "completed"},
            }
        )
        bodies.append(json.dumps(events).encode())
    return bodies


def _sizes(relkind: str, *sizes: str) -> dict[str, tuple[int, ...]]:
    """The ``sizes`` (SQL of a relation's oid ``c.oid``) of each app relation of ``relkind``
    ('r' tables, 'i' indexes), partitions summed into their parent."""
    from django.db import connection

    columns = ", ".join(f"sum({size})" for size in sizes)
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT coalesce(parent.relname, c.relname), {columns}
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
            LEFT JOIN pg_class parent ON parent.oid = i.inhparent
            WHERE n.nspname = 'public' AND c.relkind = %s
            GROUP BY 1
            """,
            [relkind],
        )
        return {name: tuple(int(value) for value in values) for name, *values in cursor}


def relation_bytes() -> dict[str, tuple[int, ...]]:
    """Per app table: bytes of its heap, its TOAST and its indexes."""
    return _sizes(
        "r",
        "pg_relation_size(c.oid)",
        "pg_total_relation_size(c.oid) - pg_relation_size(c.oid) - pg_indexes_size(c.oid)",
        "pg_indexes_size(c.oid)",
    )


def table_bytes() -> dict[str, int]:
    """Bytes each app table takes (heap, indexes, TOAST)."""
    return {name: value for name, (value,) in _sizes("r", "pg_total_relation_size(c.oid)").items()}


def index_bytes() -> dict[str, int]:
    """Bytes of each index of the app (a partitioned index summed over its partitions)."""
    return {name: value for name, (value,) in _sizes("i", "pg_relation_size(c.oid)").items()}


def measure(label: str, path: str, content_type: str, bodies: list[bytes], token: str) -> float:
    from django.test import Client

    client = Client()
    before, relations_before, indexes_before = table_bytes(), relation_bytes(), index_bytes()
    for body in bodies:
        response = client.post(
            path, body, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {token}"
        )
        if response.status_code != 200 or b"rejected" in response.content[:0]:
            sys.exit(f"{label}: {response.status_code} {response.content[:300]!r}")
    after = table_bytes()
    received = sum(map(len, bodies))
    grown = {name: after.get(name, 0) - before.get(name, 0) for name in after}
    stored = sum(grown.values())
    ratio = stored / received
    print(f"{label}: received {received:,} B, stored {stored:,} B, {ratio:.2f} x")
    relations = relation_bytes()
    for name, size in sorted(grown.items(), key=lambda item: -item[1]):
        if size:
            then = relations_before.get(name, (0, 0, 0))
            heap, toast, index = (a - b for a, b in zip(relations[name], then, strict=True))
            print(
                f"    {name:32} {size:>12,} B  {size / received:5.2f} x   (heap {heap:,}, "
                f"TOAST {toast:,}, indexes {index:,})"
            )
    indexes = index_bytes()
    grown_indexes = {name: indexes[name] - indexes_before.get(name, 0) for name in indexes}
    print("    indexes that grew by 1 % of what was received or more:")
    for name, size in sorted(grown_indexes.items(), key=lambda item: -item[1]):
        if size >= received / 100:
            print(f"        {name:54} {size:>12,} B  {size / received:5.2f} x")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs (one request each)")
    parser.add_argument("--steps", type=int, default=30, help="steps per job")
    parser.add_argument("--only", help="measure only the shape whose label starts with this")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/traceviz_storage")
    base, database = url.rsplit("/", 1)
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
    os.environ.setdefault("TRACEVIZ_ALLOWED_HOSTS", "testserver")
    sys.path.insert(0, str(ROOT))
    import django

    rng = random.Random(34)
    shapes = [
        ("OTLP, small resource", "/v1/traces", "application/x-protobuf", 300),
        ("OTLP, 12 KB resource", "/v1/traces", "application/x-protobuf", 12 * 1024),
        ("event API", "/api/v1/events", "application/json", None),
        ("OTLP, tiny spans", "/v1/traces", "application/x-protobuf", 0),
        ("OTLP, one tiny span a request", "/v1/traces", "application/x-protobuf", -1),
    ]
    django_ready = False
    for label, path, content_type, resource in shapes:
        from django.db import connections

        if args.only and not label.startswith(args.only):
            continue
        connections.close_all()
        recreate_database(base, database)
        if not django_ready:
            django.setup()
            django_ready = True
        from django.core.management import call_command

        call_command("migrate", "--noinput", verbosity=0)
        from jobs.models import IngestToken

        _token, raw = IngestToken.issue("storage-bench")
        if resource is None:
            bodies = event_bodies(args.jobs, args.steps, rng)
        elif resource <= 0:
            bodies = tiny_otlp_bodies(args.jobs, args.steps if resource == 0 else 0, rng)
        else:
            bodies = otlp_bodies(args.jobs, args.steps, resource, rng)
        measure(label, path, content_type, bodies, raw)
    connections.close_all()


if __name__ == "__main__":
    main()
