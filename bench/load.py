"""Sustained load with resends and shuffling, then a check that nothing was lost or doubled.

Creates a fresh PostgreSQL database (--database, dropped again at the end unless --keep), starts
gunicorn on it, and runs P producers for S seconds. Each producer owns its jobs, sends NDJSON
batches mixing new events with re-sent ones it already got acknowledged, shuffled within the
batch and drawn out of order from a window of its stream (so events also cross batches out of
order), and retries a batch on 503, 429 (after Retry-After) and connection errors. Afterwards
the database must hold every acknowledged event exactly once, and every job's Job/Step/
Escalation rows must equal replay over its stored events (jobs.parity).

    .venv/bin/python bench/load.py --seconds 60 --producers 8

Prints events/s, request latency p50/p99, status counts, and "lost / duplicated / parity".
"""

import argparse
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pgstats import analyze_periodically

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
RESULTS = ["success"] * 6 + ["retryable_failure", "permanent_failure", "compensatable_failure"]
# A batch is retried this many times (503 / 429 / connection errors) and for at most this long.
MAX_TRIES = 200
MAX_RETRY_SECONDS = 120.0


def postgres_url(database: str, base: str) -> str:
    return f"{base.rstrip('/')}/{database}"


def recreate_database(base: str, database: str, *, drop_only: bool = False) -> None:
    import psycopg

    with psycopg.connect(postgres_url("postgres", base), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{database}"')


def setup_django(database_url: str) -> None:
    """Django in this process, on the bench database (for the token and the verification)."""
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)


def issue_token(name: str) -> str:
    from jobs.models import IngestToken

    token, raw = IngestToken.issue(name)
    # The bench measures ingest, not the limiter: far above anything two cores can send.
    IngestToken.objects.filter(pk=token.pk).update(rate_limit_per_minute=10**9)
    return raw


def start_gunicorn(
    database_url: str,
    port: int,
    workers: int,
    extra_env: dict | None = None,
    config: Path | None = None,
):
    """Gunicorn on the database, answering /healthz; with ``config``, its settings (timeout,
    preload) come from that file, as in production."""
    env = {**os.environ, "DATABASE_URL": database_url, **(extra_env or {})}
    env.setdefault("PYTHONWARNINGS", "ignore::UserWarning")  # no STATIC_ROOT: not collected
    # A server with DEBUG off refuses the built-in key: the bench's server gets its own.
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    # The server's own log (tracebacks of the outages the fault runs cause) goes to a file.
    log_path = Path(tempfile.mkdtemp(prefix="traceviz-gunicorn-")) / "gunicorn.log"
    print(f"gunicorn log: {log_path}")
    with log_path.open("w") as log:  # the child keeps its own descriptor
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-b", f"{HOST}:{port}", "-w", str(workers)]
            + (["-c", str(config)] if config else ["traceviz.wsgi", "--timeout", "120"])
            + ["--log-level", "warning"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{HOST}:{port}"
    # A preloaded app on a loaded machine takes its time to import: up to a minute.
    for _ in range(600):
        try:
            urllib.request.urlopen(url + "/healthz", timeout=2)
            return server, url
        except OSError:
            if server.poll() is not None:
                raise RuntimeError("gunicorn exited during start-up") from None
            time.sleep(0.1)
    stop_process(server)
    raise RuntimeError("gunicorn did not answer /healthz within 60 s")


def stop_process(process: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# --- producers ----------------------------------------------------------------------------------


def job_events(job_id: str, start: datetime, rng: random.Random) -> list[dict]:
    """A job's events, each with an event_id (every other job leaves it to the server's hash)."""
    now = start
    out = []
    explicit_ids = rng.random() < 0.5

    def emit(kind: str, **payload):
        nonlocal now
        now += timedelta(milliseconds=rng.randint(1, 500))
        item = {"type": kind, "job_id": job_id, "ts": now.isoformat(), "payload": payload}
        if explicit_ids:
            item["event_id"] = f"e{len(out)}"
        out.append(item)

    emit(
        "job_started",
        workflow=rng.choice(["etl", "release", "mail"]),
        provider="openai",
        model="gpt-4.1",
        name=f"load {job_id}",
    )
    for index in range(rng.randint(2, 5)):
        node = f"node-{index}"
        for attempt in range(1, 4):
            result = rng.choice(RESULTS)
            emit("node_started", node_id=node, step_index=index, attempt=attempt)
            finish = {
                "node_id": node,
                "step_index": index,
                "attempt": attempt,
                "result_type": result,
                "duration_ms": rng.randint(5, 5000),
                "payload_results": {node: attempt},
            }
            if result != "success":
                finish |= {"reason": f"{node}: upstream said no", "failure_code": "adapter_error"}
                # auth and internal open escalations (and so notifications), network pauses.
                if error_type := rng.choice(["auth", "internal", "network", "", "", ""]):
                    finish["error_type"] = error_type
            emit("node_finished", **finish)
            if result != "retryable_failure":
                break
    emit("job_finished", status=rng.choice(["completed", "failed"]))
    return out


def event_key(item: dict) -> tuple[str, str]:
    from jobs.contract.events import default_event_id

    return item["job_id"], item.get("event_id") or default_event_id(item)


@dataclass
class Stats:
    """What every producer saw; guarded by ``lock``."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    statuses: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    acknowledged: set = field(default_factory=set)
    sent_keys: set = field(default_factory=set)
    jobs: set = field(default_factory=set)
    events_acked: int = 0  # acknowledged event deliveries, resends included
    gave_up_batches: int = 0
    # (time.monotonic(), status) of every answer, for the fault runs' outage windows.
    timeline: list[tuple[float, str]] = field(default_factory=list)


class Producer(threading.Thread):
    def __init__(
        self,
        index: int,
        url: str,
        token: str,
        stats: Stats,
        stop: threading.Event,
        seed: int,
        batch: int,
        resend: float,
        prefix: str = "load",
    ):
        super().__init__(name=f"producer-{index}", daemon=True)
        self.index, self.url, self.token, self.stats, self.stop = index, url, token, stats, stop
        self.rng = random.Random(seed * 1000 + index)
        self.batch, self.resend, self.prefix = batch, resend, prefix
        self.stream: list[dict] = []  # not yet sent, in production order
        self.sent: list[dict] = []  # acknowledged, candidates for resending
        self.jobs = 0
        self.start_time = datetime.now(UTC) - timedelta(hours=1)

    def _refill(self) -> None:
        while len(self.stream) < self.batch * 3:
            job_id = f"{self.prefix}-{self.index}-{self.jobs}"
            self.jobs += 1
            self.stream.extend(job_events(job_id, self.start_time, self.rng))
            with self.stats.lock:
                self.stats.jobs.add(job_id)

    def next_batch(self) -> list[dict]:
        self._refill()
        fresh = self.rng.randint(self.batch // 2, self.batch)
        # Out of order across batches: draw from a window three batches wide, not the head.
        picks = sorted(self.rng.sample(range(len(self.stream)), fresh), reverse=True)
        items = [self.stream.pop(i) for i in picks]
        resent = min(len(self.sent), int(fresh * self.resend))
        items += self.rng.sample(self.sent, resent)
        if resent and self.rng.random() < 0.3:
            items.append(items[0])  # a duplicate inside one batch, too
        self.rng.shuffle(items)
        return items

    def run(self) -> None:
        while not self.stop.is_set():
            items = self.next_batch()
            keys = [event_key(item) for item in items]
            with self.stats.lock:
                self.stats.sent_keys.update(keys)
            acked = self.post(items)
            if acked is None:
                continue
            with self.stats.lock:
                self.stats.acknowledged.update(keys[i] for i in acked)
                self.stats.events_acked += len(acked)
            for i in sorted(set(acked)):
                self.sent.append(items[i])
            if len(self.sent) > 5000:
                del self.sent[: len(self.sent) - 5000]

    def post(self, items: list[dict]) -> list[int] | None:
        """Send until an answer that is not retryable; the indexes the server acknowledged."""
        body = "\n".join(json.dumps(item) for item in items).encode()
        request = urllib.request.Request(
            self.url + "/api/v1/events",
            data=body,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/x-ndjson",
            },
        )
        deadline = time.monotonic() + MAX_RETRY_SECONDS
        for _ in range(MAX_TRIES):
            started = time.perf_counter()
            wait = 0.2
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    answer = json.loads(response.read())
                    status = str(response.status)
            except urllib.error.HTTPError as error:
                status = str(error.code)
                answer = None
                if error.code in (503, 429):
                    wait = min(float(error.headers.get("Retry-After") or 1), 5.0)
                    error.read()
                elif error.code == 400:
                    answer = json.loads(error.read())
            except (OSError, ValueError):
                status = "connection error"
                answer = None
            elapsed = time.perf_counter() - started
            with self.stats.lock:
                self.stats.statuses[status] += 1
                self.stats.latencies.append(elapsed)
                self.stats.timeline.append((time.monotonic(), status))
            if answer is not None:
                rejected = {error["index"] for error in answer.get("errors", [])}
                return [i for i in range(len(items)) if i not in rejected]
            if status not in ("503", "429", "connection error") or time.monotonic() > deadline:
                break
            time.sleep(wait * (0.5 + self.rng.random()))
        with self.stats.lock:
            self.stats.gave_up_batches += 1
        return None


def run_producers(
    url: str,
    token: str,
    seconds: float,
    producers: int,
    seed: int,
    batch: int,
    resend: float,
    during=None,
    prefix: str = "load",
) -> tuple[Stats, float]:
    """Run the producers for ``seconds`` (``during(stats)`` runs meanwhile in this thread), then
    let in-flight batches finish. Returns the stats and the elapsed time."""
    stats, stop = Stats(), threading.Event()
    threads = [
        Producer(i, url, token, stats, stop, seed, batch, resend, prefix) for i in range(producers)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    if during is not None:
        during(stats)
    remaining = seconds - (time.perf_counter() - started)
    if remaining > 0:
        time.sleep(remaining)
    stop.set()
    for thread in threads:
        thread.join(timeout=MAX_RETRY_SECONDS + 60)
    return stats, time.perf_counter() - started


# --- verification --------------------------------------------------------------------------------


@dataclass
class Verdict:
    lost: int
    duplicated: int
    stored_unacknowledged: int
    parity_mismatches: int
    examples: list[str]

    def line(self) -> str:
        return (
            f"lost: {self.lost}, duplicated: {self.duplicated}, "
            f"parity mismatches: {self.parity_mismatches}"
        )


def verify(stats: Stats) -> Verdict:
    """Acknowledged events stored exactly once; no event stored twice; every job's rows equal
    its replay."""
    from django.db import connection
    from django.db.models import Count

    from jobs.ingest import parity
    from jobs.models import Event, Job

    connection.close()  # the server may have been restarted under a kept connection
    # Only this run's jobs: the fault runs share one database between scenarios.
    mine = Event.objects.filter(job_id__in=stats.jobs)
    stored = Counter()
    for job_id, event_id in mine.values_list("job_id", "event_id").iterator(10_000):
        stored[(job_id, event_id)] += 1
    # The unique constraint should make this 0; counted from the table, not assumed.
    doubled = mine.values("job_id", "event_id").annotate(n=Count("id")).filter(n__gt=1).count()
    lost = [key for key in stats.acknowledged if stored[key] != 1]
    unacked = [key for key in stored if key not in stats.acknowledged]
    examples = [f"lost {key}" for key in lost[:3]]
    # Jobs with events but no Job row count as mismatches too (parity reports them).
    job_ids = set(Job.objects.filter(job_id__in=stats.jobs).values_list("job_id", flat=True))
    job_ids |= {key[0] for key in stored}
    mismatched = parity.mismatched_jobs(sorted(job_ids))
    examples += [str(diffs[0]) for diffs in list(mismatched.values())[:3]]
    return Verdict(len(lost), doubled, len(unacked), len(mismatched), examples)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(stats: Stats, elapsed: float, verdict: Verdict) -> None:
    from jobs.models import Event

    stored = Event.objects.filter(job_id__in=stats.jobs).count()
    print(
        f"stored {stored:,} distinct events of {len(stats.jobs):,} jobs in {elapsed:.1f} s: "
        f"{stored / elapsed:,.0f} new events/s, {stats.events_acked / elapsed:,.0f} "
        "acknowledged events/s (resends included)"
    )
    ms = [value * 1000 for value in stats.latencies]
    print(
        f"requests: {len(ms):,}; latency p50 {percentile(ms, 0.5):.0f} ms, "
        f"p99 {percentile(ms, 0.99):.0f} ms"
    )
    counts = ", ".join(f"{status}: {n:,}" for status, n in sorted(stats.statuses.items()))
    print(f"answers by status: {counts}; batches given up: {stats.gave_up_batches}")
    print(
        f"stored without an acknowledgement (answer lost, not resent): "
        f"{verdict.stored_unacknowledged}"
    )
    print(verdict.line())
    for example in verdict.examples:
        print(f"  e.g. {example}")


def arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--producers", type=int, default=8)
    parser.add_argument("--database", default="traceviz_load")
    parser.add_argument(
        "--postgres",
        default="postgres://postgres@127.0.0.1:5432",
        help="server URL without a database name",
    )
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--port", type=int, default=8766)
    parser.add_argument("--batch", type=int, default=100, help="new events per batch (at most)")
    parser.add_argument(
        "--resend", type=float, default=0.2, help="re-sent acknowledged events per new event"
    )
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    return parser


def main() -> None:
    args = arguments(__doc__.splitlines()[0]).parse_args()
    database_url = postgres_url(args.database, args.postgres)
    recreate_database(args.postgres, args.database)
    server = None
    try:
        setup_django(database_url)
        token = issue_token(f"load-{args.seed}")
        server, url = start_gunicorn(database_url, args.port, args.workers)
        print(
            f"{args.producers} producers for {args.seconds:g} s against {url} "
            f"(gunicorn, {args.workers} sync workers; database {args.database})"
        )
        analyzing = analyze_periodically(database_url)
        stats, elapsed = run_producers(
            url, token, args.seconds, args.producers, args.seed, args.batch, args.resend
        )
        analyzing.set()
        stop_process(server)
        server = None
        report(stats, elapsed, verify(stats))
    finally:
        if server is not None:
            stop_process(server)
        from django.db import connections

        connections.close_all()
        if not args.keep:
            recreate_database(args.postgres, args.database, drop_only=True)


if __name__ == "__main__":
    main()
