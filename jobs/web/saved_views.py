"""Saved views (docs/architecture.md "Saved views"): a user's named filters of the jobs list,
``/failures/`` or the escalation queue, listed in the navigation and shared by link.

A saved view is a name, a page's path and its query string, owned by the user who saved it. What
is saved is where the user is: with htmx, the address bar (``HX-Current-URL``, which filter
changes keep up to date through ``hx-push-url``); without, the form's own fields, rendered with
the page. Position in a list (page numbers, cursors) is left out: a view is its filters. The
view's URL, ``/views/<id>/``, is its share link: it redirects anyone allowed to see the page to
the same filters; only the owner deletes it.
"""

from urllib.parse import unquote_plus, urlsplit

from django.db import IntegrityError, transaction
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from jobs.models import SavedView
from jobs.web import access
from jobs.web.access import get_saved_view_for_user
from jobs.web.rendering import wants_fragment

Page = SavedView.Page
# Where one is in a list, not what it is filtered to: never part of a saved view.
POSITION_PARAMETERS = ("page", "cursor", "anchor")
NAME_CHARS = SavedView._meta.get_field("name").max_length or 100
QUERY_CHARS = 4000


class SavedViewError(ValueError):
    """A view that cannot be saved: the message says why, in words the user can act on."""


def filters_of(query: str) -> str:
    """``query`` without the parameters that only say where one is in the list (a view opens
    the list at its start); every other parameter is kept as it was written, in its order."""
    kept = [
        pair
        for pair in query.split("&")
        if pair and unquote_plus(pair.partition("=")[0]) not in POSITION_PARAMETERS
    ]
    return "&".join(kept)


def here(request) -> tuple[str, str] | None:
    """The page and the filters the user is looking at, when the page can be saved (None
    otherwise): the address bar for an htmx request, else the request's own path and query
    (a GET) or the form's ``path`` and ``query`` fields (a POST without htmx)."""
    if request.htmx and request.htmx.current_url:
        parts = urlsplit(request.htmx.current_url)
        path, query = parts.path, parts.query
    elif request.method == "POST":
        path, query = request.POST.get("path", ""), request.POST.get("query", "")
    else:
        path, query = request.path, request.META.get("QUERY_STRING", "")
    if path not in Page.values:
        return None
    return path, filters_of(query)


def save(owner, name: str, path: str, query: str) -> SavedView:
    """Save ``path``'s ``query`` under ``name`` for ``owner``; returns the view. SavedViewError
    for an empty or over-long name, a name the owner already uses, a page that cannot be saved
    or a query too long to keep."""
    name = name.strip()
    if not name:
        raise SavedViewError("Give the view a name")
    if len(name) > NAME_CHARS:
        raise SavedViewError(
            f"A name holds at most {NAME_CHARS} characters; this one has {len(name)}"
        )
    if "\x00" in name:
        raise SavedViewError("A name may not contain NUL characters")
    if path not in Page.values:
        raise SavedViewError("Only the jobs list, failures and the escalation queue can be saved")
    if len(query) > QUERY_CHARS:
        raise SavedViewError(f"These filters are longer than {QUERY_CHARS} characters")
    if SavedView.objects.filter(owner=owner, name=name).exists():
        raise SavedViewError(f"You already have a view named “{name}”: pick another name")
    try:
        with transaction.atomic():
            return SavedView.objects.create(owner=owner, name=name, path=path, query=query)
    except IntegrityError:  # the same name saved at the same moment from another tab
        raise SavedViewError(f"You already have a view named “{name}”: pick another name") from None


def _panel_context(request, *, message: str = "", error: str = "", name: str = "") -> dict:
    views = list(SavedView.objects.filter(owner=request.user).order_by("name", "pk"))
    where = here(request)
    return {
        "nav": "views",
        "views": [
            {
                "view": view,
                "page": Page(view.path).label,
                "share_url": request.build_absolute_uri(reverse("jobs:saved-view", args=[view.pk])),
                "current": where == (view.path, view.query),
            }
            for view in views
        ],
        "loaded": True,
        "here": where,
        "here_label": Page(where[0]).label if where else "",
        "message": message,
        "error": error,
        "name": name,
        "name_chars": NAME_CHARS,
    }


def _panel_response(request, status: int = 200, **context):
    template = "saved_views/list.html"
    if wants_fragment(request):
        template += "#saved-views-panel"
    return render(request, template, _panel_context(request, **context), status=status)


@require_GET
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
def saved_view_list(request):
    """GET /views/: the user's saved views, each with its share link, and the form that saves
    the page the user is on (the navigation's menu loads this as a fragment)."""
    return _panel_response(request)


@require_POST
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
def saved_view_create(request):
    """POST /views/save/ with ``name`` (and, without htmx, ``path`` and ``query``): save the page's
    filters. htmx gets the menu back; a plain form is sent to the saved view."""
    name = request.POST.get("name", "")
    where = here(request)
    try:
        if where is None:
            raise SavedViewError(
                "Only the jobs list, failures and the escalation queue can be saved"
            )
        view = save(request.user, name, *where)
    except SavedViewError as refused:
        # htmx swaps only 2xx answers: the error is shown in the menu it swaps.
        status = 200 if request.htmx else 400
        return _panel_response(request, status, error=str(refused), name=name)
    if request.htmx:
        return _panel_response(request, message=f"Saved “{view.name}”")
    return HttpResponseRedirect(view.target_url, status=303)


@require_GET
@access.role_required(access.can_view)
def saved_view_open(request, view_id: int):
    """GET /views/<id>/: the share link. Redirects to the saved page and filters for anyone
    allowed to see that page (403 otherwise, 404 for no such view)."""
    view = get_saved_view_for_user(request, view_id)
    return HttpResponseRedirect(view.target_url)


@require_POST
@access.role_required(access.can_view)
@vary_on_headers("HX-Request")
def saved_view_delete(request, view_id: int):
    """POST /views/<id>/delete/: the owner deletes the view (403 for anyone else's)."""
    view = get_saved_view_for_user(request, view_id, for_delete=True)
    name = view.name
    view.delete()
    if request.htmx:
        return _panel_response(request, message=f"Deleted “{name}”")
    next_url = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(next_url, {request.get_host()}, request.is_secure()):
        next_url = reverse("jobs:saved-views")
    return HttpResponseRedirect(next_url, status=303)
