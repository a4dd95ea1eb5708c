"""Failure records (one per failure) and the failure groups that gather them by fingerprint."""

import re
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Upper
from django.utils import timezone

from jobs.models.audit import AuditEntry
from jobs.models.events import DEGRADED
from jobs.models.values import JSONField
from jobs.replay.failures import FAILED_FAMILY

# A group first grouped this recently, unresolved and never regressed, is "new" (the list's
# status filter).
NEW_FOR = timedelta(days=7)
# The list's sort keys (as the URL names them) -> the group column, always descending, with the
# id beside it (each has an index serving it with the status filter).
GROUP_SORT_FIELDS = {
    "steps": "step_count",
    "jobs": "job_count",
    "newest": "created_at",
    "last_seen": "last_seen",
}


class FailureGroupQuerySet(models.QuerySet):
    def matching(self, filters: dict[str, Any], now: datetime | None = None):
        """Groups matching the failures list's filters (docs/failures.md), the one home of their
        meaning: ``status`` (``unresolved`` when empty: new, regressed, unresolved, resolved,
        ignored or all; merged groups never), ``q`` (reason words, as the jobs list's reason
        search: the group has a failure whose reason has a word starting with each),
        ``node``/``workflow`` (exact), ``provider``/``model`` (any case: a failure of the group
        failed on it, the failure's own provider/model else its job's), ``ended`` (the group
        has a failure that ended its job), ``since``/``until`` (last seen from / first seen
        before)."""
        now = now or timezone.now()
        groups = self.exclude(status=FailureGroup.Status.MERGED)
        status = filters.get("status") or "unresolved"
        Status = FailureGroup.Status
        if status == "new":
            groups = groups.filter(
                status=Status.UNRESOLVED, regressed_at=None, created_at__gte=now - NEW_FOR
            )
        elif status == "regressed":
            groups = groups.filter(status=Status.UNRESOLVED, regressed_at__isnull=False)
        elif status != "all":
            groups = groups.filter(status=status)
        if filters.get("node"):
            groups = groups.filter(node_id=filters["node"])
        if filters.get("workflow"):
            groups = groups.filter(workflow=filters["workflow"])
        if filters.get("q"):
            groups = groups.filter(
                pk__in=Failure.objects.reason_matches(filters["q"]).values("group_id")
            )
        for name in ("provider", "model"):
            if value := filters.get(name):
                failed_on = FailureGroupJob.objects.filter(**{f"{name}__iexact": value})
                groups = groups.filter(pk__in=failed_on.values("group_id"))
        if filters.get("ended"):
            groups = groups.filter(pk__in=Failure.objects.ended_their_job().values("group_id"))
        if filters.get("since"):
            groups = groups.filter(last_seen__gte=filters["since"])
        if filters.get("until"):
            groups = groups.filter(first_seen__lt=filters["until"])
        return groups

    def sorted_by(self, key: str):
        """Most first by the sort key (``GROUP_SORT_FIELDS``), the newer group first on ties;
        a group never seen sorts last."""
        field = GROUP_SORT_FIELDS[key]
        return self.order_by(F(field).desc(nulls_last=True), "-id")

    def after(self, key: str, value, pk: int):
        """The groups after the row whose sort value is ``value`` and id ``pk`` (keyset)."""
        field = GROUP_SORT_FIELDS[key]
        if value is None:
            return self.filter(**{f"{field}__isnull": True, "id__lt": pk})
        return self.filter(
            Q(**{f"{field}__lt": value})
            | Q(**{field: value, "id__lt": pk})
            | Q(**{f"{field}__isnull": True})
        )


class FailureGroup(models.Model):
    """Failed steps sharing a signature (jobs.replay.signatures), kept up to date by projection
    (jobs.ingest.failure_groups). Never deleted: a signature seen before is not new again after
    retention removed its jobs (the "new failure signature" alert rule relies on it).

    ``job_count`` and ``step_count`` are the sums of the group's FailureGroupJob rows;
    ``first_seen``/``last_seen`` are event times of the earliest/latest failure ever grouped.

    The lifecycle columns (``status`` and the ones after it) are what people decided
    (jobs.escalations.group_lifecycle): projection reads them and never rewrites them, so a
    rebuild keeps them. ``fingerprint`` is the fingerprint the group was made from (its URL
    name); every fingerprint that leads to it is a FailureFingerprint row.
    """

    class Status(models.TextChoices):
        UNRESOLVED = "unresolved"
        RESOLVED = "resolved"
        IGNORED = "ignored"
        MERGED = "merged"

    fingerprint = models.CharField(max_length=40, unique=True)
    workflow = models.CharField(max_length=200, blank=True)
    node_id = models.CharField(max_length=200, blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    # The job and step the group was first made from (the job may have left by retention).
    example_job = models.ForeignKey(
        "jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    example_step = models.CharField(max_length=220, blank=True)
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    job_count = models.IntegerField(default=0)
    step_count = models.IntegerField(default=0)
    # When traceviz first grouped the signature (the alert rule's "new").
    created_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.UNRESOLVED)
    # When a failure after its resolution reopened it (kept until it is resolved again).
    regressed_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # A resolved group regresses on a failure after this time (event time) and, when set, in a
    # version later than ``resolved_in_version``.
    resolved_after = models.DateTimeField(null=True, blank=True)
    resolved_in_version = models.CharField(max_length=200, blank=True)
    # An ignored group is unignored after this time, or once seen ``ignore_count`` more times.
    ignored_until = models.DateTimeField(null=True, blank=True)
    ignore_count = models.PositiveIntegerField(null=True, blank=True)
    seen_while_ignored = models.PositiveIntegerField(default=0)
    merged_into = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="merged_groups"
    )

    objects = FailureGroupQuerySet.as_manager()

    class Meta:
        indexes = [
            # Alert rule "new failure signature": groups created in the rule's window; the
            # failures list sorted newest first.
            models.Index(fields=["created_at"], name="failure_group_created"),
            # The failures list: a status, most failed steps / most jobs / last seen first.
            models.Index(fields=["status", "-step_count", "-id"], name="failure_group_by_steps"),
            models.Index(fields=["status", "-job_count", "-id"], name="failure_group_by_jobs"),
            models.Index(fields=["status", "-last_seen", "-id"], name="failure_group_by_seen"),
            # Alert rule "failure group regressed": groups regressed in the rule's window.
            models.Index(
                fields=["regressed_at"],
                condition=Q(regressed_at__isnull=False),
                name="failure_group_regressed",
            ),
        ]

    def __str__(self):
        return self.fingerprint

    @property
    def subject(self) -> str:
        """What failed: the node, or for a group of failures that belong to no node, whether
        the planner degraded or the job ended failed."""
        if self.node_id:
            return self.node_id
        return "planner degraded" if self.error_type == DEGRADED else "job ended failed"

    @property
    def is_regressed(self) -> bool:
        return self.status == self.Status.UNRESOLVED and self.regressed_at is not None


class FailureFingerprint(models.Model):
    """Which group a fingerprint leads to, under the grouping version that made it
    (jobs.replay.signatures.GROUPING_VERSION). A merge points the merged group's fingerprints at
    the surviving group; a new grouping version's fingerprint is added beside the old one for
    the group the old one led to, so neither orphans a group."""

    version = models.PositiveSmallIntegerField()
    fingerprint = models.CharField(max_length=40)
    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="fingerprints")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # Projection looks fingerprints up by it.
            models.UniqueConstraint(
                fields=["version", "fingerprint"], name="failure_fingerprint_identity"
            ),
        ]
        indexes = [
            # A merge: the merged group's fingerprints.
            models.Index(fields=["group"], name="failure_fingerprint_group"),
        ]

    def __str__(self):
        return f"v{self.version} {self.fingerprint}"


class FailureGroupEntry(AuditEntry):
    """The audit trail of a group's lifecycle: who did what, when, from which status to which
    (``traceviz`` for what ingest decided: a regression, an ignore that lapsed)."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="entries")


class FailureGroupJob(models.Model):
    """A job's failures in one group that failed on one provider/model (the failure record's
    own, else the job's when it names none): how many, and by hour. The failures list's
    provider filter, the group page's latest jobs and the jobs list's ``group`` filter read
    them; a group's ``job_count`` counts its distinct jobs."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="group_jobs")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="failure_groups")
    step_count = models.IntegerField(default=0)
    # The same failures by UTC hour ({"2026-11-20T10": 3}; "" for no time), so a full replay
    # or retention takes out exactly what the job put into the hour rows.
    hours = JSONField(default=dict, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            # Its index serves the group page's latest jobs, the jobs list's group filter and
            # projection's reads of the (group, job) pairs a batch changes.
            models.UniqueConstraint(
                fields=["group", "job", "provider", "model"], name="failure_group_job_provider"
            ),
        ]
        indexes = [
            # Projection and the job page: a job's groups.
            models.Index(fields=["job"], name="failure_group_job_job"),
            # The failures list's provider and model filters, ignoring case (iexact compares
            # UPPER() of both sides on PostgreSQL).
            models.Index(Upper("provider"), F("group"), name="failure_group_job_provider_up"),
            models.Index(Upper("model"), F("group"), name="failure_group_job_model_up"),
        ]

    def __str__(self):
        return f"{self.group_id} {self.job_id} {self.provider}/{self.model}"


class FailureGroupCount(models.Model):
    """A count of a group's failures by the provider/model that failed (as ``FailureGroupJob``
    counts them), in one span of their failure's time (event time): the failures page's trend
    and providers involved."""

    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    step_count = models.IntegerField(default=0)

    class Meta:
        abstract = True


class FailureGroupHour(FailureGroupCount):
    """The counts per UTC hour."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="hours")
    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "hour", "provider", "model"], name="failure_group_hour"
            ),
        ]
        indexes = [
            # The failures page: every group's hours inside the window.
            models.Index(fields=["hour", "group"], name="failure_group_hour_window"),
        ]

    def __str__(self):
        return f"{self.group_id} {self.hour:%Y-%m-%d %H:00}"


class FailureGroupDay(FailureGroupCount):
    """The hour rows summed per UTC day (the same group, provider and model): long windows of
    the failures page read a row per day for the days they cover whole, not 24 hour rows.
    Written beside the hour rows in the same statement batch (``jobs.ingest.failure_groups``),
    so a day row always equals the sum of its hours."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="days")
    day = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "day", "provider", "model"], name="failure_group_day"
            ),
        ]
        indexes = [
            # The failures page over a long window: every group's whole days inside it.
            models.Index(fields=["day", "group"], name="failure_group_day_window"),
        ]

    def __str__(self):
        return f"{self.group_id} {self.day:%Y-%m-%d}"


def search_words(text: str) -> list[str]:
    """The words of ``text`` as reason search compares them: runs of letters, digits and
    underscores, lowercased (Python's rules, so both databases compare the same text)."""
    return re.findall(r"\w+", (text or "").lower())


def search_text(reason: str) -> str:
    """What ``Failure.search_text`` holds: the reason's words, each after one space, so a word
    prefix is a plain substring ``" " + prefix`` on every database."""
    return "".join(" " + word for word in search_words(reason))


class FailureQuerySet(models.QuerySet):
    def reason_matches(self, query: str) -> "FailureQuerySet":
        """Failures whose reason has, for every word of ``query``, a word beginning with it
        (words ANDed, prefix match, case-insensitive), the same on SQLite and PostgreSQL: "time"
        finds "Timeout", "bucket not found" finds "Bucket not found: x". A query without words
        matches nothing."""
        words = search_words(query)
        if not words:
            return self.none()
        condition = Q()
        for word in words:
            condition &= Q(search_text__contains=" " + word)
        return self.filter(condition)

    def ended_their_job(self) -> "FailureQuerySet":
        """Failures that were not retried successfully nor handled, in jobs that ended failed."""
        return self.filter(
            recovered=False, handled=False, job__status__in=[s.value for s in FAILED_FAMILY]
        )


class Failure(models.Model):
    """One failure of a job (the record every view reads): a failed step attempt, a job-level
    failure (``job_finished`` failed with a reason) or the planner's degradation. Each has a
    reason, the provider/model that failed and a failure group. Written by projection with the
    job's other rows (jobs.ingest.failure_records); a full replay rewrites a job's whole."""

    class Kind(models.TextChoices):
        STEP = "step"
        JOB = "job"
        PLANNER = "planner"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="failures")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    node_id = models.CharField(max_length=200, blank=True)  # "" for a job or planner failure
    attempt = models.IntegerField(default=0)  # 0 for a job or planner failure
    reason = models.TextField(blank=True)
    search_text = models.TextField(blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    # No database constraint, as for Step.failure_group: groups are never deleted.
    group = models.ForeignKey(
        FailureGroup,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="failures",
    )
    at = models.DateTimeField(null=True, blank=True)  # event time: its finish, else its start
    # A later attempt of the node succeeded; the caller handled it (continue_on_error, a span
    # whose parent ended well): neither ended the job.
    recovered = models.BooleanField(default=False)
    handled = models.BooleanField(default=False)

    objects = FailureQuerySet.as_manager()

    class Meta:
        constraints = [
            # Projection's key; its index also serves "a job's failures".
            models.UniqueConstraint(
                fields=["job", "kind", "node_id", "attempt"], name="failure_identity"
            ),
        ]
        indexes = [
            # Jobs list: the provider filter counts a failure against the provider that failed
            # (iexact compares UPPER() of both sides on PostgreSQL).
            models.Index(Upper("provider"), F("job"), name="failure_provider"),
            # A failure group's page: its failures, newest first.
            models.Index(fields=["group", "-at"], name="failure_group_newest"),
            # The failures list's recovered count per group: only the recovered rows are read
            # (the group's total is its step_count).
            models.Index(
                fields=["group"], condition=Q(recovered=True), name="failure_group_recovered"
            ),
        ]

    def __str__(self):
        return f"{self.kind} {self.job_id} {self.node_id}:{self.attempt}"
