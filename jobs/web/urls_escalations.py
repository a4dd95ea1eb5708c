"""The escalation queue and its actions (included from traceviz/urls.py)."""

from django.urls import path

from jobs.web import escalations

urlpatterns = [
    path("", escalations.escalation_list, name="escalations"),
    path("bulk/", escalations.escalation_bulk, name="escalation-bulk"),
    path("<int:escalation_id>/", escalations.escalation_detail, name="escalation"),
    path("<int:escalation_id>/assign/", escalations.escalation_assign, name="escalation-assign"),
    path(
        "<int:escalation_id>/<slug:action>/",
        escalations.escalation_transition,
        name="escalation-action",
    ),
]
