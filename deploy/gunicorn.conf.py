"""gunicorn settings for production: ``gunicorn -c deploy/gunicorn.conf.py traceviz.wsgi``.

The worker timeout follows from the ingest limits: the largest request traceviz accepts (a batch
of ``TRACEVIZ_MAX_BATCH_EVENTS`` events, 10,000 by default) must finish well inside it on a
small machine. ``bench/max_batch.py`` measures that request (figures in bench/README.md). The
timeout is the largest batch at ``SLOWEST_EVENTS_PER_SECOND`` times ``HEADROOM`` (120 s for the
default 10,000 events), never under 30 s: raising the batch limit raises the timeout with it.
Set ``GUNICORN_TIMEOUT`` to override.

Slow clients: sync workers serve one request each, so a client trickling its body would hold a
worker. Behind the buffering proxy (deploy/nginx.conf.example: ``proxy_request_buffering on``,
``client_body_timeout``) gunicorn only ever sees whole requests, from nginx, at once; that is
the supported deployment, and ``bind`` is the loopback address for it. Exposed directly (not
recommended), set ``GUNICORN_WORKER_CLASS=gthread``: a thread waits at most 5 s for a request to
start (idle connections go back to the poller) and a slow body holds one of ``threads``
threads, not a worker. In both shapes a request whose body (or response) moves no byte for
``GUNICORN_BODY_TIMEOUT`` seconds is given up (``pre_request``: the app answers 408). Nothing in
gunicorn bounds how long a body trickling a byte at a time may take, which is why a server
facing the internet keeps the proxy in front; starting sync workers on a public address logs a
warning saying so.

Every value can be overridden from the environment (``GUNICORN_*``); command-line flags win over
this file.
"""

import math
import os

# Slowest ingest rate measured for a maximum batch (bench/max_batch.py on PostgreSQL, 2 cores
# shared with three other benches and test runs, load average 9 to 12): 10,000 OTLP spans in
# 41 s as a fresh worker's first request (10.7 s warm), 10,000 events with long reasons in
# 11 to 17 s. About 250 events per second, projection included.
SLOWEST_EVENTS_PER_SECOND = 250
# Three times that: the slowest measured maximum batch takes a third of the timeout.
HEADROOM = 3
MIN_TIMEOUT_SECONDS = 30


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip() else default


def timeout_for(max_batch_events: int) -> int:
    """Seconds a worker may spend on one request: the largest batch at the slowest measured
    rate, times the headroom, rounded up."""
    needed = math.ceil(max_batch_events / SLOWEST_EVENTS_PER_SECOND * HEADROOM)
    return max(MIN_TIMEOUT_SECONDS, needed)


MAX_BATCH_EVENTS = _env_int("TRACEVIZ_MAX_BATCH_EVENTS", 10_000)

wsgi_app = "traceviz.wsgi"
# Behind the TLS proxy, on the loopback interface (deploy/README).
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
# Sync workers (behind the proxy): one request at a time each. Two per core plus one keeps a
# core busy while another worker waits on PostgreSQL. gthread, for direct exposure: threads per
# worker, so a slow client holds a thread.
workers = _env_int("GUNICORN_WORKERS", 2 * (os.cpu_count() or 1) + 1)
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "sync") or "sync"
threads = _env_int("GUNICORN_THREADS", 8 if worker_class == "gthread" else 1)
# Seconds a request's body (or its response) may go without a byte moving, as nginx's
# client_body_timeout in front of it.
body_timeout = _env_int("GUNICORN_BODY_TIMEOUT", 10)
# The app is imported once, before the workers fork: a new worker's first request (after a
# restart or max_requests) does not pay for the imports inside a maximum batch's time.
preload_app = True
timeout = _env_int("GUNICORN_TIMEOUT", timeout_for(MAX_BATCH_EVENTS))
# A restarting worker finishes its request (a maximum batch) before it is killed.
graceful_timeout = timeout
keepalive = 5
# Workers are replaced now and then, so slow growth in a worker's memory cannot accumulate.
max_requests = _env_int("GUNICORN_MAX_REQUESTS", 2_000)
max_requests_jitter = _env_int("GUNICORN_MAX_REQUESTS_JITTER", 200)
# An empty GUNICORN_ACCESSLOG turns the access log off.
accesslog = os.environ.get("GUNICORN_ACCESSLOG", "-") or None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOGLEVEL", "info")


def pre_request(worker, req):
    """Give up on a client that stops sending its body (or reading the response): reads and
    writes on the request's socket time out after ``body_timeout`` seconds without progress,
    and the app answers 408 (jobs/web/api.py, ``read_body``). The socket's next request (a
    gthread keep-alive) starts without it: the worker sets the socket blocking again."""
    sock = getattr(req.unreader, "sock", None)
    if sock is not None:
        sock.settimeout(body_timeout)


LOOPBACK = ("127.", "localhost", "[::1]", "unix:")


def on_starting(server):
    """Warn when sync workers listen on a public address: without a buffering proxy in front,
    as many slow clients as there are workers stop the site."""
    public = [address for address in server.cfg.bind if not address.startswith(LOOPBACK)]
    if public and server.cfg.worker_class_str == "sync":
        server.log.warning(
            "sync workers listen on %s with no buffering proxy in front: slow clients can hold "
            "every worker; put nginx in front (deploy/nginx.conf.example) or set "
            "GUNICORN_WORKER_CLASS=gthread",
            ", ".join(public),
        )
