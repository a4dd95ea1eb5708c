from django.urls import path

from jobs.web import job_page as pages

# Export URLs come first and end without a slash, so "<job_id>/events.ndjson" never reads as a
# job page (those always end with "/"); job ids may contain slashes (path converter).
urlpatterns = [
    path("", pages.jobs_list, name="jobs"),
    path("jobs/<path:job_id>/events.ndjson", pages.job_events_ndjson, name="job-events-ndjson"),
    path("jobs/<path:job_id>/events.json", pages.job_events_json, name="job-events-json"),
    path("jobs/<path:job_id>/", pages.job_detail, name="job"),
]
