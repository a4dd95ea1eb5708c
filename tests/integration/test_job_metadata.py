"""A job's metadata (``job_started.metadata``, a trace's resource attributes) on its page's
header, folded when long and escaped, and as a filter of the jobs list and of GET /api/v1/jobs:
``meta=key:value``, split at the first colon, repeatable (all must hold), on any key; a
malformed one is a 400 naming it on the API and a form error on the page (issue 32)."""

import json

import pytest

from jobs.models import Job
from jobs.web.filters import parse_meta
from jobs.web.job_header import HEADER_LIST_LIMIT, METADATA_PREVIEW_CHARS
from tests import factories
from tests.factories import event, store

pytestmark = pytest.mark.django_db

ODD_KEYS = {
    "a__b": "under",
    'quo"te': "double",
    "it's": "single",
    "dot.ted": "dots",
    "0": "digit",
    "$.x": "path",
    "ключ": "unicode",
}


@pytest.fixture
def jobs(db):
    store(
        [
            event("job_started", "sha-a", at=0, metadata={"git_sha": "abc123", "env": "prod"}),
            event("job_started", "sha-b", at=1, metadata={"git_sha": "def456", "env": "prod"}),
            event(
                "job_started",
                "odd",
                at=2,
                metadata={**ODD_KEYS, "pr": 42, "ratio": 2.5, "flag": True, "url": "https://x/y"},
            ),
            event("job_started", "none", at=3),
        ]
    )


def matching(*pairs: tuple[str, str]) -> list[str]:
    found = Job.objects.order_by("job_id")
    for key, value in pairs:
        found = found.with_metadata(key, value)
    return list(found.values_list("job_id", flat=True))


@pytest.mark.parametrize(("key", "value"), sorted(ODD_KEYS.items()))
def test_any_key_is_looked_up_as_one_key(jobs, key, value):
    assert matching((key, value)) == ["odd"]
    assert matching((key, value + "!")) == []


@pytest.mark.parametrize(
    ("key", "value", "found"),
    [
        ("git_sha", "abc123", ["sha-a"]),
        ("env", "prod", ["sha-a", "sha-b"]),
        ("pr", "42", ["odd"]),
        ("ratio", "2.5", ["odd"]),
        ("flag", "true", ["odd"]),
        ("url", "https://x/y", ["odd"]),
        ("git_sha", "ABC123", []),
        ("missing", "", []),
    ],
)
def test_values_are_compared_as_text(jobs, key, value, found):
    assert matching((key, value)) == found


def test_several_pairs_must_all_hold(jobs):
    assert matching(("env", "prod"), ("git_sha", "def456")) == ["sha-b"]
    assert matching(("env", "prod"), ("pr", "42")) == []


@pytest.fixture
def token_auth(ingest_token) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {ingest_token}"}


def listed(response) -> list[str]:
    assert response.status_code == 200, response.content
    return sorted(job["job_id"] for job in json.loads(response.content)["jobs"])


def test_the_api_filters_on_metadata(client, jobs, token_auth):
    assert listed(client.get("/api/v1/jobs?meta=git_sha:abc123", **token_auth)) == ["sha-a"]
    assert listed(client.get("/api/v1/jobs?meta=url:https://x/y", **token_auth)) == ["odd"]
    both = "/api/v1/jobs?meta=env:prod&meta=git_sha:def456"
    assert listed(client.get(both, **token_auth)) == ["sha-b"]
    spaced = "/api/v1/jobs?meta=git_sha%20:%20abc123&meta="
    assert listed(client.get(spaced, **token_auth)) == ["sha-a"]
    quoted = "/api/v1/jobs?meta=quo%22te:double&meta=a__b:under"
    assert listed(client.get(quoted, **token_auth)) == ["odd"]


@pytest.mark.parametrize(
    ("query", "error"),
    [
        ("meta=git_sha", "meta 'git_sha' has no colon: write key:value, as git_sha:abc123"),
        ("meta=:abc", "meta ':abc' has an empty key: write key:value, as git_sha:abc123"),
        ("meta=k:" + "v" * 400, "meta is longer than 400 characters"),
        ("&".join(f"meta=k{n}:v" for n in range(6)), "meta: at most 5 meta filters"),
    ],
)
def test_a_malformed_meta_is_a_400_naming_it(client, jobs, token_auth, query, error):
    response = client.get(f"/api/v1/jobs?{query}", **token_auth)
    assert (response.status_code, json.loads(response.content)) == (400, {"error": error})


def test_a_nul_in_meta_is_refused(client, jobs, token_auth):
    assert client.get("/api/v1/jobs?meta=a%00:b", **token_auth).status_code == 400
    with pytest.raises(ValueError, match="meta may not hold a NUL character"):
        parse_meta(["a\x00:b"])  # past the query string's own check, PostgreSQL would refuse it


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


def job_links(response) -> list[str]:
    html = response.content.decode()
    return sorted(row.split('"')[0] for row in html.split('data-job-id="')[1:])


def test_the_page_filters_on_metadata_with_a_chip_that_removes_it(operator, jobs):
    response = operator.get("/?show=all&meta=env:prod&meta=git_sha:abc123")
    assert job_links(response) == ["sha-a"]
    html = response.content.decode()
    assert "Metadata: <strong>env = prod</strong>" in html
    assert 'href="?show=all&amp;meta=git_sha%3Aabc123"' in html  # the env chip's removal
    assert 'value="git_sha:abc123"' in html  # kept in its own field of the form


def test_a_malformed_meta_on_the_page_is_a_form_error(operator, jobs):
    response = operator.get("/?show=all&meta=git_sha")
    assert response.status_code == 200
    assert (
        "Metadata: meta &#x27;git_sha&#x27; has no colon: write key:value, as git_sha:abc123"
        in response.content.decode()
    )
    assert job_links(response) == ["none", "odd", "sha-a", "sha-b"]  # the filter left out


@pytest.fixture
def engineer(client):
    client.force_login(factories.user("eve", "engineer"))
    return client


def header(response) -> str:
    html = response.content.decode()
    start = html.index('<header id="job-head"')
    return html[start : html.index("</header>", start)]


def test_the_header_shows_metadata_with_a_filter_link_per_value(engineer, jobs):
    head = header(engineer.get("/jobs/odd/"))
    assert '<dt><code>dot.ted</code></dt><dd><span class="pre">dots</span>' in head
    assert '<dt><code>pr</code></dt><dd><span class="pre">42</span>' in head
    assert 'href="/?show=all&amp;meta=pr%3A42"' in head
    assert "<code>quo&quot;te</code>" in head


def test_long_metadata_values_and_keys_beyond_the_first_fold(engineer):
    long_value = "x" * (METADATA_PREVIEW_CHARS + 20)
    metadata = {f"k{n:02}": str(n) for n in range(HEADER_LIST_LIMIT + 3)}
    metadata["k00"] = long_value
    store([event("job_started", "long", at=0, metadata=metadata)])
    head = header(engineer.get("/jobs/long/"))
    folded = head.index('<details class="long-value">')
    assert head.index("<code>k00</code>") < folded
    assert f"{'x' * METADATA_PREVIEW_CHARS}</span>… " in head
    assert f'<div class="pre long-value-text" tabindex="0">{long_value}</div>' in head
    more = head.index('<details class="long-list metadata-more"><summary>3 more keys</summary>')
    assert head.index(f"<code>k{HEADER_LIST_LIMIT - 1:02}</code>") < more
    assert head.index(f"<code>k{HEADER_LIST_LIMIT:02}</code>") > more


def test_metadata_on_the_header_is_escaped(engineer):
    store([event("job_started", "xss", at=0, metadata={"<b>k</b>": "<script>alert(1)</script>"})])
    head = header(engineer.get("/jobs/xss/"))
    assert "<script>alert(1)</script>" not in head
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in head
    assert "<code>&lt;b&gt;k&lt;/b&gt;</code>" in head


def test_a_job_without_metadata_shows_no_metadata_row(engineer, jobs):
    assert "<dt>Metadata</dt>" not in header(engineer.get("/jobs/none/"))
