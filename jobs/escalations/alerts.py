"""Alert rules (the planner contract phase 2: an alert threshold for repeated planner degradation).

``evaluate(now)`` measures every enabled rule over its window, one SQL aggregate per rule, and
moves each subject (a provider/model, or a failure code) through episodes: a rule that holds
opens an episode (firing since ``now``) and a ``raised`` escalation tied to the rule; the episode
resolves when the rule stops holding. At most one unresolved episode per (rule, subject) exists
(a database constraint), so a rule never fires twice for the same episode; a later episode is a
new trigger, which reopens a resolved escalation and notifies again.
"""

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import cast

from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Trunc
from django.utils import timezone

from jobs.escalations import actions
from jobs.models import (
    DEGRADED,
    PARSE_INVALID,
    AlertEpisode,
    AlertRule,
    Escalation,
    EscalationEntry,
    Event,
    FailureGroup,
    Job,
    Step,
    contained,
)
from jobs.replay.state import EscalationTrigger

logger = logging.getLogger(__name__)
# An alert escalation's node_id names its subject, in at most the column's characters (a
# CharField's max_length, always set).
SUBJECT_CHARS = cast(int, Escalation._meta.get_field("node_id").max_length)
SUBJECT_HASH = 16

Kind = AlertRule.Kind
RATE_KINDS = frozenset({Kind.PLANNER_DEGRADED_RATE, Kind.FAILURE_CODE_RATE})


@dataclass(frozen=True, slots=True)
class Measurement:
    """One subject's value over a rule's window: ``count`` of what the rule counts, ``jobs``
    the denominator (and the min_jobs gate)."""

    subject: str
    provider: str
    model: str
    count: int
    jobs: int
    value: float


@dataclass(slots=True)
class Outcome:
    fired: list[AlertEpisode]
    resolved: list[AlertEpisode]


def planner_activity(
    start: datetime,
    end: datetime,
    *,
    provider: str = "",
    model: str = "",
    bucket: str | None = None,
):
    """Planner counts per provider/model (and per ``bucket``, a Trunc kind, when given) from
    events with ts in [start, end): rows of provider, model, [bucket,] jobs, parse_invalid,
    degraded. ``jobs`` are the jobs that carry that provider/model on job_started or on a planner
    event in the window (docs/contract.md). Served by the event (type, ts) index."""
    rows = Event.objects.filter(ts__gte=start, ts__lt=end).planner(provider, model)
    group = ["provider", "model"]
    if bucket:
        rows = rows.annotate(bucket=Trunc("ts", bucket, tzinfo=UTC))
        group.append("bucket")
    return (
        rows.values(*group)
        .annotate(
            jobs=Count("job_id", distinct=True),
            parse_invalid=Count("id", filter=Q(type=PARSE_INVALID)),
            degraded=Count("id", filter=Q(type=DEGRADED)),
        )
        .order_by(*group)
    )


def measure(rule: AlertRule, now: datetime) -> list[Measurement]:
    """The rule's value for each subject over [now - window, now)."""
    start = now - timedelta(minutes=rule.window_minutes)
    if rule.kind == Kind.FAILURE_CODE_RATE:
        return _failure_code_rate(rule, start, now)
    if rule.kind == Kind.NEW_FAILURE_SIGNATURE:
        return _new_signatures(start, now)
    if rule.kind == Kind.FAILURE_GROUP_REGRESSED:
        return _regressed_groups(start, now)
    measurements = []
    for row in planner_activity(start, now, provider=rule.provider, model=rule.model):
        count = row["degraded"] if rule.kind == Kind.PLANNER_DEGRADED_RATE else row["parse_invalid"]
        jobs = row["jobs"]
        value = (count / jobs if jobs else 0.0) if rule.kind in RATE_KINDS else float(count)
        subject = f"{row['provider']}/{row['model']}"
        measurements.append(Measurement(subject, row["provider"], row["model"], count, jobs, value))
    return measurements


def _failure_code_rate(rule: AlertRule, start: datetime, end: datetime) -> list[Measurement]:
    """Jobs started in the window with a step carrying the code / jobs started in the window."""
    jobs = Job.objects.filter(started_at__gte=start, started_at__lt=end)
    if rule.provider:
        jobs = jobs.filter(provider=rule.provider)
    if rule.model:
        jobs = jobs.filter(model=rule.model)
    with_code = Step.objects.filter(job=OuterRef("pk"), failure_code=rule.failure_code)
    totals = jobs.aggregate(jobs=Count("id"), count=Count("id", filter=Q(Exists(with_code))))
    value = totals["count"] / totals["jobs"] if totals["jobs"] else 0.0
    return [
        Measurement(
            rule.failure_code, rule.provider, rule.model, totals["count"], totals["jobs"], value
        )
    ]


def _new_signatures(start: datetime, end: datetime) -> list[Measurement]:
    """Failure groups traceviz first made in the window, one subject each (its fingerprint):
    a signature seen before, even if retention removed its jobs since, is not new."""
    groups = FailureGroup.objects.filter(created_at__gte=start, created_at__lt=end).order_by("pk")
    return [
        Measurement(group.fingerprint, "", "", group.step_count, group.job_count, 1.0)
        for group in groups.only("fingerprint", "step_count", "job_count")
    ]


def _regressed_groups(start: datetime, end: datetime) -> list[Measurement]:
    """Failure groups that regressed in the window and are still unresolved, one subject each
    (its fingerprint): a group resolved and seen again (docs/failures.md). One episode per
    regression: a later regression, after this one's window, fires again."""
    groups = FailureGroup.objects.filter(
        regressed_at__gte=start, regressed_at__lt=end, status=FailureGroup.Status.UNRESOLVED
    ).order_by("pk")
    return [
        Measurement(group.fingerprint, "", "", group.step_count, group.job_count, 1.0)
        for group in groups.only("fingerprint", "step_count", "job_count")
    ]


def holds(rule: AlertRule, measurement: Measurement) -> bool:
    return measurement.jobs >= rule.min_jobs and measurement.value > rule.threshold


def describe(rule: AlertRule, measurement: Measurement) -> str:
    """The escalation message: what is above which threshold, over which window."""
    window = f"over {rule.window_minutes} min"
    if rule.kind == Kind.FAILURE_GROUP_REGRESSED:
        group = FailureGroup.objects.get(fingerprint=measurement.subject)
        where = " · ".join(part for part in (group.workflow, group.node_id) if part)
        what = " ".join(part for part in (group.failure_code, group.error_type) if part)
        return (
            f"Failure group {group.fingerprint} regressed ({where or 'no workflow'}: "
            f"{what or 'no code'}): resolved, then seen again; {group.job_count} jobs so far: "
            f"{group.reason[:200]}"
        )
    if rule.kind == Kind.NEW_FAILURE_SIGNATURE:
        group = FailureGroup.objects.get(fingerprint=measurement.subject)
        where = " · ".join(part for part in (group.workflow, group.node_id) if part)
        what = " ".join(part for part in (group.failure_code, group.error_type) if part)
        return (
            f"New failure signature {group.fingerprint} ({where or 'no workflow'}: "
            f"{what or 'no code'}) in {measurement.jobs} jobs {window}: {group.reason[:200]}"
        )
    if rule.kind == Kind.PLANNER_PARSE_INVALID:
        return (
            f"Planner parse_invalid for {measurement.subject}: {measurement.count} events in "
            f"{measurement.jobs} jobs {window}, above {rule.threshold:g}"
        )
    what = (
        f"Planner degraded rate for {measurement.subject}"
        if rule.kind == Kind.PLANNER_DEGRADED_RATE
        else f"Failure rate of {measurement.subject}"
    )
    return (
        f"{what}: {measurement.value:.0%} ({measurement.count} of {measurement.jobs} jobs) "
        f"{window}, above {rule.threshold:.0%}"
    )


def evaluate(now: datetime | None = None) -> Outcome:
    """Evaluate every rule at ``now`` (default: the current time); returns what changed. A rule
    it cannot evaluate (or a subject it cannot fire for) is logged and skipped, leaving its
    episodes as they were: the other rules are evaluated (``contained``)."""
    now = now or timezone.now()
    outcome = Outcome(fired=[], resolved=[])
    firing = {(e.rule_id, e.subject): e for e in AlertEpisode.objects.filter(resolved_at=None)}
    for rule in AlertRule.objects.all():
        changed = contained(
            logger,
            f"alert rule {rule.pk} ({rule.name})",
            partial(_evaluate, rule, now, firing),
            None,
        )
        if changed is not None:
            outcome.fired.extend(changed.fired)
            outcome.resolved.extend(changed.resolved)
    return outcome


def _evaluate(rule: AlertRule, now: datetime, firing: dict) -> Outcome:
    """One rule's evaluation: fire the subjects that newly hold, resolve those that stopped."""
    outcome = Outcome(fired=[], resolved=[])
    held: set[str] = set()
    if rule.enabled:
        for measurement in measure(rule, now):
            if not holds(rule, measurement):
                continue
            held.add(measurement.subject)
            episode = firing.get((rule.pk, measurement.subject))
            if episode is None:
                what = f"alert rule {rule.pk} ({rule.name}) firing for {measurement.subject!r}"
                episode = contained(logger, what, partial(_fire, rule, measurement, now), None)
                if episode is not None:
                    outcome.fired.append(episode)
            else:
                AlertEpisode.objects.filter(pk=episode.pk).update(
                    value=measurement.value, jobs=measurement.jobs, last_evaluated_at=now
                )
    stopped = [e for (rule_pk, s), e in firing.items() if rule_pk == rule.pk and s not in held]
    outcome.resolved.extend(_resolve(stopped, now))
    return outcome


def escalation_subject(subject: str) -> str:
    """The node_id of a subject's escalation: the subject, or where it is longer than that
    column (a provider and a model of 200 characters each), its start and a hash of the whole,
    so that each subject still has an escalation of its own."""
    if len(subject) <= SUBJECT_CHARS:
        return subject
    digest = hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()[:SUBJECT_HASH]
    return f"{subject[: SUBJECT_CHARS - SUBJECT_HASH - 1]}…{digest}"


def _fire(rule: AlertRule, measurement: Measurement, now: datetime) -> AlertEpisode | None:
    """Open an episode and its escalation together; None when another evaluation got there
    first (the one-firing-episode constraint refused this one)."""
    message = describe(rule, measurement)
    try:
        with transaction.atomic():
            episode = AlertEpisode.objects.create(
                rule=rule,
                subject=measurement.subject,
                provider=measurement.provider,
                model=measurement.model,
                firing_since=now,
                value=measurement.value,
                jobs=measurement.jobs,
                last_evaluated_at=now,
            )
            node_id = escalation_subject(measurement.subject)
            trigger = EscalationTrigger(
                "raised",
                node_id,
                rule.severity,
                message,
                f"alert:{rule.pk}:{measurement.subject}:{now.isoformat()}",
                now,
            )
            existing = Escalation.objects.filter(
                alert_rule=rule, kind="raised", node_id=node_id
            ).first()
            escalation = actions.apply_trigger(
                trigger, job=None, existing=existing, source=f"alert: {rule.name}"
            )
            if escalation.alert_rule_id is None:
                escalation.alert_rule = rule
                escalation.save(update_fields=["alert_rule"])
            episode.escalation = escalation
            episode.save(update_fields=["escalation"])
    except IntegrityError:
        logger.info("alert %s for %s is already firing", rule.pk, measurement.subject)
        return None
    return episode


def _resolve(episodes: Iterable[AlertEpisode], now: datetime) -> list[AlertEpisode]:
    resolved = []
    for episode in episodes:
        with transaction.atomic():
            claimed = AlertEpisode.objects.filter(pk=episode.pk, resolved_at=None).update(
                resolved_at=now, last_evaluated_at=now
            )
            if not claimed:
                continue
            episode.resolved_at = now
            if episode.escalation_id:
                escalation = Escalation.objects.get(pk=episode.escalation_id)
                # Support decides whether to resolve the escalation; the trail says why.
                EscalationEntry.objects.create(
                    escalation=escalation,
                    actor_name=actions.SYSTEM_ACTOR,
                    action="alert resolved",
                    from_status=escalation.status,
                    to_status=escalation.status,
                    note=f"The alert stopped firing at {now.isoformat()}",
                )
        resolved.append(episode)
    return resolved


def firing_episodes():
    """Firing alerts, newest first, with their rules (one query)."""
    return (
        AlertEpisode.objects.filter(resolved_at=None)
        .select_related("rule")
        .order_by("-firing_since", "-pk")
    )
