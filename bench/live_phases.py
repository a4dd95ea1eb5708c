"""In-process twin of bench/live.py's first figure: ``store_batch`` per batch, grouped vs live.

No HTTP and no gunicorn: the same J jobs x S steps are parsed and stored batch by batch in this
process, job by job ("grouped") and in time order across jobs ("live"), on a fresh PostgreSQL
database. Prints each mode's events/s and, per batch, the wall time and the CPU time of this
process and of the database backend (CPU moves less with the machine's other load);
``--profile`` adds a cProfile of the live mode (cumulative, top functions). Less noisy than the
HTTP bench on a shared machine, so it is the one to compare a change with (run before and
after, alternating).

``--ceilings`` then prints what bounds bench/live.py's "grouped ingest / raw COPY" under
docs/architecture.md, from the grouped events, in this process: a raw COPY of their rows
(bench/live.py's), ingest as it is, ingest with the projection left out (what acknowledging a
batch would cost were projection moved out of its transaction), and parsing with validation and
redaction alone (no database): ingest must do those and COPY the same rows, so the raw COPY's
time over the sum of the two bounds the ratio whatever else gets faster.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_live_phases \
        .venv/bin/python bench/live_phases.py --profile
"""

import argparse
import cProfile
import gc
import os
import pstats
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from unittest import mock

from live import copy_rate, job_stream
from load import postgres_url, recreate_database, setup_django


def backend_cpu() -> float:
    """CPU seconds the PostgreSQL backend of Django's connection has used (a local server)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid = cursor.fetchone()[0]
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(items: list[dict], size: int) -> tuple[list[float], float, float, float]:
    """Store ``items`` in batches of ``size``, each parsed and stored as the ingest view does
    (without the cyclic garbage collector); returns each batch's seconds (parse included), and
    the CPU seconds this process and the database backend used for them all, and the seconds
    the collector took (after the batches). CPU time moves less than wall time with what else
    the machine runs."""
    from jobs.contract import bodies
    from jobs.ingest.store import collector_paused, store_batch

    seconds, collecting, began = [], [0.0], [0.0]

    def clock(phase: str, info: dict) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            collecting[0] += time.perf_counter() - began[0]

    gc.callbacks.append(clock)
    cpu, database = time.process_time(), backend_cpu()
    for start in range(0, len(items), size):
        started = time.perf_counter()
        with collector_paused():
            batch = bodies.parse_items(items[start : start + size], max_events=10_000)
            store_batch(batch)
        seconds.append(time.perf_counter() - started)
    cpu, database = time.process_time() - cpu, backend_cpu() - database
    gc.callbacks.remove(clock)
    return seconds, cpu, database, collecting[0]


def parse_seconds(items: list[dict], size: int) -> float:
    """Seconds to parse (and validate) and redact ``items`` in batches of ``size``, as
    ``store_batch`` gets and redacts them, with no database."""
    from django.conf import settings

    from jobs.contract import bodies
    from jobs.contract.redaction import redact_payload
    from jobs.ingest.store import collector_paused

    started = time.perf_counter()
    for start in range(0, len(items), size):
        with collector_paused():
            batch = bodies.parse_items(items[start : start + size], max_events=10_000)
            for _index, event in batch.events:
                redact_payload(event.payload, settings.TRACEVIZ_PREVIEW_CHARS)
    return time.perf_counter() - started


def ceilings(items: list[dict], size: int, database_url: str) -> None:
    """Print what bounds grouped ingest / raw COPY (the module docstring's ``--ceilings``)."""
    copying = copy_rate(database_url, items, size)
    ingest = len(items) / sum(run(items, size)[0])
    relabeled = [{**item, "job_id": "unprojected-" + item["job_id"]} for item in items]
    with mock.patch("jobs.ingest.store.project_jobs", return_value=Counter()):
        unprojected = len(items) / sum(run(relabeled, size)[0])
    parsing = parse_seconds(items, size)
    ceiling = (len(items) / copying) / (len(items) / copying + parsing)
    print(
        f"ceilings of grouped ingest / raw COPY ({len(items):,} events, batches of {size}, "
        f"in this process, no HTTP):\n"
        f"   raw COPY: {copying:,.0f} rows/s\n"
        f"   ingest: {ingest:,.0f} events/s = {ingest / copying:.2f} of it\n"
        f"   ingest without projection: {unprojected:,.0f} events/s = "
        f"{unprojected / copying:.2f} of it\n"
        f"   parse, validate and redact alone: {len(items) / parsing:,.0f} events/s; with the "
        f"COPY of the same rows: at most {ceiling:.2f} of it"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=1, help="grouped/live pairs, alternating")
    parser.add_argument("--profile", action="store_true", help="cProfile the last live round")
    parser.add_argument(
        "--ceilings", action="store_true", help="then what bounds grouped ingest / raw COPY"
    )
    args = parser.parse_args()
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/traceviz_phases")
    base, _, database = base.rpartition("/")
    recreate_database(base, database)
    try:
        setup_django(postgres_url(database, base))
        from pgstats import analyze_periodically

        analyzing = analyze_periodically(postgres_url(database, base))
        start = datetime.now(UTC) - timedelta(days=1)
        spacing = timedelta(milliseconds=50)
        for round_ in range(args.rounds):
            rates, cpu_rates = {}, {}
            for mode in ("grouped", "live"):
                streams = [
                    job_stream(f"{mode}-{round_}-{n}", args.steps, start, spacing)
                    for n in range(args.jobs)
                ]
                items = [item for stream in streams for item in stream]
                if mode == "live":
                    items.sort(key=lambda item: (item["ts"], item["job_id"]))
                profiler = cProfile.Profile()
                profiling = args.profile and mode == "live" and round_ == args.rounds - 1
                if profiling:
                    profiler.enable()
                # As the server freezes what it loaded (traceviz/wsgi.py): a full collection
                # walks only what the batches made, not the phase's whole event list.
                gc.collect()
                gc.freeze()
                seconds, cpu, database_cpu, collecting = run(items, args.batch)
                gc.unfreeze()
                if profiling:
                    profiler.disable()
                rates[mode] = len(items) / sum(seconds)
                cpu_rates[mode] = len(items) / (cpu + database_cpu)
                per_batch = 1000 / len(seconds)
                print(
                    f"{mode:>8}: {rates[mode]:,.0f} events/s, per batch of {args.batch}: "
                    f"{sum(seconds) * per_batch:.1f} ms wall, {cpu * per_batch:.1f} ms CPU "
                    f"here + {database_cpu * per_batch:.1f} ms database; "
                    f"{collecting * per_batch:.1f} ms collecting garbage"
                )
            print(
                f"   live / grouped = {rates['live'] / rates['grouped']:.2f} (wall), "
                f"{cpu_rates['live'] / cpu_rates['grouped']:.2f} (CPU)"
            )
        if args.ceilings:
            items = [
                item
                for n in range(args.jobs)
                for item in job_stream(f"ceilings-{n}", args.steps, start, spacing)
            ]
            ceilings(items, args.batch, postgres_url(database, base))
        analyzing.set()
        if args.profile:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base, database, drop_only=True)


if __name__ == "__main__":
    main()
