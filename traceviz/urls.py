from django.contrib import admin
from django.urls import include, path

from jobs.views import api

urlpatterns = [
    path("api/v1/events", api.ingest_events, name="api-events"),
    path("api/v1/jobs", api.jobs_list, name="api-jobs"),
    path("api/v1/jobs/<path:job_id>", api.job_detail, name="api-job"),
    path("api/v1/openapi.json", api.openapi, name="api-openapi"),
    path("healthz", api.healthz, name="healthz"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("admin/", admin.site.urls),
    path("", include("jobs.urls")),
]
