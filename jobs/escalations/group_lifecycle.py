"""A failure group's lifecycle (docs/failures.md): resolved (optionally in a version, or for
failures after a time), ignored (for a time, or until seen N more times), merged, and regressed
when a resolved group is seen again.

Every change goes through one function here, which writes the group and its audit entry
together, whatever view, task or projection calls it (as escalation actions do). What people
decide lives in the group's lifecycle columns, which projection reads and never rewrites: a
rebuild keeps them. Moving a merged group's failures is ingest's (``failure_groups.merge``),
which calls ``check_merge`` and ``mark_merged`` here.
"""

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

from django.db import transaction
from django.utils import timezone

from jobs.models import FailureGroup, FailureGroupEntry

SYSTEM_ACTOR = "traceviz"
Status = FailureGroup.Status
# The job metadata keys a failure's version is read from, first found wins (docs/failures.md):
# a producer's ``job_started`` metadata, or an OpenTelemetry resource's ``service.version``,
# which replay keeps in the job's metadata.
VERSION_KEYS = ("version", "release", "service.version")
VERSION_CHARS = 200
# A version traceviz can order: dotted numbers, optionally after a "v" ("1.10.2", "v13").
ORDERED_VERSION = re.compile(r"^[vV]?(\d+(?:\.\d+)*)$")
ACTIONS_FROM: dict[str, frozenset[str]] = {
    "resolve": frozenset({Status.UNRESOLVED, Status.IGNORED}),
    "ignore": frozenset({Status.UNRESOLVED, Status.RESOLVED}),
    "unresolve": frozenset({Status.RESOLVED, Status.IGNORED}),
}


def _when(moment: datetime) -> str:
    """A time as an audit note says it: to the second, in UTC."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


class GroupActionError(ValueError):
    """An action that does not apply: the message says why, in words a user can act on."""


class SeenFailures(Protocol):
    """Failures new to a group in one job (``ingest.failure_groups.Seen``)."""

    @property
    def count(self) -> int: ...

    @property
    def at(self) -> datetime | None: ...


def can_apply(action: str, group: FailureGroup) -> bool:
    return group.status in ACTIONS_FROM[action]


def _require(action: str, group: FailureGroup) -> None:
    if not can_apply(action, group):
        raise GroupActionError(f"This group is {group.status}: it cannot be {action}d")


def _record(group: FailureGroup, action: str, *, actor=None, from_status="", note=""):
    return FailureGroupEntry.objects.create(
        group=group,
        actor=actor,
        actor_name=actor.get_username() if actor else SYSTEM_ACTOR,
        action=action,
        from_status=from_status,
        to_status=group.status,
        note=note,
    )


def _clear_lifecycle(group: FailureGroup) -> None:
    group.resolved_at = None
    group.resolved_after = None
    group.resolved_in_version = ""
    group.ignored_until = None
    group.ignore_count = None
    group.seen_while_ignored = 0


LIFECYCLE_FIELDS = [
    "status",
    "regressed_at",
    "resolved_at",
    "resolved_after",
    "resolved_in_version",
    "ignored_until",
    "ignore_count",
    "seen_while_ignored",
    "merged_into",
]


def resolve(
    group: FailureGroup,
    *,
    actor=None,
    in_version: str = "",
    after: datetime | None = None,
    now: datetime | None = None,
) -> FailureGroup:
    """Resolve the group: a failure after ``after`` (default: now; event time), and, with
    ``in_version``, in a version later than it, regresses it."""
    now = now or timezone.now()
    in_version = in_version.strip()
    if len(in_version) > VERSION_CHARS:
        raise GroupActionError(f"A version holds at most {VERSION_CHARS} characters")
    with transaction.atomic():
        group = _locked(group)
        _require("resolve", group)
        from_status = group.status
        _clear_lifecycle(group)
        group.status = Status.RESOLVED
        group.regressed_at = None
        group.resolved_at = now
        group.resolved_after = after or now
        group.resolved_in_version = in_version
        group.save(update_fields=LIFECYCLE_FIELDS)
        if in_version:
            note = f"in version {in_version}: a failure in a later version regresses it"
        elif after is not None:
            note = f"for failures after {_when(after)}"
        else:
            note = ""
        _record(group, "resolved", actor=actor, from_status=from_status, note=note)
    return group


def ignore(
    group: FailureGroup,
    *,
    actor=None,
    until: datetime | None = None,
    count: int | None = None,
    now: datetime | None = None,
) -> FailureGroup:
    """Ignore the group: until ``until``, or until it is seen ``count`` more times (then it is
    unresolved again), or (neither) until someone unignores it."""
    now = now or timezone.now()
    if until is not None and count is not None:
        raise GroupActionError("Ignore for a time or for a number of failures, not both")
    if until is not None and until <= now:
        raise GroupActionError("Ignore until a time in the future")
    if count is not None and count < 1:
        raise GroupActionError("Ignore until seen at least once more")
    with transaction.atomic():
        group = _locked(group)
        _require("ignore", group)
        from_status = group.status
        _clear_lifecycle(group)
        group.status = Status.IGNORED
        group.ignored_until = until
        group.ignore_count = count
        group.save(update_fields=LIFECYCLE_FIELDS)
        if until is not None:
            note = f"until {_when(until)}"
        elif count is not None:
            note = f"until seen {count} more time{'s' if count != 1 else ''}"
        else:
            note = "until unignored"
        _record(group, "ignored", actor=actor, from_status=from_status, note=note)
    return group


def unresolve(group: FailureGroup, *, actor=None) -> FailureGroup:
    """Make a resolved or ignored group unresolved again."""
    with transaction.atomic():
        group = _locked(group)
        _require("unresolve", group)
        from_status = group.status
        _clear_lifecycle(group)
        group.status = Status.UNRESOLVED
        group.save(update_fields=LIFECYCLE_FIELDS)
        action = "unignored" if from_status == Status.IGNORED else "reopened"
        _record(group, action, actor=actor, from_status=from_status)
    return group


def check_merge(source: FailureGroup, target: FailureGroup) -> None:
    """Raise GroupActionError when ``source`` cannot be merged into ``target``."""
    if source.pk == target.pk:
        raise GroupActionError("A group cannot be merged into itself")
    if source.status == Status.MERGED:
        raise GroupActionError("This group is already merged into another")
    if target.status == Status.MERGED:
        raise GroupActionError(
            "That group is merged into another: merge into the group it was merged into"
        )


def mark_merged(source: FailureGroup, target: FailureGroup, *, actor=None) -> None:
    """Record that ``source`` was merged into ``target`` (its failures already moved), with an
    entry on both groups' trails. The caller holds both rows' locks."""
    from_status = source.status
    _clear_lifecycle(source)
    source.status = Status.MERGED
    source.merged_into = target
    source.save(update_fields=LIFECYCLE_FIELDS)
    _record(source, "merged", actor=actor, from_status=from_status, note=f"into {target}")
    _record(target, "merged in", actor=actor, from_status=target.status, note=f"{source}")


def _locked(group: FailureGroup) -> FailureGroup:
    return FailureGroup.objects.select_for_update().get(pk=group.pk)


def job_version(metadata: Any) -> str:
    """The version a job ran (its metadata's ``version``, ``release`` or ``service.version``,
    first found); "" when it names none."""
    if not isinstance(metadata, dict):
        return ""
    for key in VERSION_KEYS:
        value = metadata.get(key)
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value).strip()
            if text:
                return text[:VERSION_CHARS]
    return ""


def is_later_version(version: str, resolved_in: str) -> bool:
    """Whether a failure in ``version`` comes after a fix in ``resolved_in``: by number when
    both are dotted numbers ("1.10" is later than "1.9"), else when they differ (a version
    traceviz cannot order, a commit, is not the one the fix shipped in). A failure that names
    no version is not later."""
    if not version:
        return False
    ours, theirs = ORDERED_VERSION.match(version), ORDERED_VERSION.match(resolved_in)
    if ours and theirs:
        mine = [int(part) for part in ours.group(1).split(".")]
        fixed = [int(part) for part in theirs.group(1).split(".")]
        width = max(len(mine), len(fixed))
        return mine + [0] * (width - len(mine)) > fixed + [0] * (width - len(fixed))
    return version != resolved_in


def _regresses(group: FailureGroup, at: datetime | None, version: str, now: datetime) -> bool:
    moment = at or now
    if group.resolved_after is not None and moment <= group.resolved_after:
        return False
    if group.resolved_in_version:
        return is_later_version(version, group.resolved_in_version)
    return True


def note_seen(
    seen: Mapping[tuple[int, int], SeenFailures],
    versions: Mapping[int, str],
    now: datetime | None = None,
) -> list[FailureGroup]:
    """Projection saw failures new to these groups (by (group, job); ``versions``: each job's
    version): a resolved group seen after its resolution (in a later version, when resolved
    in one) regresses, an ignored group whose time ran out or that was seen its count more
    times is unresolved again. Returns the groups that changed. Called inside the batch's
    transaction, after the groups' totals were updated (their rows are locked already)."""
    if not seen:
        return []
    now = now or timezone.now()
    group_ids = sorted({group_id for group_id, _ in seen})
    watched = list(
        FailureGroup.objects.filter(
            pk__in=group_ids, status__in=[Status.RESOLVED, Status.IGNORED]
        ).order_by("pk")
    )
    changed = []
    for group in watched:
        mine = sorted(
            ((job_pk, found) for (group_id, job_pk), found in seen.items() if group_id == group.pk),
            key=lambda item: item[0],
        )
        if group.status == Status.RESOLVED:
            regressing = [
                (job_pk, found)
                for job_pk, found in mine
                if _regresses(group, found.at, versions.get(job_pk, ""), now)
            ]
            if regressing:
                _regress(group, regressing, versions, now)
                changed.append(group)
        elif _unignore_when_lapsed(group, sum(found.count for _, found in mine), now):
            changed.append(group)
    return changed


def _regress(group: FailureGroup, regressing, versions: Mapping[int, str], now: datetime) -> None:
    from_status = group.status
    job_pk, found = regressing[0]
    version = versions.get(job_pk, "")
    what = f"seen again at {_when(found.at or now)}" + (f" in version {version}" if version else "")
    if group.resolved_in_version:
        what += f" (resolved in {group.resolved_in_version})"
    _clear_lifecycle(group)
    group.status = Status.UNRESOLVED
    group.regressed_at = now
    group.save(update_fields=LIFECYCLE_FIELDS)
    _record(group, "regressed", from_status=from_status, note=what)


def _unignore_when_lapsed(group: FailureGroup, count: int, now: datetime) -> bool:
    """Count ``count`` new failures of an ignored group, unignoring it when its condition
    lapsed; returns whether it did."""
    if group.ignored_until is not None and group.ignored_until <= now:
        _unignore(group, f"the ignore ran out at {_when(group.ignored_until)}")
        return True
    if group.ignore_count is None:
        return False
    group.seen_while_ignored += count
    if group.seen_while_ignored >= group.ignore_count:
        _unignore(group, f"seen {group.seen_while_ignored} times since it was ignored")
        return True
    group.save(update_fields=["seen_while_ignored"])
    return False


def _unignore(group: FailureGroup, note: str) -> None:
    from_status = group.status
    _clear_lifecycle(group)
    group.status = Status.UNRESOLVED
    group.save(update_fields=LIFECYCLE_FIELDS)
    _record(group, "unignored", from_status=from_status, note=note)


def lapse_ignores(now: datetime | None = None) -> int:
    """Unignore every group ignored until a time that has passed (periodic); returns how
    many."""
    now = now or timezone.now()
    done = 0
    due = FailureGroup.objects.filter(status=Status.IGNORED, ignored_until__lte=now)
    for pk in due.order_by("pk").values_list("pk", flat=True):
        with transaction.atomic():
            group = FailureGroup.objects.select_for_update().get(pk=pk)
            until = group.ignored_until
            if group.status == Status.IGNORED and until is not None and until <= now:
                _unignore(group, f"the ignore ran out at {_when(until)}")
                done += 1
    return done
