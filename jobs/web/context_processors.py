"""Template context for every page: the header's firing-alert indicator and the page a saved
view would save."""

from django.utils.functional import SimpleLazyObject

from jobs.models import AlertEpisode, SavedView
from jobs.web.saved_views import filters_of


def firing_alerts(request) -> dict:
    """``firing_alert_count``: one COUNT query, run only when a page shows it to a signed-in
    user (lazy, so the login page and fragments that do not use it cost nothing)."""

    def count() -> int:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return 0
        return AlertEpisode.objects.filter(resolved_at=None).count()

    return {"firing_alert_count": SimpleLazyObject(count)}


def saved_view_here(request) -> dict:
    """``saved_view_here``: the page's path and filters when the page can be saved as a view
    (None otherwise), for the navigation's save form. No query: the views themselves load
    when the menu opens (``jobs.web.saved_views``)."""
    here = None
    if request.path in SavedView.Page.values:
        here = (request.path, filters_of(request.META.get("QUERY_STRING", "")))
    return {"saved_view_here": here}
