"""Staff (is_staff, in the "staff" group that migration 0018 fills with permissions) manage
alert rules and ingest tokens in the admin, without being superusers."""

import html
import re

import pytest
from django.contrib.auth.models import Group, User

from jobs.models import AlertRule, IngestToken, Step
from tests.factories import finished, started, store

pytestmark = pytest.mark.django_db

RULE = {
    "name": "degraded-openai",
    "kind": "planner_degraded_rate",
    "enabled": "on",
    "severity": "medium",
    "provider": "openai",
    "model": "",
    "failure_code": "",
    "threshold": "0.2",
    "window_minutes": "15",
    "min_jobs": "5",
    "episodes-TOTAL_FORMS": "0",
    "episodes-INITIAL_FORMS": "0",
    "episodes-MIN_NUM_FORMS": "0",
    "episodes-MAX_NUM_FORMS": "0",
}


@pytest.fixture
def staff(client):
    user = User.objects.create_user("sam", is_staff=True)
    user.groups.add(Group.objects.get(name="staff"))
    client.force_login(user)
    return user


def test_staff_add_an_alert_rule(client, staff):
    response = client.post("/admin/jobs/alertrule/add/", RULE)
    assert response.status_code == 302, response.content[:500]
    assert AlertRule.objects.get(name="degraded-openai").provider == "openai"


def test_staff_issue_a_token_and_see_it_once(client, staff):
    response = client.post("/admin/jobs/ingesttoken/add/", {"name": "producer-a"})
    assert response.status_code == 200
    raw = re.search(r"tvz_[A-Za-z0-9_-]+", response.content.decode()).group(0)
    token = IngestToken.objects.get(name="producer-a")
    assert IngestToken.authenticate(raw) == token
    assert raw not in client.get(f"/admin/jobs/ingesttoken/{token.pk}/change/").content.decode()


def test_staff_revoke_a_token(client, staff):
    token, raw = IngestToken.issue("producer-b")
    response = client.post(
        "/admin/jobs/ingesttoken/",
        {"action": "revoke_tokens", "_selected_action": [token.pk]},
    )
    assert response.status_code == 302
    assert IngestToken.authenticate(raw) is None


def test_staff_read_jobs_but_never_edit_them(client, staff):
    assert client.get("/admin/jobs/job/").status_code == 200
    assert client.get("/admin/jobs/job/add/").status_code == 403


def test_staff_see_a_steps_json_as_json(client, staff):
    """A step's JSON columns kept as text show in the admin as JSON, as its jsonb ones do, not
    as the Python values they read back as."""
    store([started("n1", at=1), finished("n1", at=2, payload_results={"ok": True, "note": None})])
    step = Step.objects.get()
    page = client.get(f"/admin/jobs/step/{step.pk}/change/").content.decode()
    assert html.escape('{"ok":true,"note":null}') in page
    assert "True" not in page
    job = client.get(f"/admin/jobs/job/{step.job_id}/change/").content.decode()
    assert html.escape('{"ok":true,"note":null}') in job


def test_a_staff_flag_without_the_group_opens_no_alert_rules(client):
    client.force_login(User.objects.create_user("flag-only", is_staff=True))
    assert client.get("/admin/jobs/alertrule/add/").status_code == 403
