"""What people work: escalations, their audit trail, notifications, alert rules and episodes."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from jobs.models.audit import AuditEntry
from jobs.models.runs import Job
from jobs.models.values import JSONField


class Escalation(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    class Severity(models.TextChoices):
        LOW = "low"
        MEDIUM = "medium"
        HIGH = "high"
        CRITICAL = "critical"

    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="escalations"
    )
    kind = models.CharField(max_length=64)
    node_id = models.CharField(max_length=200, blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    message = models.TextField(blank=True)
    source = models.CharField(max_length=200, blank=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="escalations",
    )
    # Every trigger event this escalation has seen: a trigger seen before changes nothing.
    trigger_event_ids = JSONField(default=list, blank=True)
    triggered_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    # When it last became open (created or reopened): the queue's age counts from here.
    opened_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # A firing alert rule's escalation has no job; node_id then names the alert's subject
    # (provider/model or failure code), so each subject has its own escalation.
    alert_rule = models.ForeignKey(
        "AlertRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="escalations"
    )

    class Meta:
        constraints = [
            # Identity: one escalation per (job, kind, node).
            models.UniqueConstraint(
                fields=["job", "kind", "node_id"],
                condition=Q(job__isnull=False),
                name="escalation_identity_job",
            ),
            # Identity of an alert's escalation: one per (rule, kind, subject).
            models.UniqueConstraint(
                fields=["alert_rule", "kind", "node_id"],
                condition=Q(alert_rule__isnull=False),
                name="escalation_identity_alert",
            ),
        ]
        indexes = [
            # Queue: open first, oldest first.
            models.Index(fields=["status", "created_at"], name="escalation_queue"),
            models.Index(fields=["kind", "status"], name="escalation_kind"),
            # Queue: unresolved first, longest open first (age counts from the last opening).
            models.Index(fields=["status", "opened_at"], name="escalation_opened"),
            # Dashboard: unresolved escalations by kind and age, and how many (partial: most
            # escalations are resolved; the condition is the panels' exclude(status=RESOLVED)).
            models.Index(
                fields=["kind", "triggered_at"],
                condition=~Q(status="resolved"),
                name="escalation_unresolved",
            ),
            # Dashboard headline: those open when the range began (not resolved by then).
            models.Index(fields=["resolved_at", "created_at"], name="escalation_resolved"),
        ]

    def __str__(self):
        return f"{self.kind} {self.job_id or ''} {self.node_id}".strip()


class EscalationEntry(AuditEntry):
    """The audit trail of an escalation: who did what, when, from which status to which."""

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="entries")


class Notification(models.Model):
    """Outbox row: written with the change that caused it, delivered later by a Celery task."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        SENT = "sent"
        FAILED = "failed"

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    escalation = models.ForeignKey(
        Escalation, on_delete=models.CASCADE, related_name="notifications"
    )
    reason = models.CharField(max_length=32)  # opened, reopened, commented
    # The audit entry whose text is the news (a comment); None for openings.
    entry = models.ForeignKey(
        EscalationEntry, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # One row per destination, so a failing webhook never re-sends an email that went out.
    channel = models.CharField(max_length=16, choices=Channel.choices, default=Channel.EMAIL)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Delivery attempts so far; a claim increments it, so it also fences a worker whose lease
    # expired from recording over the worker that claimed the row after it.
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # While "sending": when the claim lapses and another worker may take the row again.
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # Outbox sweep: pending notifications that are due.
            models.Index(fields=["status", "next_attempt_at"], name="notification_due"),
        ]

    def __str__(self):
        return f"{self.reason} {self.escalation_id} ({self.status})"


class AlertRule(models.Model):
    """An alert threshold, edited by staff in the admin; evaluated by ``alerts.evaluate``.

    Blank provider and model mean "each provider/model on its own" for the planner kinds; a
    failure-code rate is over all jobs (or the given provider/model's).
    """

    class Kind(models.TextChoices):
        PLANNER_DEGRADED_RATE = "planner_degraded_rate", "Planner degraded rate (fraction)"
        PLANNER_PARSE_INVALID = "planner_parse_invalid", "Planner parse_invalid count"
        FAILURE_CODE_RATE = "failure_code_rate", "Failure rate of a failure code (fraction)"
        NEW_FAILURE_SIGNATURE = "new_failure_signature", "New failure signature"
        FAILURE_GROUP_REGRESSED = "failure_group_regressed", "Failure group regressed"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    # Fires when the value is above the threshold: a fraction (0.2 = 20 %) for rates, a count
    # for parse_invalid.
    threshold = models.FloatField()
    window_minutes = models.PositiveIntegerField(default=15)
    min_jobs = models.PositiveIntegerField(default=5)
    severity = models.CharField(
        max_length=16, choices=Escalation.Severity.choices, default=Escalation.Severity.MEDIUM
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class AlertEpisode(models.Model):
    """One stretch of time during which a rule held for one subject: firing, then resolved."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="episodes")
    # "provider/model" for planner kinds, the failure code for failure-code rates.
    subject = models.CharField(max_length=401, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    firing_since = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField()
    jobs = models.IntegerField(default=0)
    last_evaluated_at = models.DateTimeField()
    escalation = models.ForeignKey(
        Escalation, null=True, blank=True, on_delete=models.SET_NULL, related_name="alert_episodes"
    )

    class Meta:
        constraints = [
            # A rule fires once per episode: at most one unresolved episode per subject.
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(resolved_at__isnull=True),
                name="alert_episode_one_firing",
            ),
        ]
        indexes = [
            # Page header and dashboard: firing alerts (resolved_at IS NULL), newest first.
            models.Index(fields=["resolved_at", "-firing_since"], name="alert_episode_firing"),
        ]

    def __str__(self):
        return f"{self.rule} {self.subject}".strip()

    @property
    def is_firing(self) -> bool:
        return self.resolved_at is None
