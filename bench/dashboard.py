"""Server time of each dashboard panel with 1,000,000 step rows in PostgreSQL.

Creates its data the first time in the database DATABASE_URL names (which must be PostgreSQL):
100,000 jobs spread over 7 days, 10 steps each (INSERT ... SELECT generate_series, seconds not
minutes), a job_started event per job and planner events for 5 % of them, the jobs' providers
(a second one for those 5 %, whose planner failed on it) and a failure record per failed or
retryable step. The bulk load bypasses
ingest, so the dashboard rollup (jobs.rollup) is rebuilt from it on every run, timed, as is the
refresh of one dirty hour. Then times each panel function (the SQL aggregates plus shaping the
figure) for the default 24 h range and prints median and p95 over N runs, plus the whole dashboard
request through Django's test client, unfiltered and filtered by provider, model and both
(the jobs that used them: the jobs list's meaning).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_bench \
        .venv/bin/python bench/dashboard.py

Target: each panel's p95 under 300 ms for the 24 h range.
"""

import argparse
import os
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from jobs.dashboard import charts, headlines, provider_health, rollup  # noqa: E402
from jobs.dashboard.window import parse_window  # noqa: E402
from jobs.models import DashboardDirtyHour, Job, hour_floor  # noqa: E402

JOBS = 100_000
STEPS_PER_JOB = 10
SPAN_SECONDS = 7 * 24 * 3600

SEED_SQL = """
INSERT INTO jobs_job (job_id, status, name, workflow, correlation_id, session_id, provider, model,
    plan_hash, retry_of, metadata, cursor_node, payload_results, findings,
    started_at, last_event_at, last_received_at, finish_code, finish_reason, cancel_reason,
    failing_node_id, failing_reason, failure_code, error_type, has_retryable, has_failed,
    step_count, max_attempt, event_count, planner_parse_invalid, planner_degraded, segment_strip,
    fold, input_tokens, output_tokens, partition_day)
SELECT 'bench-' || g,
       (ARRAY['completed','completed','completed','failed','failed:logic','paused:transient',
              'running','failed:internal'])[1 + g %% 8],
       'bench', (ARRAY['etl','release','mail'])[1 + g %% 3], 'corr-' || g, 'sess-' || g,
       (ARRAY['openai','anthropic','google'])[1 + g %% 3],
       (ARRAY['gpt-4.1','claude-x','gemini-2.5'])[1 + g %% 3],
       '', '', '{}', '', '{}', '[]',
       %(now)s - make_interval(secs => (g::float / %(jobs)s) * %(span)s),
       %(now)s - make_interval(secs => (g::float / %(jobs)s) * %(span)s),
       %(now)s, '', '', '', '', '', '', '', g %% 5 = 1, g %% 7 = 2, %(steps)s, 1, 11, 0, 0, '[]',
       '{}', 0, 0, %(today)s
FROM generate_series(1, %(jobs)s) AS g;

INSERT INTO jobs_step (job_id, node_id, attempt, position, result_type, segment, reason,
    ignored_stale, compensated, compensation_reason, started_at, finished_at, duration_ms, state,
    trace_span_id, parent_span_id, failure_code, error_type, tool, source, plan_hash,
    continue_on_error, payload_results, context, audit_trail, extra, started_event_id,
    finished_event_id, exception_type, stack, handled, inferred, span, history, marks,
    masked, partition_day)
SELECT j.id, 'node-' || s, 1, s,
       CASE WHEN (j.id + s) %% 10 = 0 THEN 'retryable_failure'
            WHEN (j.id + s) %% 23 = 0 THEN 'permanent_failure' ELSE 'success' END,
       CASE WHEN (j.id + s) %% 10 = 0 THEN 'retryable'
            WHEN (j.id + s) %% 23 = 0 THEN 'failed' ELSE 'ok' END,
       '', false, false, '', j.started_at + make_interval(secs => s),
       j.started_at + make_interval(secs => s + 1), ((j.id * 7919 + s * 104729) %% 5000)::float,
       '', '', '', CASE WHEN (j.id + s) %% 10 = 0 THEN 'adapter_timeout'
                        WHEN (j.id + s) %% 23 = 0 THEN 'tool_not_found' ELSE '' END,
       CASE WHEN (j.id + s) %% 10 = 0 THEN 'network'
            WHEN (j.id + s) %% 23 = 0 THEN 'logic' ELSE '' END,
       '', '', '', false, '{}', '{}', '[]', '{}', '', '', '', '', false, false, '{}', '[]', '{}',
       '[]', j.partition_day
FROM jobs_job j CROSS JOIN generate_series(0, %(steps)s - 1) AS s
WHERE j.job_id LIKE 'bench-%%';

INSERT INTO jobs_event (job_id, event_id, type, ts, attempt, payload, received_at, partition_day,
    masked, generation)
SELECT j.job_id, 'start', 'job_started', j.started_at, 1,
       jsonb_build_object('provider', j.provider, 'model', j.model), %(now)s, j.partition_day, '[]',
       0
FROM jobs_job j WHERE j.job_id LIKE 'bench-%%';

INSERT INTO jobs_event (job_id, event_id, type, ts, attempt, payload, received_at, partition_day,
    masked, generation)
SELECT j.job_id, 'planner-' || k,
       CASE WHEN k = 2 THEN 'graph.next_step.degraded' ELSE 'graph.next_step.parse_invalid' END,
       j.started_at + make_interval(secs => k), 1,
       jsonb_build_object('provider', j.provider, 'model', j.model), %(now)s, j.partition_day,
       '[]', 0
FROM jobs_job j CROSS JOIN generate_series(0, 2) AS k
WHERE j.job_id LIKE 'bench-%%' AND j.id %% 20 = 0;
"""


# The failure records and providers projection writes beside them: each job's own provider,
# and for the jobs with planner events a second one (the planner ran on another provider) that
# their planner failure names, so the provider failure rates count failures against the
# provider that failed; a step failure per failed or retryable step, naming no provider.
SEED_FAILURES_SQL = """
INSERT INTO jobs_jobprovider (job_id, provider, model)
SELECT j.id, j.provider, j.model FROM jobs_job j WHERE j.job_id LIKE 'bench-%';

INSERT INTO jobs_jobprovider (job_id, provider, model)
SELECT j.id, CASE WHEN j.provider = 'anthropic' THEN 'openai' ELSE 'anthropic' END,
       CASE WHEN j.provider = 'anthropic' THEN 'gpt-4.1' ELSE 'claude-x' END
FROM jobs_job j WHERE j.job_id LIKE 'bench-%' AND j.id % 20 = 0;

INSERT INTO jobs_failure (job_id, kind, node_id, attempt, reason, search_text, failure_code,
    error_type, provider, model, at, recovered, handled)
SELECT s.job_id, 'step', s.node_id, s.attempt, '', '', s.failure_code, s.error_type, '', '',
       s.finished_at, false, false
FROM jobs_step s JOIN jobs_job j ON j.id = s.job_id
WHERE j.job_id LIKE 'bench-%' AND s.segment IN ('failed', 'retryable');

INSERT INTO jobs_failure (job_id, kind, node_id, attempt, reason, search_text, failure_code,
    error_type, provider, model, at, recovered, handled)
SELECT j.id, 'planner', '', 0, 'next_step_parse_failed', ' next_step_parse_failed', '', '',
       p.provider, p.model, j.started_at + make_interval(secs => 2), false, false
FROM jobs_job j JOIN jobs_jobprovider p ON p.job_id = j.id AND p.provider <> j.provider
WHERE j.job_id LIKE 'bench-%' AND j.id % 20 = 0
"""


def seed_failures() -> None:
    """The failure records and providers of a database seeded before they were."""
    from jobs.models import JobProvider

    if JobProvider.objects.filter(job__job_id="bench-1").exists():
        return
    started = time.perf_counter()
    with connection.cursor() as cursor:
        for statement in SEED_FAILURES_SQL.split(";\n\n"):
            cursor.execute(statement)
    print(f"seeded failure records and providers in {time.perf_counter() - started:.1f} s")


def seed() -> None:
    if Job.objects.filter(job_id="bench-1").exists():
        return
    started = time.perf_counter()
    with connection.cursor() as cursor:
        now = timezone.now()
        # Loaded now: every row in today's partitions (as bulk-received data would be).
        params = {
            "now": now,
            "today": now.date(),
            "jobs": JOBS,
            "span": SPAN_SECONDS,
            "steps": STEPS_PER_JOB,
        }
        for statement in SEED_SQL.split(";\n\n"):
            cursor.execute(statement, params)
    print(
        f"seeded {JOBS:,} jobs / {JOBS * STEPS_PER_JOB:,} steps in "
        f"{time.perf_counter() - started:.1f} s"
    )


def measure(function, runs: int) -> tuple[float, float]:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        function()
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    p95 = timings[min(len(timings) - 1, round(0.95 * (len(timings) - 1)))]
    return statistics.median(timings), p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", "--runs", type=int, default=20)
    parser.add_argument("--ranges", default="24h,7d", help="comma-separated: 1h, 24h, 7d")
    parser.add_argument(
        "--filters",
        default="provider=anthropic,model=claude-x,provider=anthropic&model=gpt-4.1",
        help="comma-separated query strings: the whole page is also timed filtered by each",
    )
    args = parser.parse_args()
    if connection.vendor != "postgresql":
        sys.exit("bench/dashboard.py needs PostgreSQL: set DATABASE_URL=postgres://...")
    call_command("migrate", verbosity=0)
    # Pages name their static files by the manifest, as in production.
    call_command("collectstatic", interactive=False, verbosity=0)
    seed()
    seed_failures()
    with connection.cursor() as cursor:
        # Fresh bulk-loaded tables: autovacuum would set the visibility map (index-only scans)
        # and statistics a little later in production.
        cursor.execute(
            "VACUUM (ANALYZE) jobs_job, jobs_step, jobs_event, jobs_failure, jobs_jobprovider"
        )
    from jobs.models import Step

    print(f"rows: {Job.objects.count():,} jobs, {Step.objects.count():,} steps")
    started = time.perf_counter()
    cells = rollup.rebuild()
    print(f"rollup rebuilt from all rows: {cells:,} rows in {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) jobs_dashboardrollup, jobs_dashboarddirtyhour")
    timings = []
    for hours_ago in range(3, 8):  # one dirty hour each, as a batch of late events leaves it
        hour = hour_floor(timezone.now() - timedelta(hours=hours_ago))
        DashboardDirtyHour.objects.mark([hour])
        started = time.perf_counter()
        assert rollup.refresh(hour, hour + rollup.HOUR) == []
        timings.append((time.perf_counter() - started) * 1000)
    print(f"refresh of one dirty hour: median {statistics.median(timings):.1f} ms")
    for key in args.ranges.split(","):
        now = timezone.now()
        window, _errors = parse_window({"range": key}, now)
        panels = {
            "headlines": lambda w=window, n=now: headlines.headlines(w, n),
            "step results": lambda w=window: charts.step_results(w),
            "failures by code": lambda w=window: charts.failures_by_code(w),
            "failures by error type": lambda w=window: charts.failures_by_error_type(w),
            "provider failure rate": lambda w=window: provider_health.panel(w),
            "planner (counts + rate)": lambda w=window: charts.planner(w),
            "durations p50/p95": lambda w=window: charts.durations(w),
            "open escalations": lambda n=now: charts.open_escalations(n),
        }
        print(f"\nrange {key} ({window.bucket} buckets), {args.runs} runs each:")
        print(f"  {'panel':28} {'median ms':>10} {'p95 ms':>10}")
        for name, function in panels.items():
            function()  # warm the caches once
            median, p95 = measure(function, args.runs)
            print(f"  {name:28} {median:10.1f} {p95:10.1f}")
    from django.contrib.auth.models import User
    from django.test import Client

    account, _created = User.objects.get_or_create(username="bench-staff", is_staff=True)
    client = Client()
    client.force_login(account)
    filters = ["", *(f"&{query}" for query in args.filters.split(",") if query)]
    ranges = args.ranges.split(",")
    for path in [f"/dashboard/?range={key}{query}" for query in filters for key in ranges]:
        median, p95 = measure(lambda p=path: client.get(p), max(5, args.runs // 2))
        print(f"\nwhole page {path}: median {median:.1f} ms, p95 {p95:.1f} ms")


if __name__ == "__main__":
    main()
