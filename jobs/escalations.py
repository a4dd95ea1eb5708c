"""Escalations (DESIGN.md section 5): applying replay's triggers, and every change people make.

Every state change goes through one action function here, which writes the row, its audit entry
and (for openings) the outbox notification together, whatever view, task or command calls it.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from jobs.models import Escalation, EscalationEntry, Job, Notification
from jobs.replay import EscalationTrigger

SYSTEM_ACTOR = "traceviz"
Status = Escalation.Status


@dataclass(frozen=True, slots=True)
class ChainRun:
    job_id: str
    failed_at: datetime
    trigger_event_id: str


def repair_budget_overrun(runs: Iterable[ChainRun], budget: int) -> ChainRun | None:
    """The failed:logic run of a retry_of chain whose failure, in event time, pushed the count
    of such runs over ``budget``; None while the chain is within budget."""
    ordered = sorted(runs, key=lambda run: (run.failed_at, run.job_id))
    return ordered[budget] if len(ordered) > budget else None


def _record(escalation, action, *, actor=None, from_status="", to_status="", note="") -> None:
    EscalationEntry.objects.create(
        escalation=escalation,
        actor=actor,
        actor_name=actor.get_username() if actor else SYSTEM_ACTOR,
        action=action,
        from_status=from_status,
        to_status=to_status,
        note=note,
    )


def _change_status(escalation, to_status, action, *, actor=None, note="", **fields) -> None:
    from_status = escalation.status
    now = timezone.now()
    escalation.status = to_status
    escalation.updated_at = now
    escalation.resolved_at = now if to_status == Status.RESOLVED else None
    for name, value in fields.items():
        setattr(escalation, name, value)
    escalation.save()
    _record(escalation, action, actor=actor, from_status=from_status, to_status=to_status,
            note=note)  # fmt: skip


def apply_trigger(
    trigger: EscalationTrigger,
    *,
    job: Job | None,
    existing: Escalation | None,
    source: str = "replay",
) -> Escalation:
    """Open, reopen or leave alone the escalation a trigger names (identity: job, kind, node).

    A trigger the escalation has already seen changes nothing, so resends and rebuilds are
    harmless; a new trigger on a resolved escalation reopens it.
    """
    if existing is None:
        escalation = Escalation.objects.create(
            job=job,
            kind=trigger.kind,
            node_id=trigger.node_id,
            severity=trigger.severity,
            message=trigger.message,
            source=source,
            trigger_event_ids=[trigger.event_id],
            triggered_at=trigger.ts,
        )
        _record(escalation, "opened", to_status=Status.OPEN, note=trigger.message)
        Notification.objects.create(escalation=escalation, reason="opened")
        return escalation
    if trigger.event_id in existing.trigger_event_ids:
        return existing
    existing.trigger_event_ids = [*existing.trigger_event_ids, trigger.event_id]
    if existing.status == Status.RESOLVED:
        _change_status(
            existing, Status.OPEN, "reopened",
            note=f"The rule held again: {trigger.message}",
            message=trigger.message, triggered_at=trigger.ts,
        )  # fmt: skip
        Notification.objects.create(escalation=existing, reason="reopened")
    else:
        existing.save(update_fields=["trigger_event_ids"])
    return existing


def note_recovery(job: Job) -> None:
    """A job that finished completed while escalations were unresolved: support decides."""
    for escalation in job.escalations.exclude(status=Status.RESOLVED):
        _record(escalation, "job recovered", from_status=escalation.status,
                to_status=escalation.status, note="The job finished completed")  # fmt: skip


def acknowledge(escalation: Escalation, user) -> None:
    _change_status(escalation, Status.ACKNOWLEDGED, "acknowledged", actor=user)


def assign(escalation: Escalation, user, assignee) -> None:
    escalation.assignee = assignee
    escalation.updated_at = timezone.now()
    escalation.save(update_fields=["assignee", "updated_at"])
    who = assignee.get_username() if assignee else "nobody"
    _record(escalation, "assigned", actor=user, from_status=escalation.status,
            to_status=escalation.status, note=f"Assigned to {who}")  # fmt: skip


def resolve(escalation: Escalation, user, note: str) -> None:
    if not note.strip():
        raise ValueError("a resolution needs a note")
    _change_status(escalation, Status.RESOLVED, "resolved", actor=user, note=note.strip())


def reopen(escalation: Escalation, user, note: str = "") -> None:
    _change_status(escalation, Status.OPEN, "reopened", actor=user, note=note.strip())
    Notification.objects.create(escalation=escalation, reason="reopened")
