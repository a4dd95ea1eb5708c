"""Remove a string that got stored anyway (a secret redaction missed) from everything derived
from it: the event log, the projections rebuilt from it, and escalation texts."""

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction
from django.db.models import Q
from django.db.models.functions import Cast

from jobs.ingest.locks import lock_jobs
from jobs.ingest.projection import replay_jobs
from jobs.models import (
    RESOURCE_REF,
    DashboardDirtyHour,
    Escalation,
    EscalationEntry,
    Event,
    FailureGroup,
    FailureGroupEntry,
    Job,
    Notification,
    SpanResource,
    Step,
)

PURGED = "[PURGED]"


def _scrub(value: Any, needle: str) -> Any:
    if isinstance(value, str):
        return value.replace(needle, PURGED)
    if isinstance(value, dict):
        return {_scrub(key, needle): _scrub(item, needle) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrub(item, needle) for item in value]
    return value


def _contains(field_name: str, needle: str) -> Q:
    """Rows whose field holds ``needle``, whether stored as plain text or inside JSON text
    (escaped, with or without non-ASCII escapes)."""
    forms = {needle, json.dumps(needle)[1:-1], json.dumps(needle, ensure_ascii=False)[1:-1]}
    query = Q()
    for form in forms:
        query |= Q(**{f"{field_name}__contains": form})
    return query


TEXT_FIELDS = {
    Event: ["payload"],
    # A resource or scope its spans reference (a dry run counts it; a purge inlines it first).
    SpanResource: ["attributes"],
    Job: [
        "failing_reason",
        "finish_reason",
        "cancel_reason",
        "payload_results",
        "metadata",
        "findings",
        "last_validation_error",
        "fold",
    ],
    Step: [
        "reason",
        "compensation_reason",
        "payload_results",
        "context",
        "audit_trail",
        "extra",
        "history",
    ],
    Escalation: ["message"],
    # A group's normalised reason came from a step's reason (and a new-signature escalation's
    # message from the group).
    FailureGroup: ["reason", "resolved_in_version"],
    EscalationEntry: ["note"],
    # A regression's note names the version the failing job's metadata gave.
    FailureGroupEntry: ["note"],
    Notification: ["last_error"],
}


@dataclass
class PurgeReport:
    rows: dict[str, int] = field(default_factory=dict)
    jobs_rebuilt: int = 0


def _matching(model, needle: str):
    """Rows of ``model`` holding ``needle`` in any of its text or JSON fields (JSON is searched
    as its text, so a secret inside a nested value is found)."""
    rows, query = model.objects.all(), Q()
    for name in TEXT_FIELDS[model]:
        if isinstance(model._meta.get_field(name), models.JSONField):
            rows = rows.annotate(**{f"{name}_text": Cast(name, output_field=models.TextField())})
            name = f"{name}_text"
        query |= _contains(name, needle)
    return rows.filter(query)


def _inline_resources_holding(needle: str) -> None:
    """A stored resource holding ``needle`` goes: the events that reference it get it back in
    their own payload (where the scrub below finds it), and no other reads it again."""
    for digest in SpanResource.objects.filter(_contains("attributes", needle)).values_list(
        "digest", flat=True
    ):
        referencing = Event.objects.filter(payload__resource={RESOURCE_REF: digest})
        for event in referencing.iterator():
            Event.objects.filter(pk=event.pk).update(payload=event.payload)
        SpanResource.objects.filter(digest=digest).delete()


def purge_text(needle: str, *, dry_run: bool) -> PurgeReport:
    """Count (dry run) or scrub every row holding ``needle``; rebuilds the affected jobs."""
    if len(needle) < 4:
        raise ValueError("refusing to purge a string shorter than 4 characters")
    report = PurgeReport(
        rows={model.__name__: _matching(model, needle).count() for model in TEXT_FIELDS}
    )
    if dry_run:
        return report
    with transaction.atomic():
        _inline_resources_holding(needle)
        job_ids = set(_matching(Event, needle).values_list("job_id", flat=True))
        job_ids.update(_matching(Job, needle).values_list("job_id", flat=True))
        job_ids.update(_matching(Step, needle).values_list("job__job_id", flat=True))
        # Ingest's per-job locks: no batch of these jobs projects from unscrubbed events
        # while this runs, and none is lost (it waits, then folds onto the scrubbed rows).
        lock_jobs(job_ids)
        scrubbed = _matching(Event, needle).filter(job_id__in=job_ids)
        # A scrubbed provider or model changes the planner counts of the event's hour.
        DashboardDirtyHour.objects.mark(scrubbed.planner_hours())
        for event in scrubbed.iterator():
            Event.objects.filter(pk=event.pk).update(payload=_scrub(event.payload, needle))
        replay_jobs(job_ids)
        report.jobs_rebuilt = len(job_ids)
        for model in (Escalation, EscalationEntry, Notification, FailureGroup, FailureGroupEntry):
            for row in _matching(model, needle).iterator():
                for name in TEXT_FIELDS[model]:
                    setattr(row, name, _scrub(getattr(row, name), needle))
                row.save(update_fields=TEXT_FIELDS[model])
    return report
