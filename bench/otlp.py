"""OTLP ingest next to the event API, in one run against gunicorn + PostgreSQL.

The same jobs go through both doors, end to end (acknowledged = stored and projected):
J jobs of S steps each, as the event API's contract events (job_started, node_started and
node_finished per step, job_finished) and as OpenTelemetry traces (a root span and one span per
step, every third step with an LLM call span inside it, every tenth step failing once and
retried), in requests of B events or of whole traces up to 512 spans (the OpenTelemetry SDK's
``BatchSpanProcessor`` export size, ``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``; earlier runs sent
B/2 = 200: ``--spans-per-request 200``). Prints events/s, spans/s and their ratio (target:
spans/s >= 0.5 x events/s) for each of ``--rounds`` rounds (the two phases alternate, so a
change in the shared machine's load hits both alike), and their median. Each round also sends
the same shape of traces *live*: all J runs going at once, their spans in the order they end,
interleaved across traces (a collector's exports of many running agents), so each request
holds a few spans of every trace and each trace grows over many requests.

Then one long trace streamed as an instrumented app exports it while it runs: L steps' spans
sent in the order they end (a step's LLM call before the step, the root last), E spans per
request, one request at a time; then the same as a LangGraph agent loop (OpenInference's
spans: "agent" and "tools" nodes in turn, each node's span a chain call ending after the LLM
call inside it). Prints the request latency near the start and at the end: a
trace's new spans are expanded onto the stored trace where that is exact (``replay.growth``),
else it is replayed whole, so what the end costs says how often that happened
(bench/README.md says what bounds it).

``--in-process`` streams only the long traces, in this process (no HTTP, no gunicorn: each
request decoded, mapped and stored as ``POST /v1/traces`` does it), and prints what a span costs
near the trace's start (a short trace) and at its end, by fold. ``--fold-every K`` appends K
requests unprojected (``Prefer: respond-async``) and then folds them at once, as a projector
that fell K requests behind does (one coalesced fold); ``--no-growth`` expands the whole trace
on every fold instead of growing it (``trace_growth.grow`` finds nothing to grow): what removing
the growth path would cost.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_otlp .venv/bin/python bench/otlp.py
    DATABASE_URL=... .venv/bin/python bench/otlp.py --in-process --long-steps 10000 --no-growth
"""

import argparse
import os
import random
import statistics
import time
import urllib.request
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from unittest import mock

from live import Server, batches, deal, job_stream, send_all
from load import postgres_url, recreate_database, setup_django
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags, Status
from pgstats import analyze_periodically


def attribute(key: str, value) -> KeyValue:
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(string_value=value))


# What the OpenTelemetry Python SDK sets on every span: whether its parent is remote is known
# (the spans here are all of one process, so their parents are not).
SDK_FLAGS = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK


def trace_spans(
    n: int, steps: int, start: datetime, rng: random.Random, *, langgraph: bool = False
) -> list[Span]:
    """One job's trace: its root and its steps' spans (LLM call spans inside some), flagged as
    the Python SDK flags them. ``langgraph``: an agent loop as OpenInference exports a
    LangGraph run: its nodes "agent" and "tools" in turn, each node's span a chain call too,
    an LLM call in every "agent"."""
    trace_id = rng.randbytes(16)
    start_ns = int(start.timestamp() * 1e9)
    root_id = rng.randbytes(8)
    spans = []
    at = start_ns
    for index in range(steps):
        name = ("agent", "tools")[index % 2] if langgraph else f"step-{index}"
        attributes = [attribute("step.index", index)]
        if langgraph:
            attributes = [
                attribute("openinference.span.kind", "CHAIN"),
                attribute("metadata", f'{{"langgraph_node": "{name}"}}'),
            ]
        for failed in (True, False) if index % 10 == 9 else (False,):
            step_id = rng.randbytes(8)
            span = Span(
                trace_id=trace_id,
                span_id=step_id,
                parent_span_id=root_id,
                flags=SDK_FLAGS,
                name=name,
                kind=Span.SpanKind.SPAN_KIND_INTERNAL,
                start_time_unix_nano=at,
                end_time_unix_nano=at + 30_000_000,
                attributes=attributes,
            )
            if failed:
                span.status.CopyFrom(
                    Status(code=Status.StatusCode.STATUS_CODE_ERROR, message="upstream 503")
                )
            spans.append(span)
            if (name == "agent" if langgraph else index % 3 == 0) and not failed:
                spans.append(
                    Span(
                        trace_id=trace_id,
                        span_id=rng.randbytes(8),
                        parent_span_id=step_id,
                        flags=SDK_FLAGS,
                        name="ChatOpenAI",
                        start_time_unix_nano=at + 1_000_000,
                        end_time_unix_nano=at + 20_000_000,
                        attributes=[
                            attribute("openinference.span.kind", "LLM"),
                            attribute("llm.provider", "openai"),
                            attribute("llm.model_name", "gpt-4o-mini"),
                            attribute("llm.token_count.prompt", 800),
                            attribute("llm.token_count.completion", 60),
                            attribute("llm.input_messages.0.message.role", "user"),
                            attribute("llm.input_messages.0.message.content", f"step {index}?"),
                        ],
                    )
                )
            at += 50_000_000
    spans.insert(
        0,
        Span(
            trace_id=trace_id,
            span_id=root_id,
            flags=SDK_FLAGS,
            name=f"otlp-bench-{n}",
            kind=Span.SpanKind.SPAN_KIND_SERVER,
            start_time_unix_nano=start_ns,
            end_time_unix_nano=at,
        ),
    )
    return spans


def export_bodies(traces: list[list[Span]], spans_per_request: int) -> list[bytes]:
    """Whole traces per request (as a BatchSpanProcessor flushing finished runs sends them)."""
    bodies, current, count = [], ExportTraceServiceRequest(), 0
    for spans in traces:
        if count and count + len(spans) > spans_per_request:
            bodies.append(current.SerializeToString())
            current, count = ExportTraceServiceRequest(), 0
        resource_spans = current.resource_spans.add()
        resource_spans.resource.attributes.append(attribute("service.name", "otlp-bench"))
        resource_spans.scope_spans.add().spans.extend(spans)
        count += len(spans)
    if count:
        bodies.append(current.SerializeToString())
    return bodies


def end_order_bodies(spans: list[Span], spans_per_request: int) -> list[bytes]:
    """A trace's spans in the order they end (the root last), ``spans_per_request`` a body:
    what a ``BatchSpanProcessor`` exports of a run still going."""
    ordered = sorted(spans, key=lambda span: (span.end_time_unix_nano, not span.parent_span_id))
    bodies = []
    for start in range(0, len(ordered), spans_per_request):
        request = ExportTraceServiceRequest()
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.append(attribute("service.name", "otlp-bench"))
        resource_spans.scope_spans.add().spans.extend(ordered[start : start + spans_per_request])
        bodies.append(request.SerializeToString())
    return bodies


def post_traces(url: str, token: str, body: bytes) -> None:
    request = urllib.request.Request(
        url + "/v1/traces",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-protobuf"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        response.read()


def stream_in_process(spans: list[Span], args: argparse.Namespace) -> list[tuple[int, float]]:
    """Store ``spans`` in end order, ``args.long_export`` a request, each fold taking
    ``args.fold_every`` requests; returns each fold's (spans, seconds: its appends and the fold).
    The root's request is left out (it replays the trace whole, grown or not)."""
    from jobs.contract import otlp
    from jobs.ingest import projector, trace_growth
    from jobs.ingest.store import store_batch

    bodies = end_order_bodies(spans, args.long_export)[:-1]
    folds = []
    whole = mock.patch.object(trace_growth, "grow", return_value={})
    with whole if args.no_growth else nullcontext():
        for start in range(0, len(bodies), args.fold_every):
            group, count = bodies[start : start + args.fold_every], 0
            began = time.perf_counter()
            for body in group:
                request = otlp.decode_request(body, otlp.PROTOBUF)
                count += sum(
                    len(scope.spans)
                    for resource in request.resource_spans
                    for scope in resource.scope_spans
                )
                traces = otlp.to_batch(request, max_events=10_000)
                store_batch(traces.batch, project=args.fold_every == 1)
            if args.fold_every > 1:
                projector.project_dirty()
            folds.append((count, time.perf_counter() - began))
    return folds


def in_process(args: argparse.Namespace, base: str, database: str, start: datetime) -> None:
    """``--in-process``: the long traces only, streamed in this process (module docstring)."""
    recreate_database(base, database)
    database_url = postgres_url(database, base)
    setup_django(database_url)
    from jobs.ingest import counters

    analyzing = analyze_periodically(database_url)
    rng = random.Random(7)
    mode = "whole trace expanded on every fold" if args.no_growth else "grown"
    try:
        for n, langgraph in enumerate((False, True)):
            long_trace = trace_spans(n, args.long_steps, start, rng, langgraph=langgraph)
            before = counters.projections_by_path()
            folds = stream_in_process(long_trace, args)
            paths = {p: c - before.get(p, 0) for p, c in counters.projections_by_path().items()}
            per_span = [seconds * 1000 / count for count, seconds in folds]
            # Not the first fold (a new job, tables empty), as the HTTP figure leaves it out.
            early, late = statistics.median(per_span[1:6]), statistics.median(per_span[-5:])
            total = sum(seconds for _count, seconds in folds)
            print(
                f"in process, {mode}, {args.fold_every} request(s) of {args.long_export} spans a "
                f"fold: one {'LangGraph agent loop' if langgraph else 'trace'} of "
                f"{args.long_steps:,} steps ({len(long_trace):,} spans, {len(folds)} folds before "
                f"the root's) in {total:.1f} s; folds by path: {paths}\n"
                f"   ms a span, median of folds 2-6: {early:.3f}; of the last 5: {late:.3f}; "
                f"last / start {late / early:.2f} (the rule: <= 2)"
            )
    finally:
        analyzing.set()
        from django.db import connection

        connection.close()
        recreate_database(base, database, drop_only=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=400, help="events per event API request")
    parser.add_argument(
        "--spans-per-request", type=int, default=512, help="the OTel SDK's default export size"
    )
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument(
        "--rounds", type=int, default=3, help="event API then OTLP, this many times (new jobs)"
    )
    parser.add_argument("--long-steps", type=int, default=2_000, help="the long trace's steps")
    parser.add_argument(
        "--long-export", type=int, default=100, help="spans per request of the long trace"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="only the long traces, without HTTP"
    )
    parser.add_argument(
        "--fold-every", type=int, default=1, help="--in-process: requests appended a fold"
    )
    parser.add_argument(
        "--no-growth", action="store_true", help="--in-process: expand the whole trace a fold"
    )
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/traceviz_otlp")
    base, _, database = base.rpartition("/")
    start = datetime.now(UTC) - timedelta(days=1)
    if args.in_process:
        in_process(args, base, database, start)
        return
    rng = random.Random(7)

    server = Server(base, database, args.workers)
    try:
        ratios = []
        for round_ in range(1, args.rounds + 1):
            events = [
                item
                for n in range(args.jobs)
                for item in job_stream(
                    f"events-{round_}-{n}", args.steps, start, timedelta(milliseconds=50)
                )
            ]
            events_s = send_all(
                server.url, server.token, deal(batches(events, args.batch), args.producers)
            )
            traces = [trace_spans(n, args.steps, start, rng) for n in range(args.jobs)]
            span_count = sum(len(spans) for spans in traces)
            bodies = export_bodies(traces, args.spans_per_request)
            spans_s = send_all(server.url, server.token, deal(bodies, args.producers), post_traces)
            live = [trace_spans(n, args.steps, start, rng) for n in range(args.jobs)]
            live_bodies = end_order_bodies(
                [span for spans in live for span in spans], args.spans_per_request
            )
            # Not dealt round-robin: a trace's spans must arrive in their export order.
            live_s = send_all(server.url, server.token, [live_bodies], post_traces)
            event_rate, span_rate = len(events) / events_s, span_count / spans_s
            ratios.append(span_rate / event_rate)
            print(
                f"round {round_}: {args.jobs} jobs x {args.steps} steps, {args.producers} "
                f"producers, {args.workers} workers:\n"
                f"   event API: {len(events):,} events in {events_s:.1f} s = "
                f"{event_rate:,.0f} events/s\n"
                f"   /v1/traces: {span_count:,} spans in {len(bodies)} requests, "
                f"{spans_s:.1f} s = {span_rate:,.0f} spans/s\n"
                f"   spans/s / events/s = {span_rate / event_rate:.2f}\n"
                f"   the same traces live (interleaved, in end order, 1 producer): "
                f"{sum(map(len, live)) / live_s:,.0f} spans/s in {len(live_bodies)} requests"
            )
        print(
            f"median of {len(ratios)} rounds: spans/s / events/s = "
            f"{statistics.median(ratios):.2f} (target >= 0.5)"
        )
        for n, langgraph in enumerate((False, True)):
            long_trace = trace_spans(
                args.jobs + n, args.long_steps, start, rng, langgraph=langgraph
            )
            bodies = end_order_bodies(long_trace, args.long_export)
            latencies = []
            for body in bodies:
                latencies.append(send_all(server.url, server.token, [[body]], post_traces))
            early, late = latencies[1:6], latencies[-6:-1]  # not the first body, nor the root's
            print(
                f"one {'LangGraph agent loop' if langgraph else 'trace'} of {args.long_steps:,} "
                f"steps ({len(long_trace):,} spans) streamed in end order, {args.long_export} "
                f"spans per request ({len(bodies)} requests): "
                f"{len(long_trace) / sum(latencies):,.0f} spans/s\n"
                f"   median latency of requests 2-6: {statistics.median(early) * 1000:,.0f} ms; "
                f"of the last 5 before the root's: {statistics.median(late) * 1000:,.0f} ms"
            )
        print(f"server peak RSS: {server.peak_worker_kib / 1024:,.0f} MiB per worker")
    finally:
        server.stop()
        recreate_database(base, database, drop_only=True)


if __name__ == "__main__":
    main()
