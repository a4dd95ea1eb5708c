"""The sign-in lockout page. Sign-ins (the site's and the admin's) are counted by django-axes
per real client address (settings AXES_*); this renders its lockout as the login page."""

from django.conf import settings
from django.shortcuts import render


def locked_out(request, original_response=None, credentials=None):
    """django-axes' AXES_LOCKOUT_CALLABLE: the login form again, 429, with Retry-After."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    minutes = max(1, round(seconds / 60))
    response = render(
        request,
        "registration/login.html",
        {"rate_limited": f"Too many sign-in attempts. Try again in {minutes} min."},
        status=429,
    )
    response["Retry-After"] = str(seconds)
    return response


# django-axes records the typed username in a 255-character column; Django's own are 150.
RECORDED_USERNAME_CHARS = 150


def attempted_username(request, credentials=None) -> str:
    """django-axes' AXES_USERNAME_CALLABLE: the username a sign-in tried, as axes records it,
    cut to fit its column and without NUL (PostgreSQL text cannot hold it), so a hostile one is
    a failed sign-in like any other, never a 500."""
    if credentials:
        raw = credentials.get("username")
    else:
        raw = request.POST.get("username") if request is not None else None
    return str(raw or "").replace("\x00", "")[:RECORDED_USERNAME_CHARS]
