"""Webhook delivery goes to http or https only and never follows a redirect; links in every
notification are absolute, built on TRACEVIZ_SITE_URL."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from django.core import mail

from jobs.escalations import outbox
from jobs.models import Escalation, Notification
from tests import factories
from tests.factories import event, finished, started


class Recorder(BaseHTTPRequestHandler):
    """Answers POSTs with the class's ``status`` (and Location); records what it received."""

    status = 204
    location = ""
    received: list

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        type(self).received.append((self.path, self.rfile.read(length)))
        self.send_response(self.status)
        if self.location:
            self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(status: int = 204, location: str = ""):
    handler = type("Handler", (Recorder,), {"status": status, "location": location, "received": []})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, handler


@pytest.fixture
def servers():
    started_servers = []

    def start(status=204, location=""):
        server, handler = serve(status, location)
        started_servers.append(server)
        return f"http://127.0.0.1:{server.server_port}", handler

    yield start
    for server in started_servers:
        server.shutdown()
        server.server_close()


def escalation() -> Escalation:
    factories.store(
        [
            event("job_started", "j1", 0),
            started("n1", "j1", 1),
            finished("n1", "retryable_failure", "j1", 2, error_type="auth", reason="expired"),
        ]
    )
    return Escalation.objects.get(job__job_id="j1")


def webhook_row(settings, url: str) -> Notification:
    settings.TRACEVIZ_ESCALATION_EMAILS = []
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = url
    return escalation().notifications.get(channel="webhook")


@pytest.mark.django_db
def test_a_webhook_is_posted_with_an_absolute_link(settings, servers):
    settings.TRACEVIZ_SITE_URL = "https://traceviz.example.com"
    base, handler = servers()
    row = webhook_row(settings, f"{base}/hook")
    assert outbox.deliver(row.pk).status == "sent"
    ((path, body),) = handler.received
    assert path == "/hook"
    url = json.loads(body)["escalation"]["url"]
    assert url == f"https://traceviz.example.com/escalations/{row.escalation_id}/"


@pytest.mark.django_db
def test_a_redirect_is_not_followed(settings, servers):
    target, target_handler = servers()
    base, _handler = servers(status=307, location=f"{target}/elsewhere")
    row = webhook_row(settings, f"{base}/hook")
    outcome = outbox.deliver(row.pk)
    row.refresh_from_db()
    assert outcome.status == "pending"
    assert target_handler.received == []
    assert "redirect" in row.last_error and "not followed" in row.last_error


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://127.0.0.1/x", "gopher://h/"])
def test_only_http_and_https_are_sent_to(settings, url):
    row = webhook_row(settings, url)
    outbox.deliver(row.pk)
    row.refresh_from_db()
    assert "http or https" in row.last_error


@pytest.mark.django_db
def test_the_email_links_to_the_escalation_absolutely(settings):
    settings.TRACEVIZ_SITE_URL = "https://traceviz.example.com/"
    settings.TRACEVIZ_ESCALATION_EMAILS = ["support@example.com"]
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = ""
    row = escalation().notifications.get(channel="email")
    outbox.deliver(row.pk)
    (message,) = mail.outbox
    assert f"https://traceviz.example.com/escalations/{row.escalation_id}/" in message.body
