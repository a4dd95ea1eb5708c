"""Ingest throughput end to end: events durable and projected, per second, against a server.

By default starts gunicorn itself (so it can read the server's peak RSS) on the database that
DATABASE_URL names, creates an ingest token, and sends N events across J jobs in batches,
from C concurrent producers. Prints events/s and the server's peak RSS. Use --url/--token to
measure a server you started yourself (RSS is then not reported).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_bench .venv/bin/python bench/ingest.py
"""

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

from load import start_gunicorn, stop_process
from pgstats import analyze_periodically

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ["success"] * 7 + ["retryable_failure", "permanent_failure", "compensatable_failure"]


def job_events(job_id: str, start: datetime, rng: random.Random) -> list[dict]:
    """Ten events: job_started, four node attempts (started + finished), job_finished."""
    now = start

    def emit(kind: str, **payload):
        nonlocal now
        now += timedelta(milliseconds=rng.randint(1, 500))
        return {"type": kind, "job_id": job_id, "ts": now.isoformat(), "payload": payload}

    out = [
        emit(
            "job_started",
            workflow=rng.choice(["etl", "release", "mail"]),
            provider="openai",
            model="gpt-4.1",
            name=f"bench {job_id}",
        )
    ]
    for index in range(4):
        node = f"node-{index}"
        result = rng.choice(RESULTS)
        out.append(emit("node_started", node_id=node, step_index=index))
        finish = {
            "node_id": node,
            "step_index": index,
            "result_type": result,
            "duration_ms": rng.randint(5, 5000),
            "payload_results": {node: index},
        }
        if result != "success":
            finish |= {"reason": f"{node}: upstream said no", "failure_code": "adapter_error"}
        out.append(emit("node_finished", **finish))
    out.append(emit("job_finished", status="completed"))
    return out


def build_bodies(events: int, jobs: int, batch: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    per_job = max(events // jobs, 1)
    start = datetime.now(UTC) - timedelta(hours=1)
    stream: list[dict] = []
    for n in range(jobs):
        stream.extend(job_events(f"bench-{seed}-{n}", start, rng)[:per_job])
    stream = stream[:events]
    return [
        "\n".join(json.dumps(e) for e in stream[i : i + batch]).encode()
        for i in range(0, len(stream), batch)
    ]


def post(url: str, token: str, body: bytes) -> int:
    request = urllib.request.Request(
        url + "/api/v1/events",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
    )
    for _ in range(20):
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return json.loads(response.read())["stored"]
        except urllib.error.HTTPError as error:
            if error.code != 503:
                raise
            time.sleep(0.5)
    raise RuntimeError("server kept answering 503")


def rss_kib(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")
        )
    return total


def server_pids(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children")
    try:
        return [master, *map(int, children.read_text().split())]
    except OSError:
        return [master]


def manage(*args: str) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout


class NoLint:
    """Stands in for jobs.lint.Linter to measure what contract lint costs."""

    findings: list = []

    def observe(self, *args, **kwargs):
        pass

    def finish(self, **kwargs):
        return []


def lint_overhead(events: int, jobs: int, batch: int, seed: int, rounds: int = 3) -> None:
    """In-process store_batch throughput with and without contract lint, alternating rounds so
    machine noise hits both alike."""
    import django

    django.setup()
    from jobs.contract import bodies
    from jobs.ingest.store import store_batch
    from jobs.replay import walk as replay

    real = replay.lint.Linter
    rates: dict[str, list[float]] = {"with lint": [], "without lint": []}
    for n in range(rounds):
        for label in rates:
            replay.lint.Linter = real if label == "with lint" else NoLint
            requests = build_bodies(events, jobs, batch, seed * 100 + n * 2 + len(label))
            started = time.perf_counter()
            for body in requests:
                store_batch(bodies.parse_body(body, "application/x-ndjson", 10_000))
            rates[label].append(events / (time.perf_counter() - started))
    replay.lint.Linter = real
    best = {label: max(values) for label, values in rates.items()}
    cost = (best["without lint"] - best["with lint"]) / best["without lint"] * 100
    print(
        f"in-process ingest, best of {rounds}: with lint {best['with lint']:,.0f} events/s, "
        f"without lint {best['without lint']:,.0f} events/s: lint costs {cost:.1f} %"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--url", help="a running server; default: start gunicorn here")
    parser.add_argument("--token")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument(
        "--lint-overhead",
        action="store_true",
        help="measure in-process ingest with and without contract lint instead",
    )
    args = parser.parse_args()
    if args.lint_overhead:
        sys.path.insert(0, str(ROOT))
        lint_overhead(min(args.events, 20_000), min(args.jobs, 2_000), args.batch, args.seed)
        return

    server = None
    url, token = args.url, args.token
    if url is None:
        manage("migrate", "--noinput")
        token = manage("create_ingest_token", f"bench-{args.seed}").strip().splitlines()[-1]
        database_url = os.environ.get("DATABASE_URL") or f"sqlite:///{ROOT / 'db.sqlite3'}"
        server, url = start_gunicorn(database_url, 8765, args.workers)
    bodies = build_bodies(args.events, args.jobs, args.batch, args.seed)
    print(
        f"sending {args.events} events ({args.jobs} jobs, batches of {args.batch}, "
        f"{args.producers} producers) to {url}"
    )

    peak = 0
    done = threading.Event()

    def sample():
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_kib(server_pids(server.pid)))
            time.sleep(0.2)

    if server:
        threading.Thread(target=sample, daemon=True).start()
    queue = list(enumerate(bodies))
    lock = threading.Lock()
    stored = 0

    def producer():
        nonlocal stored
        while True:
            with lock:
                if not queue:
                    return
                _index, body = queue.pop(0)
            count = post(url, token, body)
            with lock:
                stored += count

    analyzing = analyze_periodically(os.environ.get("DATABASE_URL", ""))
    started = time.perf_counter()
    threads = [threading.Thread(target=producer) for _ in range(args.producers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    done.set()
    analyzing.set()
    print(
        f"stored {stored} events in {elapsed:.1f} s: {stored / elapsed:,.0f} events/s "
        "(durable and projected when each response arrives)"
    )
    if server:
        print(f"server peak RSS (master + {args.workers} workers): {peak / 1024:,.0f} MiB")
        stop_process(server)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")
    main()
