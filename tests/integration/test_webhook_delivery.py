"""Webhook delivery goes to http or https only and never follows a redirect; links in every
notification are absolute, built on TRACEVIZ_SITE_URL; every delivery carries its notification's
Idempotency-Key, so a receiver counting distinct keys sees each notification once, even when a
database outage at the moment of delivery makes traceviz send it again."""

import json
import threading
from contextlib import contextmanager
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from unittest import mock

import pytest
from django.core import mail
from django.db import OperationalError
from django.db.backends.utils import CursorWrapper
from django.utils import timezone

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
        type(self).keys.append(self.headers.get("Idempotency-Key"))
        self.send_response(self.status)
        if self.location:
            self.send_header("Location", self.location)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def serve(status: int = 204, location: str = ""):
    handler = type(
        "Handler",
        (Recorder,),
        {"status": status, "location": location, "received": [], "keys": []},
    )
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


@pytest.mark.django_db
def test_a_webhook_carries_its_notification_id_as_the_idempotency_key(settings, servers):
    base, handler = servers()
    row = webhook_row(settings, f"{base}/hook")
    outbox.deliver(row.pk)
    ((_path, body),) = handler.received
    assert handler.keys == [str(row.pk)] == [str(json.loads(body)["notification_id"])]


@contextmanager
def database_lost_after_sending():
    """The database goes away between the POST and the row being marked sent."""
    lost = threading.Event()
    post, execute = outbox.post_json, CursorWrapper.execute

    def post_then_lose(*args, **kwargs):
        post(*args, **kwargs)
        lost.set()

    def execute_unless_lost(self, *args, **kwargs):
        if lost.is_set():
            raise OperationalError("server closed the connection unexpectedly")
        return execute(self, *args, **kwargs)

    with (
        mock.patch.object(outbox, "post_json", post_then_lose),
        mock.patch.object(CursorWrapper, "execute", execute_unless_lost),
    ):
        yield


# Autocommit, as a worker runs: the claim is committed before the POST.
@pytest.mark.django_db(transaction=True)
def test_a_database_outage_at_delivery_resends_under_the_same_key(settings, servers):
    base, handler = servers()
    with mock.patch.object(outbox, "deliver_after_commit"):  # delivered by hand below
        row = webhook_row(settings, f"{base}/hook")
    with database_lost_after_sending(), pytest.raises(OperationalError):
        outbox.deliver(row.pk)
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sending", 1)
    # Its lease lapses; the next sweep cannot know the POST went through, and sends it again.
    later = timezone.now() + settings.TRACEVIZ_NOTIFY_LEASE + timedelta(seconds=1)
    assert outbox.deliver(row.pk, later).status == "sent"
    assert len(handler.received) == 2
    # Both under one key: a receiver that drops a key it has processed sees one delivery.
    assert handler.keys == [str(row.pk), str(row.pk)]
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("sent", 2)
    assert "same Idempotency-Key" in row.last_error


@pytest.mark.django_db
def test_an_email_sent_again_keeps_its_message_id(settings):
    settings.TRACEVIZ_ESCALATION_EMAILS = ["support@example.com"]
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = ""
    row = escalation().notifications.get(channel="email")
    outbox.send(row)
    outbox.send(row)
    first, second = (message.message()["Message-ID"] for message in mail.outbox)
    assert first == second
    assert first.startswith(f"<traceviz-notification-{row.pk}@")
