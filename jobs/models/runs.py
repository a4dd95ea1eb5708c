"""The projection of a job's events: jobs, their steps, calls and providers, and the jobs
list's query (one home for the page and the read API)."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import models
from django.db.models import Case, Exists, F, OuterRef, Q, Subquery, Value, When
from django.db.models.functions import Upper
from django.db.models.lookups import Exact, In
from django.utils import timezone

from jobs.models.events import Event, EventQuerySet
from jobs.models.failures import Failure, FailureGroupJob
from jobs.models.values import JSONField, JSONKeyText, JSONTextField, UTCHour, hour_floor, today_utc
from jobs.replay import backoff
from jobs.replay.failures import (
    ATTENTION_STATUSES,
    FAILED_FAMILY,
    STALLABLE_STATUSES,
    ResultType,
    RunStatus,
)


def stalled_condition(now: datetime) -> Q:
    """The stall rule (docs/contract.md): a job in a status that still expects events that has
    received none for TRACEVIZ_STALL_AFTER. ``Job.is_stalled_at`` is the same rule for a row
    in hand; nothing else decides it. The receive hour adds nothing to the rule: it is what the
    ``job_stall`` index holds."""
    cutoff = now - settings.TRACEVIZ_STALL_AFTER
    return Q(
        status__in=sorted(STALLABLE_STATUSES),
        received_hour__lte=hour_floor(cutoff),
        last_received_at__lt=cutoff,
    )


# The jobs list's "no provider" / "no model" value (the dashboard's label for an empty one).
NO_VALUE = "(none)"


# Jobs with a JobProvider row for a provider or model, up to which ``that_used`` names them by
# id; past it, each job of the outer query is looked up.
FEW_JOBS = 1000


class Probe(Exists):
    """EXISTS looked up once per outer row. PostgreSQL may otherwise run an EXISTS under an OR
    as a hash of every row it could match, built before the first outer row: 237,728
    JobProvider rows (140 ms) for a jobs list page that reads 454 jobs. ``OFFSET 0`` keeps it
    from doing so; it changes no result."""

    template = "EXISTS(%(subquery)s OFFSET 0)"


def that_used(name: str, value: str) -> Q:
    """Jobs whose own ``name`` ("provider" or "model") is ``value`` or that used it (a
    JobProvider row: its own, its planner events', its calls'), in any case: the jobs list's
    filter, and the dashboard's.

    Reads first which jobs have a JobProvider row for it: when few do (a rare provider), the
    filter names them, and the own value's index and the job ids give every match at once;
    when many do, each job the query reads is looked up (``Probe``), and the newest-first
    reading stops after a page of them."""
    rows = JobProvider.objects.filter(**{f"{name}__iexact": value})
    own = Q(**{f"{name}__iexact": value})
    users = list(rows.values_list("job_id", flat=True).distinct()[: FEW_JOBS + 1])
    if len(users) <= FEW_JOBS:
        return own | Q(pk__in=users)
    return own | Q(Probe(rows.filter(job=OuterRef("pk"))))


# Started within the last ... (the dashboard's presets); combines with since/until.
STARTED_WITHIN = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}


def statuses_of(selected: list[str]) -> list[str]:
    """The run statuses a status selection means: "failed" is the failed family unless a
    specific failed:* status is selected beside it."""
    chosen = set(selected)
    if RunStatus.FAILED in chosen and not chosen & set(FAILED_FAMILY[1:]):
        chosen.update(FAILED_FAMILY)
    return sorted(chosen)


def list_scope(filters: dict) -> str:
    """Which jobs the list starts from: "lookup" (any status), "status" (the chosen ones),
    "attention" (the default: failed and paused) or "all"."""
    if filters.get("q"):
        return "lookup"
    if filters.get("status"):
        return "status"
    flags = ("retrying", "waiting", "stalled")
    if filters.get("show") != "all" and not any(filters.get(flag) for flag in flags):
        return "attention"
    return "all"


def has_step(steps: "models.QuerySet") -> Exists:
    """The job has one of these steps. A job's steps live in its day's partition
    (``Job.partition_day``), so matching the day too lets PostgreSQL probe that one partition
    per job, newest first, instead of every day's."""
    return Exists(steps.filter(job_id=OuterRef("pk"), partition_day=OuterRef("partition_day")))


class JobQuerySet(models.QuerySet):
    def stalled(self, now: datetime | None = None) -> "JobQuerySet":
        return self.filter(stalled_condition(now or timezone.now()))

    def with_metadata(self, key: str, value: str) -> "JobQuerySet":
        """These jobs whose metadata (``job_started.metadata``; a trace's resource attributes)
        holds ``value`` at the top-level ``key``, compared as text (``JSONKeyText``): "42"
        finds 42 and "42", "true" finds true. Chained calls must all hold."""
        return self.filter(Exact(JSONKeyText("metadata", key), value))

    def ids_by_trace(self, trace_ids: Iterable[str]) -> dict[str, str]:
        """The job id holding each of these OpenTelemetry trace ids, for those that are here
        (one query): the job named by the trace id, or the job whose metadata records the
        trace (``otel.trace_id``, a job named by ``traceviz.job_id``), else the job the trace id
        is an alias of (a trace re-homed into its named job). Where two jobs hold one trace, the
        first stored."""
        wanted = {trace_id for trace_id in trace_ids if trace_id}
        if not wanted:
            return {}
        trace_of = JSONKeyText("metadata", "otel.trace_id")
        rows = (
            self.filter(Q(job_id__in=sorted(wanted)) | Q(In(trace_of, sorted(wanted))))
            .annotate(trace_of=trace_of)
            .order_by("pk")
            .values_list("job_id", "trace_of")
        )
        found: dict[str, str] = {}
        for job_id, trace_of_job in rows:
            for trace_id in (job_id, trace_of_job):
                if trace_id in wanted:
                    found.setdefault(trace_id, job_id)
        if missing := wanted - found.keys():
            found.update(JobAlias.objects.jobs_of(missing))
        return found

    def matching(self, filters: dict, now: datetime | None = None) -> "JobQuerySet":
        """These jobs matching the jobs list's filters (cleaned, as ``JobFilterForm`` gives
        them), newest first; the HTML list and ``GET /api/v1/jobs`` both ask this, so a filter
        means the same on both (docs/api.md). Every filter combines with the others (AND)."""
        jobs = self.order_by("-started_at", "-id")
        starting = list_scope(filters)
        if starting == "lookup":
            q = filters["q"]
            # A lookup finds the job whatever its status; a job id also matches by its start.
            jobs = jobs.filter(Q(job_id__startswith=q) | Q(correlation_id=q) | Q(session_id=q))
        elif starting == "status":
            jobs = jobs.filter(status__in=statuses_of(filters["status"]))
        elif starting == "attention":
            jobs = jobs.filter(status__in=sorted(ATTENTION_STATUSES))
        if filters.get("segment") == "retryable":
            jobs = jobs.filter(has_retryable=True)
        elif filters.get("segment") == "failed":
            jobs = jobs.filter(has_failed=True)
        if filters.get("failure_code"):
            jobs = jobs.filter(has_step(Step.objects.filter(failure_code=filters["failure_code"])))
        if filters.get("error_type"):
            jobs = jobs.filter(has_step(Step.objects.filter(error_type=filters["error_type"])))
        if filters.get("root_error_type"):
            jobs = jobs.filter(error_type=filters["root_error_type"])
        for name in ("provider", "model"):
            if filters.get(name) == NO_VALUE:
                jobs = jobs.filter(**{name: ""})
            elif filters.get(name):
                jobs = jobs.filter(that_used(name, filters[name]))
        if filters.get("workflow"):
            jobs = jobs.filter(workflow=filters["workflow"])
        if filters.get("range") in STARTED_WITHIN:
            jobs = jobs.filter(
                started_at__gte=(now or timezone.now()) - STARTED_WITHIN[filters["range"]]
            )
        if filters.get("since"):
            jobs = jobs.filter(started_at__gte=filters["since"])
        if filters.get("until"):
            jobs = jobs.filter(started_at__lt=filters["until"])
        if filters.get("retrying"):
            # Retrying now: an attempt after the first is running.
            jobs = jobs.filter(has_step(Step.objects.filter(segment="running", attempt__gt=1)))
        if filters.get("waiting"):
            jobs = jobs.filter(status=RunStatus.PAUSED_TRANSIENT)
        if filters.get("stalled"):
            jobs = jobs.stalled(now)
        if filters.get("has_findings"):
            jobs = jobs.exclude(findings=[])
        if filters.get("min_attempts"):
            jobs = jobs.filter(max_attempt__gte=filters["min_attempts"])
        if filters.get("reason"):
            found = Failure.objects.reason_matches(filters["reason"]).filter(job=OuterRef("pk"))
            jobs = jobs.filter(Exists(found))
        for key, value in filters.get("meta") or []:
            jobs = jobs.with_metadata(key, value)
        if filters.get("group"):
            in_group = FailureGroupJob.objects.filter(group__fingerprint=filters["group"])
            jobs = jobs.filter(id__in=in_group.values("job_id"))
        return jobs

    def with_matched_failure(self, reason: str) -> "JobQuerySet":
        """These jobs with ``matched_failure_id``: the earliest (event time) of each job's
        failures whose reason matches ``reason`` (``FailureQuerySet.reason_matches``, as the
        ``reason`` filter), so a list can say why a job was found; unchanged without one."""
        if not reason:
            return self
        found = Failure.objects.reason_matches(reason).filter(job=OuterRef("pk"))
        earliest = found.order_by(F("at").asc(nulls_last=True), "pk").values("pk")[:1]
        return self.annotate(matched_failure_id=Subquery(earliest))

    def delete_with_steps(self) -> int:
        """Delete these jobs, their steps (which do not cascade, see ``Step.job``) and what
        cascades from a job; returns how many jobs."""
        pks = list(self.values_list("pk", flat=True))
        Step.objects.filter(job_id__in=pks).delete()
        Job.objects.filter(pk__in=pks).delete()
        return len(pks)


class Job(models.Model):
    """A job's replayed state (projection of its events)."""

    job_id = models.CharField(max_length=200, unique=True)
    status = models.CharField(
        max_length=32, choices=[(s.value, s.value) for s in RunStatus], default=RunStatus.RUNNING
    )
    name = models.CharField(max_length=200, blank=True)
    workflow = models.CharField(max_length=200, blank=True)
    correlation_id = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    plan_hash = models.CharField(max_length=200, blank=True)
    retry_of = models.CharField(max_length=200, blank=True)
    metadata = JSONField(default=dict, blank=True)
    cursor_node = models.CharField(max_length=200, blank=True)
    payload_results = JSONTextField(default=dict, blank=True)
    last_validation_error = JSONField(null=True, blank=True)
    findings = JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    last_received_at = models.DateTimeField(default=timezone.now)
    # The hour of last_received_at, kept by the database: the stall index holds it rather than
    # the receive time itself, which changes on every batch and would keep PostgreSQL from
    # updating a live job's row in place (a HOT update, which writes none of its indexes).
    received_hour = models.GeneratedField(
        expression=UTCHour("last_received_at"),
        output_field=models.DateTimeField(),
        db_persist=True,
    )
    finish_code = models.CharField(max_length=200, blank=True)
    finish_reason = models.TextField(blank=True)
    cancel_reason = models.TextField(blank=True)
    # The root failure (first failing node) as the jobs list shows it.
    failing_node_id = models.CharField(max_length=200, blank=True)
    failing_reason = models.TextField(blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    # When the latest failure happened (event time): repair budget counts runs in this order.
    failed_at = models.DateTimeField(null=True, blank=True)
    has_retryable = models.BooleanField(default=False)
    has_failed = models.BooleanField(default=False)
    step_count = models.IntegerField(default=0)
    max_attempt = models.IntegerField(default=0)
    # Attempts that failed (segment failed or retryable, stale results aside), and the job's
    # duration so far (its end or last event, less its start; 0 without a start): keys the
    # jobs list sorts on (docs/pages.md).
    failed_steps = models.IntegerField(default=0, db_default=0)
    duration_ms = models.BigIntegerField(default=0, db_default=0)
    event_count = models.IntegerField(default=0)
    planner_parse_invalid = models.IntegerField(default=0)
    planner_degraded = models.IntegerField(default=0)
    # Tiny per-step summary for the list's segment strip: [[segment, stale], ...] in order.
    segment_strip = JSONTextField(default=list, blank=True)
    # Summed over the job's calls (LLM calls from OpenTelemetry spans); cost in USD.
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    # The replay fold's snapshot (jobs.replay.walk.Fold.snapshot): the next batch whose events
    # all sort after it is folded onto it instead of replaying the job. Never shown.
    fold = JSONTextField(default=dict, blank=True)
    # The UTC day the job's first event was received (or, for a job retention kept past its
    # day, the day it was moved on): its events and steps live in that day's partitions.
    partition_day = models.DateField(default=today_utc)

    objects = JobQuerySet.as_manager()

    class Meta:
        indexes = [
            # Jobs list: newest first, optionally by status (the default "needs attention" view).
            models.Index(fields=["-started_at", "-id"], name="job_newest"),
            models.Index(fields=["status", "-started_at", "-id"], name="job_status_newest"),
            # Lookup box: correlation and session ids; retry_of chains.
            models.Index(fields=["correlation_id"], name="job_correlation"),
            models.Index(fields=["session_id"], name="job_session"),
            models.Index(fields=["retry_of"], name="job_retry_of"),
            # Stall check: running-ish jobs by the hour they last received an event.
            models.Index(fields=["status", "received_hour"], name="job_stall"),
            # Retention: the jobs of a day's partitions.
            models.Index(fields=["partition_day"], name="job_partition_day"),
            # Jobs list: provider/model filters ignore case (iexact compares UPPER() of both
            # sides on PostgreSQL), newest first.
            models.Index(
                Upper("provider"),
                F("started_at").desc(),
                F("id").desc(),
                name="job_provider_newest",
            ),
            models.Index(
                Upper("model"), F("started_at").desc(), F("id").desc(), name="job_model_newest"
            ),
            # Jobs list sorted by duration, steps, attempts or failures (keyset on the key and
            # id, either direction: an index is read backwards as well).
            models.Index(fields=["duration_ms", "id"], name="job_sort_duration"),
            models.Index(fields=["step_count", "id"], name="job_sort_steps"),
            models.Index(fields=["max_attempt", "id"], name="job_sort_attempts"),
            models.Index(fields=["failed_steps", "id"], name="job_sort_failures"),
            # Compare's baseline (the latest earlier run of a workflow, completed first) and the
            # list's workflow filter, newest first.
            models.Index(fields=["workflow", "-started_at", "-id"], name="job_workflow_newest"),
        ]

    def __str__(self):
        return self.job_id

    def own_steps(self) -> "StepQuerySet":
        """The job's steps, with its partition day so PostgreSQL reads one partition."""
        return Step.objects.filter(job=self, partition_day=self.partition_day)

    def own_events(self) -> EventQuerySet:
        """The job's events, with its partition day (as ``own_steps``)."""
        return Event.objects.filter(job_id=self.job_id, partition_day=self.partition_day)

    @property
    def completed_node_ids(self) -> list[str]:
        """The nodes a success completed, in completion order, without repeats (one query).
        Each completing step holds its node's place: a live batch writes that step, not a
        list as long as the job."""
        steps = self.own_steps().filter(completes__isnull=False)
        return list(steps.order_by("completes").values_list("node_id", flat=True))

    def is_stalled_at(self, now: datetime) -> bool:
        """``stalled_condition`` for this row."""
        return (
            self.status in STALLABLE_STATUSES
            and self.last_received_at < now - settings.TRACEVIZ_STALL_AFTER
        )

    @property
    def is_stalled(self) -> bool:
        return self.is_stalled_at(timezone.now())


class JobAliasQuerySet(models.QuerySet):
    def jobs_of(self, aliases: Iterable[str]) -> dict[str, str]:
        """The job id each of these ids is an alias of (those that are one), by alias."""
        rows = self.filter(alias__any=sorted(set(aliases))).values_list("alias", "job__job_id")
        return dict(rows)

    def job_of(self, alias: str) -> str | None:
        """The job id ``alias`` is an alias of, or None."""
        return self.jobs_of([alias]).get(alias)


class JobAlias(models.Model):
    """Another id of a job: a trace's id, once a span of the trace named its job
    (``traceviz.job_id``). Spans that arrived before the name were stored under the trace id
    and moved to the named job (jobs.ingest.aliases); later events stored under the trace id go
    to the named job, and its URLs redirect there. Deleted with its job."""

    alias = models.CharField(max_length=200, unique=True)  # its index serves every lookup
    # Its index serves the cascade when the job goes, and re-pointing a re-homed job's aliases.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="aliases")
    created_at = models.DateTimeField(default=timezone.now)

    objects = JobAliasQuerySet.as_manager()

    def __str__(self):
        return f"{self.alias} -> {self.job_id}"


class StepQuerySet(models.QuerySet):
    def awaiting_retry(self) -> "StepQuerySet":
        """These steps that are attempts their job waits to retry: retryable failures that
        finished, were not stale nor ``continue_on_error``, and are still their node's latest
        non-stale attempt (no later success, failure or running attempt)."""
        later = Step.objects.filter(
            job_id=OuterRef("job_id"),
            partition_day=OuterRef("partition_day"),
            node_id=OuterRef("node_id"),
            position__gt=OuterRef("position"),
            ignored_stale=False,
        )
        return self.filter(
            result_type=ResultType.RETRYABLE_FAILURE,
            ignored_stale=False,
            continue_on_error=False,
            finished_at__isnull=False,
        ).exclude(Exists(later))

    def waited_on(self, jobs: Iterable["Job"]) -> dict[int, "Step"]:
        """The attempt each of ``jobs`` waits to retry, by job pk (one query): the latest of
        its steps ``awaiting_retry``; a job without one is left out."""
        wanted = Q(pk__in=[])
        for job in jobs:
            wanted |= Q(job_id=job.pk, partition_day=job.partition_day)
        found: dict[int, Step] = {}
        steps = (
            self.filter(wanted)
            .awaiting_retry()
            .order_by("job_id", "-position")
            .only("job_id", "node_id", "attempt", "position", "finished_at", "partition_day")
        )
        for step in steps:
            found.setdefault(step.job_id, step)
        return found

    def failed_attempt_first(self) -> "StepQuerySet":
        """These steps, the latest failed attempt first (retryable or failed, not a stale
        result), then the others latest first: an escalation names the attempt that failed,
        not the later one that succeeded after it (a job that recovered)."""
        failed = Q(segment__in=("retryable", "failed"), ignored_stale=False)
        return self.annotate(
            is_failed_attempt=Case(When(failed, then=Value(1)), default=Value(0))
        ).order_by("-is_failed_attempt", "-attempt")


@dataclass(frozen=True, slots=True)
class NextAttempt:
    """When a paused:transient job's next attempt is due by the run-status contract's backoff:
    ``node_id`` attempt ``attempt`` failed retryably at ``failed_at``, so the next attempt is
    due from ``due_from`` (no jitter) to ``due_by`` (full jitter)."""

    node_id: str
    attempt: int
    failed_at: datetime
    due_from: datetime
    due_by: datetime


def matched_failures(jobs: Iterable[Job]) -> dict[int, Failure]:
    """The failure each of ``jobs`` was found by (``JobQuerySet.with_matched_failure``), by
    job pk, in one query (none when no job has one)."""
    wanted = {
        job.pk: pk for job in jobs if (pk := getattr(job, "matched_failure_id", None)) is not None
    }
    if not wanted:
        return {}
    found = Failure.objects.in_bulk(sorted(wanted.values()))
    return {job_pk: found[pk] for job_pk, pk in wanted.items() if pk in found}


def next_attempts(jobs: Iterable[Job]) -> dict[int, NextAttempt]:
    """The next attempt due of each of ``jobs`` that waits to retry (paused:transient with an
    attempt ``awaiting_retry``), by job pk, in one query (none when no job is paused). A job
    without such an attempt is left out: nothing says when it retries."""
    paused = [job for job in jobs if job.status == RunStatus.PAUSED_TRANSIENT]
    if not paused:
        return {}
    found = {}
    for pk, step in Step.objects.waited_on(paused).items():
        assert step.finished_at is not None  # awaiting_retry: finished
        due_from, due_by = backoff.retry_window(step.finished_at, step.attempt)
        found[pk] = NextAttempt(step.node_id, step.attempt, step.finished_at, due_from, due_by)
    return found


class Step(models.Model):
    """One attempt of one node of a job, as replay built it."""

    # No database constraint and no cascade: a day's steps leave with their partition (retention
    # drops it after deleting the day's jobs); ``JobQuerySet.delete_with_steps`` deletes both
    # otherwise. No index of its own: the unique constraint's index leads with the job.
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="steps",
    )
    node_id = models.CharField(max_length=200)
    attempt = models.IntegerField()
    position = models.IntegerField()
    result_type = models.CharField(max_length=32, blank=True)
    segment = models.CharField(max_length=16)
    reason = models.TextField(blank=True)
    ignored_stale = models.BooleanField(default=False)
    compensated = models.BooleanField(default=False)
    compensation_reason = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=200, blank=True)
    step_index = models.IntegerField(null=True, blank=True)
    trace_span_id = models.CharField(max_length=200, blank=True)
    parent_span_id = models.CharField(max_length=200, blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=200, blank=True)
    plan_hash = models.CharField(max_length=200, blank=True)
    continue_on_error = models.BooleanField(default=False)
    epoch = models.BigIntegerField(null=True, blank=True)
    step_epoch = models.BigIntegerField(null=True, blank=True)
    payload_results = JSONTextField(default=dict, blank=True)
    context = JSONTextField(default=dict, blank=True)
    audit_trail = JSONTextField(default=list, blank=True)
    extra = JSONTextField(default=dict, blank=True)
    started_event_id = models.CharField(max_length=200, blank=True)
    finished_event_id = models.CharField(max_length=200, blank=True)
    exception_type = models.CharField(max_length=200, blank=True)
    stack = models.TextField(blank=True)
    # A failure its caller handled (drawn failed, no failing node); a result type inferred from
    # a span's status rather than declared (jobs.replay.spans).
    handled = models.BooleanField(default=False)
    inferred = models.BooleanField(default=False)
    # The OpenTelemetry span behind the step, as the step panel shows it.
    span = JSONTextField(default=dict, blank=True)
    # Results this attempt no longer shows (stale ones kept beside it, replaced ones), oldest
    # first; and replay's bookkeeping (event positions, first success and permanent failure).
    history = JSONTextField(default=list, blank=True)
    marks = JSONTextField(default=dict, blank=True)
    # On the step whose success completed its node: the node's place, from 0, in the job's
    # completed nodes (``Job.completed_node_ids``).
    completes = models.PositiveIntegerField(null=True, blank=True)
    # The paths ingest masked in the step's events (``Event.masked``), in the order met.
    masked = JSONTextField(default=list, blank=True)
    # The job's partition_day, as for events.
    partition_day = models.DateField(default=today_utc)
    # The failure group of a grouped failure (jobs.replay.signatures), set by projection. No
    # database constraint: the step table is partitioned and groups are never deleted.
    failure_group = models.ForeignKey(
        "FailureGroup",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the partial index step_failure_group
        related_name="steps",
    )

    objects = StepQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "node_id", "attempt", "partition_day"], name="step_unique_attempt"
            ),
        ]
        indexes = [
            # Job page: a job's steps in event order.
            models.Index(fields=["job", "position"], name="step_job_position"),
            # Jobs list filters: jobs that have a step with this failure code / error type. Only
            # the steps that have one: most steps are successes, which no filter looks for, and
            # each write of a step (a live job's is written twice) pays for every index it is in.
            models.Index(
                fields=["failure_code", "job"],
                condition=~Q(failure_code=""),
                name="step_failure_code",
            ),
            models.Index(
                fields=["error_type", "job"], condition=~Q(error_type=""), name="step_error_type"
            ),
            # Failure groups: a group's steps, and the grouped steps (rebuilding the totals).
            models.Index(
                fields=["failure_group"],
                condition=Q(failure_group__isnull=False),
                name="step_failure_group",
            ),
        ]

    def __str__(self):
        return f"{self.node_id}:{self.attempt}"

    @property
    def step_key(self) -> str:
        return f"{self.node_id}:{self.attempt}"


class JobProvider(models.Model):
    """A provider/model a job used: its ``job_started``'s, its planner events', its LLM
    calls'. The jobs list's provider and model filters read these (a job is every provider it
    used); projection rewrites a job's rows when the set changes."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="providers")
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "provider", "model"], name="job_provider"),
        ]
        indexes = [
            # Jobs list: provider / model filters, ignoring case.
            models.Index(Upper("provider"), F("job"), name="job_provider_upper"),
            models.Index(Upper("model"), F("job"), name="job_provider_model_upper"),
        ]

    def __str__(self):
        return f"{self.job_id} {self.provider}/{self.model}"


class Call(models.Model):
    """A call a step made (an LLM, a tool, a retriever, a message published...), from an
    OpenTelemetry span inside the step (jobs.replay.calls). ``node_id`` "" is a call of the job
    itself (its root span). Replay writes these rows with the job's steps."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="calls")
    node_id = models.CharField(max_length=200, blank=True)
    attempt = models.IntegerField(null=True, blank=True)
    position = models.IntegerField()
    span_id = models.CharField(max_length=32)
    parent_span_id = models.CharField(max_length=32, blank=True)
    kind = models.CharField(max_length=32)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    reason = models.TextField(blank=True)
    exception_type = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.FloatField()
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    # USD, from genai-prices; null when it does not know the model.
    cost = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    # The transcript: [{direction, role, content, tool_calls}], oldest first.
    messages = JSONField(default=list, blank=True)
    input = JSONField(null=True, blank=True)
    output = JSONField(null=True, blank=True)
    tool = JSONField(null=True, blank=True)
    # Other attributes, span events, links, stack trace.
    detail = JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "span_id"], name="call_unique_span"),
        ]
        indexes = [
            # Step panel: a step's calls in order.
            models.Index(fields=["job", "node_id", "attempt", "position"], name="call_step"),
            # Dashboard: tokens and cost per provider/model over a time window.
            models.Index(fields=["started_at"], name="call_started"),
        ]

    def __str__(self):
        return f"{self.kind} {self.name}"

    @property
    def is_unpriced(self) -> bool:
        """Tokens the job's totals count, but no known price: the job's cost leaves it out."""
        return bool(self.input_tokens or self.output_tokens) and self.cost is None
