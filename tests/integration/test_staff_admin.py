"""Staff (is_staff, in the "staff" group that migration 0018 fills with permissions) manage
alert rules and ingest tokens in the admin, without being superusers."""

import re

import pytest
from django.contrib.auth.models import Group, User

from jobs.models import AlertRule, IngestToken

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


def test_a_staff_flag_without_the_group_opens_no_alert_rules(client):
    client.force_login(User.objects.create_user("flag-only", is_staff=True))
    assert client.get("/admin/jobs/alertrule/add/").status_code == 403
