"""Support's daily work on the queue: comments (audited and notified, no status change),
select all of the filtered queue, bulk assign, and the "job recovered" badge and filter."""

import re

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from jobs.escalations import actions, outbox
from jobs.models import Escalation, EscalationEntry, Job, Notification
from jobs.web import escalations as escalation_views
from tests import factories
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def support(client):
    user = factories.user("sam", "support")
    client.force_login(user)
    return user


def open_escalation(job_id: str = "j1", error_type: str = "auth") -> Escalation:
    factories.store(
        [
            event("job_started", job_id, 0, name=f"{job_id} run"),
            started("n1", job_id, 1),
            finished("n1", "retryable_failure", job_id, 2, error_type=error_type, reason="expired"),
        ]
    )
    return Escalation.objects.get(job__job_id=job_id, node_id="n1")


def recover(job_id: str) -> None:
    factories.store(
        [
            started("n1", job_id, 5, attempt=2),
            finished("n1", "success", job_id, 6, attempt=2),
            event("job_finished", job_id, 7, status="completed"),
        ]
    )


def htmx(**extra):
    return {"HTTP_HX_REQUEST": "true", **extra}


# -- comments ----------------------------------------------------------------------------------


def test_a_comment_is_an_audit_entry_that_changes_no_status(support):
    escalation = open_escalation()
    actions.acknowledge(escalation, support)
    entry = actions.comment(escalation, support, "  Waiting for the vendor to rotate the key  ")
    escalation.refresh_from_db()
    assert escalation.status == "acknowledged"
    assert (entry.action, entry.actor_name, entry.note) == (
        "commented",
        "sam",
        "Waiting for the vendor to rotate the key",
    )
    assert entry.from_status == entry.to_status == "acknowledged"
    assert escalation.entries.last() == entry


def test_a_resolved_escalation_takes_comments(support):
    escalation = open_escalation()
    actions.resolve(escalation, support, "rotated")
    actions.comment(escalation, support, "Vendor confirmed the rotation")
    escalation.refresh_from_db()
    assert escalation.status == "resolved"
    assert escalation.entries.last().action == "commented"


def test_a_comment_is_notified_to_every_destination_with_its_text(support, settings):
    settings.TRACEVIZ_ESCALATION_EMAILS = ["support@example.com"]
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = "https://hooks.example.com/traceviz"
    escalation = open_escalation()
    entry = actions.comment(escalation, support, "Paged the on-call owner of the vendor API")
    rows = Notification.objects.filter(escalation=escalation, reason="commented")
    assert sorted(rows.values_list("channel", flat=True)) == ["email", "webhook"]
    assert {row.entry_id for row in rows} == {entry.pk}

    email_row = rows.get(channel="email")
    assert outbox.deliver(email_row.pk).status == "sent"
    (message,) = mail.outbox
    assert "commented" in message.subject
    assert "sam commented on escalation" in message.body
    assert "Paged the on-call owner of the vendor API" in message.body

    body = outbox.webhook_body(rows.get(channel="webhook"))
    assert body["event"] == "escalation.commented"
    assert body["comment"]["author"] == "sam"
    assert body["comment"]["text"] == "Paged the on-call owner of the vendor API"


def test_an_opening_notification_carries_no_comment(settings):
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = "https://hooks.example.com/traceviz"
    escalation = open_escalation()
    opened = escalation.notifications.get(reason="opened", channel="webhook")
    assert "comment" not in outbox.webhook_body(opened)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("   ", "A comment needs some text"),
        ("a\x00b", "A comment may not contain NUL characters"),
        ("x" * (actions.COMMENT_CHARS + 1), f"at most {actions.COMMENT_CHARS} characters"),
    ],
)
def test_a_comment_that_cannot_be_kept_is_refused_and_writes_nothing(support, text, error):
    escalation = open_escalation()
    before = escalation.entries.count()
    with pytest.raises(actions.ActionError, match=error):
        actions.comment(escalation, support, text)
    assert escalation.entries.count() == before
    assert not escalation.notifications.filter(reason="commented").exists()


def test_comment_posted_from_the_detail_page_shows_in_its_audit_trail(support, client):
    escalation = open_escalation()
    response = client.post(
        f"/escalations/{escalation.pk}/comment/",
        {"comment": "Looking into it <b>now</b>"},
        **htmx(HTTP_HX_TARGET="escalation-detail"),
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="escalation-detail"' in body and "<html" not in body
    assert "Looking into it &lt;b&gt;now&lt;/b&gt;" in body
    assert escalation.entries.filter(action="commented", actor=support).count() == 1


def test_an_empty_comment_from_the_page_answers_the_error_and_keeps_nothing(support, client):
    escalation = open_escalation()
    response = client.post(f"/escalations/{escalation.pk}/comment/", {"comment": ""})
    assert response.status_code == 400
    assert "A comment needs some text" in response.content.decode()
    assert not escalation.entries.filter(action="commented").exists()


def test_a_comment_without_htmx_redirects_to_the_escalation(support, client):
    escalation = open_escalation()
    response = client.post(f"/escalations/{escalation.pk}/comment/", {"comment": "on it"})
    assert response.status_code == 303
    assert response["Location"] == f"/escalations/{escalation.pk}/"


def test_an_operator_cannot_comment(client):
    client.force_login(factories.user("olga", "operator"))
    escalation = open_escalation()
    response = client.post(f"/escalations/{escalation.pk}/comment/", {"comment": "hello"})
    assert response.status_code == 403
    assert not escalation.entries.filter(action="commented").exists()


def test_the_detail_page_offers_the_comment_form_to_support_only(support, client):
    escalation = open_escalation()
    assert "Add comment" in client.get(f"/escalations/{escalation.pk}/").content.decode()
    client.force_login(factories.user("olga", "operator"))
    assert "Add comment" not in client.get(f"/escalations/{escalation.pk}/").content.decode()


def test_a_comment_needs_the_csrf_token(support):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(support)
    escalation = open_escalation()
    response = csrf_client.post(f"/escalations/{escalation.pk}/comment/", {"comment": "hi"})
    assert response.status_code == 403
    assert not escalation.entries.filter(action="commented").exists()


# -- select all and bulk ----------------------------------------------------------------------


def many_escalations(count: int, prefix: str = "bulk") -> list[Escalation]:
    return [open_escalation(f"{prefix}-{i:03d}") for i in range(count)]


def test_select_all_previews_every_escalation_of_the_filtered_queue_not_only_the_page(
    support, client, monkeypatch
):
    monkeypatch.setattr(escalation_views, "PAGE_SIZE", 5)
    many_escalations(12)
    severe = open_escalation("other", error_type="internal")  # filtered out by kind
    page = client.get("/escalations/?kind=user_action")
    assert len(page.context["rows"]) == 5
    assert page.context["page"].paginator.count == 12
    response = client.post(
        "/escalations/bulk/",
        {"select_all": "1", "action": "acknowledge", "return_query": "kind=user_action&page=2"},
    )
    preview = response.context["preview"]
    assert preview["error"] == ""
    changed = {item.escalation.pk for item in preview["changes"]}
    assert len(changed) == 12 and severe.pk not in changed
    fragment = client.post(
        "/escalations/bulk/",
        {"select_all": "1", "action": "acknowledge", "return_query": "kind=user_action&page=2"},
        **htmx(),
    ).content.decode()
    (id_list,) = re.findall(r'<input type="hidden" name="ids" value="([0-9,]*)">', fragment)
    assert sorted(int(pk) for pk in id_list.split(",")) == sorted(changed)
    assert "Preview: acknowledge 12 escalations" in fragment


def test_select_all_then_confirm_acknowledges_every_matching_escalation(
    support, client, monkeypatch
):
    monkeypatch.setattr(escalation_views, "PAGE_SIZE", 5)
    matching = many_escalations(8)
    other = open_escalation("other", error_type="internal")
    preview = client.post(
        "/escalations/bulk/",
        {"select_all": "1", "action": "acknowledge", "return_query": "kind=user_action"},
    ).context["preview"]
    ids = [item.escalation.pk for item in preview["changes"]]
    response = client.post(
        "/escalations/bulk/",
        {"ids": ids, "action": "acknowledge", "confirm": "1", "return_query": "kind=user_action"},
        **htmx(),
    )
    assert "Acknowledged 8 escalations" in response.content.decode()
    statuses = set(
        Escalation.objects.filter(pk__in=[e.pk for e in matching]).values_list("status", flat=True)
    )
    assert statuses == {"acknowledged"}
    other.refresh_from_db()
    assert other.status == "open"
    assert EscalationEntry.objects.filter(action="acknowledged", actor=support).count() == 8


def test_select_all_of_the_bulk_limit_is_previewed_and_applied_in_one_confirm(support, client):
    """A thousand ids come back in one field: as a thousand fields they would pass Django's
    DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000) and the confirm would be a 400."""
    count = escalation_views.BULK_MAX
    Job.objects.bulk_create(Job(job_id=f"many-{n}", status="failed") for n in range(count))
    jobs = Job.objects.filter(job_id__startswith="many-")
    Escalation.objects.bulk_create(
        Escalation(job=job, kind="raised", severity="low", triggered_at=timezone.now())
        for job in jobs
    )
    fragment = client.post(
        "/escalations/bulk/",
        {"select_all": "1", "action": "acknowledge", "return_query": "kind=raised"},
        **htmx(),
    ).content.decode()
    (id_list,) = re.findall(r'<input type="hidden" name="ids" value="([0-9,]*)">', fragment)
    assert len(id_list.split(",")) == count
    assert f"and {count - escalation_views.PREVIEW_LISTED} more" in fragment
    response = client.post(
        "/escalations/bulk/",
        {"ids": id_list, "action": "acknowledge", "confirm": "1", "return_query": "kind=raised"},
        **htmx(),
    )
    assert response.status_code == 200
    assert f"Acknowledged {count} escalations" in response.content.decode()
    assert Escalation.objects.filter(status="acknowledged").count() == count


def test_an_id_list_with_a_non_number_is_refused(support, client):
    (escalation,) = many_escalations(1)
    response = client.post(
        "/escalations/bulk/",
        {"ids": f"{escalation.pk},²", "action": "acknowledge", "confirm": "1"},
    )
    assert response.status_code == 400
    escalation.refresh_from_db()
    assert escalation.status == "open"


def test_select_all_past_the_bulk_limit_is_a_clear_error(support, client, monkeypatch):
    monkeypatch.setattr(escalation_views, "BULK_MAX", 3)
    many_escalations(4)
    response = client.post(
        "/escalations/bulk/", {"select_all": "1", "action": "acknowledge", "return_query": ""}
    )
    assert response.status_code == 400
    assert "at most 3 escalations at once" in response.content.decode()
    assert not Escalation.objects.filter(status="acknowledged").exists()


def test_more_ids_than_the_bulk_limit_are_refused_not_cut(support, client, monkeypatch):
    monkeypatch.setattr(escalation_views, "BULK_MAX", 2)
    escalations = many_escalations(3)
    response = client.post(
        "/escalations/bulk/",
        {"ids": [e.pk for e in escalations], "action": "acknowledge", "confirm": "1"},
    )
    assert response.status_code == 400
    assert not Escalation.objects.filter(status="acknowledged").exists()


def test_bulk_assign_previews_then_assigns_each_with_an_audit_entry(support, client):
    pat = factories.user("pat", "support")
    first, second, done = many_escalations(3)
    actions.assign(second, support, pat)
    actions.resolve(done, support, "fixed")
    ids = [first.pk, second.pk, done.pk]
    preview = client.post(
        "/escalations/bulk/", {"ids": ids, "action": "assign", "assignee": pat.pk}
    )
    context = preview.context["preview"]
    assert [item.escalation.pk for item in context["changes"]] == [first.pk]
    assert {item.escalation.pk: item.why_not for item in context["unchanged"]} == {
        second.pk: "it is already assigned to pat",
        done.pk: "it is resolved",
    }
    assert "Preview: assign 1 escalation to pat" in preview.content.decode()
    response = client.post(
        "/escalations/bulk/",
        {"ids": ids, "action": "assign", "assignee": pat.pk, "note": "vendor", "confirm": "1"},
        **htmx(),
    )
    assert "Assigned 1 escalation to pat; 2 left unchanged" in response.content.decode()
    first.refresh_from_db()
    assert first.assignee == pat
    entry = first.entries.last()
    assert (entry.action, entry.actor_name, entry.note) == (
        "assigned",
        "sam",
        "Assigned to pat: vendor",
    )


def test_bulk_assign_to_me_and_to_nobody(support, client):
    first, second = many_escalations(2)
    client.post(
        "/escalations/bulk/",
        {"ids": [first.pk, second.pk], "action": "assign", "assignee": "me", "confirm": "1"},
    )
    assert set(Escalation.objects.values_list("assignee", flat=True)) == {support.pk}
    client.post(
        "/escalations/bulk/",
        {"ids": [first.pk, second.pk], "action": "assign", "assignee": "", "confirm": "1"},
    )
    assert set(Escalation.objects.values_list("assignee", flat=True)) == {None}


def test_bulk_assign_to_someone_outside_support_is_refused(support, client):
    outsider = factories.user("olga", "operator")
    (escalation,) = many_escalations(1)
    response = client.post(
        "/escalations/bulk/",
        {"ids": [escalation.pk], "action": "assign", "assignee": outsider.pk, "confirm": "1"},
        **htmx(),
    )
    assert "Assign to someone in the support group" in response.content.decode()
    escalation.refresh_from_db()
    assert escalation.assignee is None


def test_select_all_with_bulk_assign(support, client, monkeypatch):
    monkeypatch.setattr(escalation_views, "PAGE_SIZE", 2)
    many_escalations(5)
    preview = client.post(
        "/escalations/bulk/",
        {"select_all": "1", "action": "assign", "assignee": "me", "return_query": ""},
    ).context["preview"]
    assert len(preview["changes"]) == 5


# -- job recovered -----------------------------------------------------------------------------


def test_recovered_job_shows_a_badge_in_the_queue_and_on_the_escalation(support, client):
    recovered = open_escalation("j-recovered")
    still_failing = open_escalation("j-failing")
    recover("j-recovered")
    rows = {row.escalation.pk: row for row in client.get("/escalations/").context["rows"]}
    assert rows[recovered.pk].recovered is True
    assert rows[still_failing.pk].recovered is False
    queue = client.get("/escalations/").content.decode()
    assert queue.count('class="badge esc-recovered"') == 1
    detail = client.get(f"/escalations/{recovered.pk}/")
    assert detail.context["recovered"] is True
    assert "esc-recovered" in detail.content.decode()
    assert client.get(f"/escalations/{still_failing.pk}/").context["recovered"] is False


@pytest.mark.parametrize(("value", "expected"), [("yes", {"j-recovered"}), ("no", {"j-failing"})])
def test_queue_filters_on_job_recovered(support, client, value, expected):
    open_escalation("j-recovered")
    open_escalation("j-failing")
    recover("j-recovered")
    response = client.get(f"/escalations/?recovered={value}")
    assert {row.escalation.job.job_id for row in response.context["rows"]} == expected


def test_recovered_filter_keeps_escalations_without_a_job_among_the_not_recovered(support, client):
    open_escalation("j-failing")
    Escalation.objects.create(
        job=None, kind="raised", node_id="", severity="low", triggered_at=timezone.now()
    )
    response = client.get("/escalations/?recovered=no")
    assert len(response.context["rows"]) == 2


def test_a_job_that_failed_again_after_recovering_loses_the_badge(support, client):
    escalation = open_escalation("j1")
    recover("j1")
    factories.store([event("job_finished", "j1", 9, status="failed", reason="broke again")])
    response = client.get("/escalations/?status=all&recovered=yes")
    assert escalation.entries.filter(action="job recovered").exists()
    assert response.context["rows"] == []


def test_select_all_of_recovered_jobs_resolves_only_them(support, client):
    recovered = [open_escalation(f"j-rec-{i}") for i in range(3)]
    failing = open_escalation("j-failing")
    for escalation in recovered:
        recover(escalation.job.job_id)
    preview = client.post(
        "/escalations/bulk/",
        {
            "select_all": "1",
            "action": "resolve",
            "note": "recovered",
            "return_query": "recovered=yes",
        },
    ).context["preview"]
    assert {item.escalation.pk for item in preview["changes"]} == {e.pk for e in recovered}
    assert failing.pk not in {item.escalation.pk for item in preview["changes"]}
