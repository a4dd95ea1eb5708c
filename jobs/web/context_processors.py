"""Template context for every page: the header's firing-alert indicator."""

from django.utils.functional import SimpleLazyObject

from jobs.models import AlertEpisode


def firing_alerts(request) -> dict:
    """``firing_alert_count``: one COUNT query, run only when a page shows it to a signed-in
    user (lazy, so the login page and fragments that do not use it cost nothing)."""

    def count() -> int:
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return 0
        return AlertEpisode.objects.filter(resolved_at=None).count()

    return {"firing_alert_count": SimpleLazyObject(count)}
