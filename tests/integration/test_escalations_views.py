"""The escalation queue, the escalation page and the support actions over HTTP: who may do
what (enforced on the server), HTMX fragments, audit entries, bulk preview and apply."""

from datetime import timedelta

import pytest
from django.utils import timezone

from jobs.escalations import actions
from jobs.models import Escalation, EscalationEntry, Notification
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def open_escalation(job_id: str = "j1", error_type: str = "auth", node: str = "n1") -> Escalation:
    """A user_action (auth) or internal escalation opened through ingest."""
    factories.store(
        [
            event("job_started", job_id, 0, name=f"{job_id} run"),
            started(node, job_id, 1),
            finished(
                node, "retryable_failure", job_id, 2, error_type=error_type, reason="token expired"
            ),
        ]
    )
    return Escalation.objects.get(job__job_id=job_id, node_id=node)


@pytest.fixture
def support(client):
    user = factories.user("sam", "support")
    client.force_login(user)
    return user


@pytest.fixture
def operator(client):
    user = factories.user("olga", "operator")
    client.force_login(user)
    return user


def htmx(**extra):
    return {"HTTP_HX_REQUEST": "true", **extra}


# -- queue -----------------------------------------------------------------------------------


def triggered_ago(escalation: Escalation, hours: float) -> None:
    Escalation.objects.filter(pk=escalation.pk).update(
        triggered_at=timezone.now() - timedelta(hours=hours)
    )


def test_queue_lists_open_first_then_most_severe_then_oldest_trigger(support, client):
    late = open_escalation("j-late")
    early = open_escalation("j-early")
    severe = open_escalation("j-severe", error_type="internal")
    acked = open_escalation("j-acked")
    triggered_ago(late, 1)
    triggered_ago(early, 2)
    triggered_ago(severe, 0.5)
    triggered_ago(acked, 9)
    actions.acknowledge(Escalation.objects.get(pk=acked.pk), support)
    response = client.get("/escalations/")
    order = [row.escalation.pk for row in response.context["rows"]]
    assert order == [severe.pk, early.pk, late.pk, acked.pk]


def test_queue_age_counts_from_the_trigger_event_not_from_when_it_was_noticed(support, client):
    escalation = open_escalation("j-old")
    # Stored just now (opened_at = now), but its trigger event happened 3 hours ago.
    triggered_ago(escalation, 3)
    (row,) = client.get("/escalations/").context["rows"]
    assert row.age == "3 h"
    detail = client.get(f"/escalations/{escalation.pk}/")
    assert detail.context["age"] == "3 h"


def test_queue_row_links_job_and_failing_step_at_its_latest_attempt(support, client):
    escalation = open_escalation()
    factories.store(
        [
            started("n1", "j1", 3, attempt=2),
            finished("n1", "retryable_failure", "j1", 4, attempt=2, error_type="auth"),
        ]
    )
    body = client.get("/escalations/").content.decode()
    assert 'href="/jobs/j1/"' in body
    assert 'href="/jobs/j1/?step=n1:2"' in body
    (row,) = client.get("/escalations/").context["rows"]
    assert row.escalation.pk == escalation.pk
    assert row.attempts == 2


def test_escalation_of_a_job_that_recovered_names_the_failed_attempt(support, client):
    escalation = open_escalation()
    factories.store(
        [
            started("n1", "j1", 3, attempt=2),
            finished("n1", "success", "j1", 4, attempt=2),
            event("job_finished", "j1", 5, status="completed"),
        ]
    )
    (row,) = client.get("/escalations/").context["rows"]
    assert row.attempts == 1
    assert 'href="/jobs/j1/?step=n1:1"' in client.get("/escalations/").content.decode()
    detail = client.get(f"/escalations/{escalation.pk}/")
    assert detail.context["attempt"] == 1
    assert "n1 · attempt 1" in detail.content.decode()


def test_queue_highlights_escalations_open_past_the_age_target(support, client, settings):
    settings.TRACEVIZ_ESCALATION_AGE_TARGET = timedelta(hours=4)
    old = open_escalation("j-old")
    fresh = open_escalation("j-fresh")
    triggered_ago(old, 5)
    triggered_ago(fresh, 0)
    rows = {row.escalation.pk: row for row in client.get("/escalations/").context["rows"]}
    assert rows[old.pk].overdue and rows[old.pk].age == "5 h"
    assert not rows[fresh.pk].overdue
    assert "over target" in client.get("/escalations/").content.decode()


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("kind=internal", {"j-internal"}),
        ("severity=high", {"j-internal"}),
        ("status=acknowledged", {"j-acked"}),
        ("status=all", {"j-auth", "j-internal", "j-acked", "j-resolved"}),
        ("status=resolved", {"j-resolved"}),
        ("assignee=mine", {"j-auth"}),
        ("assignee=unassigned", {"j-internal"}),
        ("job=j-internal", {"j-internal"}),
        ("since=1h", {"j-internal", "j-acked"}),
    ],
)
def test_queue_filters(support, client, query, expected):
    auth = open_escalation("j-auth")
    open_escalation("j-internal", error_type="internal")
    acked = open_escalation("j-acked")
    resolved = open_escalation("j-resolved")
    actions.assign(auth, support, support)
    actions.acknowledge(acked, support)
    actions.assign(acked, support, factories.user("sue", "support"))
    actions.resolve(resolved, support, "fixed upstream")
    Escalation.objects.filter(pk=auth.pk).update(opened_at=timezone.now() - timedelta(hours=3))
    response = client.get(f"/escalations/?{query}")
    assert {row.escalation.job.job_id for row in response.context["rows"]} == expected


def test_queue_counts_per_kind_ignore_the_kind_filter(support, client):
    open_escalation("j1")
    open_escalation("j2")
    open_escalation("j3", error_type="internal")
    response = client.get("/escalations/?kind=internal")
    assert response.context["kind_counts"] == [("internal", 1), ("user_action", 2)]
    assert len(response.context["rows"]) == 1


def test_queue_htmx_request_renders_only_the_queue_partial(support, client):
    open_escalation()
    response = client.get("/escalations/", **htmx())
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="escalation-queue"')
    assert "<html" not in body and "site-header" not in body
    assert "HX-Request" in response["Vary"]


def test_queue_history_restore_gets_the_whole_page(support, client):
    response = client.get("/escalations/", **htmx(HTTP_HX_HISTORY_RESTORE_REQUEST="true"))
    assert "<html" in response.content.decode()


@pytest.mark.speed_guard
def test_queue_query_count_does_not_grow_with_rows(support, client, django_assert_num_queries):
    open_escalation("j0")
    client.get("/escalations/")  # warm the session
    with django_assert_num_queries(8) as few:
        client.get("/escalations/")
    for index in range(1, 8):
        open_escalation(f"j{index}", error_type="internal" if index % 2 else "auth")
    with django_assert_num_queries(len(few.captured_queries)):
        response = client.get("/escalations/")
    assert len(response.context["rows"]) == 8


def test_anonymous_user_is_sent_to_login(client):
    response = client.get("/escalations/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_user_without_a_role_gets_403(client):
    client.force_login(factories.user("nobody"))
    assert client.get("/escalations/").status_code == 403


# -- operator: read only ---------------------------------------------------------------------


def test_operator_reads_the_queue_without_action_buttons(operator, client):
    escalation = open_escalation()
    body = client.get("/escalations/").content.decode()
    assert f"#{escalation.pk} user_action" in body
    assert "Acknowledge</button>" not in body and "bulk-form" not in body
    detail = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Resolution note" not in detail and "Acknowledge</button>" not in detail


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("acknowledge/", {}),
        ("assign/", {"assignee": "me"}),
        ("resolve/", {"note": "done"}),
        ("reopen/", {}),
    ],
)
def test_operator_post_is_forbidden_and_changes_nothing(operator, client, path, data):
    escalation = open_escalation()
    response = client.post(f"/escalations/{escalation.pk}/{path}", data, **htmx())
    assert response.status_code == 403
    escalation.refresh_from_db()
    assert escalation.status == "open" and escalation.assignee is None
    assert list(escalation.entries.values_list("action", flat=True)) == ["opened"]


def test_operator_bulk_post_is_forbidden(operator, client):
    escalation = open_escalation()
    response = client.post(
        "/escalations/bulk/", {"ids": [escalation.pk], "action": "acknowledge", "confirm": "1"}
    )
    assert response.status_code == 403
    assert Escalation.objects.get(pk=escalation.pk).status == "open"


def test_action_needs_csrf_token(support):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(support)
    escalation = open_escalation()
    assert strict.post(f"/escalations/{escalation.pk}/acknowledge/").status_code == 403
    assert Escalation.objects.get(pk=escalation.pk).status == "open"


def test_get_on_an_action_is_not_allowed(support, client):
    escalation = open_escalation()
    assert client.get(f"/escalations/{escalation.pk}/acknowledge/").status_code == 405


# -- support actions -------------------------------------------------------------------------


def test_acknowledge_from_the_queue_returns_the_updated_row(support, client):
    escalation = open_escalation()
    response = client.post(
        f"/escalations/{escalation.pk}/acknowledge/",
        **htmx(HTTP_HX_TARGET=f"escalation-{escalation.pk}"),
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert body.lstrip().startswith(f'<tr id="escalation-{escalation.pk}"')
    assert "acknowledged" in body
    entry = escalation.entries.last()
    assert (entry.action, entry.actor_name, entry.from_status, entry.to_status) == (
        "acknowledged",
        "sam",
        "open",
        "acknowledged",
    )


def test_assign_to_me_and_to_another_support_user(support, client):
    escalation = open_escalation()
    client.post(f"/escalations/{escalation.pk}/assign/", {"assignee": "me"})
    assert Escalation.objects.get(pk=escalation.pk).assignee == support
    sue = factories.user("sue", "support")
    client.post(f"/escalations/{escalation.pk}/assign/", {"assignee": str(sue.pk)})
    assert Escalation.objects.get(pk=escalation.pk).assignee == sue
    notes = list(escalation.entries.filter(action="assigned").values_list("note", flat=True))
    assert notes == ["Assigned to sam", "Assigned to sue"]


def test_assign_to_someone_outside_support_is_refused(support, client):
    escalation = open_escalation()
    outsider = factories.user("olga", "operator")
    response = client.post(f"/escalations/{escalation.pk}/assign/", {"assignee": outsider.pk})
    assert response.status_code == 400
    assert "support group" in response.content.decode()
    assert Escalation.objects.get(pk=escalation.pk).assignee is None


def test_resolve_without_a_note_shows_a_clear_error_and_changes_nothing(support, client):
    escalation = open_escalation()
    response = client.post(f"/escalations/{escalation.pk}/resolve/", {"note": "   "})
    assert response.status_code == 400
    assert "A resolution needs a note" in response.content.decode()
    assert Escalation.objects.get(pk=escalation.pk).status == "open"
    fragment = client.post(f"/escalations/{escalation.pk}/resolve/", {"note": ""}, **htmx())
    assert fragment.status_code == 200  # htmx swaps only 2xx: the error is in the fragment
    assert "A resolution needs a note" in fragment.content.decode()
    assert fragment.content.decode().lstrip().startswith('<section id="escalation-detail"')


def test_resolve_with_a_note_then_reopen_writes_audit_entries(support, client):
    escalation = open_escalation()
    response = client.post(f"/escalations/{escalation.pk}/resolve/", {"note": "re-authed"})
    assert response.status_code == 303
    assert response["Location"] == f"/escalations/{escalation.pk}/"
    escalation.refresh_from_db()
    assert escalation.status == "resolved" and escalation.resolved_at is not None
    client.post(f"/escalations/{escalation.pk}/reopen/", {"note": "came back"})
    escalation.refresh_from_db()
    assert escalation.status == "open" and escalation.resolved_at is None
    trail = list(escalation.entries.values_list("action", "actor_name", "to_status", "note"))
    assert trail[1:] == [
        ("resolved", "sam", "resolved", "re-authed"),
        ("reopened", "sam", "open", "came back"),
    ]


def test_reopening_keeps_the_original_opened_time_and_shows_the_reopening(support, client):
    escalation = open_escalation()
    first_opened = timezone.now() - timedelta(days=2)
    Escalation.objects.filter(pk=escalation.pk).update(
        created_at=first_opened, opened_at=first_opened
    )
    client.post(f"/escalations/{escalation.pk}/resolve/", {"note": "re-authed"})
    client.post(f"/escalations/{escalation.pk}/reopen/", {"note": "came back"})
    escalation.refresh_from_db()
    assert escalation.created_at == first_opened
    assert escalation.opened_at > first_opened
    body = client.get(f"/escalations/{escalation.pk}/").content.decode()
    opened = body.split("<dt>Opened</dt>")[1].split("</dd>")[0]
    assert first_opened.strftime("%Y-%m-%d %H:%M:%S") in opened
    reopened = body.split("<dt>Reopened</dt>")[1].split("</dd>")[0]
    assert escalation.opened_at.strftime("%Y-%m-%d %H:%M:%S") in reopened


def test_an_escalation_never_reopened_shows_no_reopened_time(support, client):
    escalation = open_escalation()
    assert "<dt>Reopened</dt>" not in client.get(f"/escalations/{escalation.pk}/").content.decode()


def test_acknowledging_a_resolved_escalation_is_an_error(support, client):
    escalation = open_escalation()
    actions.resolve(escalation, support, "done")
    response = client.post(f"/escalations/{escalation.pk}/acknowledge/")
    assert response.status_code == 400
    assert "is resolved: cannot acknowledge it" in response.content.decode()


def test_unknown_action_is_404(support, client):
    escalation = open_escalation()
    assert client.post(f"/escalations/{escalation.pk}/delete/").status_code == 404


def test_staff_may_act_without_the_support_group(client):
    client.force_login(factories.user("root", staff=True))
    escalation = open_escalation()
    client.post(f"/escalations/{escalation.pk}/acknowledge/")
    assert Escalation.objects.get(pk=escalation.pk).status == "acknowledged"


# -- escalation page -------------------------------------------------------------------------


def test_detail_page_shows_audit_trail_and_notification_failures(support, client):
    escalation = open_escalation()
    actions.acknowledge(escalation, support)
    Notification.objects.create(
        escalation=escalation,
        reason="opened",
        channel="webhook",
        attempts=3,
        last_error="attempt 3: HTTP 500 Internal Server Error",
    )
    body = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "Audit trail" in body
    assert "opened" in body and "acknowledged" in body and "sam" in body
    assert "attempt 3: HTTP 500 Internal Server Error" in body
    assert 'href="/jobs/j1/?step=n1:1"' in body


def test_detail_page_htmx_renders_the_detail_partial(support, client):
    escalation = open_escalation()
    response = client.get(f"/escalations/{escalation.pk}/", **htmx())
    assert response.content.decode().lstrip().startswith('<section id="escalation-detail"')
    assert "HX-Request" in response["Vary"]


def test_detail_page_escapes_producer_text(support, client):
    factories.store(
        [
            event(
                "escalation_raised",
                "evil",
                0,
                kind="custom",
                node_id="n1",
                message="<script>alert(1)</script>",
                severity="high",
            ),
        ]
    )
    escalation = Escalation.objects.get(job__job_id="evil")
    body = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<script>alert(1)</script>" not in client.get("/escalations/").content.decode()


def test_unknown_escalation_is_404(support, client):
    assert client.get("/escalations/999999/").status_code == 404


def test_detail_shows_when_a_paused_transient_jobs_next_retry_was_due(support, client):
    factories.store(
        [
            event("job_started", "j-net", 0),
            started("n1", "j-net", 1),
            finished("n1", "retryable_failure", "j-net", 2, error_type="network"),
            event("escalation_raised", "j-net", 3, node_id="n1", message="slow"),
        ]
    )
    raised = Escalation.objects.get(job__job_id="j-net", kind="raised")
    assert raised.job.status == "paused:transient"
    body = client.get(f"/escalations/{raised.pk}/").content.decode()
    # n1 attempt 1 finished at 09:00:02: the second attempt was due 1 s to 1.3 s later.
    assert "Next retry was due" in body
    assert "2026-03-02 09:00:03 +0000" in body


# -- bulk ------------------------------------------------------------------------------------


def test_bulk_preview_lists_what_would_change_and_changes_nothing(support, client):
    first, second, done = open_escalation("j1"), open_escalation("j2"), open_escalation("j3")
    actions.resolve(done, support, "fixed")
    response = client.post(
        "/escalations/bulk/",
        {"ids": [first.pk, second.pk, done.pk], "action": "acknowledge"},
        **htmx(),
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="bulk-preview"')
    assert "Preview: acknowledge 2 escalations" in body
    assert f"#{done.pk} user_action: it is resolved" in body
    assert "Apply 2 changes" in body
    assert set(Escalation.objects.values_list("status", flat=True)) == {"open", "resolved"}


def test_bulk_resolve_preview_requires_a_note(support, client):
    escalation = open_escalation()
    response = client.post(
        "/escalations/bulk/", {"ids": [escalation.pk], "action": "resolve"}, **htmx()
    )
    body = response.content.decode()
    assert "A resolution needs a note" in body and "Apply" not in body


def test_bulk_apply_changes_each_selected_escalation_with_an_audit_entry(support, client):
    first, second = open_escalation("j1"), open_escalation("j2")
    response = client.post(
        "/escalations/bulk/",
        {
            "ids": [first.pk, second.pk],
            "action": "resolve",
            "note": "provider outage over",
            "confirm": "1",
            "return_query": "status=all",
        },
        **htmx(),
    )
    body = response.content.decode()
    assert body.lstrip().startswith('<section id="escalation-queue"')
    assert "Resolved 2 escalations" in body
    for escalation in (first, second):
        escalation.refresh_from_db()
        assert escalation.status == "resolved"
        entry = escalation.entries.last()
        assert (entry.action, entry.actor_name, entry.note) == (
            "resolved",
            "sam",
            "provider outage over",
        )


def test_bulk_apply_skips_what_changed_since_the_preview(support, client):
    first, second = open_escalation("j1"), open_escalation("j2")
    actions.acknowledge(second, support)  # someone else got there first
    client.post(
        "/escalations/bulk/",
        {"ids": [first.pk, second.pk], "action": "acknowledge", "confirm": "1"},
    )
    assert EscalationEntry.objects.filter(escalation=second, action="acknowledged").count() == 1
    assert Escalation.objects.get(pk=first.pk).status == "acknowledged"


def test_max_retries_message_and_row_agree_on_the_attempt_count(support, client, settings):
    settings.TRACEVIZ_MAX_RETRIES = 5
    items = [event("job_started", "j-retry", 0)]
    for attempt in range(1, 8):
        items.append(started("fetch", "j-retry", attempt * 2, attempt=attempt))
        items.append(
            finished("fetch", "retryable_failure", "j-retry", attempt * 2 + 1, attempt=attempt)
        )
    factories.store(items)
    (row,) = client.get("/escalations/").context["rows"]
    assert row.escalation.kind == "max_retries_exceeded"
    assert row.attempts == 7
    # The message names the limit; it never names an attempt count other than the row's.
    assert "retry limit (5 attempts)" in row.escalation.message
    assert "6" not in row.escalation.message
    detail = client.get(f"/escalations/{row.escalation.pk}/").content.decode()
    assert "fetch · attempt 7" in detail
