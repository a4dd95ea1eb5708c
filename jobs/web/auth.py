"""Login, rate limited per client address so passwords cannot be guessed at speed."""

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.shortcuts import render

from jobs.web import ratelimit

LOGIN_WINDOW_SECONDS = 300


def login(request):
    if request.method == "POST":
        address = request.META.get("REMOTE_ADDR", "unknown")
        retry_after = ratelimit.hit(
            f"login:{address}", settings.TRACEVIZ_LOGIN_RATE_LIMIT, LOGIN_WINDOW_SECONDS
        )
        if retry_after is not None:
            minutes = max(1, round(retry_after / 60))
            response = render(
                request,
                "registration/login.html",
                {"rate_limited": f"Too many sign-in attempts. Try again in {minutes} min."},
                status=429,
            )
            response["Retry-After"] = str(retry_after)
            return response
    return auth_views.LoginView.as_view()(request)
