"""Fuzz a running server: schemathesis cases from /api/v1/openapi.json plus hand-made hostile
inputs for every URL x every kind of caller, while producers send real events beside them.

Prints the answers by status, every 5xx (which URL, caller and input), requests that got no
answer, and the producers' verdict: acknowledged events lost or stored twice, replay parity.

    .venv/bin/python bench/fuzz.py --requests 50000 --port 8218
    .venv/bin/python bench/fuzz.py --deployed --requests 50000

It starts gunicorn on 127.0.0.1 against a PostgreSQL database of its own (--database, dropped
afterwards unless --keep); every loop is bounded by the request count. ``--deployed``: gunicorn
as deploy/ runs it (deploy/gunicorn.conf.py: preloaded app, its timeouts, worker recycling;
2 sync workers, DEBUG off), where a 500 is what a producer or a reader would see.
"""

import http.client
import itertools
import json
import os
import random
import secrets
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load  # bench/load.py, beside this file
from fuzz_inputs import JOB_ID, ROLES, auth_headers, hand_made


class Tally:
    """Answers by status and every 5xx or unanswered request, shared by the sender threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.statuses: Counter = Counter()
        self.by_source: Counter = Counter()
        self.failures: Counter = Counter()  # (source, label, role, status) -> count
        self.examples: dict = {}

    def record(self, source: str, label: str, role: str, status: str, detail: str = ""):
        with self.lock:
            self.statuses[status] += 1
            self.by_source[source] += 1
            if status.startswith("5") or not status[0].isdigit():
                key = (source, label, role, status)
                self.failures[key] += 1
                self.examples.setdefault(key, detail[:300])


# --- the world: users, sessions, a job and an escalation ----------------------------------------


def make_world() -> dict:
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import Group, User
    from django.contrib.sessions.backends.db import SessionStore

    from jobs.contract import bodies
    from jobs.ingest.store import store_batch
    from jobs.models import Escalation

    events = [
        {"type": "job_started", "job_id": JOB_ID, "event_id": "s", "payload": {"provider": "p"}},
        {"type": "node_started", "job_id": JOB_ID, "event_id": "n", "payload": {"node_id": "n1"}},
        {
            "type": "node_finished",
            "job_id": JOB_ID,
            "event_id": "f",
            "payload": {"node_id": "n1", "result_type": "retryable_failure", "error_type": "auth"},
        },
    ]
    store_batch(bodies.parse_items(events, 100))
    escalation = Escalation.objects.filter(job__job_id=JOB_ID).first()
    sessions = {}
    for role in ROLES[1:-1]:
        user = User.objects.create_user(f"fuzz-{role}", is_staff=role == "staff")
        if role in ("operator", "support", "engineer"):
            user.groups.add(Group.objects.get_or_create(name=role)[0])
        if role == "staff":
            user.groups.add(Group.objects.get(name="staff"))
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session.create()
        sessions[role] = session.session_key
    token = load.issue_token("fuzz")
    return {"esc": str(escalation.pk if escalation else 1), "sessions": sessions, "token": token}


# --- sending -------------------------------------------------------------------------------------


class Sender:
    """One keep-alive connection per thread."""

    def __init__(self, port: int):
        self.port = port
        self.local = threading.local()

    def send(self, method: str, path: str, body: bytes, headers: dict) -> tuple[str, str]:
        for attempt in range(2):
            connection = getattr(self.local, "connection", None)
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
                self.local.connection = connection
            try:
                connection.putrequest(method, path, skip_accept_encoding=True)
                body = body.encode() if isinstance(body, str) else body
                names = {name.lower() for name in headers}
                chunked = "transfer-encoding" in names
                has_length = "content-length" in names
                for name, value in headers.items():
                    connection.putheader(name, value.encode("latin-1", "replace"))
                if not (has_length or chunked):
                    connection.putheader("Content-Length", str(len(body)))
                connection.endheaders(body or None, encode_chunked=chunked)
                response = connection.getresponse()
                text = response.read()
                # A body longer than its Content-Length leaves bytes on the connection.
                closing = response.getheader("Connection", "").lower() == "close"
                if has_length or chunked or closing:
                    self.reset()
                return str(response.status), text[:300].decode("utf-8", "replace")
            except (OSError, http.client.HTTPException) as error:
                self.reset()
                if attempt == 1:
                    return f"no answer ({type(error).__name__})", str(error)
        raise AssertionError("unreachable")

    def reset(self):
        connection = getattr(self.local, "connection", None)
        if connection is not None:
            connection.close()
        self.local.connection = None


def schemathesis_cases(url: str, count: int, seed: int) -> list:
    """Cases generated from the served OpenAPI document, positive and negative, per operation."""
    import schemathesis

    @schemathesis.serializer("application/x-protobuf")
    def protobuf_body(ctx, value):
        return value if isinstance(value, bytes) else str(value).encode("utf-8")

    @schemathesis.serializer("application/x-ndjson")
    def ndjson_body(ctx, value):
        return value.encode("utf-8") if isinstance(value, str) else json.dumps(value).encode()

    from hypothesis import HealthCheck, Phase, given
    from hypothesis import settings as hypothesis_settings
    from hypothesis.errors import Unsatisfiable

    schema = schemathesis.openapi.from_url(url + "/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    per = max(1, count // (2 * len(operations)))
    cases = []
    for operation, mode in itertools.product(
        operations, (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    ):

        @hypothesis_settings(
            max_examples=per,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def collect(case):
            cases.append(case)

        try:
            collect()
        except Unsatisfiable:  # nothing to negate (an operation without parameters)
            continue
    random.Random(seed).shuffle(cases)
    return cases


def send_schemathesis(case, url: str, headers: dict) -> tuple[str, str]:
    try:
        response = case.call(base_url=url, headers=headers, timeout=120)
    except Exception as error:  # a request the client library could not even send
        return f"no answer ({type(error).__name__})", str(error)
    return str(response.status_code), response.text[:300]


def fuzz(args, url: str, world: dict, tally: Tally) -> None:
    rng = random.Random(args.seed)
    manual = hand_made(world)
    wanted = args.requests
    schema_count = int(wanted * args.schemathesis_share)
    print(f"hand-made cases: {len(manual):,} distinct; generating {schema_count:,} schemathesis")
    generated = schemathesis_cases(url, schema_count, args.seed)
    print(f"schemathesis cases: {len(generated):,}")
    # Every hand-made case once, then random ones until the count is reached.
    plan = [("manual", case) for case in manual]
    plan += [("schemathesis", case) for case in generated]
    while len(plan) < wanted:
        plan.append(("manual", rng.choice(manual)))
    rng.shuffle(plan)
    sender = Sender(args.port)
    done = itertools.count(1)
    started = time.monotonic()

    deadline = started + args.max_minutes * 60

    def run(item):
        if time.monotonic() > deadline:
            return  # out of time: the report counts what was sent
        source, case = item
        if source == "manual":
            label, method, path, body, headers, role = case
            status, detail = sender.send(method, path, body, headers)
            tally.record("hand-made", label, role, status, f"{method} {path[:150]} -> {detail}")
        else:
            role = rng.choice(("token", "operator", "anonymous", "norole"))
            headers = auth_headers(role, world)
            status, detail = send_schemathesis(case, url, headers)
            label = f"{case.method} {case.path}"
            tally.record("schemathesis", label, role, status, f"{case.path_parameters} -> {detail}")
        n = next(done)
        if n % 5000 == 0:
            print(f"  {n:,} requests, {n / (time.monotonic() - started):,.0f}/s", flush=True)

    with ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(run, plan))


def main() -> None:
    parser = load.arguments(__doc__.splitlines()[0])
    parser.set_defaults(database="traceviz_fuzz", port=8218, workers=2, producers=2, seconds=1)
    parser.add_argument("--requests", type=int, default=50_000)
    parser.add_argument("--threads", type=int, default=6)
    parser.add_argument("--schemathesis-share", type=float, default=0.3)
    parser.add_argument("--max-minutes", type=float, default=60, help="stop sending after this")
    parser.add_argument(
        "--deployed", action="store_true", help="gunicorn with deploy/gunicorn.conf.py, DEBUG off"
    )
    args = parser.parse_args()
    os.environ["SECRET_KEY"] = secrets.token_urlsafe(50)  # the server's, to sign our sessions
    os.environ["CELERY_BROKER_URL"] = ""
    database_url = load.postgres_url(args.database, args.postgres)
    load.recreate_database(args.postgres, args.database)
    server = None
    tally = Tally()
    try:
        load.setup_django(database_url)
        world = make_world()
        if args.deployed:
            # As deploy/ runs it: with DEBUG off, pages need the collected static files.
            from django.core.management import call_command

            call_command("collectstatic", "--noinput", verbosity=0)
            config = load.ROOT / "deploy" / "gunicorn.conf.py"
            deployed_env = {"DEBUG": "0", "GUNICORN_ACCESSLOG": "", "GUNICORN_LOGLEVEL": "warning"}
            server, url = load.start_gunicorn(
                database_url, args.port, args.workers, deployed_env, config=config
            )
        else:
            server, url = load.start_gunicorn(database_url, args.port, args.workers)
        started = time.monotonic()
        stats, _elapsed = load.run_producers(
            url,
            world["token"],
            args.seconds,
            args.producers,
            args.seed,
            args.batch,
            args.resend,
            lambda _stats: fuzz(args, url, world, tally),
            prefix="fuzzprod",
        )
        elapsed = time.monotonic() - started
        verdict = load.verify(stats)
        report(tally, elapsed, stats, verdict)
    finally:
        if server is not None:
            load.stop_process(server)
        from django.db import connections

        connections.close_all()
        if not args.keep:
            load.recreate_database(args.postgres, args.database, drop_only=True)


def report(tally: Tally, elapsed: float, stats, verdict) -> None:
    total = sum(tally.by_source.values())
    print(f"\nfuzz requests: {total:,} in {elapsed:.0f} s ({dict(tally.by_source)})")
    print("answers: " + ", ".join(f"{s}: {n:,}" for s, n in sorted(tally.statuses.items())))
    fives = sum(
        n for (_src, _label, _role, status), n in tally.failures.items() if status[0] == "5"
    )
    unanswered = sum(n for key, n in tally.failures.items() if not key[3][0].isdigit())
    print(f"5xx: {fives}; no answer: {unanswered}")
    for key, n in sorted(tally.failures.items(), key=lambda item: -item[1]):
        source, label, role, status = key
        print(
            f"  {n:>5} x {status} {source} [{role}] {label}\n        e.g. {tally.examples[key]!r}"
        )
    producer_requests = sum(stats.statuses.values())
    answers = ", ".join(f"{s}: {n:,}" for s, n in sorted(stats.statuses.items()))
    print(f"producers beside the fuzz: {producer_requests:,} requests ({answers})")
    print(f"events acknowledged: {len(stats.acknowledged):,}; {verdict.line()}")
    for example in verdict.examples:
        print(f"  e.g. {example}")


if __name__ == "__main__":
    main()
