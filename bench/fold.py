"""The projector's side of bench/live.py, in one process: append first, then fold.

The same J jobs x S steps as bench/live.py, live-ordered (in time order across jobs), appended
in batches with ``store_batch(..., project=False)`` as a ``Prefer: respond-async`` request does,
then folded by ``projector.project_dirty`` batch after batch as ``manage.py run_projector``
does. Two ways, each on jobs of its own:

- **backlog**: every batch appended first, then every job folded (each job new, so each fold
  is a full replay of its events): a projector that fell behind;
- **interleaved**: each batch appended, then its jobs folded before the next (after the first,
  each fold resumes a job's snapshot with its few new events): a projector that keeps up;
  ``--fold-every N`` folds after every N batches instead (more events a job a fold).

Prints events/s of each phase and, per event, microseconds of wall time, of this process's CPU
and (PostgreSQL, a local server) of the database backend's CPU. ``--profile`` adds a cProfile
of the backlog's fold. On SQLite (``DATABASE_URL=sqlite:///...``) the file is made anew.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_fold_bench \\
        .venv/bin/python bench/fold.py --rounds 2
    DATABASE_URL=sqlite:////tmp/fold_bench.sqlite3 .venv/bin/python bench/fold.py
"""

import argparse
import cProfile
import gc
import os
import pstats
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from live import job_stream
from live_phases import backend_cpu
from load import recreate_database, setup_django
from pgstats import analyze_periodically


class Clock:
    """Wall, this process's CPU and the database backend's CPU, summed over the timed blocks."""

    def __init__(self, postgres: bool):
        self.postgres = postgres
        self.wall = self.cpu = self.database = 0.0

    def time(self, work: Callable[[], object]) -> None:
        wall, cpu = time.perf_counter(), time.process_time()
        database = backend_cpu() if self.postgres else 0.0
        work()
        self.wall += time.perf_counter() - wall
        self.cpu += time.process_time() - cpu
        if self.postgres:
            self.database += backend_cpu() - database

    def line(self, name: str, events: int) -> str:
        per = 1e6 / events
        database = f" + {self.database * per:.1f} database" if self.postgres else ""
        return (
            f"{name:>22}: {events / self.wall:,.0f} events/s; per event {self.wall * per:.1f} "
            f"µs wall, {self.cpu * per:.1f} CPU here{database}"
        )


def live_items(prefix: str, jobs: int, steps: int) -> list[dict]:
    start = datetime.now(UTC) - timedelta(days=1)
    spacing = timedelta(milliseconds=50)
    streams = [job_stream(f"{prefix}-{n}", steps, start, spacing) for n in range(jobs)]
    items = [item for stream in streams for item in stream]
    items.sort(key=lambda item: (item["ts"], item["job_id"]))
    return items


def append(items: list[dict]) -> None:
    from jobs.contract import bodies
    from jobs.ingest.store import store_batch

    store_batch(bodies.parse_items(items, max_events=10_000), project=False)


def drain() -> None:
    """Fold until nothing is dirty, as ``run_projector --once`` does."""
    from jobs.ingest import projector

    while projector.project_dirty():
        pass


def append_and_fold(
    items: list[dict],
    size: int,
    postgres: bool,
    profiler: cProfile.Profile | None,
    way: str,
    every: int = 1,
) -> tuple[Clock, Clock]:
    """Append ``items`` in batches of ``size``, folding after each ``every`` batches
    (``interleaved``) or once after the last (``backlog``); the time each took."""
    appending, folding = Clock(postgres), Clock(postgres)
    for number, start in enumerate(range(0, len(items), size), 1):
        appending.time(lambda start=start: append(items[start : start + size]))
        if way == "interleaved" and (number % every == 0 or start + size >= len(items)):
            folding.time(profiled(drain, profiler))
    if way == "backlog":
        folding.time(profiled(drain, profiler))
    return appending, folding


def profiled(work: Callable[[], None], profiler: cProfile.Profile | None) -> Callable[[], None]:
    if profiler is None:
        return work

    def run() -> None:
        profiler.enable()
        try:
            work()
        finally:
            profiler.disable()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--fold-every",
        type=int,
        default=1,
        help="interleaved: batches appended between folds (bench/live.py's steady load, 1 s of "
        "lag at 5,000 events/s over 400 jobs: 12 or so events a job a fold)",
    )
    parser.add_argument("--only", choices=("backlog", "interleaved"), help="that way alone")
    parser.add_argument(
        "--profile",
        choices=("backlog", "interleaved"),
        help="cProfile that way's folds in the last round (the top functions by own time)",
    )
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/traceviz_fold_bench")
    postgres = url.startswith("postgres")
    if postgres:
        base, _, database = url.rpartition("/")
        recreate_database(base, database)
    else:
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
    # Tables grow from empty here and this machine's autovacuum is off: analyze as it would,
    # or the failure records' lookups plan as scans of a table with no statistics.
    analyzing = analyze_periodically(url)
    try:
        setup_django(url)
        print(f"{'PostgreSQL' if postgres else 'SQLite'}, {os.getloadavg()[0]:.2f} load")
        for round_ in range(args.rounds):
            for way in [args.only] if args.only else ["backlog", "interleaved"]:
                items = live_items(f"{way}-{round_}", args.jobs, args.steps)
                profiling = args.profile == way and round_ == args.rounds - 1
                profiler = cProfile.Profile() if profiling else None
                gc.collect()
                gc.freeze()
                appending, folding = append_and_fold(
                    items, args.batch, postgres, profiler, way, args.fold_every
                )
                gc.unfreeze()
                if profiler is not None:
                    pstats.Stats(profiler).sort_stats("tottime").print_stats(40)
                print(appending.line(f"{way} append", len(items)))
                print(folding.line(f"{way} fold", len(items)))
            print(f"   load average {os.getloadavg()[0]:.2f}")
    finally:
        analyzing.set()
        from django.db import connections

        connections.close_all()
        if postgres:
            recreate_database(base, database, drop_only=True)


if __name__ == "__main__":
    main()
