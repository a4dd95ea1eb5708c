"""A signed-in user who holds no role reads nothing: every page and every JSON read endpoint
answers 403, as the access matrix's operator rows would answer 200 or act."""

import pytest
from django.contrib.auth.models import User

from tests.integration.test_access_matrix import (
    ACTION,
    BULK_PREVIEW,
    MATRIX,
    PAGE,
    RAW_EVENTS,
    READ_API,
    REMOTE_ADDR,
    _encode,
    fill,
    world,  # noqa: F401 (fixture)
)

pytestmark = pytest.mark.django_db

ROLE_GATED = (PAGE, RAW_EVENTS, READ_API, BULK_PREVIEW, ACTION)
GATED_ROWS = [row for row in MATRIX if any(row.expected is profile for profile in ROLE_GATED)]


def test_the_gated_rows_include_the_json_read_api():
    assert {"GET /api/v1/jobs", "GET /api/v1/jobs/{job}"} <= {row.id for row in GATED_ROWS}


@pytest.mark.parametrize("row", GATED_ROWS, ids=lambda row: row.id)
def test_a_user_without_a_role_gets_403(client, world, row):  # noqa: F811
    client.force_login(User.objects.create(username="no-role"))
    data = row.data
    if isinstance(data, dict):
        data = {key: fill(value, world) for key, value in data.items()}
    response = client.generic(
        row.method,
        fill(row.path, world),
        _encode(data, row.content_type),
        row.content_type,
        REMOTE_ADDR=REMOTE_ADDR,
    )
    assert response.status_code == 403, (row.id, response.content[:300])


def test_the_json_api_says_why_in_json(client, world):  # noqa: F811
    client.force_login(User.objects.create(username="no-role"))
    response = client.get("/api/v1/jobs")
    assert response.status_code == 403
    assert "role" in response.json()["error"]
