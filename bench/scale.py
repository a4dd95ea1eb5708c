"""Scale: millions of events through the real ingest path, then the pages and retention.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/traceviz_scale \\
        .venv/bin/python bench/scale.py load --events 1000000      # resumable: run it again
    ... bench/scale.py measure                                     # pages and sizes, now
    ... bench/scale.py retention --keep-days 7                     # then drop the older half
    ... bench/scale.py all --events 10000000 --measure-at 1000000  # all of it in one go

``load`` sends jobs in chunks of ``--chunk-jobs`` from ``--workers`` processes, each calling
``store_batch`` (what the event API and /v1/traces call after parsing the body) on its own
connection. With ``--respond-async`` the workers only append (what a request with
``Prefer: respond-async`` does) and ``--projectors`` ``manage.py run_projector`` processes fold
beside them; the load ends when nothing is left dirty, and prints how long that took.
The mix (seeded per chunk, so a resumed chunk sends the same events again and
idempotency drops what was stored): the load bench's jobs (2 to 5 nodes, retries, 30 % failed
finishes, auth and internal errors that open escalations) with four providers and their models,
one job in ten with planner parse failures and a degradation, one in twenty sent as an
OpenTelemetry trace (through the OTLP mapping) instead. Each job arrives in two halves, as a
runner flushing mid-run sends it, so half of every job goes through the incremental projection.
Receive times run over ``--days`` days ending now, so retention has whole days to drop. Before
``retention`` runs, support resolves the escalations older than ``--keep-days`` (a job with an
unresolved escalation is kept); ``--keep-escalations`` leaves them open. During the load,
support answers each escalation within a day of its trigger (the bench resolves them in one
UPDATE after each chunk, outside the chunk's timed ingest), so the queue holds about a day of
them.

Progress and what each chunk measured are kept in ``bench/.scale-<database>.json``: a run that
stops (Ctrl-C, a crash, a reboot) goes on from the last finished chunk.

Figures printed: ingest rate per tenth of the load (does it sag as the tables grow?), database
size per million events (tables and indexes), p50/p95 of the pages, and retention's time and
what it leaves behind (dead rows, sizes).
"""

import argparse
import gc
import json
import multiprocessing
import os
import queue as queue_module
import random
import signal
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

PROVIDERS = {
    "openai": ["gpt-4.1", "gpt-4.1-mini"],
    "anthropic": ["claude-sonnet-4", "claude-haiku-4"],
    "google": ["gemini-2.5-pro"],
    "mistral": ["mistral-large"],
}
EVENTS_PER_JOB = 10  # about: what the mix below averages, to size the chunk count
BATCH_EVENTS = 500
SMALL_JOB, BIG_JOB, HUGE_JOB = "scale-steps-10", "scale-steps-1000", "scale-steps-10000"
# The big job's second run (failing at another step), for the compare page.
BIG_JOB_AGAIN = "scale-steps-1000-again"
# The load's support team answers every escalation within a day of its trigger (receive time),
# so the queue holds about a day of them, not every escalation ever opened.
SUPPORT_ANSWERS_WITHIN = timedelta(days=1)


def state_path(database: str) -> Path:
    return ROOT / "bench" / f".scale-{database}.json"


def load_state(database: str) -> dict:
    path = state_path(database)
    if path.exists():
        return json.loads(path.read_text())
    return {"start": None, "chunks": {}, "measures": [], "retention": []}


def save_state(database: str, state: dict) -> None:
    path = state_path(database)
    path.with_suffix(".tmp").write_text(json.dumps(state))
    path.with_suffix(".tmp").replace(path)


def setup() -> None:
    import django

    django.setup()


def database_name() -> str:
    from django.db import connection

    return connection.settings_dict["NAME"]


# --- the mix ------------------------------------------------------------------------------------


def chunk_jobs(chunk: int, jobs: int, received: datetime) -> tuple[list[list[dict]], list]:
    """The chunk's jobs as event lists (two halves each) and its OTLP traces."""
    from load import job_events
    from otlp import trace_spans

    rng = random.Random(chunk)
    halves, traces = [], []
    for n in range(jobs):
        job_id = f"scale-{chunk:06d}-{n:03d}"
        start = received - timedelta(seconds=rng.randint(5, 600))
        if rng.random() < 0.05:
            traces.append(trace_spans(chunk * 1000 + n, rng.randint(3, 12), start, rng))
            continue
        items = job_events(job_id, start, rng)
        provider = rng.choice(list(PROVIDERS))
        items[0]["payload"] |= {"provider": provider, "model": rng.choice(PROVIDERS[provider])}
        if rng.random() < 0.1:
            items[1:1] = planner_events(job_id, items[0], rng)
        middle = len(items) // 2
        halves.append(items[:middle])
        halves.append(items[middle:])
    return halves, traces


def planner_events(job_id: str, first: dict, rng: random.Random) -> list[dict]:
    payload = {k: first["payload"][k] for k in ("provider", "model")}
    at = first["ts"]
    out = [
        {
            "type": "graph.next_step.parse_invalid",
            "job_id": job_id,
            "ts": at,
            "payload": payload
            | {
                "cycle": 1,
                "attempt": attempt,
                "parse_error_type": rng.choice(["json_decode", "schema"]),
                "validation_errors": ["next_step: field required"],
                "raw_output_preview": '{"step": "deploy"}',
            },
        }
        for attempt in (1, 2)
    ]
    if rng.random() < 0.5:
        out.append(
            {
                "type": "graph.next_step.degraded",
                "job_id": job_id,
                "ts": at,
                "payload": payload
                | {"cycle": 1, "attempts": 2, "reason": "next_step_parse_failed"},
            }
        )
    return out


# --- load ---------------------------------------------------------------------------------------


def send_chunk(chunk: int, jobs: int, received: datetime, project: bool) -> int:
    """Store the chunk's events: first halves, then second halves, in batches; returns how
    many events were stored. Without ``project`` they are only appended (``respond-async``)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from jobs.contract import bodies, otlp
    from jobs.ingest.store import store_batch

    halves, traces = chunk_jobs(chunk, jobs, received)
    stored = 0
    for round_ in (halves[0::2], halves[1::2]):
        items = [item for half in round_ for item in half]
        for start in range(0, len(items), BATCH_EVENTS):
            batch = bodies.parse_items(items[start : start + BATCH_EVENTS], max_events=10_000)
            stored += store_batch(batch, received_at=received, project=project).stored
    if traces:
        request = ExportTraceServiceRequest()
        for spans in traces:
            scope = request.resource_spans.add().scope_spans.add()
            scope.spans.extend(spans)
        batch = otlp.to_batch(request, 10_000).batch
        stored += store_batch(batch, received_at=received, project=project).stored
    return stored


def worker(
    queue, done, chunks: list[int], jobs: int, start: float, span: float, total: int, project: bool
):
    setup()
    from django.db import connection

    for chunk in chunks:
        if chunk in done:
            continue
        received = datetime.fromtimestamp(start + span * chunk / total, UTC)
        began = time.perf_counter()
        stored = send_chunk(chunk, jobs, received, project)
        queue.put((chunk, stored, time.perf_counter() - began, time.time()))
        support_resolves(received - SUPPORT_ANSWERS_WITHIN)  # not counted as ingest time
    connection.close()
    queue.put(None)


def load(args) -> None:
    setup()
    from django.core.management import call_command
    from pgstats import analyze_periodically

    call_command("migrate", "--noinput", verbosity=0)
    database = database_name()
    state = load_state(database)
    if state["start"] is None:
        state["start"] = time.time() - args.days * 86400
        state["days"] = args.days
        state["chunk_jobs"] = args.chunk_jobs
        save_state(database, state)
    jobs = state["chunk_jobs"]
    # The chunk count (and so each chunk's receive time) follows the whole load's size; a
    # milestone (--stop-at) stops early, in chunk order.
    total = state.setdefault("total_chunks", max(1, args.events // (jobs * EVENTS_PER_JOB)))
    done = {int(chunk) for chunk in state["chunks"]}
    stored = sum(chunk["events"] for chunk in state["chunks"].values())
    last = total
    if args.stop_at:
        last = min(total, max(1, round(total * args.stop_at / args.events)))
    todo = [chunk for chunk in range(last) if chunk not in done]
    print(f"load: {stored:,} events stored before; {len(todo)} of {total} chunks to go", flush=True)
    if not todo:
        return
    span = time.time() - state["start"]
    from django.db import connections

    connections.close_all()  # the workers fork: each opens its own connection
    stop = analyze_periodically(os.environ["DATABASE_URL"], every=60.0)
    queue = multiprocessing.Queue()
    project = not args.respond_async
    processes = [
        multiprocessing.Process(
            target=worker,
            args=(queue, done, todo[w :: args.workers], jobs, state["start"], span, total, project),
        )
        for w in range(args.workers)
    ]
    projectors = [
        subprocess.Popen([sys.executable, "manage.py", "run_projector"], cwd=ROOT)
        for _ in range(0 if project else args.projectors)
    ]
    for process in processes:
        process.start()
    running, began, last_print = len(processes), time.perf_counter(), 0.0
    try:
        while running:
            try:
                message = queue.get(timeout=5)
            except queue_module.Empty:
                if dead := [p.exitcode for p in processes if p.exitcode not in (None, 0)]:
                    sys.exit(f"load: a worker died (exit code {dead[0]}); run load again to resume")
                continue
            if message is None:
                running -= 1
                continue
            chunk, events, seconds, ended = message
            state["chunks"][str(chunk)] = {"events": events, "seconds": seconds, "end": ended}
            stored += events
            if time.perf_counter() - last_print > 10 or not running:
                save_state(database, state)
                last_print = time.perf_counter()
                rate = sum(c["events"] for c in recent(state, 20)) / max(
                    1e-9, sum(c["seconds"] for c in recent(state, 20))
                )
                print(
                    f"  {stored:,} events, {len(state['chunks'])}/{total} chunks, "
                    f"{rate * args.workers:,.0f} events/s now, "
                    f"{time.perf_counter() - began:,.0f} s"
                    + (f"; {dirty_jobs():,} jobs dirty" if projectors else ""),
                    flush=True,
                )
        appended = time.perf_counter() - began
        while projectors and dirty_jobs():
            if dead := [p.returncode for p in projectors if p.poll() is not None]:
                sys.exit(f"load: a projector died (exit code {dead[0]}); run load again")
            time.sleep(2)
        state.setdefault("runs", []).append(
            {
                "respond_async": not project,
                "events": sum(c["events"] for c in state["chunks"].values() if c["end"] > began),
                "appended_seconds": appended,
                "projected_seconds": time.perf_counter() - began,
            }
        )
        if projectors:
            print(
                f"load: appended in {appended:,.0f} s, projected (nothing dirty) after "
                f"{time.perf_counter() - began:,.0f} s",
                flush=True,
            )
    finally:
        save_state(database, state)
        stop.set()
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.terminate()
        for projector in projectors:
            projector.send_signal(signal.SIGTERM)
            projector.wait(timeout=60)
    print_rates(state, args.workers)


def dirty_jobs() -> int:
    """How many jobs wait for a projector (not the oldest mark's age: the load's receive times,
    which the marks take, are spread over past days)."""
    from jobs.models import ProjectionMark

    return ProjectionMark.objects.dirty().count()


def recent(state: dict, count: int) -> list[dict]:
    return sorted(state["chunks"].values(), key=lambda c: c["end"])[-count:]


def print_rates(state: dict, workers: int) -> None:
    """Events/s per tenth of the chunks (in load order): each worker is busy all the time, so
    the rate is workers x events / busy seconds."""
    chunks = [state["chunks"][key] for key in sorted(state["chunks"], key=int)]
    if len(chunks) < 10:
        return
    tenth = len(chunks) // 10
    print("ingest rate per tenth of the load (events/s):")
    rates = []
    for part in range(10):
        window = chunks[part * tenth : (part + 1) * tenth]
        events = sum(c["events"] for c in window)
        rates.append(workers * events / sum(c["seconds"] for c in window))
        before = sum(c["events"] for c in chunks[: part * tenth])
        print(f"  from {before:>12,} events: {rates[-1]:8,.0f}")
    print(f"  last tenth / first tenth: {rates[-1] / rates[0]:.2f}")


# --- measure ------------------------------------------------------------------------------------


def plant_jobs() -> None:
    """A 10-step, a 1,000-step and a 10,000-step job, and the 1,000-step job's second run (it
    fails one step earlier), sent through ingest like any other."""
    from jobs.contract import bodies
    from jobs.ingest.store import store_batch
    from jobs.models import Job

    planted = ((SMALL_JOB, 10, 10), (BIG_JOB, 1000, 1000), (BIG_JOB_AGAIN, 1000, 999))
    for job_id, steps, failing in (*planted, (HUGE_JOB, 10_000, 10_000)):
        if Job.objects.filter(job_id=job_id).exists():
            continue
        start = datetime.now(UTC) - timedelta(hours=2)
        job = {"workflow": "scale-planted"}
        items = [{"type": "job_started", "job_id": job_id, "ts": start.isoformat(), "payload": job}]
        for n in range(steps):
            at = (start + timedelta(seconds=n * min(1.0, 7000 / steps))).isoformat()
            result = "permanent_failure" if n == failing - 1 else "success"
            for kind, extra in (("node_started", {}), ("node_finished", {"result_type": result})):
                payload = {"node_id": f"n{n}", "attempt": 1, **extra}
                if result != "success" and kind == "node_finished":
                    payload |= {"reason": "upstream said no", "failure_code": "adapter_error"}
                items.append({"type": kind, "job_id": job_id, "ts": at, "payload": payload})
        for begin in range(0, len(items), 5000):
            store_batch(bodies.parse_items(items[begin : begin + 5000], max_events=10_000))


def sizes() -> dict[str, int]:
    """Bytes of every jobs_* table (partitions included), heap and indexes apart."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(pg_table_size(c.oid)), 0), "
            "coalesce(sum(pg_indexes_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname LIKE 'jobs\\_%'"
        )
        tables, indexes = cursor.fetchone()
    return {"tables": int(tables), "indexes": int(indexes)}


def timed(client, url: str, runs: int) -> tuple[float, float] | None:
    times = []
    for _ in range(runs + 1):
        began = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            return None
    times = sorted(times[1:])  # the first one warms caches
    return statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)]


def dashboard_panels(key: str, runs: int, now: datetime) -> dict[str, tuple[float, float]]:
    """Server time of each part of the dashboard's request for one range ending ``now`` (what
    bounds its figure): the rollup plan, the step and LLM panels' one fetch, then each other
    panel."""
    from jobs.dashboard import charts, headlines, llm_usage, provider_health, rollup
    from jobs.dashboard.window import parse_window

    window, _errors = parse_window({"range": key}, now)
    kinds = [rollup.Kind.FAILURE_CODE, rollup.Kind.ERROR_TYPE, rollup.Kind.DURATION]
    kinds += [rollup.Kind.SEGMENT, rollup.Kind.JOBS, rollup.Kind.LLM]

    def step_panels():
        plan = window.plan()
        rollup.prefetch(plan, kinds)
        for panel in (charts.step_results, charts.failures_by_code, charts.durations):
            panel(window, plan)
        charts.failures_by_error_type(window, plan)
        llm_usage.panels(window, plan)

    parts = {
        "rollup plan (dirty hours)": window.plan,
        "step and LLM panels": step_panels,
        "planner panels": lambda: charts.planner(window),
        "provider failure rate": lambda: provider_health.panel(window, window.plan()),
        "headlines": lambda: headlines.headlines(window, now, window.plan()),
        "open escalations": lambda: charts.open_escalations(now),
    }
    timings = {}
    for name, part in parts.items():
        times = []
        for _ in range(runs + 1):
            began = time.perf_counter()
            part()
            times.append((time.perf_counter() - began) * 1000)
        times = sorted(times[1:])
        timings[name] = (statistics.median(times), times[max(0, round(0.95 * len(times)) - 1)])
    return timings


def pages(runs: int, last: datetime | None) -> dict[str, list[float] | None]:
    """Each page's p50 / p95; ``last``: the load's last job start, where the dashboard is
    also timed as a live one would read it."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    from jobs.dashboard.window import RANGES, preset_start

    call_command("collectstatic", interactive=False, verbosity=0)  # as in production
    gc.collect()  # and frozen, as traceviz/wsgi.py does once it has loaded
    gc.freeze()
    user, _ = User.objects.get_or_create(username="scale-bench", is_staff=True)
    client = Client()
    client.force_login(user)
    urls = {
        "list: needs attention (default)": "/",
        "list: status=failed": "/?status=failed",
        # q= is the id lookup box (job id prefix, correlation or session id); reason= searches
        # the steps' reasons (the load's failures say "<node>: upstream said no").
        "list: id lookup q=upstream": "/?q=upstream",
        "list: reason search 'upstream'": "/?reason=upstream",
        "list: provider=anthropic": "/?provider=anthropic",
        "list: all, model=CLAUDE-SONNET-4 (case)": "/?show=all&model=CLAUDE-SONNET-4",
        "job page, 10 steps": f"/jobs/{SMALL_JOB}/",
        "job page, 1,000 steps": f"/jobs/{BIG_JOB}/",
        "job page, 10,000 steps": f"/jobs/{HUGE_JOB}/",
        "compare, 1,000 steps each": f"/compare/?a={BIG_JOB_AGAIN}&b={BIG_JOB}",
        "compare, the previous run picked": f"/compare/?a={BIG_JOB_AGAIN}",
        "failure groups 24 h (default)": "/failures/",
        "failure groups 7 d": "/failures/?range=7d",
        "dashboard 24 h": "/dashboard/?range=24h",
        "dashboard 7 d": "/dashboard/?range=7d",
    }
    # Once the load has stopped, the current hour holds no job and the presets read nothing
    # raw; a live dashboard reads the jobs of its current hour so far. The same windows as
    # they were at the load's last job start, whose hour holds the load's last jobs.
    if last is not None:
        for name, key in (("24 h", "24h"), ("7 d", "7d")):
            since = preset_start(last - RANGES[key], key)
            urls[f"dashboard {name} at the last job"] = custom_range(since, last)
        # The 7 days to the second, as a custom range takes them: the first hour partial too.
        urls["dashboard 7 d there, exact start"] = custom_range(last - timedelta(days=7), last)
    return {name: url and timed(client, url, runs) for name, url in urls.items()}


def custom_range(since: datetime, until: datetime) -> str:
    from jobs.dashboard.window import iso

    return "/dashboard/?" + urlencode({"range": "custom", "since": iso(since), "until": iso(until)})


def machine_speed() -> float:
    """Seconds a fixed Python loop takes now (this shared machine's speed moves by 1.7x)."""
    began, total = time.perf_counter(), 0
    for number in range(10_000_000):
        total += number
    return time.perf_counter() - began


def vacuum() -> float:
    """VACUUM (ANALYZE) every table, as autovacuum would have during the load on a server that
    runs it (this machine kind's PostgreSQL does not): it sets the visibility maps index-only
    scans read, and clears the resolved escalations' old row versions. Returns seconds."""
    import psycopg

    began = time.perf_counter()
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
    return time.perf_counter() - began


def measure(args) -> None:
    setup()
    from django.db.models import Max
    from django.utils import timezone

    from jobs.dashboard import rollup
    from jobs.models import Event, Job

    database = database_name()
    state = load_state(database)
    plant_jobs()
    events, jobs = Event.objects.count(), Job.objects.count()
    # The load leaves its hours dirty: the refresh task's work (the rollup and planner tables)
    # comes first, so the VACUUM (ANALYZE) after it gives the planner their statistics, as
    # autovacuum would after such inserts (before, the first measure of a load planned them
    # as empty: the 7 d planner panel took 95 ms, 57 after an ANALYZE).
    refreshed = rollup.refresh_pending(max_batches=10_000)
    print(
        f"measure at {events:,} events, {jobs:,} jobs (refreshed {refreshed:,} dirty hours, "
        f"then VACUUM: {vacuum():,.0f} s)"
    )
    size = sizes()
    speed = machine_speed()
    print(f"  machine: a 10^7-step Python loop took {speed:.2f} s (before the pages)")
    print(
        f"  database: tables {size['tables'] / 2**20:,.0f} MiB, indexes "
        f"{size['indexes'] / 2**20:,.0f} MiB; per million events "
        f"{(size['tables'] + size['indexes']) / 2**20 / max(events / 1e6, 1e-9):,.0f} MiB"
    )
    print(f"  {'page':<34} {'p50 ms':>8} {'p95 ms':>8}")
    # The load's last job start: the "at the last job" pages and the parts are timed there,
    # where the current hour's jobs are read raw, as on a live dashboard.
    last = Job.objects.aggregate(last=Max("started_at"))["last"]
    timings = pages(args.runs, last)
    for name, timing in timings.items():
        shown = "n/a (no such page or not 200)"
        if timing is not None:
            shown = f"{timing[0]:8.1f} {timing[1]:8.1f}"
        print(f"  {name:<34} {shown}")
    panels = {}
    now = last or timezone.now()
    for key in ("24h", "7d"):
        panels[key] = dashboard_panels(key, max(5, args.runs // 2), now)
        print(f"  dashboard {key} at {now:%Y-%m-%d %H:%M:%S}, by part:")
        for name, (median, p95) in panels[key].items():
            print(f"    {name:<32} {median:8.1f} {p95:8.1f}")
    after = machine_speed()
    print(f"  machine: the same loop took {after:.2f} s (after the pages)")
    state["measures"].append(
        {
            "events": events,
            "jobs": jobs,
            "sizes": size,
            "pages": timings,
            "dashboard_parts": panels,
            "loop_seconds": [speed, after],
            "at": time.time(),
        }
    )
    save_state(database, state)


# --- retention ----------------------------------------------------------------------------------


def dead_rows() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables "
            "WHERE relname LIKE 'jobs\\_%'"
        )
        return int(cursor.fetchone()[0])


def support_resolves(before: datetime) -> int:
    """Support answers the escalations triggered before ``before``. One UPDATE: a bench
    shortcut for the queue's resolve action, which writes an audit entry and a notification
    per escalation; returns how many. Rows another worker's resolve or ingest holds are left
    for the next call: two workers updating the same rows in different orders deadlocked."""
    from django.db import transaction
    from django.utils import timezone

    from jobs.models import Escalation

    stale = Escalation.objects.filter(triggered_at__lt=before).exclude(
        status=Escalation.Status.RESOLVED
    )
    with transaction.atomic():
        free = stale.select_for_update(skip_locked=True).order_by("pk")
        return Escalation.objects.filter(pk__in=list(free.values_list("pk", flat=True))).update(
            status=Escalation.Status.RESOLVED, resolved_at=timezone.now()
        )


def retention(args) -> None:
    setup()
    from django.db import connection
    from django.utils import timezone

    from jobs.ingest.retention import apply_retention
    from jobs.models import Event, Job

    database = database_name()
    state = load_state(database)
    if not args.keep_escalations:
        began = time.perf_counter()
        resolved = support_resolves(timezone.now() - timedelta(days=args.keep_days))
        print(
            f"support resolved {resolved:,} escalations of jobs older than {args.keep_days} days "
            f"({time.perf_counter() - began:,.1f} s, not counted in retention's time)"
        )
    before = {"events": Event.objects.count(), "jobs": Job.objects.count(), **sizes()}
    began, runs, total = time.perf_counter(), 0, None
    while True:
        result = apply_retention(args.keep_days)
        runs += 1
        total = result if total is None else total
        if total is not result:
            for name in ("jobs", "events", "escalations", "days", "moved"):
                setattr(total, name, getattr(total, name) + getattr(result, name))
        if not (result.jobs or result.days or result.escalations):
            break
    seconds = time.perf_counter() - began
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    after = {"events": Event.objects.count(), "jobs": Job.objects.count(), **sizes()}
    dead = dead_rows()
    print(
        f"retention (keep {args.keep_days} days): {seconds:,.1f} s in {runs} runs; "
        f"{total.days} days dropped whole, {total.jobs:,} jobs deleted, {total.moved:,} kept "
        f"jobs moved"
    )
    for name in ("events", "jobs"):
        print(f"  {name}: {before[name]:,} -> {after[name]:,}")
    for name in ("tables", "indexes"):
        print(f"  {name}: {before[name] / 2**20:,.0f} MiB -> {after[name] / 2**20:,.0f} MiB")
    print(f"  dead rows left for VACUUM (bloat): {dead:,}")
    state["retention"].append(
        {"seconds": seconds, "before": before, "after": after, "dead": dead, "at": time.time()}
    )
    save_state(database, state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["load", "measure", "retention", "all"])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--measure-at", default="1000000", help="comma-separated event counts")
    parser.add_argument("--stop-at", type=int, default=0, help="load: stop after about N events")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-jobs", type=int, default=200)
    parser.add_argument(
        "--respond-async",
        action="store_true",
        help="load: append only; --projectors run_projector processes fold beside the workers",
    )
    parser.add_argument("--projectors", type=int, default=2)
    parser.add_argument("--days", type=int, default=14)
    parser.add_argument("--keep-days", type=int, default=7)
    parser.add_argument(
        "--keep-escalations",
        action="store_true",
        help="retention: leave the old jobs' escalations unresolved (their jobs are kept)",
    )
    parser.add_argument("--runs", type=int, default=20, help="requests per page")
    args = parser.parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres://", "postgresql://")):
        sys.exit("bench/scale.py measures PostgreSQL: set DATABASE_URL=postgres://...")
    if args.command == "all":
        target = args.events
        for milestone in sorted(int(n) for n in args.measure_at.split(",") if n):
            if milestone < target:
                args.stop_at = milestone
                run(load, args)
                run(measure, args)
        args.stop_at = 0
        run(load, args)
        run(measure, args)
        run(retention, args)
    else:
        run({"load": load, "measure": measure, "retention": retention}[args.command], args)


def run(command, args) -> None:
    """Each step in a fresh process, so the load's workers fork from a process without open
    connections."""
    process = multiprocessing.Process(target=command, args=(args,))
    process.start()
    process.join()
    if process.exitcode:
        sys.exit(process.exitcode)


if __name__ == "__main__":
    main()
