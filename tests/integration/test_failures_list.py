"""The failures list (GET /failures/): search, filters, sorting and keyset pages, recovered
counts, the htmx fragment, saved views; and the lifecycle actions a group's page posts."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.escalations import group_lifecycle
from jobs.models import FailureGroup, SavedView, Step
from tests import factories
from tests.factories import recent_event

pytestmark = pytest.mark.django_db


def failing_job(job_id: str, node: str, failures: int, minutes_ago: float = 30, **extra) -> list:
    """Events of a job whose ``node`` failed ``failures`` attempts (retryable, then permanent)."""
    items = [recent_event("job_started", job_id, minutes_ago + 1, workflow="billing", **extra)]
    for attempt in range(1, failures + 1):
        items.append(
            recent_event(
                "node_finished",
                job_id,
                minutes_ago - attempt * 0.01,
                node_id=node,
                attempt=attempt,
                result_type="permanent_failure" if attempt == failures else "retryable_failure",
                reason=f"{node} upstream timed out",
                failure_code="adapter_timeout",
            )
        )
    return items


def group_of(job_id: str, node: str) -> FailureGroup:
    return Step.objects.filter(job__job_id=job_id, node_id=node, attempt=1).get().failure_group


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


def fingerprints(response) -> list[str]:
    return [item["group"].fingerprint for item in response.context["rows"]]


def test_a_new_group_with_three_failures_is_reachable_after_a_hundred_bigger_ones(operator):
    items = []
    for index in range(100):
        items += failing_job(f"busy-{index}", f"busy{index}x", 4, minutes_ago=60)
    factories.store(items)
    factories.store(failing_job("fresh", "freshnode", 3, minutes_ago=5))
    fresh = group_of("fresh", "freshnode")
    seen: list[str] = []
    url = "/failures/"
    pages = 0
    while url:
        response = operator.get(url if url.startswith("/") else "/failures/" + url)
        seen += fingerprints(response)
        url = response.context["next_page_url"]
        pages += 1
    assert pages == 3 and len(seen) == len(set(seen)) == 101
    assert seen[-1] == fresh.fingerprint
    assert response.context["total"] == 101
    newest = operator.get("/failures/?sort=newest")
    assert fingerprints(newest)[0] == fresh.fingerprint
    last_seen = operator.get("/failures/?sort=last_seen")
    assert fingerprints(last_seen)[0] == fresh.fingerprint


def test_sorting_by_most_jobs_counts_jobs_not_steps(operator):
    factories.store(failing_job("one", "many_steps", 5))
    factories.store(failing_job("a", "many_jobs", 1) + failing_job("b", "many_jobs", 1))
    response = operator.get("/failures/?sort=jobs")
    assert [item["group"].node_id for item in response.context["rows"]] == [
        "many_jobs",
        "many_steps",
    ]
    response = operator.get("/failures/")
    assert [item["group"].node_id for item in response.context["rows"]] == [
        "many_steps",
        "many_jobs",
    ]


def test_status_filters_default_to_unresolved(operator):
    factories.store(failing_job("a", "fetch", 1) + failing_job("b", "charge", 1))
    factories.store(failing_job("c", "refund", 1) + failing_job("d", "notify", 1))
    fetch, charge, refund = group_of("a", "fetch"), group_of("b", "charge"), group_of("c", "refund")
    group_lifecycle.resolve(fetch)
    group_lifecycle.ignore(charge)
    group_lifecycle.resolve(refund)
    factories.store(failing_job("c2", "refund", 1, minutes_ago=-1))  # regresses refund
    FailureGroup.objects.filter(node_id="notify").update(
        created_at=timezone.now() - timedelta(days=30)
    )

    def nodes(query: str) -> set[str]:
        response = operator.get("/failures/" + query)
        return {item["group"].node_id for item in response.context["rows"]}

    assert nodes("") == {"refund", "notify"}
    assert nodes("?status=new") == set()  # notify is old, refund regressed
    assert nodes("?status=regressed") == {"refund"}
    assert nodes("?status=resolved") == {"fetch"}
    assert nodes("?status=ignored") == {"charge"}
    assert nodes("?status=all") == {"fetch", "charge", "refund", "notify"}
    html = operator.get("/failures/").content.decode()
    assert 'data-group-status="regressed"' in html


def test_a_new_group_is_new(operator):
    factories.store(failing_job("a", "fetch", 1))
    response = operator.get("/failures/?status=new")
    assert [item["group"].node_id for item in response.context["rows"]] == ["fetch"]


def test_search_node_workflow_and_provider_filters(operator):
    factories.store(failing_job("a", "fetch", 1, provider="openai", model="gpt-x"))
    factories.store(failing_job("b", "charge", 1, provider="anthropic", model="claude-x"))

    def nodes(query: str) -> list[str]:
        response = operator.get("/failures/" + query)
        return sorted(item["group"].node_id for item in response.context["rows"])

    assert nodes("?q=fetch+upstr") == ["fetch"]
    assert nodes("?q=TIMED") == ["charge", "fetch"]
    assert nodes("?q=nothing") == []
    assert nodes("?node=charge") == ["charge"]
    assert nodes("?workflow=billing") == ["charge", "fetch"]
    assert nodes("?workflow=other") == []
    assert nodes("?provider=Anthropic") == ["charge"]
    assert nodes("?model=GPT-X") == ["fetch"]


def test_recovered_failures_are_marked_and_the_ended_filter_keeps_those_that_ended(operator):
    success = recent_event(
        "node_finished", "rec", 29, node_id="flaky", attempt=2, result_type="success"
    )
    recovered = [*failing_job("rec", "flaky", 2)[:-1], success]
    factories.store(recovered)
    factories.store(failing_job("dead", "fatal", 1))
    response = operator.get("/failures/")
    counts = {item["group"].node_id: item["counts"] for item in response.context["rows"]}
    assert (counts["flaky"].recovered, counts["fatal"].recovered) == (1, 0)
    ended = operator.get("/failures/?ended=on")
    assert [item["group"].node_id for item in ended.context["rows"]] == ["fatal"]
    flaky, fatal = group_of("rec", "flaky"), group_of("dead", "fatal")
    fatal_ended = operator.get(f"/failures/{fatal.fingerprint}/?ended=on")
    assert [f.job.job_id for f in fatal_ended.context["failures"]] == ["dead"]
    page = operator.get(f"/failures/{flaky.fingerprint}/")
    assert page.context["counts"].recovered == 1
    assert [f.recovered for f in page.context["failures"]] == [True]
    assert "data-recovered" in page.content.decode()
    only_ended = operator.get(f"/failures/{flaky.fingerprint}/?ended=on")
    assert only_ended.context["failures"] == []


def test_the_htmx_request_gets_the_table_fragment_and_varies_on_it(operator):
    factories.store(failing_job("a", "fetch", 1))
    response = operator.get("/failures/?q=fetch", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="group-table"')
    assert "<nav" not in html and 'id="group-filters"' not in html
    assert "HX-Request" in response["Vary"]
    page = operator.get("/failures/").content.decode()
    assert 'hx-target="#group-table"' in page and 'hx-push-url="true"' in page


def test_bad_filters_and_page_links_say_so_and_list_the_first_page(operator):
    factories.store(failing_job("a", "fetch", 1))
    response = operator.get("/failures/?status=bogus&sort=nope&cursor=xyz")
    assert response.status_code == 200
    html = response.content.decode()
    assert "Select a valid choice" in html
    assert len(response.context["rows"]) == 1
    response = operator.get("/failures/?cursor=not-ours")
    assert "not a page link this list made" in response.content.decode()


def test_query_count_does_not_grow_with_the_page(operator, django_assert_num_queries):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    factories.store(failing_job("a", "fetch", 1))
    operator.get("/failures/?q=timed&provider=x")
    with CaptureQueriesContext(connection) as one:
        operator.get("/failures/")
    items = []
    for index in range(8):
        items += failing_job(f"n{index}", f"node{index}x", 2)
    factories.store(items)
    with django_assert_num_queries(len(one.captured_queries)):
        response = operator.get("/failures/")
    assert len(response.context["rows"]) == 9


def test_a_saved_view_keeps_the_failures_filters(operator):
    factories.store(failing_job("a", "fetch", 1))
    query = "range=7d&q=timed&status=all&sort=newest&ended=on&cursor=abc"
    response = operator.post(
        "/views/save/", {"name": "My failures", "path": "/failures/", "query": query}
    )
    assert response.status_code == 303
    view = SavedView.objects.get(name="My failures")
    assert view.query == "range=7d&q=timed&status=all&sort=newest&ended=on"
    opened = operator.get(f"/views/{view.pk}/")
    assert opened["Location"] == "/failures/?" + view.query
    listed = operator.get(opened["Location"])
    assert listed.context["sort"] == "newest" and listed.context["status"] == "all"


# --- the group page's actions ---------------------------------------------------------------


def test_resolve_ignore_reopen_and_merge_from_the_group_page(operator):
    factories.store(failing_job("a", "fetch", 1) + failing_job("b", "charge", 1))
    fetch, charge = group_of("a", "fetch"), group_of("b", "charge")
    url = f"/failures/{fetch.fingerprint}/"
    response = operator.post(url + "resolve/", {"in_version": "2.0"})
    assert response.status_code == 303 and response["Location"] == url
    fetch.refresh_from_db()
    assert (fetch.status, fetch.resolved_in_version) == ("resolved", "2.0")
    page = operator.get(url).content.decode()
    assert "in version <strong>2.0</strong>" in page
    assert re.search(r"olga</strong> resolved \(unresolved → resolved\)", page)
    operator.post(url + "unresolve/")
    operator.post(url + "ignore/", {"duration": "24h"})
    fetch.refresh_from_db()
    assert fetch.status == "ignored" and fetch.ignored_until > timezone.now()
    operator.post(url + "unresolve/")
    operator.post(url + "ignore/", {"count": "5"})
    fetch.refresh_from_db()
    assert (fetch.status, fetch.ignore_count) == ("ignored", 5)
    response = operator.post(f"/failures/{charge.fingerprint}/merge/", {"into": fetch.fingerprint})
    assert response["Location"] == url
    charge.refresh_from_db()
    assert charge.status == "merged"
    merged_page = operator.get(f"/failures/{charge.fingerprint}/").content.decode()
    assert f'data-merged-into="{fetch.fingerprint}"' in merged_page
    actions = [entry.action for entry in fetch.entries.all()]
    assert actions == [
        "resolved",
        "reopened",
        "ignored",
        "unignored",
        "ignored",
        "merged in",
    ]


def test_a_refused_action_shows_why(operator):
    factories.store(failing_job("a", "fetch", 1))
    fetch = group_of("a", "fetch")
    url = f"/failures/{fetch.fingerprint}/"
    response = operator.post(url + "unresolve/")
    assert response.status_code == 400
    assert "cannot be unresolved" in response.content.decode()
    response = operator.post(url + "merge/", {"into": "0123456789abcdef0123"})
    assert response.status_code == 400 and "No failure group has that fingerprint" in (
        response.content.decode()
    )
    response = operator.post(url + "ignore/", {"duration": "24h", "count": "3"})
    assert response.status_code == 400 and "not both" in response.content.decode()
    assert operator.post(url + "explode/").status_code == 404
    fetch.refresh_from_db()
    assert fetch.status == "unresolved" and not fetch.entries.exists()
