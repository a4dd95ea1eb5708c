"""Support's daily use in a real browser: a comment on an escalation lands in its audit trail
without changing its status; select all of a filtered queue and bulk assign; the "job
recovered" badge and filter; saving, opening, sharing and deleting a saved view. Screenshots
land in test-artifacts/."""

from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from jobs.models import Escalation, SavedView
from tests import factories
from tests.browser.conftest import axe_violations, log_in, screenshot
from tests.factories import event, finished, started

pytestmark = pytest.mark.django_db(transaction=True)


def failing_job(job_id: str, workflow: str = "etl") -> list[dict]:
    return [
        event("job_started", job_id, 0, workflow=workflow),
        started("load", job_id, 1),
        finished(
            "load",
            "retryable_failure",
            job_id,
            2,
            error_type="auth",
            reason="warehouse token expired",
        ),
    ]


def recovered(job_id: str) -> list[dict]:
    return [
        started("load", job_id, 5, attempt=2),
        finished("load", "success", job_id, 6, attempt=2),
        event("job_finished", job_id, 7, status="completed"),
    ]


@pytest.fixture
def queue(transactional_db):
    """Seven open user_action escalations (etl-0..etl-6), two of whose jobs recovered, and one
    internal one on deploy-1; support users sam and pat."""
    items = []
    for i in range(7):
        items += failing_job(f"etl-{i}")
    items += recovered("etl-0") + recovered("etl-1")
    items += [
        event("job_started", "deploy-1", 0, workflow="deploy"),
        started("push", "deploy-1", 1),
        finished("push", "retryable_failure", "deploy-1", 2, error_type="internal", reason="bug"),
    ]
    factories.store(items)
    Escalation.objects.update(triggered_at=timezone.now())
    factories.user("sam", "support")
    factories.user("pat", "support")
    factories.user("olga", "operator")


def test_support_comments_without_changing_the_status(page, live_server, queue):
    escalation = Escalation.objects.get(job__job_id="etl-3")
    log_in(page, live_server, "sam", f"/escalations/{escalation.pk}/")
    page.fill(f"#comment-{escalation.pk}", "Asked the data team to rotate the warehouse token")
    page.get_by_role("button", name="Add comment").click()
    page.wait_for_selector(".esc-entry-commented")
    entry = page.locator(".esc-entry-commented")
    assert "Asked the data team to rotate the warehouse token" in entry.inner_text()
    assert "sam" in entry.inner_text()
    assert "open → open" in entry.inner_text()
    assert page.locator("#escalation-title [data-esc-status='open']").count() == 1
    # The form is empty again for the next comment.
    assert page.input_value(f"#comment-{escalation.pk}") == ""
    screenshot(page, "escalation-comment")
    assert axe_violations(page, "#escalation-detail") == []
    escalation.refresh_from_db()
    assert escalation.status == "open"


def test_an_empty_comment_says_what_is_wrong(page, live_server, queue):
    escalation = Escalation.objects.get(job__job_id="etl-3")
    log_in(page, live_server, "sam", f"/escalations/{escalation.pk}/")
    # A comment of spaces passes the browser's "required" check; the server says why not.
    page.fill(f"#comment-{escalation.pk}", "   ")
    page.get_by_role("button", name="Add comment").click()
    page.wait_for_selector("#escalation-detail .form-error")
    assert "A comment needs some text" in page.inner_text("#escalation-detail .form-error")
    assert page.locator(".esc-entry-commented").count() == 0


def test_select_all_of_a_filtered_queue_and_bulk_assign(page, live_server, queue):
    log_in(page, live_server, "sam", "/escalations/?kind=user_action")
    page.check("input[name=select_all]")
    page.select_option("#bulk-form select[name=action]", "assign")
    page.select_option("#bulk-form select[name=assignee]", label="pat")
    page.get_by_role("button", name="Preview changes").click()
    page.wait_for_selector("#bulk-preview h2")
    assert "assign 7 escalations to pat" in page.inner_text("#bulk-preview h2")
    screenshot(page, "escalations-select-all-assign-preview")
    page.get_by_role("button", name="Apply 7 changes").click()
    page.wait_for_selector(".esc-flash")
    assert "Assigned 7 escalations to pat" in page.inner_text(".esc-flash")
    assignees = set(
        Escalation.objects.filter(kind="user_action").values_list("assignee__username", flat=True)
    )
    assert assignees == {"pat"}
    assert Escalation.objects.get(job__job_id="deploy-1").assignee is None


def test_recovered_badge_and_filter(page, live_server, queue):
    log_in(page, live_server, "sam", "/escalations/")
    assert page.locator(".esc-recovered").count() == 2
    page.select_option("#f-recovered", "yes")
    page.wait_for_url("**recovered=yes**")
    page.wait_for_function("document.querySelectorAll('#escalation-queue tbody tr').length === 2")
    rows = page.inner_text("#escalation-queue tbody")
    assert "etl-0" in rows and "etl-1" in rows and "etl-2" not in rows
    screenshot(page, "escalations-recovered-filter")
    assert axe_violations(page, "#escalation-queue") == []


def test_save_share_and_delete_a_view(page, live_server, queue, browser):
    log_in(page, live_server, "sam", "/escalations/")
    # Filter through the form (htmx pushes the URL), then save what the address bar shows.
    page.select_option("#f-recovered", "yes")
    page.wait_for_url("**recovered=yes**")
    page.click(".saved-views > summary")
    page.wait_for_selector("#saved-views-panel .muted")  # loaded: "No saved views yet."
    address_bar = urlsplit(page.url).query  # the whole filter form, as htmx pushed it
    assert "recovered=yes" in address_bar
    page.fill("#saved-view-name", "Recovered: resolve these")
    page.get_by_role("button", name="Save view").click()
    page.wait_for_selector("#saved-views-panel .saved-views-flash")
    view = SavedView.objects.get()
    assert (view.path, view.query) == ("/escalations/", address_bar)
    link = page.locator(".saved-view-link", has_text="Recovered: resolve these")
    assert link.get_attribute("href") == f"/escalations/?{address_bar}"
    assert page.locator(".saved-view[aria-current='true']").count() == 1
    share_url = page.input_value(f"#share-{view.pk}")
    assert share_url == f"{live_server.url}/views/{view.pk}/"
    screenshot(page, "saved-views-menu")
    assert axe_violations(page, "#saved-views-panel") == []

    # Someone else opens the share link and sees the same filters.
    other = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    try:
        log_in(other, live_server, "olga", f"/views/{view.pk}/")
        other.wait_for_url(f"**/escalations/?{address_bar}")
        assert other.locator("#f-recovered").input_value() == "yes"
        assert other.locator("#escalation-queue tbody tr").count() == 2
        screenshot(other, "saved-view-opened-by-share-link")
        # olga cannot delete sam's view: it is not in her menu, and a forged POST is refused.
        other.click(".saved-views > summary")
        other.wait_for_selector("#saved-views-panel .muted")
        assert other.locator(".saved-view-link").count() == 0
        status = other.evaluate(
            """async (url) => {
                const headers = JSON.parse(document.body.getAttribute('hx-headers'));
                const token = headers['x-csrftoken'];
                const answer = await fetch(url, {method: 'POST', headers: {'X-CSRFToken': token}});
                return answer.status;
            }""",
            f"/views/{view.pk}/delete/",
        )
        assert status == 403
    finally:
        other.context.close()

    page.get_by_role("button", name="Delete the view Recovered: resolve these").click()
    page.wait_for_selector("text=Deleted “Recovered: resolve these”")
    assert not SavedView.objects.exists()


def test_the_saved_views_menu_fits_a_narrow_screen(page, live_server, queue):
    page.set_viewport_size({"width": 390, "height": 844})
    log_in(page, live_server, "olga", "/?show=all")
    page.click(".saved-views > summary")
    page.wait_for_selector("#saved-views-panel .muted")
    page.fill("#saved-view-name", "All jobs")
    page.get_by_role("button", name="Save view").click()
    page.wait_for_selector("#saved-views-panel .saved-view-link")
    screenshot(page, "saved-views-menu-390")
    assert page.evaluate("() => document.documentElement.scrollWidth") <= 390
    box = page.locator("#saved-views-panel").bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390
