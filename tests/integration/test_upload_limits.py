"""Django's form upload limit (DATA_UPLOAD_MAX_MEMORY_SIZE) stays at its default everywhere;
the ingest views read their bodies themselves, up to TRACEVIZ_MAX_BODY_BYTES."""

import json

import pytest
from django.conf import global_settings, settings

from tests.factories import event

pytestmark = pytest.mark.django_db
OVER_DJANGO_LIMIT = global_settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1024


def test_the_setting_is_django_default():
    assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE == global_settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def test_a_huge_form_post_outside_ingest_is_refused(client):
    body = {"username": "x", "password": "y" * OVER_DJANGO_LIMIT}
    assert client.post("/accounts/login/", body).status_code == 400


def test_ingest_still_takes_a_body_over_djangos_limit(send):
    body = " " * OVER_DJANGO_LIMIT + json.dumps([event("job_started", "big-body")])
    response = send(body)
    assert response.status_code == 200, response.content[:300]
    assert response.json()["stored"] == 1


def test_otlp_still_takes_a_body_over_djangos_limit(client, ingest_token):
    body = " " * OVER_DJANGO_LIMIT + json.dumps({"resourceSpans": []})
    response = client.post(
        "/v1/traces",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
    )
    assert response.status_code == 200, response.content[:300]
