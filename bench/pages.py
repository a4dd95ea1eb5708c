"""Server time of the pages: the jobs list over 100,000 jobs and job pages of 10, 50, 5,000
and 10,000 steps (the 10- and 10,000-step jobs failed, their root failure their last step).

Runs Django in-process (test Client, so no network or browser time is counted) against the
database DATABASE_URL names, creating its data there the first time (Job and Step rows with
bulk_create for the list; the two job pages through ingest, so they have real events for the
narrative). Prints median and p95 over N requests per page.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_bench .venv/bin/python bench/pages.py

Targets: list p95 < 150 ms, job page with 10 steps < 30 ms (issue 16), with 50 steps < 100 ms,
with 5,000 steps < 1 s, with 10,000 steps < 300 ms (issue 14; browser ready < 2 s is checked by
tests/browser/test_big_job_browser.py, which prints its figure). ``--skip-list`` measures
only the job pages (no 100,000-job list data).
"""

import argparse
import os
import random
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
from jobs.models import Job, Step  # noqa: E402

PREFIX = "bench-list-"
BASE = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = (
    ["completed"] * 50
    + ["failed"] * 25
    + ["paused:transient"] * 10
    + ["running"] * 10
    + ["failed:logic"] * 5
)
REASONS = [
    "upstream timeout after 30s",
    "404 bucket releases-eu not found",
    "connection refused by crm",
    "schema mismatch on field total",
    "token expired for mailbox",
    "rate limited by provider",
    "invalid json in planner output",
    "permission denied writing contacts",
]
WORKFLOWS = ["etl", "publish-release", "crm-sync", "mail-digest", "pdca"]


def create_list_jobs(count: int, rng: random.Random) -> None:
    existing = Job.objects.filter(job_id__startswith=PREFIX).count()
    if existing >= count:
        print(f"list data: {existing} jobs already there")
        return
    started = time.perf_counter()
    batch = 5000
    for start in range(existing, count, batch):
        jobs = []
        for n in range(start, min(start + batch, count)):
            status = rng.choice(STATUSES)
            failed = status.startswith(("failed", "paused"))
            begun = BASE + timedelta(seconds=n * 25 + rng.randint(0, 20))
            strip = [["ok", False], ["ok", False]] + (
                [["retryable" if status == "paused:transient" else "failed", False]]
                if failed
                else [["ok", False]]
            )
            jobs.append(
                Job(
                    job_id=f"{PREFIX}{n:07d}",
                    status=status,
                    workflow=rng.choice(WORKFLOWS),
                    name="bench",
                    provider=rng.choice(["openai", "anthropic"]),
                    model="m-1",
                    correlation_id=f"corr-{n}",
                    started_at=begun,
                    last_event_at=begun,
                    finished_at=begun + timedelta(seconds=5) if status == "completed" else None,
                    failing_node_id="n2" if failed else "",
                    failing_reason=rng.choice(REASONS) if failed else "",
                    has_failed=failed and status != "paused:transient",
                    has_retryable=status == "paused:transient",
                    step_count=3,
                    max_attempt=rng.randint(1, 4),
                    event_count=7,
                    segment_strip=strip,
                )
            )
        Job.objects.bulk_create(jobs, batch_size=batch)
        created = {j.job_id: j.pk for j in Job.objects.filter(job_id__in=[j.job_id for j in jobs])}
        steps = []
        for job in jobs:
            pk = created[job.job_id]
            for position, (segment, _stale) in enumerate(job.segment_strip):
                failure = segment != "ok"
                steps.append(
                    Step(
                        job_id=pk,
                        node_id=f"n{position}",
                        attempt=1,
                        position=position,
                        segment=segment,
                        result_type=(
                            "retryable_failure"
                            if segment == "retryable"
                            else "permanent_failure"
                            if failure
                            else "success"
                        ),
                        reason=job.failing_reason if failure else "",
                        failure_code="adapter_timeout" if failure else "",
                        started_at=job.started_at,
                        finished_at=job.started_at + timedelta(seconds=1),
                        duration_ms=1000,
                    )
                )
        Step.objects.bulk_create(steps, batch_size=batch)
        print(f"  {min(start + batch, count)} jobs", end="\r", flush=True)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_job; ANALYZE jobs_step")
    print(f"list data: {count - existing} jobs created in {time.perf_counter() - started:.1f} s")


def create_job_with_steps(job_id: str, steps: int, fail_last: bool = False) -> None:
    if Job.objects.filter(job_id=job_id).exists():
        return
    items = [
        {
            "type": "job_started",
            "job_id": job_id,
            "ts": BASE.isoformat(),
            "payload": {"workflow": "etl", "provider": "openai", "model": "m-1"},
        }
    ]
    attempts = []  # (node, attempt, result): every tenth node retries once, then succeeds
    while len(attempts) < steps:
        node = f"node-{len(attempts)}"
        if len(attempts) % 10 == 0 and len(attempts) + 1 < steps:
            attempts.append((node, 1, "retryable_failure"))
            attempts.append((node, 2, "success"))
        else:
            attempts.append((node, 1, "success"))
    if fail_last:
        attempts[-1] = (attempts[-1][0], attempts[-1][1], "permanent_failure")
    for n, (node, attempt, result) in enumerate(attempts):
        at = BASE + timedelta(milliseconds=100 * n)
        span = f"s{n}"
        items.append(
            {
                "type": "node_started",
                "job_id": job_id,
                "ts": at.isoformat(),
                "payload": {
                    "node_id": node,
                    "attempt": attempt,
                    "trace_span_id": span,
                    "parent_span_id": "s0" if n else "",
                },
            }
        )
        items.append(
            {
                "type": "node_finished",
                "job_id": job_id,
                "ts": (at + timedelta(milliseconds=80)).isoformat(),
                "payload": {
                    "node_id": node,
                    "attempt": attempt,
                    "result_type": result,
                    "reason": "upstream timeout" if result != "success" else "",
                    "duration_ms": 80,
                    "trace_span_id": span,
                    "payload_results": {"n": n},
                },
            }
        )
    if fail_last:
        finish = BASE + timedelta(milliseconds=100 * len(attempts))
        items.append(
            {
                "type": "job_finished",
                "job_id": job_id,
                "ts": finish.isoformat(),
                "payload": {"status": "failed"},
            }
        )
    started = time.perf_counter()
    store_batch(bodies.parse_items(items, max_events=len(items) + 1))
    made = Job.objects.get(job_id=job_id).step_count
    print(f"job {job_id}: {made} steps stored in {time.perf_counter() - started:.1f} s")


def measure(client: Client, url: str, requests: int, **headers) -> tuple[float, float, float]:
    """Median and p95 wall time, and the median CPU time of this (Django) process: on a busy
    machine the wall time mostly measures waiting for a core; the CPU time does not (it leaves
    out the database server's own work)."""
    for _ in range(3):
        assert client.get(url, **headers).status_code == 200, url
    times, cpu = [], []
    for _ in range(requests):
        started, started_cpu = time.perf_counter(), time.process_time()
        response = client.get(url, **headers)
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.process_time() - started_cpu) * 1000)
        assert response.status_code == 200
    return statistics.median(times), statistics.quantiles(times, n=20)[-1], statistics.median(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--skip-list", action="store_true", help="measure the job pages only")
    args = parser.parse_args()
    print(f"database: {connection.vendor} {settings.DATABASES['default']['NAME']}")
    call_command("migrate", verbosity=0)
    # Pages name their static files by the manifest, as in production.
    call_command("collectstatic", interactive=False, verbosity=0)
    rng = random.Random(42)
    if not args.skip_list:
        create_list_jobs(args.jobs, rng)
    create_job_with_steps("bench-steps-10", 10, fail_last=True)
    create_job_with_steps("bench-steps-50", 50)
    create_job_with_steps("bench-steps-5000", 5000)
    create_job_with_steps("bench-steps-10000", 10_000, fail_last=True)
    if connection.vendor == "postgresql":
        # As autovacuum would on a server (the bench machine runs without it): without
        # statistics on the new day partitions the planner guesses, e.g. filters a job's
        # 20,000 events for the step panel's two instead of using the unique index.
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    # No setup_test_environment(): its template instrumentation would be timed too.
    user, _ = User.objects.get_or_create(username="bench-operator")
    user.groups.add(Group.objects.get_or_create(name="engineer")[0])
    client = Client()
    client.force_login(user)
    list_pages = [
        ("list: needs attention (default)", "/", {}),
        ("list: status=failed", "/?status=failed", {}),
        ("list: all, text search 'timeout'", "/?show=all&reason=timeout", {}),
        ("list: failed + provider + search", "/?status=failed&provider=openai&reason=bucket", {}),
        ("list: table refresh (HTMX)", "/?status=failed", {"HTTP_HX_REQUEST": "true"}),
        ("list: all, by duration", "/?show=all&sort=-duration", {}),
        ("list: all, by failures", "/?show=all&sort=-failures", {}),
    ]
    big = "/jobs/bench-steps-10000/"
    htmx = {"HTTP_HX_REQUEST": "true"}
    pages = ([] if args.skip_list else list_pages) + [
        ("job page: 10 steps, failed", "/jobs/bench-steps-10/", {}),
        ("job page: 50 steps", "/jobs/bench-steps-50/", {}),
        ("job page: 50 steps, panel", "/jobs/bench-steps-50/?step=node-0:1", {}),
        ("job page: 5,000 steps", "/jobs/bench-steps-5000/", {}),
        (
            "job page: 5,000 steps, panel (HTMX)",
            "/jobs/bench-steps-5000/?step=node-0:1",
            {"HTTP_HX_REQUEST": "true"},
        ),
        (
            "job page: 5,000 steps, strip click (HTMX)",
            "/jobs/bench-steps-5000/?step=node-2500:1",
            {**htmx, "HTTP_HX_TARGET": "waterfall"},
        ),
        ("job page: 10,000 steps, root failure open", big, {}),
        ("job page: 10,000 steps, deep link", big + "?step=node-5000:1", {}),
        (
            "job page: 10,000 steps, find (HTMX)",
            big + "?retried=1",
            {**htmx, "HTTP_HX_TARGET": "step-results"},
        ),
        ("job page: 10,000 steps, panel (HTMX)", big + "?step=node-9000:1", htmx),
    ]
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"{'page':<40} {'median':>9} {'p95':>9} {'cpu':>9}   ({args.requests} requests each)")
    for label, url, headers in pages:
        median, p95, cpu = measure(client, url, args.requests, **headers)
        print(f"{label:<40} {median:>7.1f}ms {p95:>7.1f}ms {cpu:>7.1f}ms")
    print(f"load average: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
