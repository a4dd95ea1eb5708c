"""Shared fixtures. Outside CI the suite falls back to SQLite and skips what needs absent
services, saying so; with CI=true a missing PostgreSQL or Redis is a failure, never a skip."""

import json
import os

import pytest
from django.db import connection

from jobs.models import IngestToken

IN_CI = os.environ.get("CI") == "true"
REDIS_URL = os.environ.get("TRACEVIZ_TEST_REDIS_URL", "")


def pytest_sessionstart(session):
    if not IN_CI:
        return
    if connection.vendor != "postgresql":
        raise pytest.UsageError("CI=true: the suite must run on PostgreSQL (set DATABASE_URL)")
    if not REDIS_URL:
        raise pytest.UsageError("CI=true: TRACEVIZ_TEST_REDIS_URL must point at Redis")


def pytest_report_header(config):
    return f"traceviz: database {connection.vendor}, redis {REDIS_URL or 'not configured'}"


def require_postgres():
    """Skip (outside CI) or fail (in CI) a test that needs PostgreSQL."""
    if connection.vendor == "postgresql":
        return
    if IN_CI:
        pytest.fail("CI=true and the database is not PostgreSQL")
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
