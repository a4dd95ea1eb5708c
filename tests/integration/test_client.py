"""The producer client (traceviz_client, client/) against a live test server: batching,
idempotent retries, rejects, steps and the command line. The client alone: client/tests."""

import json
import subprocess
import sys
import threading
import urllib.error
from pathlib import Path

import pytest
import traceviz_client as tvz
from django.db import OperationalError
from traceviz_client import (
    CompensatableError,
    PermanentError,
    RetryableError,
    TraceVizClient,
    TraceVizError,
)

from jobs.models import Event, IngestToken, Job, Step

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token() -> str:
    return IngestToken.issue("client-test")[1]


class Recorder:
    """Stands in for ``time.sleep``: records the delays, waits for nothing."""

    def __init__(self):
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def count_posts(client: TraceVizClient, monkeypatch) -> list[int]:
    """Record the number of events in each request the client makes."""
    sizes: list[int] = []
    real_post = client._post

    def post(data: bytes):
        sizes.append(len(json.loads(data)))
        return real_post(data)

    monkeypatch.setattr(client, "_post", post)
    return sizes


def job_started(job_id: str, **payload) -> dict:
    return {"type": "job_started", "job_id": job_id, "payload": payload}


def test_events_get_an_id_once_and_are_stored(live_server, token):
    client = TraceVizClient(live_server.url, token, flush_interval=60)
    event = job_started("c-1", workflow="crm")

    assert client.send([event]) == []
    assigned = event["event_id"]
    assert client.close() == []

    stored = Event.objects.get(job_id="c-1")
    assert stored.event_id == assigned
    assert len(assigned) == 36  # a uuid4
    assert Job.objects.get(job_id="c-1").workflow == "crm"


def test_send_batches_by_size(live_server, token, monkeypatch):
    client = TraceVizClient(live_server.url, token, max_batch=2, flush_interval=60)
    sizes = count_posts(client, monkeypatch)

    client.send([job_started(f"c-{i}") for i in range(3)])
    assert sizes == [2, 1]  # full batch sent at once; send() flushes the rest with it
    client.send([job_started("c-9")])
    assert sizes == [2, 1]  # below max_batch and not yet due: buffered
    client.close()

    assert sizes == [2, 1, 1]
    assert Event.objects.count() == 4
    assert (client.totals.sent, client.totals.stored) == (4, 4)


def test_buffered_events_are_sent_after_flush_interval(live_server, token, monkeypatch):
    client = TraceVizClient(live_server.url, token, flush_interval=0.05)
    sent = threading.Event()
    real_post = client._post

    def post(data: bytes):
        result = real_post(data)
        sent.set()
        return result

    monkeypatch.setattr(client, "_post", post)
    client.send([job_started("c-timer")])

    assert sent.wait(timeout=10), "the background flush never sent the event"
    assert Event.objects.filter(job_id="c-timer").exists()
    assert client.close() == []


def test_503_is_retried_after_retry_after(live_server, token, monkeypatch):
    sleep = Recorder()
    client = TraceVizClient(live_server.url, token, sleep=sleep)
    real_authenticate = IngestToken.authenticate
    calls = []

    def flaky(raw):
        calls.append(raw)
        if len(calls) == 1:
            raise OperationalError("database restarting")
        return real_authenticate(raw)

    monkeypatch.setattr(IngestToken, "authenticate", staticmethod(flaky))
    client.send([job_started("c-503")])
    client.close()

    assert sleep.delays == [5.0]  # the server's Retry-After
    assert len(calls) == 2
    assert Event.objects.filter(job_id="c-503").count() == 1


def test_retry_after_a_lost_response_stores_nothing_twice(live_server, token, monkeypatch):
    sleep = Recorder()
    client = TraceVizClient(live_server.url, token, sleep=sleep, backoff=0.5)
    real_post = client._post
    attempts = []

    def post(data: bytes):
        result = real_post(data)
        attempts.append(result)
        if len(attempts) == 1:
            raise ConnectionResetError("connection reset after the server stored the batch")
        return result

    monkeypatch.setattr(client, "_post", post)
    client.send([job_started("c-lost"), job_started("c-lost", model="m")])
    client.close()

    assert Event.objects.filter(job_id="c-lost").count() == 2
    assert (client.totals.stored, client.totals.duplicates) == (0, 2)
    assert len(sleep.delays) == 1 and 0 <= sleep.delays[0] <= 0.5


def test_unreachable_server_raises_with_the_events_after_backoff(token):
    sleep = Recorder()
    client = TraceVizClient(
        "http://127.0.0.1:9", token, sleep=sleep, max_retries=3, backoff=1, max_backoff=3
    )
    events = [job_started("c-down")]
    client.send(events)

    with pytest.raises(TraceVizError) as failed:
        client.close()

    assert failed.value.events == events
    assert failed.value.status is None
    assert len(sleep.delays) == 3
    assert all(0 <= delay <= cap for delay, cap in zip(sleep.delays, [1, 2, 3], strict=True))


def test_rejected_events_come_back_with_their_errors(live_server, token):
    client = TraceVizClient(live_server.url, token, flush_interval=60)
    good = job_started("c-mixed")
    bad = {"type": "node_finished", "job_id": "c-mixed", "payload": {"node_id": "n1", "attempt": 0}}

    client.send([good, bad])
    rejects = client.flush()

    assert [(r.event, r.errors) for r in rejects] == [
        (bad, [{"field": "payload.attempt", "message": "must be an integer from 1 to 1000000"}])
    ]
    assert client.totals.rejected == 1
    assert Event.objects.filter(job_id="c-mixed").count() == 1


def test_batch_with_every_event_rejected_returns_the_rejects(live_server, token):
    client = TraceVizClient(live_server.url, token)
    bad = {"type": "node_started", "job_id": "c-bad", "payload": {}}

    client.send([bad])
    rejects = client.close()

    assert [r.errors for r in rejects] == [[{"field": "payload.node_id", "message": "required"}]]
    assert not Event.objects.exists()


def test_context_manager_raises_for_rejects_nobody_received(live_server, token):
    bad = {"type": "node_started", "job_id": "c-bad", "payload": {}}

    with pytest.raises(TraceVizError) as failed, TraceVizClient(live_server.url, token) as client:
        client.send([bad])

    assert failed.value.events == [bad]
    assert client.rejects[0].errors == [{"field": "payload.node_id", "message": "required"}]


def test_wrong_token_raises_without_retrying(live_server):
    sleep = Recorder()
    client = TraceVizClient(live_server.url, "tvz_wrong", sleep=sleep)
    client.send([job_started("c-401")])

    with pytest.raises(TraceVizError) as failed:
        client.close()

    assert failed.value.status == 401
    assert "invalid or revoked token" in str(failed.value)
    assert sleep.delays == []


def test_successful_step_reports_success_with_results_and_duration(live_server, token):
    with TraceVizClient(live_server.url, token) as client, client.step("c-step", "fetch") as step:
        step.results["contacts"] = 3

    row = Step.objects.get(job__job_id="c-step")
    assert (row.node_id, row.attempt, row.result_type, row.segment) == ("fetch", 1, "success", "ok")
    assert row.payload_results == {"contacts": 3}
    assert row.duration_ms is not None and row.duration_ms >= 0
    assert Job.objects.get(job_id="c-step").completed_node_ids == ["fetch"]


@pytest.mark.parametrize(
    ("raised", "result_type", "reason"),
    [
        (RetryableError("read timeout"), "retryable_failure", "read timeout"),
        (PermanentError("HTTP 404"), "permanent_failure", "HTTP 404"),
        (CompensatableError("upload failed"), "compensatable_failure", "upload failed"),
        (KeyError("missing"), "permanent_failure", "'missing'"),
    ],
)
def test_step_exception_decides_the_result_type_and_is_reraised(
    live_server, token, raised, result_type, reason
):
    with (
        TraceVizClient(live_server.url, token) as client,
        pytest.raises(type(raised)),
        client.step("c-fail", "charge", attempt=2),
    ):
        raise raised

    row = Step.objects.get(job__job_id="c-fail")
    assert (row.attempt, row.result_type, row.reason) == (2, result_type, reason)


def test_step_failure_carries_failure_code_and_error_type(live_server, token, client):
    with (
        TraceVizClient(live_server.url, token) as producer,
        pytest.raises(PermanentError),
        producer.step("c-code", "write_crm"),
    ):
        raise PermanentError("403", failure_code="policy_denied", error_type="permission")

    body = client.get("/api/v1/jobs/c-code", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert body["status"] == "paused:approval"
    assert (body["failure_code"], body["error_type"]) == ("policy_denied", "permission")
    assert body["steps"][0]["reason"] == "403"


def test_retry_after_accepts_seconds_and_http_dates():
    assert tvz.retry_after_seconds("7") == 7.0
    assert tvz.retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past
    assert tvz.retry_after_seconds("soon") is None


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "traceviz_client", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_sends_a_file_and_a_resend_stores_nothing_twice(live_server, token, tmp_path):
    path = tmp_path / "events.ndjson"
    lines = [
        job_started("c-cli", workflow="w"),
        {
            "type": "node_started",
            "job_id": "c-cli",
            "ts": "2026-03-02T09:00:00Z",
            "payload": {"node_id": "n1"},
        },
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")

    first = run_cli("send", str(path), "--url", live_server.url, "--token", token)
    again = run_cli("send", str(path), "--url", live_server.url, "--token", token)

    assert (first.returncode, first.stdout) == (0, "2 lines: 2 stored, 0 duplicates, 0 rejected\n")
    assert (again.returncode, again.stdout) == (0, "2 lines: 0 stored, 2 duplicates, 0 rejected\n")
    assert Event.objects.filter(job_id="c-cli").count() == 2


def test_cli_exits_non_zero_and_lists_rejects(live_server, token, tmp_path):
    path = tmp_path / "events.ndjson"
    path.write_text(
        json.dumps(job_started("c-cli2"))
        + "\nnot json\n"
        + json.dumps({"type": "node_finished", "job_id": "c-cli2", "payload": {}})
        + "\n"
    )

    result = run_cli("send", str(path), "--url", live_server.url, "--token", token)

    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        "3 lines: 1 stored, 0 duplicates, 2 rejected",
        "line 2: not JSON: Expecting value: line 1 column 1 (char 0)",
        "line 3: payload.node_id: required",
    ]


def test_cli_reports_an_undeliverable_batch(live_server, tmp_path):
    path = tmp_path / "events.ndjson"
    path.write_text(json.dumps(job_started("c-cli3")) + "\n")

    result = run_cli("send", str(path), "--url", live_server.url, "--token", "tvz_wrong")

    assert result.returncode == 2
    assert "invalid or revoked token" in result.stderr


def test_connection_errors_are_retried_like_503(token, monkeypatch):
    sleep = Recorder()
    client = TraceVizClient("http://traceviz.invalid", token, sleep=sleep, max_retries=1)
    calls = []

    def post(data: bytes):
        calls.append(data)
        if len(calls) == 1:
            raise urllib.error.URLError("connection refused")
        return 200, {"received": 1, "stored": 1, "duplicates": 0, "errors": []}

    monkeypatch.setattr(client, "_post", post)
    client.send([job_started("c-refused")])

    assert client.close() == []
    assert len(calls) == 2 and calls[0] == calls[1]  # the same body, the same event ids
    assert len(sleep.delays) == 1
