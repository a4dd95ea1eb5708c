"""traceviz-client on its own: standard library unittest against a small HTTP server standing in
for traceviz's ``POST /api/v1/events``, so these run where only the client is installed (no
Django, no server). The client against the real server: the server's
tests/integration/test_client.py."""

import json
import subprocess
import sys
import tempfile
import threading
import unittest
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import traceviz_client as tvz
from traceviz_client import (
    CompensatableError,
    PermanentError,
    RetryableError,
    TraceVizClient,
    TraceVizError,
)

TOKEN = "tvz_test"


class FakeTraceViz(ThreadingHTTPServer):
    """Answers each POST with the next scripted (status, body, headers), then stores everything
    (200) as traceviz does; records each request's events and headers."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script: list[tuple[int, dict, dict[str, str]]] = []
        self.requests: list[tuple[dict[str, str], list[dict]]] = []
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def events(self) -> list[dict]:
        return [event for _headers, batch in self.requests for event in batch]

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self.thread.join()


class Handler(BaseHTTPRequestHandler):
    server: FakeTraceViz

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        batch = json.loads(self.rfile.read(length))
        self.server.requests.append((dict(self.headers), batch))
        if self.server.script:
            status, body, headers = self.server.script.pop(0)
        else:
            status, body, headers = 200, {"stored": len(batch), "duplicates": 0}, {}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:
        pass  # no request log on the test output


class Recorder:
    """Stands in for ``time.sleep``: records the delays, waits for nothing."""

    def __init__(self):
        self.delays: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def job_started(job_id: str) -> dict:
    return {"type": "job_started", "job_id": job_id, "payload": {"workflow": "crm"}}


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeTraceViz()
        self.addCleanup(self.server.stop)

    def client(self, **options) -> TraceVizClient:
        options.setdefault("flush_interval", 60)
        return TraceVizClient(self.server.url, TOKEN, **options)

    def test_events_get_an_id_and_a_time_once_and_go_with_the_token(self):
        event = job_started("c-1")
        client = self.client()

        self.assertEqual(client.send([event]), [])
        assigned = event["event_id"], event["ts"]
        self.assertEqual(client.close(), [])

        headers, batch = self.server.requests[0]
        self.assertEqual(batch, [event])
        self.assertEqual((batch[0]["event_id"], batch[0]["ts"]), assigned)
        self.assertEqual(uuid.UUID(assigned[0]).version, 4)
        self.assertTrue(assigned[1].endswith("Z"))
        self.assertEqual(headers["Authorization"], f"Bearer {TOKEN}")
        self.assertEqual(headers["User-Agent"], tvz.USER_AGENT)
        self.assertEqual(client.totals.stored, 1)

    def test_batches_hold_at_most_max_batch_events(self):
        client = self.client(max_batch=3)
        client.send([job_started(f"c-{n}") for n in range(7)])
        client.close()

        self.assertEqual([len(batch) for _headers, batch in self.server.requests], [3, 3, 1])
        self.assertEqual(client.totals.sent, 7)

    def test_a_503_is_retried_after_retry_after_with_the_same_event_ids(self):
        self.server.script = [(503, {"error": "busy"}, {"Retry-After": "7"})]
        sleep = Recorder()
        client = self.client(sleep=sleep)

        client.send([job_started("c-retry")])
        client.close()

        self.assertEqual(sleep.delays, [7.0])
        first, second = (batch for _headers, batch in self.server.requests)
        self.assertEqual(first, second)

    def test_retries_that_run_out_raise_with_the_undelivered_events(self):
        self.server.script = [(503, {"error": "busy"}, {})] * 3
        sleep = Recorder()
        client = self.client(max_retries=2, backoff=1.0, max_backoff=1.5, sleep=sleep)
        client.send([job_started("c-down")])

        with self.assertRaises(TraceVizError) as raised:
            client.close()
        self.assertEqual(raised.exception.status, 503)
        self.assertEqual([event["job_id"] for event in raised.exception.events], ["c-down"])
        self.assertEqual(len(sleep.delays), 2)
        self.assertTrue(all(0 <= delay <= 1.5 for delay in sleep.delays))

    def test_refused_events_come_back_with_their_field_errors(self):
        errors = [{"field": "job_id", "message": "required"}]
        self.server.script = [
            (207, {"stored": 1, "duplicates": 0, "errors": [{"index": 1, "errors": errors}]}, {})
        ]
        bad = {"type": "job_started", "payload": {}}
        client = self.client()
        client.send([job_started("c-ok"), bad])

        (reject,) = client.close()
        self.assertIs(reject.event, bad)
        self.assertEqual(reject.errors, errors)
        self.assertIn("job_id: required", str(reject))
        self.assertEqual((client.totals.stored, client.totals.rejected), (1, 1))

    def test_a_bad_request_raises_with_the_servers_message(self):
        self.server.script = [(401, {"error": "unknown token"}, {})]
        client = self.client()
        client.send([job_started("c-401")])

        with self.assertRaises(TraceVizError) as raised:
            client.close()
        self.assertEqual(raised.exception.status, 401)
        self.assertIn("unknown token", str(raised.exception))

    def test_a_step_reports_its_start_and_its_result(self):
        with self.client() as client, client.step("c-step", "fetch", attempt=2) as step:
            step.results["contacts"] = 120

        started, finished = self.server.events
        self.assertEqual((started["type"], finished["type"]), ("node_started", "node_finished"))
        self.assertEqual(started["payload"]["node_id"], "fetch")
        self.assertEqual(finished["payload"]["attempt"], 2)
        self.assertEqual(finished["payload"]["result_type"], "success")
        self.assertEqual(finished["payload"]["payload_results"], {"contacts": 120})

    def test_a_failing_step_reports_its_result_type_and_reraises(self):
        cases = [
            (RetryableError("CRM 503", failure_code="provider_retryable"), "retryable_failure"),
            (PermanentError("403", error_type="permission"), "permanent_failure"),
            (CompensatableError("half written"), "compensatable_failure"),
            (KeyError("other"), "permanent_failure"),
        ]
        for error, result_type in cases:
            with self.subTest(result_type=result_type, error=type(error).__name__):
                self.server.requests.clear()
                with (
                    self.client() as client,
                    self.assertRaises(type(error)),
                    client.step("c-fail", "write_crm"),
                ):
                    raise error
                finished = self.server.events[-1]["payload"]
                self.assertEqual(finished["result_type"], result_type)
                self.assertEqual(
                    finished.get("failure_code", ""), getattr(error, "failure_code", "")
                )
                self.assertEqual(finished.get("error_type", ""), getattr(error, "error_type", ""))


class RetryAfterTest(unittest.TestCase):
    def test_seconds_and_http_dates_are_read_and_anything_else_is_not(self):
        self.assertEqual(tvz.retry_after_seconds("7"), 7.0)
        self.assertEqual(tvz.retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT"), 0.0)
        self.assertIsNone(tvz.retry_after_seconds("soon"))
        self.assertIsNone(tvz.retry_after_seconds(None))


class CommandLineTest(unittest.TestCase):
    def setUp(self):
        self.server = FakeTraceViz()
        self.addCleanup(self.server.stop)
        folder = tempfile.TemporaryDirectory()
        self.addCleanup(folder.cleanup)
        self.folder = Path(folder.name)

    def run_cli(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "traceviz_client", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def test_send_posts_the_files_events_as_they_are_and_says_what_was_stored(self):
        path = self.folder / "events.ndjson"
        path.write_text(json.dumps(job_started("c-cli")) + "\n\nnot json\n")

        result = self.run_cli("send", str(path), "--url", self.server.url, "--token", TOKEN)

        self.assertEqual(result.returncode, 1, result.stderr)  # the unreadable line
        self.assertIn("2 lines: 1 stored, 0 duplicates, 1 rejected", result.stdout)
        # The server's content hash makes a resend idempotent: no id or time is added.
        self.assertEqual(self.server.events, [job_started("c-cli")])

    def test_send_without_a_url_or_token_is_refused(self):
        result = self.run_cli("send", str(self.folder / "none.ndjson"))

        self.assertEqual(result.returncode, 2)
        self.assertIn("--url and --token are required", result.stderr)


class ImportTest(unittest.TestCase):
    def test_importing_the_client_imports_neither_django_nor_celery(self):
        check = (
            "import traceviz_client, sys; "
            "assert 'django' not in sys.modules and 'celery' not in sys.modules"
        )
        result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    unittest.main()
