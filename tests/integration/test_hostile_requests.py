"""Hostile input never breaks a page and never gets a 500 (issue 15): bad ids stored before
validation refused them, NUL and out-of-range values in paths and filters, odd bearer values,
non-ASCII digits, database outages, multi-member gzip and chunked bodies."""

import gzip
import io
import json
from contextlib import contextmanager
from unittest import mock

import pytest
from django.db import OperationalError
from django.db.backends.utils import CursorWrapper
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from jobs.contract.bodies import ParsedBatch
from jobs.contract.events import Event as ContractEvent
from jobs.ingest.store import store_batch
from jobs.models import Escalation, Event, Job
from tests.factories import BASE_TS, event, finished, started, store, user

pytestmark = pytest.mark.django_db

BAD_JOB_IDS = ["bad\njob", "tab\tjob", "..", "a/../b", "bell\x07"]


def store_unchecked(job_id: str) -> None:
    """A job whose id validation now refuses, stored as an older release let it in."""
    items = [
        ContractEvent("job_started", job_id, f"{job_id}-0", BASE_TS, None, {"name": "old"}),
        ContractEvent(
            "escalation_raised",
            job_id,
            f"{job_id}-1",
            BASE_TS,
            None,
            {"kind": "manual", "message": "look", "severity": "high", "node_id": "n1"},
        ),
    ]
    store_batch(ParsedBatch(events=list(enumerate(items))))


@pytest.fixture
def engineer(client):
    client.force_login(user("hostile-engineer", "engineer", "support"))
    return client


@pytest.mark.parametrize("job_id", BAD_JOB_IDS)
def test_bad_job_id_is_refused_at_ingest_with_a_field_error(send, job_id):
    response = send([event("node_started", job_id, 0, node_id="n1")])
    assert response.status_code == 400
    assert response.json()["errors"][0]["errors"][0]["field"] == "job_id"
    assert not Event.objects.exists()


@pytest.mark.parametrize("event_type", ["job_started", "cancel_requested", "custom.thing"])
@pytest.mark.parametrize("attempt", [2**62, True])
def test_attempt_out_of_bounds_on_any_type_is_a_field_error_and_the_batch_is_kept(
    send, event_type, attempt
):
    bad = event(event_type, "j1", 0, attempt=attempt)
    response = send([started("n1", "j1", 0), bad])
    assert response.status_code == 207, response.content
    (rejected,) = response.json()["errors"]
    assert rejected == {
        "index": 1,
        "errors": [{"field": "payload.attempt", "message": "must be an integer from 1 to 1000000"}],
    }
    assert list(Event.objects.values_list("type", "attempt")) == [("node_started", 1)]


@pytest.mark.parametrize("job_id", ["bad\njob", "a/../b", "tab\tjob"])
def test_stored_bad_job_id_keeps_every_page_working(engineer, job_id):
    store_unchecked(job_id)
    job = Job.objects.get(job_id=job_id)
    assert Escalation.objects.filter(job=job).exists()
    job_url = reverse("jobs:job", args=[job_id])
    quoted = job_id.replace("\n", "%0A").replace("\t", "%09")
    assert engineer.get("/").status_code == 200
    for path in ["/?show=all", "/escalations/", f"/escalations/?job={quoted}"]:
        response = engineer.get(path)
        assert response.status_code == 200, path
        assert escape(job_url) in response.content.decode(), path
    escalation = Escalation.objects.get(job=job)
    assert engineer.get(f"/escalations/{escalation.pk}/").status_code == 200
    response = engineer.get(job_url)
    assert response.status_code == 200
    assert response.context["job"].job_id == job_id


@pytest.mark.parametrize(
    "path",
    [
        "/?q=a%00b",
        "/?provider=a%00b&show=all",
        "/?reason=a%00b",
        "/escalations/?job=a%00b",
        "/dashboard/?provider=a%00b",
        "/dashboard/?model=a%00b&range=7d",
    ],
)
def test_nul_in_a_filter_is_not_a_server_error(engineer, path):
    response = engineer.get(path)
    assert response.status_code in (200, 400), path


@pytest.mark.parametrize("query", ["q=a%00b", "kind__exact=a%00b", "a%00=1"])
def test_nul_in_an_admin_search_or_filter_is_a_400(client, query):
    admin = user("root", staff=True)
    admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    response = client.get(f"/admin/jobs/alertrule/?{query}")
    assert response.status_code == 400
    assert b"NUL" in response.content


@pytest.mark.parametrize(
    "query",
    [
        "range=custom&since=9999-12-30T00:00:00Z&until=9999-12-31T23:59:59Z",
        "range=custom&since=9999-12-31T00:00:00Z",
        "range=custom&since=0001-01-01T00:00:00%2B01:00&until=0001-01-02T00:00:00Z",
        "range=custom&since=9999-12-31T23:59:59-23:59&until=9999-12-31T23:59:59-23:59",
    ],
)
def test_dashboard_range_at_the_edge_of_the_calendar_answers_a_page(engineer, query):
    response = engineer.get(f"/dashboard/?{query}")
    assert response.status_code == 200
    assert b"range" in response.content


def test_huge_from_on_the_job_page_answers_the_page(engineer):
    store([started("n1", "j1", 0), finished("n1", "success", "j1", 1)])
    for value in ("9" * 40, "-" + "9" * 40, "1e309"):
        response = engineer.get(f"/jobs/j1/?from={value}", HTTP_HX_REQUEST="true")
        assert response.status_code == 200, value
        response = engineer.get(f"/jobs/j1/?from={value}&rows={value}")
        assert response.status_code == 200, value


@pytest.mark.parametrize("value", ["Bearer ñandú-token", "Bearer \u2603", "Bearer tok\u00e9n"])
def test_non_ascii_bearer_on_metrics_is_refused_not_a_500(client, settings, value):
    settings.TRACEVIZ_METRICS_TOKEN = "metrics-token-123"
    response = client.get("/metrics", HTTP_AUTHORIZATION=value, REMOTE_ADDR="203.0.113.9")
    assert response.status_code == 403


def _escalation() -> Escalation:
    store([event("escalation_raised", "j1", 0, kind="manual", message="x", severity="high")])
    return Escalation.objects.get()


@pytest.mark.parametrize("raw", ["١٢", "²", "12\u0663", "+1", "-1"])
def test_non_decimal_assignee_is_a_400(engineer, raw):
    escalation = _escalation()
    response = engineer.post(f"/escalations/{escalation.pk}/assign/", {"assignee": raw})
    assert response.status_code == 400
    escalation.refresh_from_db()
    assert escalation.assignee is None


@pytest.mark.parametrize("raw", ["١٢", "²", "1\u0663"])
def test_non_decimal_bulk_id_is_a_400(engineer, raw):
    escalation = _escalation()
    response = engineer.post(
        "/escalations/bulk/",
        {"action": "acknowledge", "ids": [str(escalation.pk), raw], "confirm": "1"},
    )
    assert response.status_code == 400
    escalation.refresh_from_db()
    assert escalation.status == Escalation.Status.OPEN


@contextmanager
def database_down():
    def refuse(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    with (
        mock.patch.object(CursorWrapper, "execute", refuse),
        mock.patch.object(CursorWrapper, "executemany", refuse),
    ):
        yield


@pytest.mark.parametrize(
    "path", ["/", "/dashboard/", "/escalations/", "/jobs/j1/", "/metrics", "/api/v1/jobs"]
)
def test_database_outage_answers_a_503_page_with_retry_after(db, path):
    store([started("n1", "j1", 0)])
    client = Client(raise_request_exception=False)
    client.force_login(user("outage-engineer", "engineer", "support", staff=True))
    with database_down():
        response = client.get(path, REMOTE_ADDR="127.0.0.1")
    assert response.status_code == 503, path
    assert response["Retry-After"]
    assert b"database" in response.content.lower()


@pytest.mark.postgres
def test_connection_lost_during_copy_is_a_503_with_retry_after(send):
    import psycopg

    @contextmanager
    def lost(self, statement, *args, **kwargs):
        raise psycopg.OperationalError("consuming input failed: server closed the connection")
        yield  # pragma: no cover

    with mock.patch.object(psycopg.Cursor, "copy", lost):
        response = send([started("n1", "j1", 0)])
    assert response.status_code == 503
    assert response["Retry-After"]
    assert not Event.objects.exists()


def test_multi_member_gzip_body_is_read_whole(send):
    first = json.dumps([started("n1", "j1", 0)]).encode()[:-1] + b","
    second = json.dumps(finished("n1", "success", "j1", 1)).encode() + b"]"
    body = gzip.compress(first) + gzip.compress(second)
    response = send(body, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 200, response.json()
    assert response.json()["stored"] == 2


def _chunked_request(body: bytes, token: str, terminated: bool):
    from django.test import RequestFactory

    request = RequestFactory().post(
        "/api/v1/events",
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
        HTTP_TRANSFER_ENCODING="chunked",
    )
    request.META.pop("CONTENT_LENGTH", None)
    request.META["wsgi.input"] = io.BytesIO(body)
    if terminated:
        request.META["wsgi.input_terminated"] = True
    return request


@pytest.mark.parametrize("terminated", [True, False])
def test_chunked_body_is_read_or_refused_saying_so(ingest_token, terminated):
    from jobs.web.api import ingest_events

    body = json.dumps([started("n1", "j1", 0)]).encode()
    request = _chunked_request(body, ingest_token, terminated)
    request.user = mock.Mock(is_authenticated=False)
    response = ingest_events(request)
    if terminated:
        assert response.status_code == 200, response.content
        assert json.loads(response.content)["stored"] == 1
    else:
        assert response.status_code == 411
        assert b"chunked" in response.content
        assert not Event.objects.exists()


def test_outage_outside_a_view_answers_503_and_other_errors_500(rf):
    from traceviz.outage import server_error

    try:
        raise OperationalError("the database system is shutting down")
    except OperationalError:
        response = server_error(rf.get("/dashboard/"))
    assert response.status_code == 503
    assert response["Retry-After"]
    try:
        raise KeyError("bug")
    except KeyError:
        response = server_error(rf.get("/dashboard/"))
    assert response.status_code == 500


# --- issue 34: cookies, paths, ids, offsets and nesting that cost a 500 -----------------------

NUL_SESSION_COOKIES = ['sessionid="a\\000b"', 'sessionid="abcdefgh\\000ijklmnop"']


@pytest.mark.parametrize("cookie", NUL_SESSION_COOKIES)
def test_a_session_cookie_with_a_nul_counts_as_no_session(db, ingest_token, cookie):
    client = Client(raise_request_exception=False)
    client.cookies.load(cookie)
    assert "\x00" in client.cookies["sessionid"].value
    assert client.get("/").status_code == 302
    assert client.get("/accounts/login/").status_code == 200
    response = client.get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Bearer {ingest_token}")
    assert response.status_code == 200
    login = user("cookie-user", "operator")
    signed_in = client.post(
        "/accounts/login/", {"username": login.username, "password": "pw-traceviz-1"}
    )
    assert signed_in.status_code == 302
    assert client.get("/").status_code == 200


@pytest.mark.parametrize(
    "path", ["/failures/a%00b/", "/jobs/a%00b/", "/jobs/a%00b/events.json", "/api/v1/jobs/a%00b"]
)
def test_nul_in_a_path_is_a_400(engineer, path):
    response = engineer.get(path)
    assert response.status_code == 400
    assert b"NUL" in response.content


@pytest.mark.parametrize("action", ["acknowledge", "resolve"])
def test_nul_in_an_escalation_note_is_a_form_error(engineer, action):
    escalation = _escalation()
    response = engineer.post(f"/escalations/{escalation.pk}/{action}/", {"note": "fixed\x00it"})
    assert response.status_code == 400
    assert b"NUL" in response.content
    escalation.refresh_from_db()
    assert (escalation.status, escalation.entries.count()) == ("open", 1)


def test_nul_in_a_bulk_note_is_a_form_error(engineer):
    escalation = _escalation()
    response = engineer.post(
        "/escalations/bulk/",
        {"action": "resolve", "ids": [str(escalation.pk)], "note": "a\x00b", "confirm": "1"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 200
    assert b"A note may not contain NUL characters" in response.content
    escalation.refresh_from_db()
    assert escalation.status == "open"


@pytest.mark.parametrize("raw", ["9" * 5000, "9" * 20, "²"])
def test_an_assignee_past_any_row_id_is_a_400(engineer, raw):
    escalation = _escalation()
    response = engineer.post(f"/escalations/{escalation.pk}/assign/", {"assignee": raw})
    assert response.status_code == 400
    escalation.refresh_from_db()
    assert escalation.assignee is None


@pytest.mark.parametrize("raw", ["9" * 5000, "9" * 20])
def test_a_bulk_id_past_any_row_id_is_a_400(engineer, raw):
    escalation = _escalation()
    response = engineer.post(
        "/escalations/bulk/",
        {"action": "acknowledge", "ids": [str(escalation.pk), raw], "confirm": "1"},
    )
    assert response.status_code == 400
    escalation.refresh_from_db()
    assert escalation.status == "open"


@pytest.mark.parametrize("raw", ["9" * 5000, "9" * 20, "%C2%B2"])
@pytest.mark.parametrize("suffix", ["", "assign/", "acknowledge/"])
def test_an_escalation_path_id_past_any_row_id_is_a_404(engineer, raw, suffix):
    _escalation()
    method = engineer.post if suffix else engineer.get
    assert method(f"/escalations/{raw}/{suffix}").status_code == 404


@pytest.mark.parametrize(
    "query",
    [
        "more=steps&from=1e%2B30",
        f"more=steps&from={10**30}",
        f"more=waterfall&from={10**30}",
        f"more=narrative&from={10**30}",
        f"more=steps&from=0&to={'9' * 5000}",
        "more=steps&from=0&to=%C2%B2",
        f"rows={10**30}",
        "rows=1e%2B30",
        "first=%C2%B2",
        f"first={10**30}",
        "step=n1:%C2%B2",
        f"step=n1:{'9' * 5000}",
    ],
)
def test_numbers_past_any_row_in_a_job_page_query_answer_the_page(engineer, query):
    store([started("n1", "j1", 0), finished("n1", "success", "j1", 1)])
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        # An old "more=" link is sent to the rows' own URL: follow it there.
        response = engineer.get(f"/jobs/j1/?{query}", follow=True, **headers)
        assert response.status_code in (200, 404), (query, headers)


@pytest.mark.parametrize("depth", [500, 5000])
def test_a_json_attribute_nested_too_deep_is_kept_as_text_and_the_job_reads_back(engineer, depth):
    from tests.otlp_spans import attrs, root, span, store_spans

    deep = '{"a":' * depth + "1" + "}" * depth
    store_spans(root(), span(attributes=attrs(traceviz__payload_results=deep, input__value=deep)))
    job = Job.objects.get()
    (step,) = job.steps.all()
    assert step.payload_results == {}
    if len(deep) < 16 * 1024:  # longer, the mapping cuts the span's attributes
        assert step.span["attributes"]["traceviz.payload_results"] == deep
    response = engineer.get(f"/api/v1/jobs/{job.job_id}")
    assert response.status_code == 200
    assert response.json()["steps"][0]["node_id"] == "fetch"
    assert engineer.get(f"/jobs/{job.job_id}/?step=fetch:1").status_code == 200
    assert engineer.get(f"/jobs/{job.job_id}/events.json").status_code == 200
    # The step's input is shown as the text it came as.
    panel = engineer.get(f"/jobs/{job.job_id}/?step=fetch:1", HTTP_HX_REQUEST="true")
    assert escape(deep[:60]).encode() in panel.content


@pytest.mark.parametrize(
    "moment",
    [
        "9999-12-31T23:59:59-23:59",
        "0001-01-01T00:00:00%2B14:00",
        "9999-12-31T23:59:59",
        "0001-01-01",
    ],
)
@pytest.mark.parametrize("name", ["since", "until"])
def test_a_jobs_list_time_filter_at_the_edge_of_the_calendar_answers_a_page(engineer, name, moment):
    store([started("n1", "j1", 0), finished("n1", "success", "j1", 1)])
    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = engineer.get(f"/?{name}={moment}", **headers)
        assert response.status_code in (200, 400), (name, moment, headers)
