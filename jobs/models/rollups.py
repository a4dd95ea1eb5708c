"""The dashboard's hourly rollups, planner counts and the metric counters."""

from collections.abc import Iterable
from datetime import datetime

from django.db import models

from jobs.models.values import JSONTextField, hour_floor


class Counter(models.Model):
    """A Prometheus counter series kept in the database, so every web process adds to the same
    number and it survives restarts. ``labels`` is the canonical key (sorted JSON)."""

    name = models.CharField(max_length=200)
    labels = models.CharField(max_length=1000, blank=True)
    value = models.FloatField(default=0)

    class Meta:
        constraints = [
            # The upsert target of counters.increment (INSERT ... ON CONFLICT DO UPDATE).
            models.UniqueConstraint(fields=["name", "labels"], name="counter_series"),
        ]

    def __str__(self):
        return f"{self.name}{self.labels} {self.value:g}"


class RateCounter(models.Model):
    """Requests counted per ingest token in fixed time windows. In the database so every web
    process shares one count; ended windows are deleted by a periodic task."""

    key = models.CharField(max_length=255)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "window_start"], name="rate_counter_window"),
        ]

    def __str__(self):
        return f"{self.key} @ {self.window_start}: {self.count}"

    @classmethod
    def forget_windows_before(cls, cutoff) -> int:
        """Delete windows that started before ``cutoff``; returns how many rows went."""
        deleted, _ = cls.objects.filter(window_start__lt=cutoff).delete()
        return deleted


class DashboardRollup(models.Model):
    """The dashboard's step panels pre-aggregated (jobs.rollup): per hour of job start (UTC),
    scope, provider, model and the panel's own dimension, how many steps and how many distinct
    jobs. A job lies in one hour, once under its own provider/model, so job counts add up
    across the OWN rows; a provider or model filter adds its shape's guest rows."""

    class Scope(models.TextChoices):
        # The job kinds' rows (JOBS, the step kinds, ERROR_TYPE): OWN, each job under its own
        # provider/model; the others hold each job again under every provider, model or
        # provider x model it used that is not its own (guests), so that a filter reads OWN
        # rows that match plus its shape's guests: the jobs that used it, each once, as the
        # jobs list's filters mean. Other kinds are OWN only.
        OWN = "", "own"
        PROVIDER = "provider"  # model ""
        MODEL = "model"  # provider ""
        PAIR = "pair"  # every provider it used x every model it used

    class Kind(models.TextChoices):
        # Jobs started (dimension empty; steps = their step_count); status "failed" for the
        # failed family, "" for every other status.
        JOBS = "jobs"
        SEGMENT = "segment"  # dimension: step segment
        FAILURE_CODE = "failure_code"  # dimension: failure code (non-empty)
        ERROR_TYPE = "error_type"  # dimension: error type (non-empty); status: the job's
        DURATION = "duration"  # dimension: node id; steps with a duration, their histogram
        # LLM calls made of OpenTelemetry spans: provider and model are the call's (not the
        # job's), steps = calls, with their summed tokens and cost.
        LLM = "llm"
        # Jobs started per provider/model they used (JobProvider; a job that used none, under
        # its own empty one): status "failed" when the job ended failed on that provider/model
        # (a failure record that ended it names it, or names none and the job's own is it), ""
        # otherwise. A job counts once per provider/model it used, so job counts add up across
        # hours for one provider/model, not across providers.
        PROVIDERS = "providers"
        # A whole UTC day's rows of each kind above merged (hour = midnight: counts and sums
        # added, histograms merged), and the DAY row saying the day's are complete
        # (jobs.dashboard.rollup.compile_days).
        JOBS_DAY = "jobs_day"
        SEGMENT_DAY = "segment_day"
        FAILURE_CODE_DAY = "failure_code_day"
        ERROR_TYPE_DAY = "error_type_day"
        DURATION_DAY = "duration_day"
        LLM_DAY = "llm_day"
        PROVIDERS_DAY = "providers_day"
        DAY = "day"

    hour = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    scope = models.CharField(max_length=8, choices=Scope.choices, blank=True, default="")
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    dimension = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=32, blank=True)
    steps = models.IntegerField(default=0)
    jobs = models.IntegerField(default=0)
    # Duration rows: {"b": [bucket, ...], "n": [steps, ...]}, log-spaced buckets of duration_ms
    # (jobs.dashboard.histograms.bucket_of).
    histogram = JSONTextField(null=True, blank=True)
    # LLM rows: the calls' sums, null when no call reported any (as SQL's SUM).
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=24, decimal_places=8, null=True, blank=True)

    class Meta:
        constraints = [
            # One row per cell. Its index serves the panels' reads (an hour range, then kind)
            # and the refresh's delete of recomputed hours.
            models.UniqueConstraint(
                fields=["hour", "kind", "scope", "provider", "model", "dimension", "status"],
                name="rollup_cell",
            ),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.kind} {self.dimension}"


class DirtyHourQuerySet(models.QuerySet):
    def mark(self, moments: Iterable[datetime | None]) -> None:
        """Record that what the dashboard's pre-aggregates hold for the hours of these times
        changed (one INSERT; None is skipped): jobs started then, or planner-counted events
        with that ts. The rollup recomputes those hours later."""
        hours = sorted({hour_floor(value) for value in moments if value is not None})
        if hours:
            self.bulk_create([self.model(hour=hour) for hour in hours])


class DashboardDirtyHour(models.Model):
    """An hour whose rollup rows may be stale: an hour of job start (the step panels) or of
    event ts (the planner panels). project_jobs appends one row per start hour it touched and
    per hour of the new job_started and planner events (append-only: concurrent batches never
    conflict or wait on each other); jobs.rollup.refresh deletes the rows it saw and recomputes
    their hours."""

    hour = models.DateTimeField()

    objects = DirtyHourQuerySet.as_manager()

    class Meta:
        indexes = [
            # Refresh: the dirty hours inside the dashboard's range, newest first.
            models.Index(fields=["hour"], name="dirty_hour"),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00}"


class PlannerJobHour(models.Model):
    """The planner panels' membership rows (jobs.dashboard.planner_rollup): one per UTC hour of
    event ts, provider, model and job that has a planner-counted event
    (``EventQuerySet.planner``) in that hour, with that hour's parse_invalid and degraded events
    of the job. A range's jobs are the distinct job ids over its hours' rows; recomputed per
    dirty hour like the step rollup (``DashboardDirtyHour``).

    ``prev_hour`` links each row to the same job's (and provider/model's) previous row: the
    jobs of a run of hours [h1, h2) are its rows whose ``prev_hour`` is null or before h1,
    counted without gathering job ids."""

    hour = models.DateTimeField()
    # Text, not CharField: the raw aggregate takes the payload's strings whatever their length.
    provider = models.TextField(blank=True)
    model = models.TextField(blank=True)
    job_id = models.CharField(max_length=200)
    parse_invalid = models.IntegerField(default=0)
    degraded = models.IntegerField(default=0)
    prev_hour = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            # One row per (hour, provider, model, job). Its index serves the panels' reads of
            # an hour range, the refresh's delete of recomputed hours and the day compile.
            models.UniqueConstraint(
                fields=["hour", "provider", "model", "job_id"], name="planner_job_hour"
            ),
        ]
        indexes = [
            # A job's rows in hour order: the refresh's relinking of prev_hour, and the raw
            # edge's check whether a job already has a row in a run of hours.
            models.Index(
                fields=["job_id", "provider", "model", "hour"], name="planner_job_hour_job"
            ),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.provider}/{self.model} {self.job_id}"


class PlannerCount(models.Model):
    """The planner panels' counts of one UTC hour or one whole UTC day per provider/model:
    distinct jobs and parse_invalid and degraded events, summed from the PlannerJobHour rows of
    that hour or day. Hour rows are written with their membership rows; day rows only for past
    days without dirty hours (jobs.dashboard.planner_rollup.compile_days), and deleted when any hour
    of their day is recomputed."""

    class Span(models.TextChoices):
        HOUR = "hour"
        DAY = "day"

    start = models.DateTimeField()
    span = models.CharField(max_length=4, choices=Span.choices)
    provider = models.TextField(blank=True)
    model = models.TextField(blank=True)
    jobs = models.IntegerField(default=0)
    parse_invalid = models.IntegerField(default=0)
    degraded = models.IntegerField(default=0)

    class Meta:
        constraints = [
            # One row per cell. Its index serves the panels' reads (hour rows of a range, the
            # day rows of whole days) and the refresh's deletes.
            models.UniqueConstraint(
                fields=["span", "start", "provider", "model"], name="planner_count_cell"
            ),
        ]

    def __str__(self):
        return f"{self.span} {self.start:%Y-%m-%d %H:00} {self.provider}/{self.model}"
