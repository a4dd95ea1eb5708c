from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views import defaults

urlpatterns = [
    # Sign-ins (here and the admin's) are limited by django-axes (settings AXES_*).
    path("", include("jobs.web.urls")),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
]


def not_found(request, exception):
    """JSON under /api/ (tools read the error), the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": f"no such URL {request.path!r}"}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found
handler500 = "traceviz.outage.server_error"
