"""Bulk actions on escalations (docs/architecture.md, "Escalations"): what an action would do
to each selected escalation, previewed before it is confirmed and applied again, under the rows'
locks, when it is. Each change still goes through its action function (``actions``)."""

from dataclasses import dataclass

from jobs.escalations import actions
from jobs.models import Escalation

ACTIONS = {"acknowledge": "Acknowledge", "resolve": "Resolve", "assign": "Assign"}
DONE = {"acknowledge": "Acknowledged", "resolve": "Resolved", "assign": "Assigned"}


@dataclass(slots=True)
class BulkItem:
    escalation: Escalation
    applies: bool
    why_not: str


def who(user) -> str:
    """A user as the bulk messages name them ("nobody" for None)."""
    return user.get_username() if user is not None else "nobody"


def why_unchanged(action: str, escalation: Escalation, assignee) -> str:
    """Why ``action`` leaves ``escalation`` unchanged ("" when it applies)."""
    if action == "assign":
        if escalation.status == Escalation.Status.RESOLVED:
            return "it is resolved"
        if escalation.assignee_id == (assignee.pk if assignee is not None else None):
            return f"it is already assigned to {who(assignee)}"
        return ""
    return "" if actions.can_apply(action, escalation) else f"it is {escalation.status}"


def plan(
    action: str, selected: list[Escalation], note: str, assignee=None
) -> tuple[list[BulkItem], str]:
    """What a bulk action would do to each selected escalation, and an error that stops the
    whole action ("" when it can go ahead). ``assignee`` is whom "assign" assigns to (None:
    nobody)."""
    if action not in ACTIONS:
        return [], "Choose an action"
    if not selected:
        return [], "Select at least one escalation"
    if problem := actions.note_problem(note) or actions.action_note_problem(action, note):
        return [], problem
    items = []
    for escalation in selected:
        why_not = why_unchanged(action, escalation, assignee)
        items.append(BulkItem(escalation, not why_not, why_not))
    if not any(item.applies for item in items):
        verb = {"acknowledge": "acknowledged", "resolve": "resolved"}.get(action)
        return items, (
            f"Nothing to change: none of the selected escalations can be {verb}"
            if verb
            else f"Nothing to change: every selected escalation is resolved or already "
            f"assigned to {who(assignee)}"
        )
    return items, ""


def apply(action: str, escalation: Escalation, user, note: str, assignee) -> None:
    """Apply a planned bulk action to one escalation through its action function."""
    if action == "assign":
        actions.assign(escalation, user, assignee, note)
    else:
        actions.apply_action(action, escalation, user, note)
