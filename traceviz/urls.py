from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path
from django.views import defaults

from jobs.web import api, auth, otlp
from jobs.web import dashboard as dashboard_views
from jobs.web import metrics as metrics_views

urlpatterns = [
    path("api/v1/events", api.ingest_events, name="api-events"),
    path("v1/traces", otlp.export_traces, name="otlp-traces"),
    path("api/v1/jobs", api.jobs_list, name="api-jobs"),
    path("api/v1/jobs/<path:job_id>", api.job_detail, name="api-job"),
    path("api/v1/openapi.json", api.openapi, name="api-openapi"),
    path("healthz", api.healthz, name="healthz"),
    path("metrics", metrics_views.prometheus_metrics, name="metrics"),
    path("dashboard/", dashboard_views.dashboard, name="dashboard"),
    path("escalations/", include("jobs.web.urls_escalations")),
    path("accounts/login/", auth.login, name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("", include("jobs.web.urls")),
]


def not_found(request, exception):
    """JSON under /api/ (tools read the error), the HTML page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"error": f"no such URL {request.path!r}"}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found
