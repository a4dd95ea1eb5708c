"""Who may do what (docs/architecture.md), decided here and nowhere else.

A user's roles are the groups of ``models.Role`` they belong to (migration 0002 creates them);
staff hold every role. They are looked up once per request and cached on the user object, so
a page that asks several questions costs one query. Views get the objects they show through
``get_job_for_user``, ``get_escalation_for_user`` and ``get_saved_view_for_user``, which
decide what the user may see and act on; views with no object use ``role_required``. A job
asked for by an alias (a trace id whose trace named its job) is ``JobMoved``, which
``follows_job_aliases`` answers with a redirect.
"""

from collections.abc import Callable
from functools import wraps
from urllib.parse import urlsplit

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django_htmx.http import HttpResponseClientRedirect

from jobs.models import Escalation, Job, JobAlias, Role, SavedView

EVERY_ROLE = frozenset(Role.values)
ROLES_CACHE = "_traceviz_roles"


def roles_of(user) -> frozenset[str]:
    """The roles ``user`` holds: empty when anonymous, all of them for staff."""
    if not user.is_authenticated:
        return frozenset()
    cached = getattr(user, ROLES_CACHE, None)
    if cached is None:
        if user.is_staff or user.is_superuser:
            cached = EVERY_ROLE
        else:
            cached = frozenset(
                user.groups.filter(name__in=EVERY_ROLE).values_list("name", flat=True)
            )
        setattr(user, ROLES_CACHE, cached)
    return cached


def can_view(user) -> bool:
    """Jobs list, job pages, dashboard, escalations (read): every role."""
    return bool(roles_of(user))


def can_act_on_escalations(user) -> bool:
    return Role.SUPPORT in roles_of(user)


def can_act_on_failure_groups(user) -> bool:
    """Resolve, ignore and merge failure groups: every role (whoever works failures)."""
    return bool(roles_of(user))


def can_see_raw_events(user) -> bool:
    """Raw events and export."""
    return Role.ENGINEER in roles_of(user)


def role_required(check: Callable[[object], bool]):
    """Login required (302 to login), then ``check(user)`` or 403."""

    def decorator(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if not check(request.user):
                raise PermissionDenied
            return view(request, *args, **kwargs)

        return wrapper

    return decorator


class JobMoved(Http404):
    """The id asked for is an alias of the job ``job_id`` (a trace's id, once a span of the
    trace named its job): ``follows_job_aliases`` redirects there; uncaught, a 404."""

    def __init__(self, job_id: str):
        super().__init__(f"the job is {job_id!r} now")
        self.job_id = job_id


def get_job_for_user(
    request, job_id: str, *, need: Callable[[object], bool] = can_view, jobs: QuerySet | None = None
) -> Job:
    """The job ``job_id`` if the user may see it: PermissionDenied (403) without the role
    ``need`` asks for, 404 when there is no such job. Callers wrap the view in
    ``login_required`` so an anonymous user is sent to the login page first."""
    if not need(request.user):
        raise PermissionDenied
    # The fold's snapshot is replay's, never shown: left in the database.
    jobs = Job.objects.defer("fold") if jobs is None else jobs
    try:
        return get_object_or_404(jobs, job_id=job_id)
    except Http404:
        if (named := JobAlias.objects.job_of(job_id)) is not None:
            raise JobMoved(named) from None
        raise


def follows_job_aliases(url_name: str):
    """A view of one job (URL ``url_name``, the job id its argument) that answers a
    ``JobMoved`` with a redirect (302) to the same URL of the named job, query string kept:
    deep links made of a trace id keep working once the trace is named. An HTMX request (a
    page of the trace id's job polling for updates, a step opened in it) moves the whole page
    there instead, keeping the page's own query: the job it shows is the named one now."""

    def decorator(view):
        @wraps(view)
        def wrapper(request, job_id: str, *args, **kwargs):
            try:
                return view(request, job_id, *args, **kwargs)
            except JobMoved as moved:
                if getattr(request, "htmx", False):
                    page = urlsplit(request.htmx.current_url or "").query
                    return HttpResponseClientRedirect(
                        moved_url(request, url_name, moved.job_id, query=page)
                    )
                return redirect(moved_url(request, url_name, moved.job_id))

        return wrapper

    return decorator


def moved_url(request, url_name: str, job_id: str, *, query: str | None = None) -> str:
    """The URL ``url_name`` of the job ``job_id``, with ``query`` (the request's query string
    when None)."""
    query = request.META.get("QUERY_STRING", "") if query is None else query
    return reverse(url_name, args=[job_id]) + (f"?{query}" if query else "")


def get_escalation_for_user(request, escalation_id: int, *, for_action: bool = False) -> Escalation:
    """The escalation or 404. Reading needs a role; ``for_action`` needs support (or staff),
    else PermissionDenied, and locks the row for the rest of the caller's transaction."""
    if not can_view(request.user):
        raise PermissionDenied
    escalations = Escalation.objects.select_related("job", "assignee")
    if for_action:
        if not can_act_on_escalations(request.user):
            raise PermissionDenied
        escalations = escalations.select_for_update(of=("self",))
    return get_object_or_404(escalations, pk=escalation_id)


# Who may see each page a saved view can name: opening its share link needs the same.
SAVED_VIEW_PAGE_ACCESS: dict[str, Callable[[object], bool]] = {
    SavedView.Page.JOBS: can_view,
    SavedView.Page.FAILURES: can_view,
    SavedView.Page.ESCALATIONS: can_view,
}


def get_saved_view_for_user(request, view_id: int, *, for_delete: bool = False) -> SavedView:
    """The saved view or 404. Opening it (its share link) needs the access its page needs;
    ``for_delete`` needs to be its owner. PermissionDenied otherwise."""
    view = get_object_or_404(SavedView, pk=view_id)
    if for_delete:
        if view.owner_id != request.user.pk:
            raise PermissionDenied
    elif not SAVED_VIEW_PAGE_ACCESS[view.path](request.user):
        raise PermissionDenied
    return view
