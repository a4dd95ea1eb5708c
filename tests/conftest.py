"""Shared fixtures. Outside CI the suite falls back to SQLite and skips what needs absent
services, saying so; with CI=true a missing PostgreSQL or Redis is a failure, never a skip.

CI runs the suite twice (``make test``): on PostgreSQL, and on SQLite, the embedded default
``make run`` uses. ``TRACEVIZ_TEST_DATABASE`` names the database a pass must run on; the SQLite
pass sets it to ``sqlite`` and deselects the tests marked ``postgres`` (``-m "not postgres"``).
"""

import gc
import json
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection

from jobs.models import IngestToken

IN_CI = os.environ.get("CI") == "true"
# Real producer libraries in environments of their own (``make producers``): the script of
# producer NAME is PRODUCERS/NAME/run.py, run by PRODUCER_VENVS/NAME's Python.
PRODUCERS = Path(__file__).resolve().parent / "producers"
PRODUCER_VENVS = PRODUCERS.parent.parent / ".venv-producers"
REDIS_URL = os.environ.get("TRACEVIZ_TEST_REDIS_URL", "")
DATABASES = ("postgresql", "sqlite")
TEST_DATABASE = os.environ.get("TRACEVIZ_TEST_DATABASE", "")
# The database this run must use: TRACEVIZ_TEST_DATABASE's, else PostgreSQL in CI, else any.
EXPECTED_DATABASE = TEST_DATABASE or ("postgresql" if IN_CI else "")


def pytest_sessionstart(session):
    if TEST_DATABASE not in ("", *DATABASES):
        raise pytest.UsageError(
            f"TRACEVIZ_TEST_DATABASE must be one of {', '.join(DATABASES)}, got {TEST_DATABASE!r}"
        )
    if EXPECTED_DATABASE and connection.vendor != EXPECTED_DATABASE:
        because = f"TRACEVIZ_TEST_DATABASE={TEST_DATABASE}" if TEST_DATABASE else "CI=true"
        hint = "" if TEST_DATABASE else " (or TRACEVIZ_TEST_DATABASE=sqlite for the SQLite pass)"
        raise pytest.UsageError(
            f"{because}: the suite must run on {EXPECTED_DATABASE}, but DATABASE_URL points at "
            f"{connection.vendor}{hint}"
        )
    if IN_CI and not REDIS_URL:
        raise pytest.UsageError("CI=true: TRACEVIZ_TEST_REDIS_URL must point at Redis")


@pytest.fixture(autouse=True)
def unhashed_static_files(settings):
    """Tests run without collectstatic: static URLs are the source names (the manifest
    storage would need its manifest), served by the finders as under DEBUG."""
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"},
    }


def pytest_report_header(config):
    header = f"traceviz: database {connection.vendor}, redis {REDIS_URL or 'not configured'}"
    if TEST_DATABASE == "sqlite":
        header += " (TRACEVIZ_TEST_DATABASE=sqlite: the SQLite pass, tests marked postgres "
        header += "belong to the PostgreSQL pass)"
    return header


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix, tmp_path_factory):
    """On SQLite, test in a database file (one per xdist worker, under pytest's temporary
    directory) in WAL mode, as ``make run`` does, rather than Django's default shared-cache
    in-memory database: there a write that meets another connection's read (a Celery worker's
    thread, the live server's) fails at once with "database table is locked"."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] == "django.db.backends.sqlite3" and not database.get("TEST", {}).get(
        "NAME"
    ):
        database.setdefault("TEST", {})["NAME"] = str(
            tmp_path_factory.mktemp("database") / "test.sqlite3"
        )


# pytest-xdist deselects in its workers and its closing line counts no deselected tests, so the
# SQLite pass would not say it left the postgres tests out: workers hand their node ids to the
# controller, which counts them like pytest does without xdist ("1028 passed, 1 deselected").
deselected_by_workers: set[str] = set()


def pytest_deselected(items):
    workeroutput = getattr(items[0].config, "workeroutput", None) if items else None
    if workeroutput is not None:
        workeroutput.setdefault("deselected", []).extend(item.nodeid for item in items)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    deselected_by_workers.update(getattr(node, "workeroutput", {}).get("deselected", ()))


@pytest.hookimpl(trylast=True)  # after plugins that read every report in the stats
def pytest_terminal_summary(terminalreporter):
    if deselected_by_workers and not terminalreporter.stats.get("deselected"):
        terminalreporter.stats["deselected"] = [
            SimpleNamespace(nodeid=nodeid) for nodeid in sorted(deselected_by_workers)
        ]


# Fixtures through which a test reaches the database (a Django test client may too).
DATABASE_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "live_server", "client"}
)


def pytest_collection_modifyitems(items):
    """A test that asks for no database (none of DATABASE_FIXTURES, no django_db mark) is
    marked dbless: CI's PostgreSQL pass leaves it to the SQLite pass, so it runs once."""
    for item in items:
        if not DATABASE_FIXTURES.intersection(getattr(item, "fixturenames", ())) and not (
            item.get_closest_marker("django_db")
        ):
            item.add_marker(pytest.mark.dbless)


def pytest_runtest_setup(item):
    """The markers do the work: a test marked postgres or redis needs that service, so the
    marker that deselects it in CI's SQLite pass is also the one that skips (or fails) it."""
    if item.get_closest_marker("postgres"):
        require_postgres()
    if item.get_closest_marker("redis"):
        require_redis()


def require_postgres():
    """Skip (outside CI) or fail (in CI) a test that needs PostgreSQL. Mark such a test
    ``@pytest.mark.postgres`` rather than calling this: CI's SQLite pass deselects the marker,
    and an unmarked caller fails that pass."""
    if connection.vendor == "postgresql":
        return
    if IN_CI:
        pytest.fail(
            "CI=true and the database is not PostgreSQL: the SQLite pass deselects the tests "
            "marked postgres (-m 'not postgres'); mark every test that needs PostgreSQL"
        )
    pytest.skip("needs PostgreSQL: set DATABASE_URL=postgres://... to run")


def require_redis() -> str:
    """The Redis URL for tests that need a real broker; skip outside CI when absent."""
    import redis

    if REDIS_URL:
        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
            return REDIS_URL
        except redis.RedisError as error:
            if IN_CI:
                pytest.fail(f"CI=true and Redis at {REDIS_URL} is unreachable: {error}")
            pytest.skip(f"Redis at {REDIS_URL} unreachable: {error}")
    if IN_CI:
        pytest.fail("CI=true and TRACEVIZ_TEST_REDIS_URL is not set")
    pytest.skip("needs Redis: set TRACEVIZ_TEST_REDIS_URL=redis://127.0.0.1:6379/0 to run")


@pytest.fixture
def ingest_token(db) -> str:
    """A live ingest token's clear value."""
    _token, raw = IngestToken.issue("test-producer")
    return raw


@pytest.fixture
def send(client, ingest_token):
    """POST events to /api/v1/events: ``send(events, content_type=..., **headers)``."""

    def send(events, content_type="application/json", **headers):
        if isinstance(events, bytes | str):
            body = events
        elif content_type == "application/x-ndjson":
            body = "\n".join(json.dumps(event) for event in events)
        else:
            body = json.dumps(events)
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {ingest_token}")
        return client.post("/api/v1/events", body, content_type=content_type, **headers)

    return send


@pytest.fixture
def collector_states(monkeypatch):
    """``collector_states(module, name)``: replace ``module.name`` with a wrapper that records,
    in the list returned, whether the cyclic garbage collector was on at each call."""

    def watch(module, name: str) -> list[bool]:
        seen: list[bool] = []
        original = getattr(module, name)

        def watching(*args, **kwargs):
            seen.append(gc.isenabled())
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, watching)
        return seen

    return watch


def producer_python(name: str) -> Path:
    """The Python of producer ``name``'s own environment, built by ``make producers`` from
    tests/producers/NAME/requirements.txt (a copy of which it keeps); skip outside CI when it
    is missing or was built from other requirements, fail in CI (``make test`` builds it)."""
    venv = PRODUCER_VENVS / name
    python = venv / "bin" / "python"
    wanted = (PRODUCERS / name / "requirements.txt").read_bytes()
    built = venv / "requirements.txt"
    if python.exists() and built.exists() and built.read_bytes() == wanted:
        return python
    state = "is out of date" if python.exists() else "is missing"
    message = f"the {name} producer's environment {venv} {state}: run `make producers`"
    if IN_CI:
        pytest.fail(f"CI=true and {message} (make test builds it first)")
    pytest.skip(message)


@pytest.fixture
def run_producer(live_server):
    """``run_producer(name, *args)``: run tests/producers/NAME/run.py in its own environment
    against the live server, with a fresh ingest token, and return the JSON line it printed
    last. OTEL_* variables of this process are not passed on: each producer runs with its
    library's default telemetry settings unless its script says otherwise."""
    _token, raw = IngestToken.issue("producer")

    def run(name: str, *args: str, timeout: float = 180) -> dict:
        python = producer_python(name)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        command = [str(python), str(PRODUCERS / name / "run.py"), *args]
        command += ["--url", live_server.url, "--token", raw]
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=environment
        )
        if done.returncode != 0:
            pytest.fail(f"producer {name} exited {done.returncode}:\n{done.stderr[-4000:]}")
        lines = done.stdout.strip().splitlines()
        assert lines, f"producer {name} printed nothing; stderr:\n{done.stderr[-4000:]}"
        return json.loads(lines[-1])

    return run
