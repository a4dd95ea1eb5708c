"""Live producers: what incremental projection buys, against gunicorn + PostgreSQL, in one run.

Prints four figures (docs/architecture.md; bench/README.md says what bounds each):
1. grouped vs live: J jobs x S steps (node_started + node_finished each) delivered job by job,
   then the same shape delivered live (time order across jobs), in batches of B events; with P
   producers each reporting its own jobs (as runners do), then with one producer; R rounds of
   each (which mode goes first alternates), medians printed, as a shared machine moves one
   round's ratio by more than a change does;
2. one long job streamed one step (two events) per request up to L steps: request latency
   near 10 steps and near L steps;
3. grouped ingest vs a raw COPY of the same event rows, over one connection, into a bare copy
   of the event table (same indexes), same run: with the producers of 1. (as the issue's "about
   0.26" was measured: bench/ingest.py's producers against a COPY of its events), and with one;
4. the server's peak RSS per worker.

With ``--respond-async`` every request carries ``Prefer: respond-async`` and ``--projectors``
``manage.py run_projector`` processes run beside gunicorn; every phase's clock then stops when
no job is dirty (the jobs read back projected), and a fifth figure is printed:
5. projection lag under a steady load (``--steady-rate`` events/s for ``--steady-seconds``, many
   jobs a request, as live runners send them): p50/p95 of the oldest dirty mark's age (the lag
   /metrics exports) and of the oldest event not folded yet read from the events, sampled
   every 0.1 s, and the ingest requests' p99 latency.

Every phase starts on a fresh database (dropped and created here), so run it against a
PostgreSQL server you may create databases on:

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_live .venv/bin/python bench/live.py
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime, timedelta

from ingest import ROOT, rss_kib, server_pids
from load import postgres_url, recreate_database, setup_django, start_gunicorn, stop_process
from pgstats import analyze_periodically

PORT = 8767
# Set by --respond-async: every request asks for the answer right after the append.
HEADERS: dict[str, str] = {}


def job_stream(job_id: str, steps: int, start: datetime, spacing: timedelta) -> list[dict]:
    """job_started, then ``steps`` nodes each started and finished ``spacing`` apart (every
    tenth a retryable failure retried once), then job_finished."""
    at = start

    def emit(kind: str, **payload) -> dict:
        nonlocal at
        at += spacing
        return {"type": kind, "job_id": job_id, "ts": at.isoformat(), "payload": payload}

    out = [emit("job_started", workflow="live-bench", provider="openai", model="gpt-4.1")]
    for index in range(steps):
        node = f"step-{index}"
        out.append(emit("node_started", node_id=node, step_index=index))
        if index % 10 == 9:
            out.append(
                emit(
                    "node_finished",
                    node_id=node,
                    result_type="retryable_failure",
                    reason="upstream 503",
                    failure_code="provider_retryable",
                    duration_ms=40,
                )
            )
            out.append(emit("node_started", node_id=node, attempt=2, step_index=index))
            out.append(emit("node_finished", node_id=node, attempt=2, duration_ms=35))
        else:
            out.append(
                emit("node_finished", node_id=node, duration_ms=30, payload_results={"i": index})
            )
    out.append(emit("job_finished", status="completed"))
    return out


def ndjson(items: list[dict]) -> bytes:
    return "\n".join(json.dumps(item) for item in items).encode()


def post(url: str, token: str, body: bytes) -> float:
    """POST one batch; returns the request's latency in seconds (503s are retried)."""
    request = urllib.request.Request(
        url + "/api/v1/events",
        data=body,
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/x-ndjson",
            **HEADERS,
        },
    )
    for _ in range(20):
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=300) as response:
                answer = json.loads(response.read())
            if answer["rejected"]:
                raise RuntimeError(f"events rejected: {answer['errors'][:3]}")
            return time.perf_counter() - started
        except urllib.error.HTTPError as error:
            if error.code != 503:
                raise
            time.sleep(0.5)
    raise RuntimeError("server kept answering 503")


def send_all(url: str, token: str, lanes: list[list[bytes]], send=None) -> float:
    """Send each lane's bodies in order, one producer thread per lane (``send``: the function
    posting one, by default to the event API); returns the wall time."""
    send = send or post

    def producer(lane: list[bytes]):
        for body in lane:
            send(url, token, body)

    started = time.perf_counter()
    threads = [threading.Thread(target=producer, args=(lane,)) for lane in lanes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def batches(items: list[dict], size: int) -> list[bytes]:
    return [ndjson(items[i : i + size]) for i in range(0, len(items), size)]


def deal(bodies: list[bytes], producers: int) -> list[list[bytes]]:
    """Bodies dealt round-robin to ``producers`` lanes."""
    return [bodies[p::producers] for p in range(producers)]


def runner_lanes(
    streams: list[list[dict]], producers: int, size: int, *, live: bool
) -> list[list[bytes]]:
    """One lane per producer, each owning every ``producers``-th job (a runner reports its own
    jobs): its jobs' events job by job, or ``live``: in time order across its jobs, as a runner
    flushing every second sends them."""
    lanes = []
    for p in range(producers):
        items = [item for stream in streams[p::producers] for item in stream]
        if live:
            items.sort(key=lambda item: (item["ts"], item["job_id"]))
        lanes.append(batches(items, size))
    return lanes


class Server:
    """gunicorn on a fresh database, with its peak RSS per worker sampled."""

    def __init__(
        self,
        base: str,
        database: str,
        workers: int,
        port: int = PORT,
        projectors: int = 0,
        projector_batch: int | None = None,
    ):
        recreate_database(base, database)
        self.database_url = postgres_url(database, base)
        setup_django(self.database_url)
        from django.db import connection

        connection.close()
        from load import issue_token

        self.token = issue_token("live-bench")
        self.process, self.url = start_gunicorn(self.database_url, port, workers)
        env = {**os.environ, "DATABASE_URL": self.database_url, "PYTHONWARNINGS": "ignore"}
        self.projectors = [
            subprocess.Popen(
                [sys.executable, "manage.py", "run_projector"]
                + (["--batch", str(projector_batch)] if projector_batch else []),
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for _ in range(projectors)
        ]
        self.peak_worker_kib = 0
        self.done = threading.Event()
        self.analyzing = analyze_periodically(self.database_url)
        threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self):
        while not self.done.is_set():
            workers = server_pids(self.process.pid)[1:]
            self.peak_worker_kib = max([self.peak_worker_kib, *(rss_kib([p]) for p in workers)])
            time.sleep(0.2)

    def stop(self):
        self.done.set()
        self.analyzing.set()
        for projector in self.projectors:
            stop_process(projector)
        stop_process(self.process)

    def dirty(self) -> tuple[int, float]:
        """Dirty jobs and the oldest mark's age in seconds, read straight from the database."""
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as conn:
            count, lag = conn.execute(
                "SELECT count(*), coalesce(extract(epoch FROM now() - min(first_marked_at)), 0) "
                "FROM jobs_projectionmark WHERE generation > projected"
            ).fetchone()
        return count, float(lag)

    def unshown_age(self) -> float:
        """The age in seconds of the oldest event not folded yet, read from the events
        themselves (what the marks' lag should say, checked apart from them)."""
        import psycopg

        with psycopg.connect(self.database_url, autocommit=True) as conn:
            # Each dirty job's events after its mark, by the (job_id, generation) index: a
            # join of the marks with the events scans every event, a core's worth at 10 Hz.
            (age,) = conn.execute(
                "SELECT coalesce(extract(epoch FROM now() - min(oldest.at)), 0) "
                "FROM jobs_projectionmark AS mark CROSS JOIN LATERAL ("
                "SELECT min(event.received_at) AS at FROM jobs_event AS event "
                "WHERE event.job_id = mark.job_id AND event.partition_day = mark.partition_day "
                "AND event.generation > mark.projected) AS oldest "
                "WHERE mark.generation > mark.projected"
            ).fetchone()
        return float(age)

    def send_all(self, lanes: list[list[bytes]]) -> float:
        """``send_all`` to this server; with async answers, the clock stops once nothing is
        dirty (every job reads back projected)."""
        started = time.perf_counter()
        send_all(self.url, self.token, lanes)
        while HEADERS and self.dirty()[0]:
            time.sleep(0.02)
        return time.perf_counter() - started

    def steady(self, rate: int, seconds: float, jobs: int, batch: int, start, spacing) -> None:
        """Figure 5: ``rate`` events/s in requests of ``batch`` for ``seconds``, live order
        across ``jobs`` jobs; prints the lag's p50/p95 and the requests' p99."""
        steps = int(rate * seconds) // (2 * jobs) + 2
        streams = [job_stream(f"steady-{n}", steps, start, spacing) for n in range(jobs)]
        items = sorted(
            (item for stream in streams for item in stream),
            key=lambda item: (item["ts"], item["job_id"]),
        )
        bodies = batches(items[: int(rate * seconds)], batch)
        lags: list[float] = []
        unshown: list[float] = []
        latencies: list[float] = []
        sampling = threading.Event()

        def sample():
            while not sampling.is_set():
                lags.append(self.dirty()[1])
                unshown.append(self.unshown_age())
                time.sleep(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        interval = batch / rate
        began = time.perf_counter()
        lanes = deal(list(enumerate(bodies)), 4)

        def producer(lane):
            for index, body in lane:
                wait = began + index * interval - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                latencies.append(post(self.url, self.token, body))

        threads = [threading.Thread(target=producer, args=(lane,)) for lane in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sent = time.perf_counter() - began
        sampling.set()
        sampler.join()
        q = statistics.quantiles
        print(
            f"5. steady load: {len(bodies) * batch:,} events in {sent:.1f} s "
            f"({len(bodies) * batch / sent:,.0f} events/s asked {rate:,}/s, {jobs} live jobs, "
            f"batches of {batch}, {len(self.projectors)} projector(s)):\n"
            f"   projection lag p50 {q(lags, n=100)[49]:.2f} s, p95 {q(lags, n=100)[94]:.2f} s "
            f"(target p95 < 1 s); ingest request p99 {q(latencies, n=100)[98] * 1000:.0f} ms\n"
            f"   oldest event not shown, read from the events: p50 "
            f"{q(unshown, n=100)[49]:.2f} s, p95 {q(unshown, n=100)[94]:.2f} s"
        )


def copy_rate(database_url: str, items: list[dict], batch: int) -> float:
    """Rows/s of a raw COPY of these events, in batches, into a bare copy of the event table
    (same columns, indexes and constraints; nothing else done per row)."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS bench_raw_event")
        conn.execute("CREATE TABLE bench_raw_event (LIKE jobs_event INCLUDING ALL)")
        columns = (
            "job_id, event_id, type, ts, seq, attempt, payload, received_at, partition_day, "
            "masked, generation"
        )
        now = datetime.now(UTC)
        rows = [
            (
                item["job_id"],
                f"e{index}",
                item["type"],
                item["ts"],
                None,
                item["payload"].get("attempt", 1),
                json.dumps(item["payload"]),
                now,
                now.date(),
                "[]",
                1,
            )
            for index, item in enumerate(items)
        ]
        started = time.perf_counter()
        for start in range(0, len(rows), batch):
            with (
                conn.transaction(),
                conn.cursor() as cursor,
                cursor.copy(f"COPY bench_raw_event ({columns}) FROM STDIN") as copy,
            ):
                for row in rows[start : start + batch]:
                    copy.write_row(row)
        elapsed = time.perf_counter() - started
        conn.execute("DROP TABLE bench_raw_event")
    return len(rows) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=400, help="events per request")
    parser.add_argument("--long-steps", type=int, default=10_000)
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--port", type=int, default=PORT, help="gunicorn's port")
    parser.add_argument(
        "--rounds", type=int, default=3, help="grouped/live pairs of figure 1 (medians printed)"
    )
    parser.add_argument(
        "--respond-async",
        action="store_true",
        help="send Prefer: respond-async, run --projectors beside gunicorn, and stop each "
        "clock when nothing is dirty",
    )
    parser.add_argument("--projectors", type=int, default=1)
    parser.add_argument(
        "--projector-batch", type=int, help="jobs a projector folds a transaction (its default)"
    )
    parser.add_argument("--steady-rate", type=int, default=5_000, help="figure 5's events/s")
    parser.add_argument("--steady-seconds", type=float, default=20)
    parser.add_argument(
        "--skip-long", action="store_true", help="leave figure 2 (the 10,000-step job) out"
    )
    args = parser.parse_args()
    if args.respond_async:
        HEADERS["Prefer"] = "respond-async"
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/traceviz_live")
    base, _, database = base.rpartition("/")
    start = datetime.now(UTC) - timedelta(days=1)
    spacing = timedelta(milliseconds=50)

    server = Server(
        base,
        database,
        args.workers,
        args.port,
        projectors=args.projectors if args.respond_async else 0,
        projector_batch=args.projector_batch,
    )
    try:
        grouped_rates = {}
        for producers in sorted({args.producers, 1}, reverse=True):
            rounds = []
            for round_ in range(args.rounds):
                rates = {}
                # Alternate which mode goes first: the tables grow from round to round.
                for mode in ("grouped", "live")[:: 1 if round_ % 2 == 0 else -1]:
                    streams = [
                        job_stream(f"{mode}-{producers}-{round_}-{n}", args.steps, start, spacing)
                        for n in range(args.jobs)
                    ]
                    lanes = runner_lanes(streams, producers, args.batch, live=mode == "live")
                    count = sum(len(stream) for stream in streams)
                    rates[mode] = count / server.send_all(lanes)
                rounds.append(rates)
            median = {
                mode: statistics.median(rates[mode] for rates in rounds)
                for mode in ("grouped", "live")
            }
            ratios = [rates["live"] / rates["grouped"] for rates in rounds]
            print(
                f"1. {args.jobs} jobs x {args.steps} steps ({count:,} events, batches of "
                f"{args.batch}, {producers} producer(s) each reporting its own jobs, "
                f"{args.workers} workers), median of {args.rounds} round(s):\n"
                f"   grouped (job by job): {median['grouped']:,.0f} events/s\n"
                f"   live (time order across jobs): {median['live']:,.0f} events/s\n"
                f"   live / grouped = {statistics.median(ratios):.2f} (target >= 0.8); "
                f"by round: {', '.join(f'{ratio:.2f}' for ratio in ratios)}"
            )
            grouped_rates[producers] = median["grouped"]
        grouped = [
            item
            for n in range(args.jobs)
            for item in job_stream(f"copied-{n}", args.steps, start, spacing)
        ]

        mode = "async (Prefer: respond-async)" if args.respond_async else "read-your-writes"
        print(f"   answers: {mode}")
        if args.respond_async:
            server.steady(args.steady_rate, args.steady_seconds, 400, args.batch, start, spacing)
        long_items = (
            [] if args.skip_long else job_stream("long-job", args.long_steps, start, spacing)
        )
        first, steps = long_items[:1], long_items[1:-1]
        if first:
            post(server.url, server.token, ndjson(first))
        latencies: list[tuple[int, float]] = []
        done_steps, index = 0, 0
        while index < len(steps):
            # One step per request: its node_started and node_finished (and a retry's pair).
            end = index + 1
            while end < len(steps) and not (
                steps[end]["type"] == "node_started"
                and steps[end]["payload"].get("attempt", 1) == 1
            ):
                end += 1
            latencies.append(
                (done_steps + 1, post(server.url, server.token, ndjson(steps[index:end])))
            )
            done_steps, index = done_steps + 1, end
        near_start = [s for n, s in latencies if 5 <= n <= 15]
        near_end = [s for n, s in latencies if n > args.long_steps - 20]
        early = statistics.median(near_start) * 1000 if near_start else float("nan")
        late = statistics.median(near_end) * 1000 if near_end else float("nan")
        print(
            f"2. one job streamed one step per request up to {args.long_steps:,} steps "
            f"({len(latencies):,} requests):\n"
            f"   median latency at steps 5-15: {early:.1f} ms; "
            f"at the last 20 steps: {late:.1f} ms\n"
            f"   ratio {late / early:.2f} (target <= 2)"
        )

        copy_rows = copy_rate(server.database_url, grouped, args.batch)
        print(
            f"3. raw COPY of the grouped phase's {len(grouped):,} rows into a bare copy of the "
            f"event table: {copy_rows:,.0f} rows/s\n"
            f"   grouped ingest ({args.producers} producers, as in 1.) / raw COPY = "
            f"{grouped_rates[args.producers] / copy_rows:.2f} (target >= 0.4)\n"
            f"   grouped ingest (1 producer) / raw COPY = {grouped_rates[1] / copy_rows:.2f} "
            "(requests one at a time: nothing overlaps a request's database time)"
        )
        print(
            f"4. server peak RSS: {server.peak_worker_kib / 1024:,.0f} MiB per worker "
            "(target < 300 MB)"
        )
    finally:
        server.stop()
        recreate_database(base, database, drop_only=True)


if __name__ == "__main__":
    main()
