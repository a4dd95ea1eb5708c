"""Who may do what to an escalation, and how long it has waited: the rules the queue, the
escalation page and the bulk actions ask (docs/architecture.md, "Escalations"). Whether a user
may act at all is their role (``jobs.web.access.can_act_on_escalations``); given that, what
they may do to one escalation is decided here."""

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Q, QuerySet

from jobs.escalations import actions
from jobs.escalations.stalls import duration_label
from jobs.models import Escalation, Role


@dataclass(frozen=True, slots=True)
class Allowed:
    """The actions a user may take on one escalation now."""

    acknowledge: bool
    resolve: bool
    reopen: bool
    # Assign it to themselves: it is unresolved and not theirs already.
    take: bool


def allowed(escalation: Escalation, user, can_act: bool) -> Allowed:
    """What ``user`` may do to ``escalation``; nothing when they may not act (``can_act``, their
    role), else each action its status allows (``actions.can_apply``)."""
    unresolved = escalation.status != Escalation.Status.RESOLVED
    return Allowed(
        acknowledge=can_act and actions.can_apply("acknowledge", escalation),
        resolve=can_act and actions.can_apply("resolve", escalation),
        reopen=can_act and actions.can_apply("reopen", escalation),
        take=can_act and unresolved and escalation.assignee_id != user.pk,
    )


@dataclass(frozen=True, slots=True)
class Age:
    """How long an unresolved escalation has waited since its trigger ("" once resolved), and
    whether that is past TRACEVIZ_ESCALATION_AGE_TARGET."""

    label: str
    overdue: bool


def age(escalation: Escalation, now: datetime) -> Age:
    """The escalation's age, from the event that triggered it (not from when traceviz noticed
    it); a resolved escalation has none."""
    if escalation.status == Escalation.Status.RESOLVED:
        return Age("", False)
    waited = now - escalation.triggered_at
    return Age(duration_label(waited), waited > settings.TRACEVIZ_ESCALATION_AGE_TARGET)


def age_target() -> str:
    return duration_label(settings.TRACEVIZ_ESCALATION_AGE_TARGET)


def support_users() -> QuerySet:
    """Who an escalation can be assigned to: the active people who can act on it (staff,
    superusers and the support group), by username."""
    return (
        get_user_model()
        .objects.filter(Q(is_staff=True) | Q(is_superuser=True) | Q(groups__name=Role.SUPPORT))
        .filter(is_active=True)
        .distinct()
        .order_by("username")
    )
