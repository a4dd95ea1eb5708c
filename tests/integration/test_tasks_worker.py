"""A real Celery worker against the real Redis: an escalation opened by ingest is delivered to a
webhook (a local HTTP server) after commit, retried after the server first answers 500.

Outside CI this skips when Redis is absent (tests/conftest.py require_redis); in CI it runs.
"""

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from jobs.models import Escalation, Notification
from tests import factories
from tests.conftest import require_redis
from tests.factories import event, finished, started

WAIT_SECONDS = 30


class Webhook(ThreadingHTTPServer):
    """Answers the first ``failures`` POSTs with 500, then 200; keeps every body received."""

    def __init__(self, failures: int):
        self.failures = failures
        self.bodies: list[dict] = []
        self.statuses: list[int] = []
        super().__init__(("127.0.0.1", 0), WebhookHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class WebhookHandler(BaseHTTPRequestHandler):
    def do_POST(self):
        server: Webhook = self.server
        length = int(self.headers.get("Content-Length", "0"))
        server.bodies.append(json.loads(self.rfile.read(length)))
        status = 500 if len(server.statuses) < server.failures else 200
        server.statuses.append(status)
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # keep the test output clean
        pass


@pytest.fixture
def webhook():
    server = Webhook(failures=1)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def celery_on_redis():
    """The project's Celery app pointed at the test Redis (a private queue) for this test only,
    restored afterwards."""
    from traceviz.celery import app

    broker_url = require_redis()
    keys = ("broker_url", "task_always_eager", "task_default_queue")
    saved = {key: app.conf[key] for key in keys}
    app.conf.update(
        broker_url=broker_url,
        task_always_eager=False,
        task_default_queue=f"traceviz-test-{uuid.uuid4().hex[:8]}",
    )
    app.loader.import_default_modules()
    drop_connections(app)
    try:
        yield app
    finally:
        app.conf.update(saved)
        drop_connections(app)


def drop_connections(app):
    """Forget the app's connection and producer pools: they are built once, for the broker
    configured at the time (even eager calls build them), and would keep publishing there."""
    if app._pool is not None:
        app._pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None


def wait_for(predicate, timeout: float = WAIT_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_worker_delivers_webhook_retrying_after_a_500(celery_on_redis, webhook, settings):
    from celery.contrib.testing.worker import start_worker

    settings.TRACEVIZ_ESCALATION_EMAILS = []
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = webhook.url
    settings.TRACEVIZ_WEBHOOK_TIMEOUT = 5
    with start_worker(celery_on_redis, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        factories.store(
            [
                event("job_started", "w1", 0),
                started("n1", "w1", 1),
                finished("n1", "retryable_failure", "w1", 2, error_type="internal", reason="bug"),
            ]
        )
        escalation = Escalation.objects.get(job__job_id="w1")
        (notification,) = Notification.objects.filter(escalation=escalation)
        assert notification.channel == "webhook"
        assert wait_for(lambda: Notification.objects.get(pk=notification.pk).status == "sent"), (
            webhook.statuses,
            Notification.objects.filter(pk=notification.pk).values().first(),
        )
    notification.refresh_from_db()
    assert webhook.statuses == [500, 200]
    assert notification.attempts == 2
    assert notification.last_error == "attempt 1: HTTP 500 Internal Server Error"
    assert [body["escalation"]["id"] for body in webhook.bodies] == [escalation.pk] * 2
    assert webhook.bodies[0]["event"] == "escalation.opened"
    assert webhook.bodies[0]["escalation"]["kind"] == "internal"
