"""Escalations (DESIGN.md section 5): applying replay's triggers, and every change people make.

Every state change goes through one action function here, which writes the row, its audit entry
and (for openings) the outbox notification together, whatever view, task or command calls it.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from jobs.escalations import outbox as notify
from jobs.models import Escalation, EscalationEntry, Job, Notification, Step
from jobs.replay import backoff, failures
from jobs.replay.failures import ResultType, RunStatus
from jobs.replay.walk import EscalationTrigger

SYSTEM_ACTOR = "traceviz"
Status = Escalation.Status
STALLED = "stalled"
STALL_BATCH = 200
STALL_MAX_BATCHES = 50


class ActionError(ValueError):
    """An action that does not apply: the message says why, in words support can act on."""


# Which statuses each status-changing action starts from (DESIGN.md section 5: open ->
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


def _notify(escalation: Escalation, reason: str) -> None:
    """Outbox: one row per configured destination, written in the caller's transaction and
    delivered once it commits (the periodic sweep re-sends whatever that enqueue lost)."""
    from jobs.tasks import deliver_notification  # tasks import this module

    for channel in notify.configured_channels():
        notification = Notification.objects.create(
            escalation=escalation, reason=reason, channel=channel
        )
        deliver_notification.delay_on_commit(notification.pk)


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


# Kinds replay derives from a job's state after each event. A late event that comes earlier in
# event order (a cancel that makes a failure stale, a job_finished, a job_started's plan hash) can
# show that such a rule never held: the full replay no longer has its trigger.
STATE_KINDS = frozenset(
    {
        "user_action",
        "internal",
        "reconciliation",
        "max_retries_exceeded",
        "boundary_violation",
        "contract_violation",
    }
)


def withdraw_unheld(
    job_escalations: Iterable[Escalation], held: set[tuple[str, str]]
) -> list[Escalation]:
    """Delete a job's open state-kind escalations whose (kind, node) its replay no longer
    triggers, unless a person has acted on them (those stay, with what people did). Returns the
    deleted ones. This keeps the set of escalations independent of how delivery was batched."""
    withdrawn = []
    for escalation in job_escalations:
        if escalation.kind not in STATE_KINDS or escalation.status != Status.OPEN:
            continue
        if (escalation.kind, escalation.node_id) in held:
            continue
        if escalation.entries.filter(actor__isnull=False).exists():
            continue
        escalation.delete()
        withdrawn.append(escalation)
    return withdrawn


def note_recovery(job: Job) -> None:
    """A job that finished completed while escalations were unresolved: support decides."""
    for escalation in job.escalations.exclude(status=Status.RESOLVED):
        _record(
            escalation,
            "job recovered",
            from_status=escalation.status,
            to_status=escalation.status,
            note="The job finished completed",
        )


def acknowledge(escalation: Escalation, user, note: str = "") -> None:
    """Open -> acknowledged; ActionError from any other status."""
    _require("acknowledge", escalation)
    _change_status(escalation, Status.ACKNOWLEDGED, "acknowledged", actor=user, note=note.strip())


def assign(escalation: Escalation, user, assignee) -> None:
    """Assign to ``assignee`` (None unassigns); the status stays. ActionError when nothing
    would change."""
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
        note=f"Assigned to {who}",
    )


def resolve(escalation: Escalation, user, note: str) -> None:
    """Open or acknowledged -> resolved, with a required note (ActionError without one)."""
    if not note.strip():
        raise ActionError("A resolution needs a note: say what was done or why nothing is needed")
    _require("resolve", escalation)
    _change_status(escalation, Status.RESOLVED, "resolved", actor=user, note=note.strip())


def reopen(escalation: Escalation, user, note: str = "") -> None:
    """Resolved -> open, with a new outbox notification."""
    _require("reopen", escalation)
    _change_status(escalation, Status.OPEN, "reopened", actor=user, note=note.strip())
    _notify(escalation, "reopened")


def apply_action(action: str, escalation: Escalation, user, note: str = "") -> None:
    """Run a status-changing action by name (the bulk form and the action views share this)."""
    if action == "acknowledge":
        acknowledge(escalation, user, note)
    elif action == "resolve":
        resolve(escalation, user, note)
    elif action == "reopen":
        reopen(escalation, user, note)
    else:
        raise ActionError(f"Unknown action {action!r}")


# -- stalls ------------------------------------------------------------------------------------


def duration_label(delta: timedelta) -> str:
    """A short human duration: "45 s", "12 min", "3 h 5 min", "2 d 4 h"."""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds} s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def latest_retryable_step(job: Job) -> Step | None:
    """The attempt a paused:transient job is waiting to retry: the latest retryable failure
    that is still its node's latest non-stale attempt (no later success or failure)."""
    seen_nodes: set[str] = set()
    steps = job.steps.filter(ignored_stale=False).order_by("-position")
    for step in steps.only("node_id", "attempt", "result_type", "finished_at", "continue_on_error"):
        if step.node_id in seen_nodes:
            continue
        seen_nodes.add(step.node_id)
        retryable = step.result_type == ResultType.RETRYABLE_FAILURE
        if retryable and step.finished_at and not step.continue_on_error:
            return step
    return None


def stall_trigger(job: Job, now: datetime, waiting_step: Step | None = None) -> EscalationTrigger:
    """The trigger of a stall episode. The episode is named by the job's last receive time, so
    the same silence never triggers twice and a job that stalls again after new events does."""
    silent = duration_label(now - job.last_received_at)
    message = (
        f"No event received for {silent} while {job.status} (last event received "
        f"{job.last_received_at:%Y-%m-%d %H:%M:%S} UTC)."
    )
    if job.status == RunStatus.PAUSED_TRANSIENT and waiting_step is not None:
        earliest, latest = backoff.retry_window(waiting_step.finished_at, waiting_step.attempt)
        message += (
            f" Node {waiting_step.node_id} attempt {waiting_step.attempt} failed retryably at "
            f"{waiting_step.finished_at:%Y-%m-%d %H:%M:%S} UTC; by the source 003 backoff its "
            f"next attempt was due between {earliest:%H:%M:%S} and {latest:%H:%M:%S} UTC and "
            f"has not arrived."
        )
    return EscalationTrigger(
        STALLED,
        "",
        "medium",
        message,
        f"stall:{job.last_received_at.isoformat()}",
        job.last_received_at,
    )


def check_stalls(now: datetime | None = None, *, batch_size: int = STALL_BATCH) -> int:
    """Open (or reopen) a ``stalled`` escalation on every job that received no event for
    TRACEVIZ_STALL_AFTER while running, cancelling or paused:transient (DESIGN.md section 4).

    Works in bounded batches, longest silence first, and skips in the query the jobs whose
    current stall episode already opened or reopened their escalation. Returns how many
    escalations it opened or reopened.
    """
    now = now or timezone.now()
    seen_episode = Escalation.objects.filter(
        job=OuterRef("pk"), kind=STALLED, node_id="", triggered_at=OuterRef("last_received_at")
    )
    stalled = (
        Job.objects.filter(
            status__in=failures.STALLABLE_STATUSES,
            last_received_at__lt=now - settings.TRACEVIZ_STALL_AFTER,
        )
        .exclude(Exists(seen_episode))
        .order_by("last_received_at", "pk")
        .only("pk", "last_received_at")
    )
    changed = 0
    page = stalled
    for _ in range(STALL_MAX_BATCHES):
        batch = list(page[:batch_size])
        changed += sum(_apply_stall(job.pk, now) for job in batch)
        if len(batch) < batch_size:
            break
        # Keyset: an escalation still open from an earlier episode only records the new one,
        # so its job stays in the query; move past it rather than see it again.
        last = batch[-1]
        page = stalled.filter(
            Q(last_received_at__gt=last.last_received_at)
            | Q(last_received_at=last.last_received_at, pk__gt=last.pk)
        )
    return changed


def _apply_stall(job_pk: int, now: datetime) -> int:
    """Apply one job's stall trigger under its row lock (ingest writes the same row), after
    checking it is still stalled. Returns 1 when this opened or reopened the escalation."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_pk).first()
        if job is None or not (
            job.status in failures.STALLABLE_STATUSES
            and now - job.last_received_at > settings.TRACEVIZ_STALL_AFTER
        ):
            return 0
        waiting = latest_retryable_step(job) if job.status == RunStatus.PAUSED_TRANSIENT else None
        existing = (
            Escalation.objects.select_for_update().filter(job=job, kind=STALLED, node_id="").first()
        )
        was_open = existing is not None and existing.status != Status.RESOLVED
        escalation = apply_trigger(
            stall_trigger(job, now, waiting), job=job, existing=existing, source="stall check"
        )
        return int(not was_open and escalation.status == Status.OPEN)


def _retry_chain(job: Job) -> list[Job]:
    """Every run linked to ``job`` through retry_of, in either direction."""
    seen = {job.job_id: job}
    frontier = [job]
    while frontier:
        ids = {j.retry_of for j in frontier if j.retry_of} | {j.job_id for j in frontier}
        linked = Job.objects.filter(job_id__in=ids) | Job.objects.filter(retry_of__in=ids)
        frontier = [j for j in linked if j.job_id not in seen]
        seen.update((j.job_id, j) for j in frontier)
    return list(seen.values())


def check_repair_budget(job: Job, current: dict) -> None:
    """Open (or leave alone) the repair_budget_exhausted escalation of ``job``'s retry_of chain:
    on the failed:logic run that pushed the chain over TRACEVIZ_REPAIR_BUDGET. ``current`` maps
    (job pk, kind, node) to the escalations already loaded; it is updated in place."""
    runs = [
        ChainRun(run.job_id, run.failed_at, _failing_event_id(run))
        for run in _retry_chain(job)
        if run.status == RunStatus.FAILED_LOGIC and run.failed_at
    ]
    overrun = repair_budget_overrun(runs, settings.TRACEVIZ_REPAIR_BUDGET)
    if overrun is None:
        return
    over_job = Job.objects.get(job_id=overrun.job_id)
    trigger = EscalationTrigger(
        "repair_budget_exhausted",
        "",
        "medium",
        f"{len(runs)} runs failed with logic errors in this retry chain (budget "
        f"{settings.TRACEVIZ_REPAIR_BUDGET}): auto-fix stops here",
        overrun.trigger_event_id,
        overrun.failed_at,
    )
    key = (over_job.pk, trigger.kind, "")
    current[key] = apply_trigger(
        trigger, job=over_job, existing=current.get(key) or _existing(over_job, trigger.kind)
    )


def _existing(job: Job, kind: str) -> Escalation | None:
    return Escalation.objects.filter(job=job, kind=kind, node_id="").first()


def _failing_event_id(job: Job) -> str:
    step = (
        job.steps.exclude(result_type__in=["", ResultType.SUCCESS])
        .order_by("-finished_at", "-position")
        .only("finished_event_id")
        .first()
    )
    return step.finished_event_id if step else f"{job.job_id}:failed"
