"""In-process twin of bench/live.py's first figure: ``store_batch`` per batch, grouped vs live.

No HTTP and no gunicorn: the same J jobs x S steps are parsed and stored batch by batch in this
process, job by job ("grouped") and in time order across jobs ("live"), on a fresh PostgreSQL
database. Prints each mode's events/s and, per batch, the wall time and the CPU time of this
process and of the database backend (CPU moves less with the machine's other load);
``--profile`` adds a cProfile of the live mode (cumulative, top functions). Less noisy than the
HTTP bench on a shared machine, so it is the one to compare a change with (run before and
after, alternating).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_live_phases \
        .venv/bin/python bench/live_phases.py --profile
"""

import argparse
import cProfile
import gc
import os
import pstats
import time
from datetime import UTC, datetime, timedelta

from live import job_stream
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=1, help="grouped/live pairs, alternating")
    parser.add_argument("--profile", action="store_true", help="cProfile the last live round")
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
                seconds, cpu, database, collecting = run(items, args.batch)
                gc.unfreeze()
                if profiling:
                    profiler.disable()
                rates[mode] = len(items) / sum(seconds)
                cpu_rates[mode] = len(items) / (cpu + database)
                per_batch = 1000 / len(seconds)
                print(
                    f"{mode:>8}: {rates[mode]:,.0f} events/s, per batch of {args.batch}: "
                    f"{sum(seconds) * per_batch:.1f} ms wall, {cpu * per_batch:.1f} ms CPU "
                    f"here + {database * per_batch:.1f} ms database; "
                    f"{collecting * per_batch:.1f} ms collecting garbage"
                )
            print(
                f"   live / grouped = {rates['live'] / rates['grouped']:.2f} (wall), "
                f"{cpu_rates['live'] / cpu_rates['grouped']:.2f} (CPU)"
            )
        analyzing.set()
        if args.profile:
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(base, database, drop_only=True)


if __name__ == "__main__":
    main()
