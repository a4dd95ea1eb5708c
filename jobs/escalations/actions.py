"""Escalations (docs/contract.md): applying replay's triggers, and every change people make.

Every state change goes through one action function here, which writes the row, its audit entry
and (for openings) the outbox notification together, whatever view, task or command calls it.
"""

from collections.abc import Iterable

from django.db.models import Max
from django.utils import timezone

from jobs.escalations import outbox
from jobs.models import Escalation, EscalationEntry, Job, Notification
from jobs.replay import rules
from jobs.replay.state import EscalationTrigger, Recovery

SYSTEM_ACTOR = "traceviz"
Status = Escalation.Status


class ActionError(ValueError):
    """An action that does not apply: the message says why, in words support can act on."""


# Which statuses each status-changing action starts from (docs/contract.md: open ->
# acknowledged -> resolved, reopen allowed).
ACTION_FROM: dict[str, frozenset[str]] = {
    "acknowledge": frozenset({Status.OPEN}),
    "resolve": frozenset({Status.OPEN, Status.ACKNOWLEDGED}),
    "reopen": frozenset({Status.RESOLVED}),
}
ACTION_TO = {"acknowledge": Status.ACKNOWLEDGED, "resolve": Status.RESOLVED, "reopen": Status.OPEN}


def can_apply(action: str, escalation: Escalation) -> bool:
    return escalation.status in ACTION_FROM[action]


def _require(action: str, escalation: Escalation) -> None:
    if not can_apply(action, escalation):
        raise ActionError(f"Escalation {escalation.pk} is {escalation.status}: cannot {action} it")


def _record(
    escalation, action, *, actor=None, from_status="", to_status="", note=""
) -> EscalationEntry:
    return EscalationEntry.objects.create(
        escalation=escalation,
        actor=actor,
        actor_name=actor.get_username() if actor else SYSTEM_ACTOR,
        action=action,
        from_status=from_status,
        to_status=to_status,
        note=note,
    )


def _notify(escalation: Escalation, reason: str, entry: EscalationEntry | None = None) -> None:
    """Outbox: one row per configured destination, written in the caller's transaction and
    delivered once it commits (the periodic sweep re-sends whatever that enqueue lost).
    ``entry`` is the audit entry the notification tells of, when its text is the news (a
    comment)."""
    for channel in outbox.configured_channels():
        notification = Notification.objects.create(
            escalation=escalation, reason=reason, channel=channel, entry=entry
        )
        outbox.deliver_after_commit(notification.pk)


def _change_status(escalation, to_status, action, *, actor=None, note="", **fields) -> None:
    from_status = escalation.status
    now = timezone.now()
    escalation.status = to_status
    escalation.updated_at = now
    escalation.resolved_at = now if to_status == Status.RESOLVED else None
    if to_status == Status.OPEN:
        escalation.opened_at = now
    for name, value in fields.items():
        setattr(escalation, name, value)
    escalation.save()
    _record(
        escalation, action, actor=actor, from_status=from_status, to_status=to_status, note=note
    )


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
        _notify(escalation, "opened")
        return escalation
    if trigger.event_id in existing.trigger_event_ids:
        return existing
    existing.trigger_event_ids = [*existing.trigger_event_ids, trigger.event_id]
    if existing.status == Status.RESOLVED:
        _change_status(
            existing,
            Status.OPEN,
            "reopened",
            note=f"The rule held again: {trigger.message}",
            message=trigger.message,
            triggered_at=trigger.ts,
        )
        _notify(existing, "reopened")
    else:
        existing.save(update_fields=["trigger_event_ids"])
    return existing


def withdraw_unheld(
    job_escalations: Iterable[Escalation], held: set[tuple[str, str]]
) -> list[Escalation]:
    """Withdraw a job's unresolved escalations of the state kinds whose (kind, node) a full
    replay of its events no longer triggers: with a late event folded in where it belongs (a
    cancel that makes a failure stale, a job_started's plan hash), the rule never held. They are
    resolved by the system with an audit entry saying why, never deleted: what people did and
    the notifications stay in the history. Returns the withdrawn ones."""
    withdrawn = []
    for escalation in job_escalations:
        if escalation.kind not in rules.STATE_KINDS or escalation.status == Status.RESOLVED:
            continue
        if (escalation.kind, escalation.node_id) in held:
            continue
        # Its triggers turned out not to be: forget them, so that if a later replay sees the
        # rule hold again (even from one of these events), the escalation reopens.
        seen = ", ".join(escalation.trigger_event_ids)
        _change_status(
            escalation,
            Status.RESOLVED,
            "withdrawn",
            note="Withdrawn: with every event of the job in event order, this rule never held "
            f"(an event that arrived late sorts before its trigger; triggers were {seen})",
            trigger_event_ids=[],
        )
        withdrawn.append(escalation)
    return withdrawn


def note_recovery(job: Job, recovery: Recovery) -> None:
    """The job finished completed (``recovery``'s event) while escalations triggered before it
    were unresolved: each gets one "job recovered" entry; support decides what to do."""
    keys = recovery.escalations
    for escalation in job.escalations.exclude(status=Status.RESOLVED).exclude(
        entries__action="job recovered"
    ):
        if (escalation.kind, escalation.node_id) in keys:
            _record(
                escalation,
                "job recovered",
                from_status=escalation.status,
                to_status=escalation.status,
                note="The job finished completed",
            )


def rehome(escalation: Escalation, job_pk: int, note: str) -> None:
    """The escalation's job is now ``job_pk`` (its trace was named after its first spans were
    stored under the trace id: ``jobs.ingest.aliases``): status, assignee, triggers and audit
    trail stay; an audit entry says why (``note``)."""
    if escalation.job_id != job_pk:
        escalation.job_id = job_pk
        escalation.save(update_fields=["job"])
    _record(
        escalation, "rehomed", from_status=escalation.status, to_status=escalation.status, note=note
    )


def _people_acted_at(escalation: Escalation):
    """When a person last acted on the escalation (None if nobody did)."""
    by_people = escalation.entries.exclude(actor__isnull=True, actor_name=SYSTEM_ACTOR)
    return by_people.aggregate(last=Max("at"))["last"]


def merge(first: Escalation, second: Escalation, job_pk: int, note: str) -> Escalation:
    """Two escalations of one identity (kind, node) that lived apart, on a job re-homed and on
    the job it joined, become one on ``job_pk``; returns it. The one people acted on last (else
    the older) is kept, with its status and assignee; it takes the other's triggers, audit
    entries and notifications, its assignee when it has none, and the earlier creation. Kept
    resolved while the other was not, it takes the other's status back: a merge never hides
    an open problem. The other is deleted; an audit entry says what happened (``note``)."""
    acted = {esc.pk: _people_acted_at(esc) for esc in (first, second)}

    def rank(esc: Escalation) -> tuple:
        at = acted[esc.pk]
        return (0, -at.timestamp()) if at else (1, esc.created_at.timestamp(), esc.pk)

    kept, other = sorted((first, second), key=rank)
    EscalationEntry.objects.filter(escalation=other).update(escalation=kept)
    Notification.objects.filter(escalation=other).update(escalation=kept)
    triggers = [*kept.trigger_event_ids, *other.trigger_event_ids]
    kept.trigger_event_ids = list(dict.fromkeys(triggers))
    kept.created_at = min(kept.created_at, other.created_at)
    kept.triggered_at = min(kept.triggered_at, other.triggered_at)
    kept.assignee_id = kept.assignee_id or other.assignee_id
    kept.job_id = job_pk
    other_pk, other_status = other.pk, other.status
    other.delete()  # first: the kept one takes its (job, kind, node)
    kept.save()
    _record(
        kept,
        "merged",
        from_status=kept.status,
        to_status=kept.status,
        note=f"{note}. Escalation {other_pk} ({other_status}) had the same kind and node on the "
        "other job: its audit trail and notifications are here now",
    )
    if kept.status == Status.RESOLVED and other_status != Status.RESOLVED:
        _change_status(
            kept,
            other_status,
            "reopened",
            note=f"Escalation {other_pk}, merged into this one, was still {other_status}",
        )
    return kept


def acknowledge(escalation: Escalation, user, note: str = "") -> None:
    """Open -> acknowledged; ActionError from any other status."""
    _require("acknowledge", escalation)
    _change_status(escalation, Status.ACKNOWLEDGED, "acknowledged", actor=user, note=note.strip())


COMMENT_CHARS = 4000


def comment(escalation: Escalation, user, text: str) -> EscalationEntry:
    """A comment: an audit entry that changes no status (from and to are the escalation's
    status), notified to the escalation's destinations like a change, with its text. Any
    status takes comments, resolved included. ActionError for an empty comment, one longer
    than ``COMMENT_CHARS``, or one that cannot be kept (``note_problem``)."""
    text = text.strip()
    if not text:
        raise ActionError("A comment needs some text")
    if len(text) > COMMENT_CHARS:
        raise ActionError(
            f"A comment holds at most {COMMENT_CHARS} characters; this one has {len(text)}"
        )
    if problem := note_problem(text, "A comment"):
        raise ActionError(problem)
    escalation.updated_at = timezone.now()
    escalation.save(update_fields=["updated_at"])
    entry = _record(
        escalation,
        "commented",
        actor=user,
        from_status=escalation.status,
        to_status=escalation.status,
        note=text,
    )
    _notify(escalation, "commented", entry)
    return entry


def assign(escalation: Escalation, user, assignee, note: str = "") -> None:
    """Assign to ``assignee`` (None unassigns); the status stays; ``note`` (optional) goes
    into the audit entry after who it is assigned to. ActionError when nothing would change."""
    if escalation.assignee_id == (assignee.pk if assignee else None):
        who = assignee.get_username() if assignee else "nobody"
        raise ActionError(f"Escalation {escalation.pk} is already assigned to {who}")
    escalation.assignee = assignee
    escalation.updated_at = timezone.now()
    escalation.save(update_fields=["assignee", "updated_at"])
    who = assignee.get_username() if assignee else "nobody"
    _record(
        escalation,
        "assigned",
        actor=user,
        from_status=escalation.status,
        to_status=escalation.status,
        note=f"Assigned to {who}" + (f": {note.strip()}" if note.strip() else ""),
    )


RESOLUTION_NEEDS_NOTE = "A resolution needs a note: say what was done or why nothing is needed"


def action_note_problem(action: str, note: str) -> str | None:
    """Why ``action`` cannot be taken with ``note`` (None when it can): a resolution needs a
    note; every other action takes one or none."""
    if action == "resolve" and not note.strip():
        return RESOLUTION_NEEDS_NOTE
    return None


def resolve(escalation: Escalation, user, note: str) -> None:
    """Open or acknowledged -> resolved, with a required note (ActionError without one)."""
    if problem := action_note_problem("resolve", note):
        raise ActionError(problem)
    _require("resolve", escalation)
    _change_status(escalation, Status.RESOLVED, "resolved", actor=user, note=note.strip())


def reopen(escalation: Escalation, user, note: str = "") -> None:
    """Resolved -> open, with a new outbox notification."""
    _require("reopen", escalation)
    _change_status(escalation, Status.OPEN, "reopened", actor=user, note=note.strip())
    _notify(escalation, "reopened")


def note_problem(note: str, what: str = "A note") -> str | None:
    """Why ``note`` cannot be kept with an action (None when it can): notes are stored as text,
    which holds no NUL. ``what`` names the text in the message."""
    if "\x00" in note:
        return f"{what} may not contain NUL characters"
    return None


def apply_action(action: str, escalation: Escalation, user, note: str = "") -> None:
    """Run a status-changing action by name (the bulk form and the action views share this).
    ActionError for a note that cannot be kept (``note_problem``)."""
    if problem := note_problem(note):
        raise ActionError(problem)
    if action == "acknowledge":
        acknowledge(escalation, user, note)
    elif action == "resolve":
        resolve(escalation, user, note)
    elif action == "reopen":
        reopen(escalation, user, note)
    else:
        raise ActionError(f"Unknown action {action!r}")
