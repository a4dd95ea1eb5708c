"""Server time to compare two 10,000-step runs (docs/compare.md): the JSON API, the page, and
the parts (reading the two runs' rows, the comparison itself).

Two runs of one workflow, each 10,000 steps with arguments, a step definition and payload
results: ``b`` completed; ``a`` differs at every 100th node (its arguments), fails at node
9,000 and ran 50 nodes ``b`` did not. Stored through ingest into the database DATABASE_URL
names, the first time only. Django in-process (test Client: no network, no browser); prints
the median and p95 wall time and the median CPU time of this process over N requests.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_bench .venv/bin/python bench/compare.py

Target: well under a second of server time for the API and the page.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402

from jobs.contract import bodies  # noqa: E402
from jobs.ingest.store import store_batch  # noqa: E402
from jobs.models import Job  # noqa: E402
from jobs.replay import compare  # noqa: E402
from jobs.web.compare import load_run  # noqa: E402

STEPS = 10_000
BASE = datetime(2026, 2, 1, tzinfo=UTC)
A, B = "bench-compare-a", "bench-compare-b"


def run_events(job_id: str, start: datetime, today: bool) -> list[dict]:
    items = [
        {
            "type": "job_started",
            "job_id": job_id,
            "ts": start.isoformat(),
            "payload": {"workflow": "bench-compare", "provider": "openai", "model": "m-1"},
        }
    ]
    nodes = [f"node-{n}" for n in range(STEPS)]
    if today:  # 50 nodes only a ran, in place of b's last 50
        nodes = nodes[:-50] + [f"extra-{n}" for n in range(50)]
    for n, node in enumerate(nodes):
        at = start + timedelta(milliseconds=100 * n)
        failed = today and n == 9_000
        arguments = {"table": f"t{n % 7}", "batch": 500, "rules": "v13" if today else "v12"}
        if not (today and n % 100 == 0):
            arguments["rules"] = "v12"
        items.append(
            {
                "type": "node_started",
                "job_id": job_id,
                "ts": at.isoformat(),
                "payload": {"node_id": node, "attempt": 1},
            }
        )
        items.append(
            {
                "type": "node_finished",
                "job_id": job_id,
                "ts": (at + timedelta(milliseconds=80)).isoformat(),
                "payload": {
                    "node_id": node,
                    "attempt": 1,
                    "result_type": "permanent_failure" if failed else "success",
                    "reason": "duplicate key (id)=(42)" if failed else "",
                    "duration_ms": 80,
                    "payload_results": {"rows": n * 10 + (1 if today and n % 250 == 0 else 0)},
                    "context": {
                        "expected_arguments": {"table": f"t{n % 7}", "batch": 500},
                        "actual_arguments": arguments,
                        "step_definition": {"tool": "sql", "sql": f"SELECT * FROM t{n % 7}"},
                    },
                },
            }
        )
    finish = start + timedelta(milliseconds=100 * len(nodes))
    status = "failed" if today else "completed"
    items.append(
        {
            "type": "job_finished",
            "job_id": job_id,
            "ts": finish.isoformat(),
            "payload": {"status": status},
        }
    )
    return items


def create(job_id: str, start: datetime, today: bool) -> None:
    if Job.objects.filter(job_id=job_id).exists():
        return
    items = run_events(job_id, start, today)
    started = time.perf_counter()
    store_batch(bodies.parse_items(items, max_events=len(items) + 1))
    made = Job.objects.get(job_id=job_id).step_count
    print(f"job {job_id}: {made} steps stored in {time.perf_counter() - started:.1f} s")


def timed(call, requests: int) -> tuple[float, float, float]:
    """Median and p95 wall time and median CPU time (ms) of ``call`` over ``requests`` runs."""
    for _ in range(2):
        call()
    times, cpu = [], []
    for _ in range(requests):
        started, started_cpu = time.perf_counter(), time.process_time()
        call()
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
    return statistics.median(times), statistics.quantiles(times, n=20)[-1], statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    print(f"database: {connection.vendor} {settings.DATABASES['default']['NAME']}")
    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)
    create(B, BASE, today=False)
    create(A, BASE + timedelta(days=1), today=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    user, _ = User.objects.get_or_create(username="bench-engineer")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    client = Client()
    client.force_login(user)
    job_a, job_b = Job.objects.get(job_id=A), Job.objects.get(job_id=B)
    run_a, run_b = load_run(job_a), load_run(job_b)
    comparison = compare.compare(run_a, run_b)
    first = comparison.first_divergence
    print(
        f"{len(comparison.nodes):,} nodes aligned, first divergence {first.node_id} "
        f"({first.kind}), {sum(n.diverges for n in comparison.nodes):,} differ"
    )

    def get(url: str):
        def call():
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)

        return call

    rows = [
        ("read both runs' rows (load_run x2)", lambda: (load_run(job_a), load_run(job_b))),
        ("compare() alone", lambda: compare.compare(run_a, run_b)),
        ("GET /api/v1/compare?a=&b=", get(f"/api/v1/compare?a={A}&b={B}")),
        ("GET /api/v1/compare?a= (b picked)", get(f"/api/v1/compare?a={A}")),
        ("GET /compare/?a=&b= (page)", get(f"/compare/?a={A}&b={B}")),
    ]
    print(f"{'what':40} {'median':>10} {'p95':>10} {'CPU':>10}")
    for name, call in rows:
        median, p95, cpu = timed(call, args.requests)
        print(f"{name:40} {median:8.1f} ms {p95:8.1f} ms {cpu:8.1f} ms")


if __name__ == "__main__":
    main()
