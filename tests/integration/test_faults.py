"""A database that cannot be reached (issue 7): ingest, OTLP ingest and /healthz answer 503
(with Retry-After where a producer retries), never 500. bench/faults.py restarts a real
PostgreSQL under load; these tests fake the outage so they run anywhere."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from tests.factories import event

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def database_down(monkeypatch):
    """Every new cursor fails as psycopg does when the server is gone (after the fixtures that
    need the database have run)."""

    def refuse(self, *args, **kwargs):
        raise OperationalError("connection to server at 127.0.0.1, port 5432 failed")

    monkeypatch.setattr(BaseDatabaseWrapper, "cursor", refuse)


@pytest.mark.django_db
def test_ingest_answers_503_with_retry_after_when_the_database_is_down(send, database_down):
    response = send([event("job_started", "down-1")])
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json() == {"error": "database unavailable, retry later"}


@pytest.mark.django_db
def test_otlp_ingest_answers_503_with_retry_after_when_the_database_is_down(
    client, ingest_token, database_down
):
    response = client.post(
        "/v1/traces",
        b"{}",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
    )
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["message"] == "database unavailable, retry later"


@pytest.mark.django_db
def test_read_api_answers_503_when_the_database_is_down(client, ingest_token, database_down):
    response = client.get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert (response.status_code, response["Retry-After"]) == (503, "5")


def test_healthz_answers_503_when_the_database_is_down(client, database_down):
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "database": "unreachable",
        "projection": None,
    }
    assert response["Cache-Control"].startswith("max-age=0")


# A whole process whose DATABASE_URL names a closed port: the real driver error, not a stub.
CLOSED_PORT_SCRIPT = """
import json
import django
django.setup()
from django.test import Client
client = Client()
ingest = client.post("/api/v1/events", b'{"type": "job_started", "job_id": "j1"}',
                     content_type="application/json", HTTP_AUTHORIZATION="Bearer tvz_whatever")
health = client.get("/healthz")
print(json.dumps({"ingest": [ingest.status_code, ingest.get("Retry-After")],
                  "healthz": [health.status_code, health.get("Retry-After")]}))
"""


def test_a_server_whose_database_port_is_closed_answers_503_not_500():
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "traceviz.settings",
        # Port 9 (discard) is closed on loopback: the connection is refused at once.
        "DATABASE_URL": "postgres://postgres@127.0.0.1:9/traceviz_unreachable",
        "DATABASE_CONNECT_TIMEOUT": "2",
        "PYTHONWARNINGS": "ignore",
    }
    done = subprocess.run(
        [sys.executable, "-c", CLOSED_PORT_SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    assert answers == {"ingest": [503, "5"], "healthz": [503, "5"]}


@pytest.mark.django_db
def test_ingest_answers_200_when_the_broker_is_down_and_the_notification_waits(
    send, settings, monkeypatch, django_capture_on_commit_callbacks
):
    """A broker outage when the outbox row commits: the enqueue fails, the request does not
    (the sweep sends the row later). This was a 500: Django logged the failed robust callback
    by a __qualname__ that functools.partial lacks."""
    from kombu.exceptions import OperationalError as BrokerDown

    from jobs import tasks
    from jobs.models import Notification

    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = "http://127.0.0.1:9/hook"

    def broker_down(*args, **kwargs):
        raise BrokerDown("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    monkeypatch.setattr(tasks.deliver_notification, "apply_async", broker_down)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        response = send(
            [
                event("job_started", "broker-down"),
                {
                    "type": "node_finished",
                    "job_id": "broker-down",
                    "payload": {
                        "node_id": "n1",
                        "result_type": "retryable_failure",
                        "error_type": "auth",
                    },
                },
            ]
        )
    assert response.status_code == 200
    assert len(callbacks) == 1
    assert list(Notification.objects.values_list("status", flat=True)) == ["pending"]
