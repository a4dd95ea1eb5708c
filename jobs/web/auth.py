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
