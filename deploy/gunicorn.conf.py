"""gunicorn settings for production: ``gunicorn -c deploy/gunicorn.conf.py traceviz.wsgi``.

The worker timeout follows from the ingest limits: the largest request traceviz accepts (a batch
of ``TRACEVIZ_MAX_BATCH_EVENTS`` events, 10,000 by default) must finish well inside it on a
small machine. ``bench/max_batch.py`` measures that request (figures in bench/README.md). The
timeout is the largest batch at ``SLOWEST_EVENTS_PER_SECOND`` times ``HEADROOM`` (120 s for the
default 10,000 events), never under 30 s: raising the batch limit raises the timeout with it.
Set ``GUNICORN_TIMEOUT`` to override.

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
# Sync workers: one request at a time each. Two per core plus one keeps a core busy while
# another worker waits on PostgreSQL.
workers = _env_int("GUNICORN_WORKERS", 2 * (os.cpu_count() or 1) + 1)
worker_class = "sync"
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
