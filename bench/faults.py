"""Faults under load: the database restarted, the broker stopped, a worker killed mid-task.

(a) PostgreSQL is stopped for --outage seconds in the middle of a load run (bench/load.py's
    producers: resends, shuffling, retries): ingest must answer 503 with Retry-After (never
    500) while it is down, the producers recover, and afterwards every acknowledged event is
    stored exactly once and every job's rows equal its replay.
(b) Redis (the Celery broker) is stopped and started during a run, with a Celery worker and an
    escalation webhook (a local http.server that counts deliveries per notification id, and
    drops a resend whose Idempotency-Key it has processed, as a receiver should): ingest keeps
    accepting, and after the broker is back and the outbox sweep has run, every notification
    is delivered exactly once as the receiver sees it.
(c) The worker process running a delivery is killed (SIGKILL) while the webhook holds the
    request unanswered: the task message is redelivered (acks late) and runs again, and the
    notification is delivered once, after its lease lapses.

By default it restarts the machine's PostgreSQL and Redis, briefly, always starting them again
(try/finally). With --private it starts a PostgreSQL cluster (port --private-pg-port) and a
Redis (on a unix socket) of its own in a temporary directory, faults those and removes them at
the end, so a machine whose services others use is left alone. Traffic goes to 127.0.0.1 only;
every loop is bounded in count and time.

    .venv/bin/python bench/faults.py --seconds 40 --producers 8
    .venv/bin/python bench/faults.py --private --port 8217   # shared services untouched
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load  # bench/load.py, beside this file

ROOT = load.ROOT
REDIS_START = [
    "redis-server",
    "--daemonize",
    "yes",
    "--bind",
    "127.0.0.1",
    "-::1",
    "--port",
    "6379",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    "/var/lib/redis",
    "--logfile",
    "/var/log/redis/ci.log",
]
PG = ["pg_ctlcluster", "--skip-systemctl-redirect", "15", "main"]
PG_READY = ["pg_isready", "-h", "127.0.0.1", "-p", "5432", "-q"]
REDIS_CLI = ["redis-cli", "-p", "6379"]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
NOTIFY_LEASE = 10  # seconds; the minimum the settings allow, so (c) finishes soon


# --- services ------------------------------------------------------------------------------------


def wait_until(check, seconds: float, step: float = 0.25) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


def postgres_ready() -> bool:
    return subprocess.run(PG_READY).returncode == 0


def redis_ready() -> bool:
    done = subprocess.run([*REDIS_CLI, "ping"], capture_output=True, text=True)
    return done.stdout.strip() == "PONG"


def as_postgres(*command: str) -> list[str]:
    """``command`` as the postgres user (pg_ctl and initdb refuse root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else list(command)


def start_private_services(port: int) -> Path:
    """A PostgreSQL cluster on 127.0.0.1:``port`` and a Redis on a unix socket, both in a new
    temporary directory, and the module's service commands pointed at them. Returns the
    directory (``stop_private_services`` removes it)."""
    global PG, PG_READY, REDIS_CLI, REDIS_START
    home = Path(tempfile.mkdtemp(prefix="traceviz-faults-services-"))
    home.chmod(0o755)
    data = home / "pg"
    if os.geteuid() == 0:
        shutil.chown(home, "postgres")
    subprocess.run(
        as_postgres(str(PG_BIN / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"),
        check=True,
        capture_output=True,
        timeout=120,
    )
    options = f"-p {port} -c listen_addresses=127.0.0.1 -k {home} -c fsync=off"
    PG = [
        *as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(home / "pg.log")),
    ]
    PG = [*PG, "-o", options, "-w"]
    PG_READY = ["pg_isready", "-h", "127.0.0.1", "-p", str(port), "-q"]
    socket = home / "redis.sock"
    REDIS_CLI = ["redis-cli", "-s", str(socket)]
    REDIS_START = [
        "redis-server",
        "--daemonize",
        "yes",
        "--port",
        "0",
        "--unixsocket",
        str(socket),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(home),
        "--logfile",
        str(home / "redis.log"),
    ]
    subprocess.run([*PG, "start"], check=True, timeout=60, capture_output=True)
    subprocess.run(REDIS_START, check=True, timeout=30)
    wait_until(redis_ready, 30)
    return home


def stop_private_services(home: Path) -> None:
    subprocess.run([*PG, "stop", "-m", "fast"], timeout=60, capture_output=True)
    subprocess.run([*REDIS_CLI, "shutdown", "nosave"], timeout=30, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def postgres_outage(seconds: float) -> tuple[float, float]:
    """Stop PostgreSQL for ``seconds``; always started again. Returns the outage window."""
    began = time.monotonic()
    try:
        subprocess.run([*PG, "stop", "-m", "fast"], check=True, timeout=60)
        time.sleep(seconds)
    finally:
        subprocess.run([*PG, "start"], check=True, timeout=60)
        wait_until(postgres_ready, 30)
    return began, time.monotonic()


def redis_outage(seconds: float) -> tuple[float, float]:
    """Stop Redis for ``seconds``; always started again. Returns the outage window."""
    began = time.monotonic()
    try:
        subprocess.run([*REDIS_CLI, "shutdown", "nosave"], timeout=30)
        wait_until(lambda: not redis_ready(), 10)
        time.sleep(seconds)
    finally:
        if not redis_ready():
            subprocess.run(REDIS_START, check=True, timeout=30)
        wait_until(redis_ready, 30)
    return began, time.monotonic()


class Webhook(ThreadingHTTPServer):
    """Counts deliveries per notification id as a receiver processes them: a POST whose
    Idempotency-Key (the notification id) it has processed before is dropped, and counted in
    ``resent`` (traceviz sends again when it could not record an outcome); one without the key
    is processed every time. While ``hold`` is set, the next request is read and then left
    unanswered until ``release`` (and not counted: nothing was processed)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), WebhookHandler)
        self.deliveries: Counter = Counter()
        self.resent: Counter = Counter()
        self.processed_keys: set[str] = set()
        self.lock = threading.Lock()
        self.hold = threading.Event()
        self.held = threading.Event()
        self.release = threading.Event()
        self.held_id: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        server = self.server
        if server.hold.is_set():
            server.hold.clear()
            server.held_id = body["notification_id"]
            server.held.set()
            server.release.wait(timeout=120)
            self.close_connection = True
            return  # no answer: the sender died waiting; the request was never processed
        key = self.headers.get("Idempotency-Key")
        with server.lock:
            if key is not None and key in server.processed_keys:
                server.resent[body["notification_id"]] += 1
            else:
                if key == str(body["notification_id"]):
                    server.processed_keys.add(key)
                server.deliveries[body["notification_id"]] += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def start_worker(env: dict, log_path: Path) -> subprocess.Popen:
    log = log_path.open("w")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "traceviz",
            "worker",
            "-l",
            "info",
            "-c",
            "1",
            "-n",
            f"faults-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


TASK_LINE = re.compile(r"deliver_notification\[([0-9a-f-]+)\] (received|succeeded|failed|raised)")


def unfinished_task(log: str) -> str | None:
    """The task id the worker log shows received and not (yet) finished, the latest first."""
    open_tasks: dict[str, None] = {}
    for task_id, what in TASK_LINE.findall(log):
        if what == "received":
            open_tasks[task_id] = None
        else:
            open_tasks.pop(task_id, None)
    return next(reversed(open_tasks), None)


def pool_children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


# --- scenarios -----------------------------------------------------------------------------------


def statuses_between(stats: load.Stats, window: tuple[float, float]) -> Counter:
    began, ended = window
    with stats.lock:
        return Counter(status for at, status in stats.timeline if began <= at <= ended + 1.0)


def print_load(stats: load.Stats, elapsed: float, window: tuple[float, float], what: str):
    during = statuses_between(stats, window)
    shown = ", ".join(f"{status}: {n}" for status, n in sorted(during.items())) or "none"
    print(f"  outage of {window[1] - window[0]:.1f} s; answers during the {what} outage: {shown}")
    load.report(stats, elapsed, load.verify(stats))


def load_with_outage(args, url: str, token: str, outage, prefix: str):
    """Run the producers for ``args.seconds`` with ``outage(args.outage)`` a third of the way in;
    returns the stats, the elapsed time and the outage's (start, end) window."""
    window = [0.0, 0.0]

    def during(_stats):
        time.sleep(args.seconds / 3)
        window[:] = outage(args.outage)

    stats, elapsed = load.run_producers(
        url,
        token,
        args.seconds,
        args.producers,
        args.seed,
        args.batch,
        args.resend,
        during,
        prefix=prefix,
    )
    return stats, elapsed, tuple(window)


def scenario_database(args, url: str, token: str) -> bool:
    print(
        f"\n(a) PostgreSQL stopped for {args.outage:g} s in the middle of a "
        f"{args.seconds:g} s run, {args.producers} producers"
    )
    stats, elapsed, window = load_with_outage(args, url, token, postgres_outage, "pgfault")
    print_load(stats, elapsed, window, "database")
    return statuses_between(stats, tuple(window)).get("500", 0) == 0


def notifications_settled() -> bool:
    from jobs.models import Notification

    return not Notification.objects.filter(status__in=["pending", "sending"]).exists()


def sweep_until_settled(seconds: float) -> bool:
    """Run the outbox sweep (as beat would) until nothing is pending; bounded."""
    from django.db import connection

    from jobs import tasks

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        connection.close()
        tasks.sweep_outbox()
        if wait_until(notifications_settled, 5, step=0.5):
            return True
    return False


def delivery_report(webhook: Webhook) -> tuple[int, int, int, int, int]:
    """Notifications, then those the receiver processed once, more than once, never, and the
    resends it dropped by their Idempotency-Key."""
    from jobs.models import Notification

    ids = list(Notification.objects.filter(channel="webhook").values_list("pk", flat=True))
    with webhook.lock:
        counts = dict(webhook.deliveries)
        resent = sum(webhook.resent.values())
    once = sum(1 for pk in ids if counts.get(pk) == 1)
    twice = sum(1 for pk in ids if counts.get(pk, 0) > 1)
    never = sum(1 for pk in ids if pk not in counts)
    return len(ids), once, twice, never, resent


def scenario_broker(args, url: str, token: str, webhook: Webhook) -> bool:
    print(
        f"\n(b) Redis (broker) stopped for {args.outage:g} s during a {args.seconds:g} s run, "
        "one Celery worker, webhook deliveries counted per notification id"
    )
    stats, elapsed, window = load_with_outage(args, url, token, redis_outage, "brokerfault")
    print_load(stats, elapsed, window, "broker")
    settled = sweep_until_settled(180)
    total, once, twice, never, resent = delivery_report(webhook)
    print(
        f"  notifications: {total}; delivered once: {once}, more than once: {twice}, "
        f"never: {never}; resends dropped by their Idempotency-Key: {resent} "
        f"(outbox settled: {settled})"
    )
    return settled and twice == 0 and never == 0


def scenario_worker_killed(args, url: str, token: str, webhook: Webhook, worker, log_path):
    from jobs.models import Notification

    print("\n(c) the worker process running a delivery killed with SIGKILL mid-request")
    time.sleep(3)  # let the worker finish what (b)'s sweeps queued
    webhook.hold.set()
    body = json.dumps(
        [
            {"type": "job_started", "job_id": "killfault-1", "event_id": "s"},
            {
                "type": "node_finished",
                "job_id": "killfault-1",
                "event_id": "f",
                "payload": {
                    "node_id": "n1",
                    "result_type": "retryable_failure",
                    "error_type": "auth",
                    "reason": "token expired",
                },
            },
        ]
    ).encode()
    request = load.urllib.request.Request(
        url + "/api/v1/events",
        data=body,
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    load.urllib.request.urlopen(request, timeout=60).read()
    if not webhook.held.wait(timeout=60):
        print("  the delivery never reached the webhook")
        return False
    victims = pool_children(worker.pid)
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    webhook.release.set()
    notification_id = webhook.held_id
    # The killed task: the one received last that had not finished when the kill came.
    task_id = unfinished_task(log_path.read_text(errors="replace"))
    runs = 0

    def ran_again() -> bool:
        # Acks late + reject on worker lost: the message goes back and runs in a new process.
        nonlocal runs
        runs = log_path.read_text(errors="replace").count(
            f"deliver_notification[{task_id}] received"
        )
        return runs >= 2

    wait_until(ran_again, 60, step=0.5)
    settled = sweep_until_settled(NOTIFY_LEASE + 90)
    row = Notification.objects.get(pk=notification_id)
    delivered = webhook.deliveries.get(notification_id, 0)
    print(
        f"  killed pool process {victims} while notification {notification_id} was being "
        f"sent; the task message was received {runs} times (task {task_id})"
    )
    print(
        f"  notification {notification_id}: status {row.status} after {row.attempts} claims, "
        f"delivered {delivered} time(s), {time.monotonic() - killed_at:.0f} s after the kill"
    )
    return runs >= 2 and delivered == 1 and row.status == "sent" and settled


def main() -> None:
    parser = load.arguments(__doc__.splitlines()[0])
    parser.set_defaults(seconds=40, database="traceviz_faults")
    parser.add_argument("--outage", type=float, default=6, help="seconds each service is down")
    parser.add_argument("--redis-db", type=int, default=11, help="a Redis database of its own")
    parser.add_argument(
        "--private", action="store_true", help="fault a PostgreSQL and a Redis of its own"
    )
    parser.add_argument("--private-pg-port", type=int, default=5499)
    args = parser.parse_args()
    services = None
    if args.private:
        services = start_private_services(args.private_pg_port)
        args.postgres = f"postgres://postgres@127.0.0.1:{args.private_pg_port}"
        print(f"private PostgreSQL on port {args.private_pg_port}, Redis in {services}")
    try:
        run(args, services)
    finally:
        if services is not None:
            stop_private_services(services)


def run(args, services: Path | None) -> None:
    if not (postgres_ready() and redis_ready()):
        sys.exit("PostgreSQL and Redis must both be up before the fault runs")

    if services is None:
        broker = f"redis://127.0.0.1:6379/{args.redis_db}"
    else:
        broker = f"redis+socket://{services / 'redis.sock'}?virtual_host={args.redis_db}"
    webhook = Webhook()
    threading.Thread(target=webhook.serve_forever, daemon=True).start()
    database_url = load.postgres_url(args.database, args.postgres)
    # This process sweeps the outbox onto the same broker the web and worker processes use.
    os.environ.update(
        CELERY_BROKER_URL=broker,
        TRACEVIZ_ESCALATION_WEBHOOK_URL=webhook.url,
        TRACEVIZ_NOTIFY_LEASE=str(NOTIFY_LEASE),
        TRACEVIZ_WEBHOOK_TIMEOUT="30",
    )
    load.recreate_database(args.postgres, args.database)
    subprocess.run([*REDIS_CLI, "-n", str(args.redis_db), "flushdb"], capture_output=True)
    server = worker = None
    results = {}
    log_path = Path(tempfile.mkdtemp(prefix="traceviz-faults-")) / "worker.log"
    try:
        load.setup_django(database_url)
        import traceviz.celery  # noqa: F401  (the app that reads CELERY_* settings)

        token = load.issue_token(f"faults-{args.seed}")
        # (a) without broker or webhook: ingest and the database alone.
        server, url = load.start_gunicorn(
            database_url,
            args.port,
            args.workers,
            {"CELERY_BROKER_URL": "", "TRACEVIZ_ESCALATION_WEBHOOK_URL": ""},
        )
        results["a"] = scenario_database(args, url, token)
        load.stop_process(server)

        env = {**os.environ, "DATABASE_URL": database_url, "PYTHONWARNINGS": "ignore"}
        worker = start_worker(env, log_path)
        server, url = load.start_gunicorn(database_url, args.port, args.workers)
        results["b"] = scenario_broker(args, url, token, webhook)
        results["c"] = scenario_worker_killed(args, url, token, webhook, worker, log_path)
    finally:
        for process in (server, worker):
            if process is not None:
                load.stop_process(process)
        webhook.release.set()
        webhook.shutdown()
        from django.db import connections

        connections.close_all()
        if not args.keep:
            load.recreate_database(args.postgres, args.database, drop_only=True)
        subprocess.run([*REDIS_CLI, "-n", str(args.redis_db), "flushdb"], capture_output=True)
    print(
        "\nverdicts: " + ", ".join(f"({k}) {'ok' if v else 'FAILED'}" for k, v in results.items())
    )
    print(f"worker log: {log_path}")


if __name__ == "__main__":
    main()
