"""Per-token ingest limits and login limits answer 429 with Retry-After."""

from datetime import UTC, datetime

import pytest

from jobs.models import IngestToken
from jobs.web import ratelimit
from tests.factories import event


def test_requests_within_the_limit_pass_and_the_next_one_waits_for_the_window(db):
    now = datetime(2026, 3, 2, 9, 0, 20, tzinfo=UTC)
    assert [ratelimit.hit("k", 2, 60, now) for _ in range(2)] == [None, None]
    assert ratelimit.hit("k", 2, 60, now) == 40  # seconds left in the minute
    assert ratelimit.hit("k", 2, 60, datetime(2026, 3, 2, 9, 1, 0, tzinfo=UTC)) is None


def test_a_limit_of_zero_is_unlimited(db):
    assert all(ratelimit.hit("k", 0, 60) is None for _ in range(5))


def test_ingest_over_the_token_limit_answers_429_with_retry_after(send, ingest_token):
    IngestToken.objects.update(rate_limit_per_minute=2)
    statuses = [send([event("job_started", f"j{n}")]).status_code for n in range(3)]
    assert statuses == [200, 200, 429]
    response = send([event("job_started", "j9")])
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "2 requests per minute" in response.json()["error"]


def test_limits_are_per_token(client, send, db):
    IngestToken.objects.update(rate_limit_per_minute=1)
    assert send([event("job_started", "a")]).status_code == 200
    _other, raw = IngestToken.issue("other-producer")
    other = send([event("job_started", "b")], HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert other.status_code == 200


@pytest.mark.parametrize("attempts", [3])
def test_login_attempts_past_the_limit_answer_429(client, db, settings, attempts):
    settings.TRACEVIZ_LOGIN_RATE_LIMIT = 2
    codes = [
        client.post("/accounts/login/", {"username": "x", "password": "wrong"}).status_code
        for _ in range(attempts)
    ]
    assert codes == [200, 200, 429]
    response = client.post("/accounts/login/", {"username": "x", "password": "wrong"})
    assert b"Too many sign-in attempts" in response.content
    assert response.has_header("Retry-After")
