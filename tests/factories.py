"""Plain factory functions for events, users and stored jobs."""

from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import Group, User
from django.utils import timezone

from jobs.contract import bodies, events
from jobs.ingest.store import store_batch

BASE_TS = datetime(2026, 3, 2, 9, 0, 0, tzinfo=UTC)


def ts(seconds: float) -> str:
    """An RFC 3339 timestamp ``seconds`` after a fixed base time."""
    return (BASE_TS + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def event(
    type_: str, job_id: str = "j1", at: float = 0, event_id: str | None = None, seq=None, **payload
) -> dict:
    item = {"type": type_, "job_id": job_id, "ts": ts(at), "payload": payload}
    if event_id is not None:
        item["event_id"] = event_id
    if seq is not None:
        item["seq"] = seq
    return item


OPENAI = {"provider": "openai", "model": "gpt-4.1"}
ANTHROPIC = {"provider": "anthropic", "model": "claude-x"}


def degraded_planner(job_id: str, at: float, **job_started) -> list[dict]:
    """A job started on openai whose planner degraded on anthropic (the job failed);
    ``job_started``: more fields of its ``job_started``."""
    return [
        event("job_started", job_id, at, **OPENAI, **job_started),
        event("graph.next_step.parse_invalid", job_id, at + 1, attempt=1, **ANTHROPIC),
        event(
            "graph.next_step.degraded",
            job_id,
            at + 2,
            attempts=1,
            reason="next_step_parse_failed",
            **ANTHROPIC,
        ),
    ]


def recent_event(type_: str, job_id: str, minutes_ago: float, **payload) -> dict:
    """An event ``minutes_ago`` before now (for pages whose default range is recent)."""
    moment = timezone.now() - timedelta(minutes=minutes_ago)
    ts_ = moment.isoformat().replace("+00:00", "Z")
    return {"type": type_, "job_id": job_id, "ts": ts_, "payload": payload}


def started(node_id: str, job_id: str = "j1", at: float = 0, attempt: int = 1, **payload) -> dict:
    return event("node_started", job_id, at, node_id=node_id, attempt=attempt, **payload)


def finished(
    node_id: str,
    result_type: str | None = "success",
    job_id: str = "j1",
    at: float = 1,
    attempt: int = 1,
    **payload,
) -> dict:
    if result_type is not None:
        payload["result_type"] = result_type
    return event("node_finished", job_id, at, node_id=node_id, attempt=attempt, **payload)


def parsed(items: list[dict]) -> list[events.Event]:
    """Validated events with their timestamps, as replay takes them; fails on invalid items."""
    batch = bodies.parse_items(items, max_events=100_000)
    assert not batch.errors, batch.errors
    return [event for _index, event in batch.events]


def store(items: list[dict], token=None):
    """Store events through the ingest path (no HTTP); returns the IngestResult."""
    return store_batch(bodies.parse_items(items, max_events=100_000), token=token)


def user(username: str, *groups: str, staff: bool = False, password: str = "pw-traceviz-1") -> User:
    account = User.objects.create_user(username, password=password, is_staff=staff)
    for name in groups:
        account.groups.add(Group.objects.get_or_create(name=name)[0])
    return account
