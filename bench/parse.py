"""What a request costs before the database: parse, validate and redact, per event and per span.

In this process, no database and no HTTP: the event API's bodies (NDJSON batches of the jobs
``bench/live.py`` sends: job_started, nodes started and finished, a retried failure every tenth
step) through ``bodies.parse_body`` and then ``redaction.redact_payload`` per event, as
``ingest.store_batch`` redacts them; and OTLP export requests (``bench/otlp.py``'s traces: a root,
a span per step, an LLM call span in every third) through ``otlp.decode_request`` and
``otlp.to_batch`` (which redacts as it maps) and the bounding ``store_batch`` applies. Prints
events/s, spans/s and their ratio, best of ``--rounds`` (the two alternate, so the shared
machine's load hits both alike; CPU time of this process, so other processes' work counts
less), and with ``--profile`` the functions that cost most. ``PYTHONPATH`` chooses the checkout
measured (another worktree's ``jobs`` for a before and after).

    .venv/bin/python bench/parse.py
"""

import argparse
import cProfile
import os
import pstats
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from live import job_stream, ndjson
from otlp import export_bodies, trace_spans

ROOT = Path(__file__).resolve().parent.parent
PREVIEW_CHARS = 2000


def event_bodies(jobs: int, steps: int, batch: int) -> tuple[list[bytes], int]:
    start = datetime.now(UTC) - timedelta(days=1)
    items = [
        item
        for n in range(jobs)
        for item in job_stream(f"parse-{n}", steps, start, timedelta(milliseconds=50))
    ]
    return [ndjson(items[i : i + batch]) for i in range(0, len(items), batch)], len(items)


def span_bodies(jobs: int, steps: int, per_request: int) -> tuple[list[bytes], int]:
    rng = random.Random(7)
    start = datetime.now(UTC) - timedelta(days=1)
    traces = [trace_spans(n, steps, start, rng) for n in range(jobs)]
    return export_bodies(traces, per_request), sum(map(len, traces))


def parse_events(bodies: list[bytes]) -> int:
    from jobs.contract import redaction
    from jobs.contract.bodies import parse_body

    count = 0
    for body in bodies:
        batch = parse_body(body, "application/x-ndjson", 10_000)
        for _index, event in batch.events:
            redaction.redact_payload(event.payload, PREVIEW_CHARS)
            count += 1
    return count


def parse_spans(bodies: list[bytes]) -> int:
    from jobs.contract import otlp, redaction

    count = 0
    for body in bodies:
        batch = otlp.to_batch(otlp.decode_request(body, otlp.PROTOBUF), 10_000)
        for _index, event in batch.batch.events:
            redaction.bounded_payload(event.payload, PREVIEW_CHARS)
        count += batch.span_count
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch", type=int, default=400, help="events per event API request")
    parser.add_argument("--spans-per-request", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", choices=("events", "spans"), help="profile one door")
    args = parser.parse_args()
    if not os.environ.get("PYTHONPATH"):
        sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

    events, event_count = event_bodies(args.jobs, args.steps, args.batch)
    spans, span_count = span_bodies(args.jobs, args.steps, args.spans_per_request)
    if args.profile:
        run = parse_events if args.profile == "events" else parse_spans
        profiler = cProfile.Profile()
        profiler.runcall(run, events if args.profile == "events" else spans)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    rates: dict[str, list[float]] = {"events": [], "spans": []}
    for _round in range(args.rounds):
        for label, run, bodies in (("events", parse_events, events), ("spans", parse_spans, spans)):
            # Redaction remembers short strings' answers: each round starts cold, as a
            # worker's first batches of new ids would.
            from jobs.contract import redaction

            redaction._redact_short.cache_clear()
            # CPU time of this process: other work on a shared machine does not count.
            started = time.process_time()
            count = run(bodies)
            rates[label].append(count / (time.process_time() - started))
    event_rate, span_rate = max(rates["events"]), max(rates["spans"])
    print(
        f"parse + validate + redact, best of {args.rounds} rounds, one process:\n"
        f"   event API: {event_count:,} events in {len(events)} bodies: "
        f"{event_rate:,.0f} events/s ({1e6 / event_rate:.1f} us per event)\n"
        f"   /v1/traces: {span_count:,} spans in {len(spans)} requests: "
        f"{span_rate:,.0f} spans/s ({1e6 / span_rate:.1f} us per span)\n"
        f"   spans/s / events/s = {span_rate / event_rate:.2f}"
    )


if __name__ == "__main__":
    main()
