"""Per-token ingest limits answer 429 with Retry-After; sign-ins (the site's and the admin's)
are limited by django-axes per real client address."""

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User

from jobs.models import IngestToken
from jobs.web import ratelimit
from tests.factories import event

WRONG = {"username": "x", "password": "wrong"}


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


@pytest.fixture
def failure_limit(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.AXES_FAILURE_LIMIT = 2
    return 2


def test_login_failures_past_the_limit_answer_429(client, db, failure_limit):
    codes = [client.post("/accounts/login/", WRONG).status_code for _ in range(3)]
    assert codes == [200, 429, 429]
    response = client.post("/accounts/login/", WRONG)
    assert b"Too many sign-in attempts" in response.content
    assert int(response["Retry-After"]) >= 60


def test_a_locked_out_address_cannot_sign_in_even_with_the_right_password(
    client, db, failure_limit
):
    User.objects.create_user("alice", password="right-password-1")
    for _ in range(2):
        client.post("/accounts/login/", WRONG)
    response = client.post(
        "/accounts/login/", {"username": "alice", "password": "right-password-1"}
    )
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session


def test_the_admin_login_is_limited_too(client, db, failure_limit):
    codes = [client.post("/admin/login/", WRONG).status_code for _ in range(3)]
    assert codes == [200, 429, 429]


def test_site_and_admin_failures_count_together(client, db, failure_limit):
    client.post("/admin/login/", WRONG)
    assert client.post("/accounts/login/", WRONG).status_code == 429


def test_the_lockout_is_per_client_address(client, db, failure_limit):
    for _ in range(2):
        client.post("/accounts/login/", WRONG, REMOTE_ADDR="198.51.100.1")
    other = client.post("/accounts/login/", WRONG, REMOTE_ADDR="198.51.100.2")
    assert other.status_code == 200


def test_a_forwarded_for_header_from_an_untrusted_peer_changes_nothing(client, db, failure_limit):
    # Without a trusted proxy, rotating X-Forwarded-For must not dodge the limit.
    codes = [
        client.post(
            "/accounts/login/",
            WRONG,
            REMOTE_ADDR="198.51.100.1",
            HTTP_X_FORWARDED_FOR=f"10.0.0.{n}",
        ).status_code
        for n in range(3)
    ]
    assert codes == [200, 429, 429]


def test_behind_a_trusted_proxy_one_attacker_does_not_lock_out_everyone(
    client, db, failure_limit, settings
):
    settings.TRACEVIZ_TRUSTED_PROXY_NETWORKS = _networks("127.0.0.1")
    for _ in range(2):
        client.post(
            "/accounts/login/", WRONG, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.66"
        )
    attacker = client.post(
        "/accounts/login/", WRONG, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.66"
    )
    colleague = client.post(
        "/accounts/login/", WRONG, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.7"
    )
    assert (attacker.status_code, colleague.status_code) == (429, 200)


def _networks(*addresses):
    import ipaddress

    return [ipaddress.ip_network(address) for address in addresses]


@pytest.mark.parametrize(
    "username", ["x" * 5000, "a\x00b", "\x00", "é" * 300], ids=["long", "nul", "only-nul", "wide"]
)
def test_a_hostile_username_is_refused_not_a_500(client, db, failure_limit, username):
    for path in ("/accounts/login/", "/admin/login/"):
        response = client.post(path, {"username": username, "password": "wrong"})
        assert response.status_code in (200, 429), (path, response.status_code)


def test_hostile_usernames_count_towards_the_lockout(client, db, failure_limit):
    client.post("/accounts/login/", {"username": "x" * 5000, "password": "wrong"})
    client.post("/accounts/login/", {"username": "a\x00b", "password": "wrong"})
    assert client.post("/accounts/login/", WRONG).status_code == 429
