"""Admin: staff (the "staff" group, migration 0018) edit alert rules and issue and revoke
ingest tokens; jobs, steps, events and escalations are read-only here (the projection is rebuilt
from events, escalations change through their actions)."""

from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils import timezone

from jobs.models import (
    AlertEpisode,
    AlertRule,
    Escalation,
    EscalationEntry,
    Event,
    IngestToken,
    Job,
    JSONTextField,
    Step,
    json_text,
)


def shown_as_json(name: str):
    """A read-only field showing the JSONTextField ``name`` as JSON text, as the admin shows a
    JSONField (as a model field it would show the Python value: True, None, single quotes)."""

    @admin.display(description=name.replace("_", " "))
    def show(obj):
        return json_text(getattr(obj, name))

    return show


class ReadOnlyAdmin(admin.ModelAdmin):
    """Viewable by staff; never added, changed or deleted here."""

    def get_fields(self, request, obj=None):
        as_text = {f.name for f in self.model._meta.fields if isinstance(f, JSONTextField)}
        return [
            shown_as_json(name) if isinstance(name, str) and name in as_text else name
            for name in super().get_fields(request, obj)
        ]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AlertEpisodeInline(admin.TabularInline):
    model = AlertEpisode
    fields = ("subject", "firing_since", "resolved_at", "value", "jobs", "escalation")
    readonly_fields = fields
    extra = 0
    max_num = 0
    ordering = ("-firing_since",)
    show_change_link = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("escalation")


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = (
        "name",
        "kind",
        "provider",
        "model",
        "failure_code",
        "threshold",
        "window_minutes",
        "min_jobs",
        "severity",
        "enabled",
    )
    list_filter = ("kind", "enabled", "severity")
    list_editable = ("threshold", "enabled")
    search_fields = ("name", "provider", "model", "failure_code")
    fieldsets = (
        (None, {"fields": ("name", "kind", "enabled", "severity")}),
        (
            "Subject (blank provider/model: each provider/model on its own)",
            {"fields": ("provider", "model", "failure_code")},
        ),
        (
            "Condition: fires when the value is above the threshold",
            {
                "fields": ("threshold", "window_minutes", "min_jobs"),
                "description": "Rates are fractions (0.2 = 20 %); parse_invalid is a count.",
            },
        ),
    )
    inlines = [AlertEpisodeInline]


@admin.register(AlertEpisode)
class AlertEpisodeAdmin(ReadOnlyAdmin):
    list_display = ("rule", "subject", "firing_since", "resolved_at", "value", "jobs")
    list_filter = ("rule",)
    list_select_related = ("rule",)
    date_hierarchy = "firing_since"


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = (
        "job_id",
        "status",
        "workflow",
        "provider",
        "model",
        "started_at",
        "failure_code",
        "error_type",
    )
    list_filter = ("status",)
    search_fields = ("job_id", "correlation_id", "session_id")
    show_full_result_count = False


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = (
        "job",
        "node_id",
        "attempt",
        "result_type",
        "segment",
        "finished_at",
        "duration_ms",
    )
    list_filter = ("segment",)
    list_select_related = ("job",)
    search_fields = ("job__job_id", "node_id")
    raw_id_fields = ("job",)
    show_full_result_count = False


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "event_id", "type", "ts", "received_at")
    search_fields = ("job_id", "event_id")
    show_full_result_count = False


class EscalationEntryInline(admin.TabularInline):
    model = EscalationEntry
    fields = ("at", "actor_name", "action", "from_status", "to_status", "note")
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyAdmin):
    list_display = (
        "pk",
        "kind",
        "job",
        "alert_rule",
        "node_id",
        "severity",
        "status",
        "triggered_at",
    )
    list_filter = ("status", "kind", "severity")
    list_select_related = ("job", "alert_rule")
    raw_id_fields = ("job", "assignee", "alert_rule")
    inlines = [EscalationEntryInline]


@admin.register(IngestToken)
class IngestTokenAdmin(admin.ModelAdmin):
    """Issue (the clear token is shown once, on the page that answers the form, and stored
    nowhere) and revoke; never deleted, since stored events name the token that sent them."""

    list_display = ("name", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("name", "prefix")
    actions = ["revoke_tokens"]

    def get_fields(self, request, obj=None):
        if obj is None:
            return ("name", "rate_limit_per_minute")
        return (
            "name",
            "prefix",
            "rate_limit_per_minute",
            "created_at",
            "last_used_at",
            "revoked_at",
        )

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return ()
        return ("name", "prefix", "created_at", "last_used_at", "revoked_at")

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        if not change:
            request.issued_token = obj.set_new_secret()
        super().save_model(request, obj, form, change)

    def response_add(self, request, obj, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "token": obj,
            "raw": request.issued_token,
            "title": f"Ingest token {obj.name}",
        }
        return TemplateResponse(request, "admin/jobs/ingesttoken/issued.html", context)

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke_tokens(self, request, queryset):
        revoked = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {revoked} token(s): they answer 401 from now on.")
