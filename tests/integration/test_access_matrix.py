"""Who may do what (docs/architecture.md), as one table: every URL the project serves x every
kind of caller -> the status it gets. Rows are keyed by the URL pattern; a pattern without a row
fails ``test_every_url_pattern_has_a_row``, so a new URL cannot ship without deciding who may
use it. Admin is one row (its index); everything under admin/ is Django's own checks."""

from dataclasses import dataclass, field

import pytest
from django.contrib.auth.models import Group, User
from django.urls import URLResolver, get_resolver

from jobs.models import Escalation, FailureGroup, IngestToken, SavedView
from tests.factories import event, finished, started, store

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "operator", "support", "engineer", "staff", "token")
# Not on the metrics allow-list (loopback), so /metrics shows its own access rule.
REMOTE_ADDR = "203.0.113.9"
JOB_ID = "acc-job"


def statuses(anonymous, operator, support, engineer, staff, token) -> dict[str, int]:
    return dict(zip(ROLES, (anonymous, operator, support, engineer, staff, token), strict=True))


# Profiles: the statuses of each kind of URL.
PUBLIC = statuses(200, 200, 200, 200, 200, 200)
WRONG_METHOD = statuses(405, 405, 405, 405, 405, 405)
PAGE = statuses(302, 200, 200, 200, 200, 302)  # every role reads; a bearer token is no session
RAW_EVENTS = statuses(302, 403, 403, 200, 200, 302)  # engineers (and staff)
ACTION = statuses(302, 403, 303, 403, 303, 302)  # support (and staff), 303 back to the page
BULK_PREVIEW = statuses(302, 403, 200, 403, 200, 302)
INGEST = statuses(401, 401, 401, 401, 401, 200)  # the token only; sessions do not ingest
READ_API = statuses(401, 200, 200, 200, 200, 200)
METRICS = statuses(403, 403, 403, 403, 200, 403)  # off the allow-list: staff (or metrics token)
ADMIN = statuses(302, 302, 302, 302, 200, 302)
SIGNED_IN = statuses(302, 200, 200, 200, 200, 302)
LOGOUT = statuses(302, 302, 302, 302, 302, 302)
SAVE_VIEW = statuses(302, 303, 303, 303, 303, 302)  # every role saves its own, 303 to the view
SHARE_LINK = statuses(302, 302, 302, 302, 302, 302)  # every role is sent to the saved page
OWNER_ONLY = statuses(302, 303, 403, 403, 403, 302)  # the view belongs to the operator
# Every role acts on failure groups; unresolving a group that is unresolved is refused (400),
# which still shows who got past the access check.
GROUP_ACTION = statuses(302, 400, 400, 400, 400, 302)

# A live job page's poll of the world's job, which expects no events (paused for approval):
# every role reads it, and is told to stop polling (htmx's 286).
POLL_STOPPED = statuses(302, 286, 286, 286, 286, 302)
# The fragment URLs answer their partial to htmx (without it they send the reader to the page).
HTMX = {"HTTP_HX_REQUEST": "true"}
EVENTS_BODY = '{"type": "job_started", "job_id": "acc-ingested"}'


@dataclass(frozen=True)
class Row:
    pattern: str  # the URL pattern as get_resolver() spells it
    method: str
    path: str  # {job}, {esc} are filled from the world fixture
    expected: dict[str, int]
    data: dict | str | None = None
    content_type: str = "application/x-www-form-urlencoded"
    extra: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.method} {self.path}"


MATRIX = [
    Row("api/v1/events", "POST", "/api/v1/events", INGEST, EVENTS_BODY, "application/json"),
    Row("api/v1/events", "GET", "/api/v1/events", WRONG_METHOD),
    Row("v1/traces", "POST", "/v1/traces", INGEST, "{}", "application/json"),
    Row("v1/traces", "GET", "/v1/traces", WRONG_METHOD),
    Row("v1/logs", "POST", "/v1/logs", INGEST, "{}", "application/json"),
    Row("v1/logs", "GET", "/v1/logs", WRONG_METHOD),
    Row("api/v1/jobs", "GET", "/api/v1/jobs", READ_API),
    Row("api/v1/jobs", "POST", "/api/v1/jobs", WRONG_METHOD),
    Row("api/v1/jobs/<job_id:job_id>", "GET", "/api/v1/jobs/{job}", READ_API),
    Row("api/v1/jobs/<job_id:job_id>", "DELETE", "/api/v1/jobs/{job}", WRONG_METHOD),
    Row("api/v1/compare", "GET", "/api/v1/compare?a={job}&b={job}", READ_API),
    Row("api/v1/compare", "POST", "/api/v1/compare?a={job}&b={job}", WRONG_METHOD),
    Row("api/v1/openapi.json", "GET", "/api/v1/openapi.json", PUBLIC),
    Row("api/v1/openapi.json", "POST", "/api/v1/openapi.json", WRONG_METHOD),
    Row("healthz", "GET", "/healthz", PUBLIC),
    Row("healthz", "POST", "/healthz", WRONG_METHOD),
    Row("metrics", "GET", "/metrics", METRICS),
    Row("metrics", "POST", "/metrics", WRONG_METHOD),
    Row("dashboard/", "GET", "/dashboard/", PAGE),
    Row("dashboard/", "POST", "/dashboard/", WRONG_METHOD),
    Row("compare/", "GET", "/compare/?a={job}&b={job}", PAGE),
    Row("compare/", "POST", "/compare/?a={job}&b={job}", WRONG_METHOD),
    Row("failures/", "GET", "/failures/", PAGE),
    Row("failures/", "POST", "/failures/", WRONG_METHOD),
    Row("failures/<str:fingerprint>/", "GET", "/failures/{group}/", PAGE),
    Row("failures/<str:fingerprint>/", "POST", "/failures/{group}/", WRONG_METHOD),
    Row(
        "failures/<str:fingerprint>/<slug:action>/",
        "POST",
        "/failures/{group}/unresolve/",
        GROUP_ACTION,
    ),
    Row(
        "failures/<str:fingerprint>/<slug:action>/",
        "GET",
        "/failures/{group}/unresolve/",
        WRONG_METHOD,
    ),
    Row("escalations/", "GET", "/escalations/", PAGE),
    Row("escalations/", "POST", "/escalations/", WRONG_METHOD),
    Row(
        "escalations/bulk/",
        "POST",
        "/escalations/bulk/",
        BULK_PREVIEW,
        {"ids": "{esc}", "action": "acknowledge"},
    ),
    Row("escalations/bulk/", "GET", "/escalations/bulk/", WRONG_METHOD),
    Row("escalations/<int:escalation_id>/", "GET", "/escalations/{esc}/", PAGE),
    Row("escalations/<int:escalation_id>/", "POST", "/escalations/{esc}/", WRONG_METHOD),
    Row(
        "escalations/<int:escalation_id>/assign/",
        "POST",
        "/escalations/{esc}/assign/",
        ACTION,
        {"assignee": "me"},
    ),
    Row(
        "escalations/<int:escalation_id>/assign/", "GET", "/escalations/{esc}/assign/", WRONG_METHOD
    ),
    Row(
        "escalations/<int:escalation_id>/comment/",
        "POST",
        "/escalations/{esc}/comment/",
        ACTION,
        {"comment": "looking"},
    ),
    Row(
        "escalations/<int:escalation_id>/comment/",
        "GET",
        "/escalations/{esc}/comment/",
        WRONG_METHOD,
    ),
    Row(
        "escalations/<int:escalation_id>/<slug:action>/",
        "POST",
        "/escalations/{esc}/acknowledge/",
        ACTION,
    ),
    Row(
        "escalations/<int:escalation_id>/<slug:action>/",
        "GET",
        "/escalations/{esc}/acknowledge/",
        WRONG_METHOD,
    ),
    Row("accounts/login/", "GET", "/accounts/login/", PUBLIC),
    Row(
        "accounts/login/",
        "POST",
        "/accounts/login/",
        PUBLIC,  # a wrong password: the form again
        {"username": "nobody", "password": "wrong"},
    ),
    Row("accounts/logout/", "POST", "/accounts/logout/", LOGOUT),
    Row("accounts/logout/", "GET", "/accounts/logout/", WRONG_METHOD),
    Row("accounts/password_change/", "GET", "/accounts/password_change/", SIGNED_IN),
    Row("accounts/password_change/done/", "GET", "/accounts/password_change/done/", SIGNED_IN),
    Row("accounts/password_reset/", "GET", "/accounts/password_reset/", PUBLIC),
    Row("accounts/password_reset/done/", "GET", "/accounts/password_reset/done/", PUBLIC),
    Row("accounts/reset/<uidb64>/<token>/", "GET", "/accounts/reset/MQ/bad-token/", PUBLIC),
    Row("accounts/reset/done/", "GET", "/accounts/reset/done/", PUBLIC),
    Row("views/", "GET", "/views/", PAGE),
    Row("views/", "POST", "/views/", WRONG_METHOD),
    Row("views/save/", "POST", "/views/save/", SAVE_VIEW, {"name": "mine", "path": "/"}),
    Row("views/save/", "GET", "/views/save/", WRONG_METHOD),
    Row("views/<int:view_id>/", "GET", "/views/{view}/", SHARE_LINK),
    Row("views/<int:view_id>/", "POST", "/views/{view}/", WRONG_METHOD),
    Row("views/<int:view_id>/delete/", "POST", "/views/{view}/delete/", OWNER_ONLY),
    Row("views/<int:view_id>/delete/", "GET", "/views/{view}/delete/", WRONG_METHOD),
    Row("", "GET", "/", PAGE),
    Row("", "POST", "/", WRONG_METHOD),
    Row("jobs/<job_id:job_id>/events.ndjson", "GET", "/jobs/{job}/events.ndjson", RAW_EVENTS),
    Row("jobs/<job_id:job_id>/events.ndjson", "POST", "/jobs/{job}/events.ndjson", WRONG_METHOD),
    Row("jobs/<job_id:job_id>/events.json", "GET", "/jobs/{job}/events.json", RAW_EVENTS),
    Row("jobs/<job_id:job_id>/events.json", "POST", "/jobs/{job}/events.json", WRONG_METHOD),
    Row("jobs/<job_id:job_id>/live", "GET", "/jobs/{job}/live", POLL_STOPPED, extra=HTMX),
    Row("jobs/<job_id:job_id>/live", "POST", "/jobs/{job}/live", WRONG_METHOD),
    Row(
        "jobs/<job_id:job_id>/rows/<rows_part:part>",
        "GET",
        "/jobs/{job}/rows/steps?from=0",
        PAGE,
        extra=HTMX,
    ),
    Row(
        "jobs/<job_id:job_id>/rows/<rows_part:part>",
        "POST",
        "/jobs/{job}/rows/narrative?from=0",
        WRONG_METHOD,
    ),
    Row("jobs/<job_id:job_id>/", "GET", "/jobs/{job}/", PAGE),
    Row("jobs/<job_id:job_id>/", "GET", "/jobs/{job}/?step=n1:1", PAGE),
    Row("jobs/<job_id:job_id>/", "POST", "/jobs/{job}/", WRONG_METHOD),
    Row("admin/", "GET", "/admin/", ADMIN),
]


def served_patterns(patterns=None, prefix: str = "") -> set[str]:
    """Every URL pattern the project serves, the admin's collapsed into "admin/"."""
    found = set()
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            if pattern.namespace == "admin":
                found.add(route)
            else:
                found |= served_patterns(pattern.url_patterns, route)
        else:
            found.add(route)
    return found


def test_every_url_pattern_has_a_row():
    covered = {row.pattern for row in MATRIX}
    served = served_patterns()
    assert sorted(served - covered) == [], "add a MATRIX row for each new URL"
    assert sorted(covered - served) == [], "a MATRIX row names a URL that is not served"


def test_every_row_decides_every_role():
    assert all(set(row.expected) == set(ROLES) for row in MATRIX)


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    # A wrong password still runs the hasher (no user-enumeration by timing): keep it cheap.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def world(db):
    """A job with steps and an open escalation, and one caller of each kind."""
    store(
        [
            event("job_started", JOB_ID, 0, name="access matrix"),
            started("n1", JOB_ID, 1),
            finished("n1", "retryable_failure", JOB_ID, 2, error_type="auth", reason="expired"),
        ]
    )
    escalation = Escalation.objects.get(job__job_id=JOB_ID)
    users = {}
    for role in ("operator", "support", "engineer"):
        users[role] = User.objects.create(username=role)
        users[role].groups.add(Group.objects.get_or_create(name=role)[0])
    users["staff"] = User.objects.create(username="staff", is_staff=True)
    _token, raw = IngestToken.issue("access-matrix")
    group = FailureGroup.objects.get().fingerprint
    view = SavedView.objects.create(
        owner=users["operator"], name="failed", path="/", query="status=failed"
    )
    return {
        "job": JOB_ID,
        "esc": str(escalation.pk),
        "group": group,
        "view": str(view.pk),
        "users": users,
        "token": raw,
    }


def fill(template: str, world: dict) -> str:
    return (
        template.replace("{job}", world["job"])
        .replace("{esc}", world["esc"])
        .replace("{group}", world["group"])
        .replace("{view}", world["view"])
    )


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("row", MATRIX, ids=lambda row: row.id)
def test_access(client, world, row, role):
    extra = {"REMOTE_ADDR": REMOTE_ADDR, **row.extra}
    if role == "token":
        extra["HTTP_AUTHORIZATION"] = f"Bearer {world['token']}"
    elif role != "anonymous":
        client.force_login(world["users"][role])
    data = row.data
    if isinstance(data, dict):
        data = {key: fill(value, world) for key, value in data.items()}
    path = fill(row.path, world)
    response = client.generic(
        row.method, path, _encode(data, row.content_type), row.content_type, **extra
    )
    expected = row.expected[role]
    assert response.status_code == expected, (row.id, role, response.content[:300])
    signed_in = role not in ("anonymous", "token")
    if row.expected is SHARE_LINK and signed_in:
        assert response["Location"] == "/?status=failed"
    elif expected == 302 and row.expected is not LOGOUT:
        login = "/admin/login/" if path.startswith("/admin/") else "/accounts/login/"
        assert response["Location"].startswith(f"{login}?next="), response["Location"]


def _encode(data, content_type: str) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    from urllib.parse import urlencode

    return urlencode(data)
