"""The jobs list's filters: parsed from the URL (so a filtered view is shareable), applied as
one queryset. Every filter combines with every other one (AND)."""

import base64
import binascii
from datetime import datetime, timedelta

from django import forms
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from jobs.dashboard.window import UNSET
from jobs.models import FailureGroupJob, Job, Step
from jobs.replay import failures
from jobs.replay.failures import FailureCode, RunStatus

SHOW_CHOICES = [("attention", "Needs attention"), ("all", "All jobs")]
SEGMENT_CHOICES = [("", "any"), ("retryable", "has retryable"), ("failed", "has failed")]
STATUS_CHOICES = [(s.value, s.value) for s in RunStatus]
FAILURE_CODE_CHOICES = [("", "any")] + [(c.value, c.value) for c in FailureCode]
ERROR_TYPE_CHOICES = [("", "any")] + [(t, t) for t in failures.RUN_STATUS_BY_ERROR_TYPE]
# Started within the last ... (the dashboard's presets); combines with since/until.
RANGES = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}
RANGE_CHOICES = [("", "any time"), ("1h", "last hour"), ("24h", "last 24 h"), ("7d", "last 7 days")]
# "failed" alone means the failed family; next to a specific failed:* status it means itself.
FAILED_FAMILY = (RunStatus.FAILED, RunStatus.FAILED_LOGIC, RunStatus.FAILED_INTERNAL)
# ``meta=key:value`` filters on the job's metadata: at most this many (each is one more
# condition on every row the list reads), each at most this long (so the query string stays
# well under what a server reads of a request line).
MAX_META_FILTERS = 5
MAX_META_CHARS = 400


def parse_meta(values: list[str]) -> list[tuple[str, str]]:
    """The (key, value) pairs of ``meta`` query values, each ``key:value`` split at the first
    colon (so the value may hold colons, the key may not), spaces around either side ignored;
    empty items (a blank form field) are skipped. Raises ValueError saying which item is
    malformed: no colon, an empty key, a NUL character, too long, or too many items."""
    pairs = []
    for raw in values:
        if not raw.strip():
            continue
        key, colon, value = raw.partition(":")
        if not colon:
            raise ValueError(f"meta {raw!r} has no colon: write key:value, as git_sha:abc123")
        if not key.strip():
            raise ValueError(f"meta {raw!r} has an empty key: write key:value, as git_sha:abc123")
        if "\x00" in raw:
            raise ValueError("meta may not hold a NUL character")
        if len(raw) > MAX_META_CHARS:
            raise ValueError(f"meta is longer than {MAX_META_CHARS} characters")
        pairs.append((key.strip(), value.strip()))
    if len(pairs) > MAX_META_FILTERS:
        raise ValueError(f"at most {MAX_META_FILTERS} meta filters")
    return pairs


class MetaFilterField(forms.Field):
    """Repeatable ``meta=key:value`` parameters, cleaned to (key, value) pairs."""

    widget = forms.MultipleHiddenInput  # reads every value of the parameter

    def to_python(self, value) -> list[tuple[str, str]]:
        try:
            return parse_meta(list(value or []))
        except ValueError as error:
            raise forms.ValidationError(str(error)) from None


class JobFilterForm(forms.Form):
    show = forms.ChoiceField(choices=SHOW_CHOICES, required=False)
    q = forms.CharField(required=False, max_length=200, label="Job, correlation or session id")
    status = forms.MultipleChoiceField(choices=STATUS_CHOICES, required=False)
    segment = forms.ChoiceField(choices=SEGMENT_CHOICES, required=False)
    failure_code = forms.ChoiceField(choices=FAILURE_CODE_CHOICES, required=False)
    error_type = forms.ChoiceField(choices=ERROR_TYPE_CHOICES, required=False)
    # The error type of the job's root failure (the dashboard's error-type panel links here).
    root_error_type = forms.CharField(required=False, max_length=200)
    provider = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200)
    workflow = forms.CharField(required=False, max_length=200)
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False, label="Started within")
    since = forms.DateTimeField(required=False, label="Started from")
    until = forms.DateTimeField(required=False, label="Started before")
    retrying = forms.BooleanField(required=False, label="Retrying now")
    stalled = forms.BooleanField(required=False)
    has_findings = forms.BooleanField(required=False, label="Has findings")
    min_attempts = forms.IntegerField(required=False, min_value=1, label="Min attempts")
    reason = forms.CharField(required=False, max_length=200, label="Reason contains")
    group = forms.RegexField(
        required=False, regex=r"^[0-9a-f]{1,40}$", max_length=40, label="Failure group"
    )
    meta = MetaFilterField(required=False, label="Metadata")
    cursor = forms.CharField(required=False, max_length=200)
    # The live refresh's first row: rows newer than it are counted, not inserted above it.
    anchor = forms.CharField(required=False, max_length=200)

    def clean_q(self):
        return self.cleaned_data["q"].strip()

    def clean_reason(self):
        return self.cleaned_data["reason"].strip()

    def clean_anchor(self):
        raw = self.cleaned_data["anchor"]
        if not raw:
            return None
        try:
            return decode_cursor(raw)
        except ValueError:
            raise forms.ValidationError("not a refresh link this list made") from None

    def clean_cursor(self):
        raw = self.cleaned_data["cursor"]
        if not raw:
            return None
        try:
            return decode_cursor(raw)
        except ValueError:
            raise forms.ValidationError("not a page link this list made") from None


def statuses_of(selected: list[str]) -> list[str]:
    """The run statuses a status selection means: "failed" is the failed family unless a
    specific failed:* status is selected beside it."""
    chosen = set(selected)
    if RunStatus.FAILED in chosen and not chosen & set(FAILED_FAMILY[1:]):
        chosen.update(FAILED_FAMILY)
    return sorted(chosen)


def scope(filters: dict) -> str:
    """Which jobs the list starts from, as ``filter_jobs`` decides: "lookup" (any status),
    "status" (the chosen ones), "attention" (the default) or "all"."""
    if filters.get("q"):
        return "lookup"
    if filters.get("status"):
        return "status"
    if filters.get("show") != "all" and not (filters.get("retrying") or filters.get("stalled")):
        return "attention"
    return "all"


def filter_jobs(filters: dict, now: datetime | None = None) -> QuerySet[Job]:
    """The jobs matching cleaned filters, newest first (cursor not applied)."""
    jobs = Job.objects.order_by("-started_at", "-id")
    starting = scope(filters)
    if starting == "lookup":
        q = filters["q"]
        # A lookup finds the job whatever its status: the attention default does not apply.
        # A job id also matches by its beginning (served by the job_id index under the C
        # collation; an exact id is found either way).
        jobs = jobs.filter(Q(job_id__startswith=q) | Q(correlation_id=q) | Q(session_id=q))
    elif starting == "status":
        jobs = jobs.filter(status__in=statuses_of(filters["status"]))
    elif starting == "attention":
        jobs = jobs.filter(status__in=sorted(failures.ATTENTION_STATUSES))
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
        if filters.get(name) == UNSET:
            jobs = jobs.filter(**{name: ""})
        elif filters.get(name):
            jobs = jobs.filter(**{f"{name}__iexact": filters[name]})
    if filters.get("workflow"):
        jobs = jobs.filter(workflow=filters["workflow"])
    if filters.get("range") in RANGES:
        jobs = jobs.filter(started_at__gte=(now or timezone.now()) - RANGES[filters["range"]])
    if filters.get("since"):
        jobs = jobs.filter(started_at__gte=filters["since"])
    if filters.get("until"):
        jobs = jobs.filter(started_at__lt=filters["until"])
    if filters.get("retrying"):
        jobs = jobs.filter(status=RunStatus.PAUSED_TRANSIENT)
    if filters.get("stalled"):
        jobs = jobs.stalled()
    if filters.get("has_findings"):
        jobs = jobs.exclude(findings=[])
    if filters.get("min_attempts"):
        jobs = jobs.filter(max_attempt__gte=filters["min_attempts"])
    if filters.get("reason"):
        jobs = jobs.filter(has_step(Step.objects.reason_matches(filters["reason"])))
    for key, value in filters.get("meta") or []:
        jobs = jobs.with_metadata(key, value)
    if filters.get("group"):
        jobs = jobs.filter(
            id__in=FailureGroupJob.objects.filter(group__fingerprint=filters["group"]).values(
                "job_id"
            )
        )
    return jobs


def has_step(steps: QuerySet[Step]) -> Exists:
    """The job has one of these steps. A job's steps live in its day's partition
    (``Job.partition_day``), so matching the day too lets PostgreSQL probe that one partition
    per job, newest first, instead of every day's (the list's cost would grow with the days
    kept)."""
    return Exists(steps.filter(job_id=OuterRef("pk"), partition_day=OuterRef("partition_day")))


def after_cursor(jobs: QuerySet[Job], cursor: tuple[datetime, int] | None) -> QuerySet[Job]:
    """Keyset pagination on (started_at, id) descending."""
    if cursor is None:
        return jobs
    started, pk = cursor
    return jobs.filter(Q(started_at__lt=started) | Q(started_at=started, id__lt=pk))


def from_anchor(jobs: QuerySet[Job], anchor: tuple[datetime, int]) -> QuerySet[Job]:
    """The anchor row and the rows after it (keyset order, newest first)."""
    started, pk = anchor
    return jobs.filter(Q(started_at__lt=started) | Q(started_at=started, id__lte=pk))


def newer_than(jobs: QuerySet[Job], anchor: tuple[datetime, int]) -> QuerySet[Job]:
    started, pk = anchor
    return jobs.filter(Q(started_at__gt=started) | Q(started_at=started, id__gt=pk))


def encode_cursor(job: Job) -> str:
    assert job.started_at is not None  # a job's first event sets it
    raw = f"{job.started_at.isoformat()}|{job.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        started, pk = raw.split("|")
        return datetime.fromisoformat(started), int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("cursor is not one this list made") from None


def is_default(filters: dict) -> bool:
    """True when no filter narrows the default "needs attention" view."""
    return not any(
        value for name, value in filters.items() if name not in ("show", "cursor", "anchor")
    )
