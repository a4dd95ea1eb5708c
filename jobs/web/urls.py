"""Every URL of the app (docs/architecture.md); traceviz/urls.py includes this at the root.

Export, live poll and rows URLs come before the job page and end without a slash, so
"<job_id>/events.ndjson" or "<job_id>/live" never reads as a job page (those always end with
"/"); job ids may contain slashes.
"""

from django.urls import path, register_converter

from jobs.web import (
    api,
    compare,
    dashboard,
    escalations,
    export,
    failures,
    job_page,
    jobs_list,
    metrics,
    otlp,
    saved_views,
)


class JobIdConverter:
    """A job id in a path: any text but NUL, slashes and newlines included, so that reversing
    the URL of any stored job id works (``path``'s ``.+`` stops at a newline, and a job stored
    before ingest refused such ids would break every page that links it). A NUL, which no
    database text holds, never gets here: a path with one is a 400 (traceviz.bad_requests)."""

    regex = "[^\\x00]+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(JobIdConverter, "job_id")


class RowsPartConverter:
    """One of the job page's long lists whose windows have a URL (``job_page.job_rows``)."""

    regex = "steps|waterfall|narrative"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


register_converter(RowsPartConverter, "rows_part")

app_name = "jobs"

urlpatterns = [
    # Producers and tools.
    path("api/v1/events", api.ingest_events, name="api-events"),
    path("v1/traces", otlp.export_traces, name="otlp-traces"),
    path("v1/logs", otlp.export_logs, name="otlp-logs"),
    path("api/v1/jobs", api.jobs_list, name="api-jobs"),
    path("api/v1/jobs/<job_id:job_id>", api.job_detail, name="api-job"),
    path("api/v1/compare", compare.compare_api, name="api-compare"),
    path("api/v1/openapi.json", api.openapi, name="api-openapi"),
    path("healthz", api.healthz, name="healthz"),
    path("metrics", metrics.prometheus_metrics, name="metrics"),
    # Pages.
    path("dashboard/", dashboard.dashboard, name="dashboard"),
    path("compare/", compare.compare_page, name="compare"),
    path("failures/", failures.failure_group_list, name="failures"),
    path("failures/<str:fingerprint>/", failures.failure_group_detail, name="failure-group"),
    path(
        "failures/<str:fingerprint>/<slug:action>/",
        failures.failure_group_action,
        name="failure-group-action",
    ),
    path("escalations/", escalations.escalation_list, name="escalations"),
    path("escalations/bulk/", escalations.escalation_bulk, name="escalation-bulk"),
    path("escalations/<int:escalation_id>/", escalations.escalation_detail, name="escalation"),
    path(
        "escalations/<int:escalation_id>/assign/",
        escalations.escalation_assign,
        name="escalation-assign",
    ),
    path(
        "escalations/<int:escalation_id>/comment/",
        escalations.escalation_comment,
        name="escalation-comment",
    ),
    path(
        "escalations/<int:escalation_id>/<slug:action>/",
        escalations.escalation_transition,
        name="escalation-action",
    ),
    path("views/", saved_views.saved_view_list, name="saved-views"),
    path("views/save/", saved_views.saved_view_create, name="saved-view-create"),
    path("views/<int:view_id>/", saved_views.saved_view_open, name="saved-view"),
    path("views/<int:view_id>/delete/", saved_views.saved_view_delete, name="saved-view-delete"),
    path("", jobs_list.jobs_list, name="jobs"),
    path("jobs/<job_id:job_id>/events.ndjson", export.job_events_ndjson, name="job-events-ndjson"),
    path("jobs/<job_id:job_id>/events.json", export.job_events_json, name="job-events-json"),
    path("jobs/<job_id:job_id>/live", job_page.job_live, name="job-live"),
    path("jobs/<job_id:job_id>/rows/<rows_part:part>", job_page.job_rows, name="job-rows"),
    path("jobs/<job_id:job_id>/", job_page.job_detail, name="job"),
]
