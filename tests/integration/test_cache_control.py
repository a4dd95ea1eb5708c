"""Nothing traceviz answers is kept by a browser or a shared cache, but its static files: every
URL of the URLconf, as staff, as nobody and with an ingest token, answers with
``Cache-Control: private, no-store``; static files keep whitenoise's caching."""

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils.cache import get_max_age

from jobs.models import Escalation, FailureGroup
from tests.factories import event, finished, started, store, user

pytestmark = pytest.mark.django_db

# What each named part of a URL pattern is filled with (anything else: "1"); ``world`` adds
# the stored escalation and failure group.
PARTS = {
    "job_id": "j1",
    "action": "acknowledge",
    "app_label": "jobs",
    "url": "jobs/job/",
    "uidb64": "MQ",
    "token": "set-password",
}
PART = re.compile(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)")


def every_url(parts: dict, patterns=None, prefix: str = ""):
    """Every route of the URLconf as a path, each named part filled in from ``parts``."""
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from every_url(parts, pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            yield "/" + PART.sub(lambda m: parts.get(m[1] or m[2], "1"), route).strip("^$")


@pytest.fixture
def world(db) -> dict:
    """A failed job with its escalation and failure group; the parts that name them."""
    store(
        [
            event("job_started", "j1", 0),
            started("n1", "j1", 1),
            finished("n1", "permanent_failure", "j1", 2, error_type="internal", reason="boom"),
        ]
    )
    return PARTS | {
        "escalation_id": str(Escalation.objects.get().pk),
        "fingerprint": FailureGroup.objects.get().fingerprint,
    }


def private(response) -> bool:
    header = response.get("Cache-Control", "")
    directives = {part.strip().split("=")[0] for part in header.split(",")}
    return {"private", "no-store"} <= directives


def test_the_walk_reaches_every_page_api_export_and_admin_url(world):
    paths = set(every_url(world))
    assert {"/", "/jobs/j1/", "/jobs/j1/events.ndjson", "/api/v1/jobs/j1", "/admin/"} <= paths
    assert f"/escalations/{world['escalation_id']}/acknowledge/" in paths
    assert f"/failures/{world['fingerprint']}/" in paths
    assert len(paths) > 100


def test_every_url_answers_private_no_store_to_staff(world, client):
    admin = user("root", staff=True)
    admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    for path in every_url(world):
        response = client.get(path, REMOTE_ADDR="127.0.0.1")
        assert private(response), (path, response.status_code, response.get("Cache-Control"))


def test_every_url_answers_private_no_store_to_nobody(world, client):
    for path in every_url(world):
        response = client.get(path)
        assert private(response), (path, response.status_code, response.get("Cache-Control"))


def test_the_read_api_exports_and_ingest_answer_private_no_store_to_a_token(
    world, client, ingest_token
):
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {ingest_token}"}
    for path in ("/api/v1/jobs", "/api/v1/jobs/j1"):
        assert private(client.get(path, **bearer)), path
    sent = client.post(
        "/api/v1/events", b'{"type": "t", "job_id": "j2"}', "application/json", **bearer
    )
    assert sent.status_code == 200 and private(sent)
    client.force_login(user("eve", "engineer"))
    for path in ("/jobs/j1/events.ndjson", "/jobs/j1/events.json"):
        response = client.get(path)
        assert response.status_code == 200 and private(response), path


def test_static_files_keep_their_caching(client):
    response = client.get("/static/css/traceviz.css")
    assert response.status_code == 200
    assert "no-store" not in response.get("Cache-Control", "")
    assert get_max_age(response) > 0
