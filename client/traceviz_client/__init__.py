"""A Python client for producers: send events to traceviz's ``POST /api/v1/events``.

The ``traceviz-client`` distribution: standard library only (urllib), no dependencies::

    from traceviz_client import TraceVizClient, RetryableError

    with TraceVizClient("https://traceviz.example.com", token) as client:
        client.send([{"type": "job_started", "job_id": "run-1", "payload": {"workflow": "crm"}}])
        with client.step("run-1", "fetch_contacts") as step:
            step.results["contacts"] = fetch()  # raise RetryableError(...) for a transient failure

Events are buffered and sent in batches (``max_batch`` events, or when the oldest buffered event
is ``flush_interval`` seconds old). Each event gets an ``event_id`` (uuid4) and a ``ts`` the
first time it is handed to ``send``, so every retry of it is idempotent on the server. 503, 429
and connection errors are retried with exponential backoff and jitter, honouring Retry-After.
Nothing is dropped silently: events the server refused come back from ``send``/``flush``/
``close`` as ``Reject`` objects with their field errors, and a batch that could not be delivered
raises ``TraceVizError`` carrying the events.

Command line: ``traceviz-client send FILE.ndjson --url URL --token TOKEN`` (or
``python -m traceviz_client send ...``).
"""

import argparse
import email.utils
import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

EVENTS_PATH = "/api/v1/events"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
USER_AGENT = "traceviz-client/1"
# A Retry-After longer than this is a misconfigured server, not a reason to hang a producer.
MAX_RETRY_AFTER_SECONDS = 300.0


# --- step failures: the result types of the event contract (the server's docs/contract.md,
# "Replay: steps and results") ----------------------------------------------------------------


class StepFailure(Exception):
    """Base of the step failure classes; ``result_type`` is what ``node_finished`` reports.

    ``failure_code`` and ``error_type`` (optional) go on the event as they are.
    """

    result_type = "permanent_failure"

    def __init__(self, reason: str = "", *, failure_code: str = "", error_type: str = ""):
        super().__init__(reason)
        self.failure_code = failure_code
        self.error_type = error_type


class RetryableError(StepFailure):
    """Transient (LLM format, network timeout): the step may be retried."""

    result_type = "retryable_failure"


class PermanentError(StepFailure):
    """Not retryable (404, permission, business rejection): the step must not run again."""

    result_type = "permanent_failure"


class CompensatableError(StepFailure):
    """Partial commit (a release created, its upload failed): compensation may run."""

    result_type = "compensatable_failure"


# --- delivery ------------------------------------------------------------------------------


class TraceVizError(Exception):
    """A batch the server did not take and that retrying cannot fix (or retries ran out).

    ``status`` is the HTTP status (None for a connection error), ``events`` the batch that was
    not delivered: the client no longer holds them, the caller owns them now.
    """

    def __init__(self, message: str, *, status: int | None = None, events=()):
        super().__init__(message)
        self.status = status
        self.events: list[dict[str, Any]] = list(events)
        self.rejects: list[Reject] = []  # rejects found earlier, handed over with the error


@dataclass(frozen=True, slots=True)
class Reject:
    """An event the server refused, with its field errors ({"field": ..., "message": ...})."""

    event: dict[str, Any]
    errors: list[dict[str, str]]

    def __str__(self) -> str:
        problems = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in self.errors)
        return f"{self.event.get('type')} {self.event.get('event_id', '')}: {problems}"


@dataclass(slots=True)
class Totals:
    """What the server answered so far, summed over batches."""

    sent: int = 0
    stored: int = 0
    duplicates: int = 0
    rejected: int = 0


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def retry_after_seconds(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date), or None."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


class TraceVizClient:
    """Buffers events and sends them in batches; see the module docstring.

    Thread-safe. A background thread sends a batch once its oldest event is ``flush_interval``
    seconds old; rejects or an error from such a send are handed over by the next ``send``,
    ``flush`` or ``close``. ``fill_defaults=False`` leaves ``event_id`` and ``ts`` to the server
    (its content hash then makes a resend of the same lines idempotent, as the CLI wants).
    """

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        max_batch: int = 500,
        flush_interval: float = 2.0,
        timeout: float = 10.0,
        max_retries: int = 6,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        fill_defaults: bool = True,
        sleep=time.sleep,
    ):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.url = base_url.rstrip("/") + EVENTS_PATH
        self.token = token
        self.max_batch = max_batch
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.fill_defaults = fill_defaults
        self.totals = Totals()
        self.rejects: list[Reject] = []  # every reject over the client's life, for inspection
        self._sleep = sleep
        self._buffer: list[dict[str, Any]] = []
        self._oldest_at: float | None = None
        self._lock = threading.Lock()  # the buffer and what background sends left behind
        self._send_lock = threading.Lock()  # one batch on the wire at a time, in order
        self._pending_rejects: list[Reject] = []
        self._pending_error: TraceVizError | None = None
        self._closed = threading.Event()
        self._timer: threading.Thread | None = None

    # -- public ----------------------------------------------------------------------------

    def send(self, events) -> list[Reject]:
        """Buffer events (dicts); sends full batches now. Returns the rejects known so far.

        Sets ``event_id`` (and ``ts``) on each dict that has none, in place, so handing the
        same dict over again is idempotent too. Raises ``TraceVizError`` for a batch that could
        not be delivered.
        """
        if self._closed.is_set():
            raise TraceVizError("client is closed")
        events = [events] if isinstance(events, dict) else list(events)
        for event in events:
            if self.fill_defaults:
                event.setdefault("event_id", str(uuid.uuid4()))
                event.setdefault("ts", now_rfc3339())
        with self._lock:
            if events and not self._buffer:
                self._oldest_at = time.monotonic()
            self._buffer.extend(events)
            due = len(self._buffer) >= self.max_batch or self._is_due()
        self._start_timer()
        if due:
            return self.flush()
        return self._take_pending()

    def flush(self) -> list[Reject]:
        """Send everything buffered now. Returns the rejects, raises ``TraceVizError``."""
        rejects: list[Reject] = []
        while True:
            with self._lock:
                batch = self._buffer[: self.max_batch]
                del self._buffer[: self.max_batch]
                self._oldest_at = time.monotonic() if self._buffer else None
            if not batch:
                break
            rejects.extend(self._deliver(batch))
        return self._take_pending() + rejects

    def close(self) -> list[Reject]:
        """Flush and stop the background sender. Returns the rejects, raises ``TraceVizError``."""
        try:
            return self.flush()
        finally:
            self._closed.set()
            if self._timer is not None and self._timer is not threading.current_thread():
                self._timer.join(timeout=self.timeout)

    def __enter__(self) -> "TraceVizClient":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        """Closes; rejects nobody received yet raise ``TraceVizError`` (unless the block is
        already raising: they stay in ``client.rejects``)."""
        rejects = self.close()
        if rejects and exc_type is None:
            error = TraceVizError(
                f"{len(rejects)} events rejected, first {rejects[0]}",
                status=400,
                events=[reject.event for reject in rejects],
            )
            error.rejects = rejects
            raise error

    def step(self, job_id: str, node_id: str, attempt: int = 1, **started_payload) -> "Step":
        """A context manager that reports one attempt of one node; see ``Step``."""
        return Step(self, job_id, node_id, attempt, started_payload)

    # -- delivery --------------------------------------------------------------------------

    def _deliver(self, batch: list[dict[str, Any]]) -> list[Reject]:
        with self._send_lock:
            status, body = self._post_with_retries(batch)
        self.totals.sent += len(batch)
        # A 400 with per-item errors is a batch whose every event was refused, not a bad body.
        if status in (200, 207) or (status == 400 and isinstance(body.get("errors"), list)):
            self.totals.stored += int(body.get("stored", 0))
            self.totals.duplicates += int(body.get("duplicates", 0))
            rejects = [
                Reject(batch[item["index"]], item.get("errors", []))
                for item in body.get("errors", [])
                if isinstance(item, dict)
                and isinstance(item.get("index"), int)
                and 0 <= item["index"] < len(batch)
            ]
            self.totals.rejected += len(rejects)
            self.rejects.extend(rejects)
            return rejects
        message = body.get("error") if isinstance(body.get("error"), str) else f"HTTP {status}"
        raise TraceVizError(
            f"traceviz refused a batch of {len(batch)} events: {message}",
            status=status,
            events=batch,
        )

    def _post_with_retries(self, batch: list[dict[str, Any]]) -> tuple[int, dict]:
        data = json.dumps(batch, ensure_ascii=False).encode("utf-8")
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                return self._post(data)
            except urllib.error.HTTPError as error:
                status, body = error.code, _json_body(error.read())
                if status not in RETRY_STATUSES:
                    return status, body
                if last:
                    raise TraceVizError(
                        f"traceviz answered {status} {body.get('error', '')} after "
                        f"{attempt + 1} tries",
                        status=status,
                        events=batch,
                    ) from None
                self._sleep(self._delay(attempt, error.headers.get("Retry-After")))
            except (urllib.error.URLError, OSError) as error:
                if last:
                    raise TraceVizError(
                        f"cannot reach traceviz at {self.url} after {attempt + 1} tries: {error}",
                        events=batch,
                    ) from None
                self._sleep(self._delay(attempt, None))
        raise AssertionError("unreachable")

    def _post(self, data: bytes) -> tuple[int, dict]:
        request = urllib.request.Request(
            self.url,
            data=data,
            method="POST",
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "User-Agent": USER_AGENT,
            },
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            return response.status, _json_body(response.read())

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """Retry-After when the server sent one, else capped exponential backoff with full
        jitter (so producers that failed together do not come back together)."""
        asked = retry_after_seconds(retry_after)
        if asked is not None:
            return min(asked, MAX_RETRY_AFTER_SECONDS)
        return random.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))

    # -- background flush ------------------------------------------------------------------

    def _is_due(self) -> bool:
        return (
            self._oldest_at is not None
            and time.monotonic() - self._oldest_at >= self.flush_interval
        )

    def _start_timer(self) -> None:
        with self._lock:
            if self._timer is not None or self.flush_interval <= 0:
                return
            self._timer = threading.Thread(
                target=self._run_timer, name="traceviz-client-flush", daemon=True
            )
        self._timer.start()

    def _run_timer(self) -> None:
        while not self._closed.wait(self.flush_interval / 4):
            with self._lock:
                due = self._is_due() and self._pending_error is None
            if not due:
                continue
            try:
                rejects = self.flush()
            except TraceVizError as error:
                with self._lock:
                    self._pending_error = error
            else:
                with self._lock:
                    self._pending_rejects.extend(rejects)

    def _take_pending(self) -> list[Reject]:
        with self._lock:
            error, self._pending_error = self._pending_error, None
            rejects, self._pending_rejects = self._pending_rejects, []
        if error is not None:
            error.rejects = rejects  # not lost with the error either
            raise error
        return rejects


def _json_body(raw: bytes) -> dict:
    try:
        body = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


# --- steps ---------------------------------------------------------------------------------


class Step:
    """Reports one node attempt: ``node_started`` on entry, ``node_finished`` on exit.

    ``result_type`` comes from the exception that left the block: a ``StepFailure`` subclass
    gives its own (with ``failure_code``/``error_type``), any other exception
    ``permanent_failure`` with ``reason=str(exc)``, none ``success``. ``results`` becomes
    ``payload_results``; ``fields`` adds other node_finished fields (tool, state, ...). The
    exception is never swallowed.
    """

    def __init__(
        self,
        client: TraceVizClient,
        job_id: str,
        node_id: str,
        attempt: int,
        started_payload: dict[str, Any],
    ):
        self.client = client
        self.job_id = job_id
        self.node_id = node_id
        self.attempt = attempt
        self.started_payload = started_payload
        self.results: dict[str, Any] = {}
        self.fields: dict[str, Any] = {}
        self._started = 0.0

    def __enter__(self) -> "Step":
        self._started = time.perf_counter()
        self._send(self._event("node_started", self.started_payload))
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        duration_ms = (time.perf_counter() - self._started) * 1000
        payload: dict[str, Any] = {**self.fields, "duration_ms": round(duration_ms, 3)}
        if exc is None:
            payload["result_type"] = "success"
        else:
            payload["result_type"] = getattr(exc, "result_type", "permanent_failure")
            payload["reason"] = str(exc) or type(exc).__name__
            for name in ("failure_code", "error_type"):
                if getattr(exc, name, ""):
                    payload[name] = getattr(exc, name)
        if self.results or exc is None:
            payload["payload_results"] = self.results
        self._send(self._event("node_finished", payload))
        return False

    def _send(self, event: dict[str, Any]) -> None:
        # Rejects found while sending go back to the client, for its next send/flush/close.
        if rejects := self.client.send([event]):
            with self.client._lock:
                self.client._pending_rejects[:0] = rejects

    def _event(self, event_type: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": event_type,
            "job_id": self.job_id,
            "payload": {**payload, "node_id": self.node_id, "attempt": self.attempt},
        }


# --- command line --------------------------------------------------------------------------


@dataclass(slots=True)
class FileSummary:
    lines: int = 0
    unreadable: list[str] = field(default_factory=list)


def _read_ndjson(path: str, summary: FileSummary) -> list[tuple[int, dict[str, Any]]]:
    """(line number, event) for each JSON object line; other lines go to ``summary``."""
    events = []
    stream = sys.stdin if path == "-" else open(path, encoding="utf-8")  # noqa: SIM115
    with stream:
        for number, line in enumerate(stream, start=1):
            if not line.strip():
                continue
            summary.lines += 1
            try:
                event = json.loads(line)
            except ValueError as error:
                summary.unreadable.append(f"line {number}: not JSON: {error}")
                continue
            if not isinstance(event, dict):
                summary.unreadable.append(f"line {number}: not a JSON object")
                continue
            events.append((number, event))
    return events


def main(argv: list[str] | None = None) -> int:
    """``send FILE.ndjson --url URL --token TOKEN``: 0 when everything was stored, 1 when events
    were rejected, 2 when a batch could not be delivered."""
    parser = argparse.ArgumentParser(prog="traceviz-client")
    commands = parser.add_subparsers(dest="command", required=True)
    send = commands.add_parser("send", help="send the events of an NDJSON file ('-' for stdin)")
    send.add_argument("file")
    send.add_argument(
        "--url",
        default=os.environ.get("TRACEVIZ_URL"),
        help="traceviz base URL (default: $TRACEVIZ_URL)",
    )
    send.add_argument(
        "--token",
        default=os.environ.get("TRACEVIZ_TOKEN"),
        help="ingest token (default: $TRACEVIZ_TOKEN)",
    )
    send.add_argument("--batch", type=int, default=1000, help="events per request")
    args = parser.parse_args(argv)
    if not args.url or not args.token:
        parser.error("--url and --token are required (or TRACEVIZ_URL / TRACEVIZ_TOKEN)")

    summary = FileSummary()
    try:
        numbered = _read_ndjson(args.file, summary)
    except OSError as error:
        print(f"cannot read {args.file}: {error}", file=sys.stderr)
        return 2
    lines = {id(event): number for number, event in numbered}
    # The server's content hash is the idempotency key: re-running the same file is harmless.
    client = TraceVizClient(
        args.url, args.token, max_batch=max(1, args.batch), flush_interval=0, fill_defaults=False
    )
    try:
        rejects = client.send([event for _number, event in numbered]) + client.close()
    except TraceVizError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    totals = client.totals
    print(
        f"{summary.lines} lines: {totals.stored} stored, {totals.duplicates} duplicates, "
        f"{len(rejects) + len(summary.unreadable)} rejected"
    )
    for problem in summary.unreadable:
        print(problem)
    for reject in rejects:
        problems = "; ".join(f"{e.get('field')}: {e.get('message')}" for e in reject.errors)
        print(f"line {lines[id(reject.event)]}: {problems}")
    return 1 if rejects or summary.unreadable else 0
