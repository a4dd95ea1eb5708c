"""What an audit trail records of each change people (or traceviz) made: who, when, what, from
which status to which. Escalations and failure groups each keep one."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    """One change; ``actor_name`` keeps who did it after their account is gone (``traceviz``
    for what ingest or a periodic task decided)."""

    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=200)
    action = models.CharField(max_length=32)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        abstract = True
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.action} by {self.actor_name}"
