"""Look-alike ids (issue 34): an id with a bidirectional override, a zero-width character, a
BOM or nothing but spaces is refused with a field error, from the event API and from OTLP
attributes; an id that mixes scripts (a homoglyph) is accepted and marked on the page; step
links stay under gunicorn's request line for the longest ids, in a short form, while the old
long links still work."""

import json
from urllib.parse import quote

import pytest
from django.utils.html import escape

from jobs.models import Job, Step
from tests.factories import finished, started, store, user

pytestmark = pytest.mark.django_db

TRACE_ID = "5b8efff798038103d269b633813fc60c"
ROOT_ID = "eee19b7ec3c1b174"
CHILD_ID = "eee19b7ec3c1b173"
START = 1_772_442_000_000_000_000
# gunicorn's default limit_request_line: the method, the target and the version together.
REQUEST_LINE_LIMIT = 4094

LOOKALIKES = {
    "right-to-left override": "invoice\u202egpj.exe",
    "left-to-right isolate": "job\u2066-1",
    "zero-width space": "job\u200b-1",
    "zero-width joiner": "jo\u200db",
    "byte order mark": "\ufeffjob-1",
    "only spaces": "   ",
    "only an ideographic space": "\u3000",
}


@pytest.mark.parametrize("job_id", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_a_lookalike_job_id_is_refused_with_a_field_error(send, job_id):
    response = send([started("n1", job_id, 0), started("n1", "j-ok", 0)])
    assert response.status_code == 207, response.content
    (rejected,) = response.json()["errors"]
    assert rejected["index"] == 0
    assert [error["field"] for error in rejected["errors"]] == ["job_id"]
    assert list(Job.objects.values_list("job_id", flat=True)) == ["j-ok"]


@pytest.mark.parametrize("node_id", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_a_lookalike_node_id_is_refused_with_a_field_error(send, node_id):
    response = send([started(node_id, "j1", 0)])
    assert response.status_code == 400, response.content
    errors = response.json()["errors"][0]["errors"]
    assert [error["field"] for error in errors] == ["payload.node_id"]


def _span(span_id: str, parent: str = "", **attributes) -> dict:
    return {
        "traceId": TRACE_ID,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": "fetch",
        "startTimeUnixNano": str(START),
        "endTimeUnixNano": str(START + 1000),
        "attributes": [
            {"key": key.replace("__", "."), "value": {"stringValue": value}}
            for key, value in attributes.items()
        ],
    }


@pytest.fixture
def post_traces(client, ingest_token):
    def post(*spans: dict):
        body = {"resourceSpans": [{"scopeSpans": [{"spans": list(spans)}]}]}
        return client.post(
            "/v1/traces",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
        )

    return post


@pytest.mark.parametrize("key", ["traceviz.node_id", "traceviz.job_id"])
@pytest.mark.parametrize("value", LOOKALIKES.values(), ids=LOOKALIKES.keys())
def test_a_lookalike_id_in_otlp_attributes_refuses_its_span_and_says_why(post_traces, key, value):
    attributes = {key.replace(".", "__"): value}
    response = post_traces(_span(ROOT_ID), _span(CHILD_ID, ROOT_ID, **attributes))
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) >= 1
    field = "job_id" if key == "traceviz.job_id" else f"payload.attributes.{key}"
    assert f"'fetch': {field}: must not" in partial["errorMessage"]
    if key == "traceviz.node_id":
        assert Job.objects.get(job_id=TRACE_ID).name == "fetch"
        assert not Step.objects.exists()


@pytest.fixture
def engineer(client):
    client.force_login(user("lookalike-engineer", "engineer", "support"))
    return client


def test_a_mixed_script_job_id_is_stored_and_marked_on_its_page(engineer):
    job_id = "p\u0430ypal-sync"  # a Cyrillic a (U+0430) among Latin letters
    store([started("fetch", job_id, 0), finished("fetch", "success", job_id, 1)])
    page = engineer.get(f"/jobs/{quote(job_id)}/")
    assert page.status_code == 200
    assert b'class="badge mixed-script"' in page.content
    assert escape("mixes scripts: Cyrillic, Latin").encode() in page.content
    listing = engineer.get("/?show=all")
    assert b'class="badge mixed-script"' in listing.content


def test_a_single_script_id_has_no_mark(engineer):
    store([started("取得", "注文-同期", 0), finished("取得", "success", "注文-同期", 1)])
    page = engineer.get(f"/jobs/{quote('注文-同期')}/")
    assert page.status_code == 200
    assert b"mixed-script" not in page.content


def _request_line(href: str, path: str) -> int:
    target = href if href.startswith("/") else path + href
    return len(f"GET {target} HTTP/1.1".encode())


def test_step_links_of_200_four_byte_characters_fit_the_request_line(engineer):
    job_id = "\U0001f600" * 200
    node_id = "\U0001f680" * 200
    store([started(node_id, job_id, 0), finished(node_id, "permanent_failure", job_id, 1)])
    path = f"/jobs/{quote(job_id, safe='')}/"
    page = engineer.get(path)
    assert page.status_code == 200
    content = page.content.decode()
    hrefs = [part.split('"', 1)[0] for part in content.split('href="')[1:]]
    step_links = [href.replace("&amp;", "&") for href in hrefs if "step=" in href]
    assert step_links
    for href in step_links:
        assert _request_line(href, path) <= REQUEST_LINE_LIMIT, href
    short = next(href for href in step_links if "step=~" in href)
    panel = engineer.get(path + short[short.index("?") :], HTTP_HX_REQUEST="true")
    assert panel.status_code == 200
    assert escape(node_id).encode() in panel.content


def test_an_old_long_step_link_still_opens_its_step(engineer):
    job_id, node_id = "j1", "\U0001f680" * 200
    store([started(node_id, job_id, 0), finished(node_id, "permanent_failure", job_id, 1)])
    page = engineer.get(f"/jobs/j1/?step={quote(node_id, safe='')}:1", HTTP_HX_REQUEST="true")
    assert page.status_code == 200
    assert escape(node_id).encode() in page.content


def test_a_short_step_key_that_names_no_step_is_a_404_panel(engineer):
    store([started("n1", "j1", 0), finished("n1", "success", "j1", 1)])
    response = engineer.get("/jobs/j1/?step=~0123456789abcdef:1", HTTP_HX_REQUEST="true")
    assert response.status_code == 404
