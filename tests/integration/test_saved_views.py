"""Saved views: saving the filters of the jobs list, /failures/ and the escalation queue under a
name, listing them in the navigation, sharing them by link, deleting one's own."""

import pytest
from django.test import Client

from jobs.models import SavedView
from jobs.web import saved_views
from tests import factories

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def olga(client):
    user = factories.user("olga", "operator")
    client.force_login(user)
    return user


def htmx_from(url: str, **extra) -> dict:
    """Headers of an htmx request made from the page at ``url`` (the address bar)."""
    return {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": f"http://testserver{url}", **extra}


# -- saving ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path", "query"),
    [
        ("/?status=failed&workflow=etl", "/", "status=failed&workflow=etl"),
        ("/failures/?range=7d", "/failures/", "range=7d"),
        ("/escalations/?status=open&recovered=yes", "/escalations/", "status=open&recovered=yes"),
    ],
)
def test_saving_keeps_the_address_bars_page_and_filters(olga, client, url, path, query):
    response = client.post("/views/save/", {"name": "Mine"}, **htmx_from(url))
    assert response.status_code == 200
    view = SavedView.objects.get(owner=olga)
    assert (view.name, view.path, view.query) == ("Mine", path, query)
    body = response.content.decode()
    assert 'id="saved-views-panel"' in body and "<html" not in body
    assert "Saved “Mine”" in body


def test_position_in_the_list_is_not_part_of_a_view(olga, client):
    url = "/escalations/?status=open&page=3"
    client.post("/views/save/", {"name": "open"}, **htmx_from(url))
    client.post("/views/save/", {"name": "failed"}, **htmx_from("/?status=failed&cursor=abc"))
    saved = dict(SavedView.objects.values_list("name", "query"))
    assert saved == {"open": "status=open", "failed": "status=failed"}


def test_without_htmx_the_form_fields_say_what_to_save_and_the_answer_opens_it(olga, client):
    response = client.post(
        "/views/save/", {"name": "etl failures", "path": "/", "query": "workflow=etl"}
    )
    assert response.status_code == 303
    assert response["Location"] == "/?workflow=etl"


def test_a_filter_value_comes_back_unchanged(olga, client):
    query = "q=r%C3%A9sum%C3%A9+%22quoted%22%20x&workflow=a%26b&meta=k%3Av"
    client.post("/views/save/", {"name": "odd"}, **htmx_from(f"/?{query}"))
    view = SavedView.objects.get()
    response = client.get(f"/views/{view.pk}/")
    assert response["Location"] == f"/?{query}"


@pytest.mark.parametrize(
    ("name", "url", "error"),
    [
        ("", "/", "Give the view a name"),
        ("   ", "/", "Give the view a name"),
        ("x" * 101, "/", "at most 100 characters"),
        ("a\x00b", "/", "may not contain NUL"),
        ("mine", "/dashboard/?range=7d", "Only the jobs list, failures and the escalation queue"),
        ("mine", "/jobs/j1/", "Only the jobs list, failures and the escalation queue"),
    ],
)
def test_a_view_that_cannot_be_saved_is_refused_with_a_reason(olga, client, name, url, error):
    response = client.post("/views/save/", {"name": name}, **htmx_from(url))
    assert error in response.content.decode()
    assert not SavedView.objects.exists()
    plain = client.post("/views/save/", {"name": name, "path": url.split("?")[0]})
    assert plain.status_code == 400
    assert error in plain.content.decode()


def test_a_name_is_unique_per_owner_not_across_users(olga, client):
    client.post("/views/save/", {"name": "failed"}, **htmx_from("/?status=failed"))
    again = client.post("/views/save/", {"name": "failed"}, **htmx_from("/?status=paused"))
    assert "You already have a view named “failed”" in again.content.decode()
    assert SavedView.objects.get(owner=olga).query == "status=failed"
    other = Client()
    other.force_login(factories.user("sam", "support"))
    other.post("/views/save/", {"name": "failed"}, **htmx_from("/?status=paused"))
    assert SavedView.objects.filter(name="failed").count() == 2


def test_a_user_without_a_role_cannot_save(client):
    client.force_login(factories.user("nobody"))
    response = client.post("/views/save/", {"name": "x", "path": "/"})
    assert response.status_code == 403
    assert not SavedView.objects.exists()


def test_saving_needs_the_csrf_token(olga):
    csrf_client = Client(enforce_csrf_checks=True)
    csrf_client.force_login(olga)
    response = csrf_client.post("/views/save/", {"name": "x", "path": "/"})
    assert response.status_code == 403
    assert not SavedView.objects.exists()


# -- the navigation ----------------------------------------------------------------------------


def test_every_page_offers_the_menu_and_saving_only_on_the_three_list_pages(olga, client):
    for url in ("/?status=failed", "/failures/", "/escalations/?status=open"):
        body = client.get(url).content.decode()
        assert 'class="saved-views"' in body
        assert 'id="saved-view-name"' in body, url
    dashboard = client.get("/dashboard/").content.decode()
    assert 'class="saved-views"' in dashboard
    assert 'id="saved-view-name"' not in dashboard


def test_the_save_form_of_a_plain_page_carries_its_filters(olga, client):
    body = client.get("/escalations/?status=open&page=2").content.decode()
    assert '<input type="hidden" name="path" value="/escalations/">' in body
    assert '<input type="hidden" name="query" value="status=open">' in body


def test_the_menu_lists_my_views_with_their_share_links_not_others(olga, client):
    mine = SavedView.objects.create(owner=olga, name="ETL failed", path="/", query="workflow=etl")
    SavedView.objects.create(
        owner=factories.user("sam", "support"), name="Sam's", path="/escalations/"
    )
    response = client.get("/views/", **htmx_from("/?workflow=etl"))
    body = response.content.decode()
    assert "<html" not in body
    assert 'href="/?workflow=etl"' in body and "ETL failed" in body
    assert f'value="http://testserver/views/{mine.pk}/"' in body
    assert "Sam&#x27;s" not in body and "Sam's" not in body
    # The view of the page one is on is marked.
    assert 'aria-current="true"' in body


@pytest.mark.speed_guard
def test_the_menu_loads_lazily_so_pages_cost_no_query_for_it(olga, client):
    SavedView.objects.create(owner=olga, name="ETL failed", path="/", query="workflow=etl")
    body = client.get("/escalations/").content.decode()
    assert "ETL failed" not in body
    assert 'hx-get="/views/"' in body


def test_the_saved_views_page_renders_whole_without_htmx(olga, client):
    SavedView.objects.create(owner=olga, name="ETL failed", path="/", query="workflow=etl")
    response = client.get("/views/")
    body = response.content.decode()
    assert "<html" in body and "<h1>Saved views</h1>" in body and "ETL failed" in body
    assert "HX-Request" in response["Vary"]


def test_names_are_escaped(olga, client):
    SavedView.objects.create(owner=olga, name="<script>alert(1)</script>", path="/")
    body = client.get("/views/").content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


# -- sharing -----------------------------------------------------------------------------------


def test_a_share_link_opens_the_same_filters_for_anyone_who_may_see_the_page(olga, client):
    view = SavedView.objects.create(owner=olga, name="open", path="/escalations/", query="a=1")
    other = Client()
    other.force_login(factories.user("erin", "engineer"))
    response = other.get(f"/views/{view.pk}/")
    assert response.status_code == 302
    assert response["Location"] == "/escalations/?a=1"
    assert other.get(response["Location"]).status_code == 200


def test_a_share_link_needs_the_pages_access(olga):
    view = SavedView.objects.create(owner=olga, name="open", path="/", query="status=failed")
    no_role = Client()
    no_role.force_login(factories.user("nobody"))
    assert no_role.get(f"/views/{view.pk}/").status_code == 403
    anonymous = Client().get(f"/views/{view.pk}/")
    assert anonymous.status_code == 302
    assert anonymous["Location"].startswith("/accounts/login/?next=")


def test_an_unknown_view_is_404(olga, client):
    assert client.get("/views/999999/").status_code == 404
    assert client.post("/views/999999/delete/").status_code == 404


# -- deleting ----------------------------------------------------------------------------------


def test_the_owner_deletes_a_view(olga, client):
    view = SavedView.objects.create(owner=olga, name="open", path="/escalations/")
    response = client.post(f"/views/{view.pk}/delete/", **htmx_from("/escalations/"))
    assert response.status_code == 200
    assert "Deleted “open”" in response.content.decode()
    assert not SavedView.objects.exists()


def test_someone_elses_view_cannot_be_deleted(olga, client):
    sams = SavedView.objects.create(
        owner=factories.user("sam", "support"), name="sam's", path="/escalations/"
    )
    assert client.post(f"/views/{sams.pk}/delete/").status_code == 403
    staff = Client()
    staff.force_login(factories.user("root", staff=True))
    assert staff.post(f"/views/{sams.pk}/delete/").status_code == 403
    assert SavedView.objects.filter(pk=sams.pk).exists()


def test_deleting_without_htmx_goes_back_to_a_local_page_only(olga, client):
    first = SavedView.objects.create(owner=olga, name="a", path="/")
    second = SavedView.objects.create(owner=olga, name="b", path="/")
    back = client.post(f"/views/{first.pk}/delete/", {"next": "/escalations/"})
    assert (back.status_code, back["Location"]) == (303, "/escalations/")
    away = client.post(f"/views/{second.pk}/delete/", {"next": "https://evil.example/"})
    assert away["Location"] == "/views/"


def test_filters_of_drops_only_position():
    assert saved_views.filters_of("page=2&status=open&cursor=x&anchor=y&kind=a%20b") == (
        "status=open&kind=a%20b"
    )
    assert saved_views.filters_of("") == ""


@pytest.mark.speed_guard
def test_the_list_of_views_costs_the_same_queries_whatever_its_length(
    olga, client, django_assert_num_queries
):
    SavedView.objects.create(owner=olga, name="v0", path="/")
    client.get("/views/")  # warm the session
    with django_assert_num_queries(4) as few:  # session, user, their roles, the views
        client.get("/views/", **htmx_from("/"))
    for index in range(1, 8):
        SavedView.objects.create(
            owner=olga, name=f"v{index}", path="/failures/", query=f"q={index}"
        )
    with django_assert_num_queries(len(few.captured_queries)):
        response = client.get("/views/", **htmx_from("/"))
    assert response.content.decode().count('class="saved-view-link"') == 8
