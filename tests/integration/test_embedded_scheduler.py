"""The embedded default runs the whole product: with no broker (eager Celery) and SQLite,
``manage.py run_scheduler`` (which ``make run`` starts beside runserver) runs the periodic
tasks, so an alert fires with nothing else running."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from io import StringIO
from pathlib import Path

import pytest
from celery import shared_task
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]
PROVIDER = {"provider": "flaky-llm", "model": "m1"}


def degraded_jobs(count: int) -> list[dict]:
    now = datetime.now(UTC).isoformat()
    lines = []
    for n in range(count):
        job_id = f"sched-{n}"
        lines.append({"type": "job_started", "job_id": job_id, "ts": now, "payload": PROVIDER})
        lines.append(
            {
                "type": "graph.next_step.degraded",
                "job_id": job_id,
                "ts": now,
                "seq": 1,
                "payload": {**PROVIDER, "attempts": 3, "reason": "next_step_parse_failed"},
            }
        )
    return lines


def embedded_env(database: Path) -> dict:
    inherited = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    inherited.pop("CELERY_BROKER_URL", None)
    return {
        **inherited,
        "DJANGO_SETTINGS_MODULE": "traceviz.settings",
        "DATABASE_URL": f"sqlite:///{database}",
        "PYTHONWARNINGS": "ignore",
    }


def firing_episodes(database: Path) -> int:
    with sqlite3.connect(database) as connection:
        (count,) = connection.execute(
            "SELECT count(*) FROM jobs_alertepisode WHERE resolved_at IS NULL"
        ).fetchone()
    return count


def test_the_scheduler_fires_an_alert_under_the_embedded_default(tmp_path):
    database = tmp_path / "embedded.sqlite3"
    env = embedded_env(database)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True, timeout=300)
    events = tmp_path / "degraded.ndjson"
    events.write_text("\n".join(json.dumps(line) for line in degraded_jobs(6)))
    subprocess.run([*manage, "import_events", str(events)], cwd=ROOT, env=env, check=True)
    assert firing_episodes(database) == 0  # ingest alone fires nothing: evaluation is periodic

    scheduler = subprocess.Popen(
        [*manage, "run_scheduler"], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 90
        while firing_episodes(database) == 0 and time.monotonic() < deadline:
            assert scheduler.poll() is None, "run_scheduler exited"
            time.sleep(0.5)
        assert firing_episodes(database) == 1
    finally:
        scheduler.send_signal(signal.SIGTERM)
        output, _ = scheduler.communicate(timeout=30)
    assert scheduler.returncode == 0, output
    assert "evaluate-alerts" in output


RUNS: list[int] = []


@shared_task
def swallowing_task() -> int:
    """Stopped while it runs the first time, a task that catches broad exceptions; a scheduler
    that lost that stop runs it again, and is stopped again."""
    RUNS.append(len(RUNS) + 1)
    if len(RUNS) == 1:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
        except Exception:
            pass
    else:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.1)
    return len(RUNS)


# The scheduler closes stale connections between runs (close_old_connections), which checks
# any connection an earlier test on this worker left open: database access must be allowed.
@pytest.mark.django_db
def test_a_stop_signal_during_a_task_that_catches_errors_stops_the_scheduler(settings):
    settings.CELERY_BROKER_URL = ""
    settings.CELERY_BEAT_SCHEDULE = {
        "swallow": {"task": f"{__name__}.swallowing_task", "schedule": 0.01}
    }
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    output = StringIO()
    RUNS.clear()
    try:
        call_command("run_scheduler", stdout=output)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    # The stop came during the first run: the scheduler ends after it, and runs nothing more.
    assert RUNS == [1]
    assert output.getvalue().splitlines()[-1] == "run_scheduler: stopped"
