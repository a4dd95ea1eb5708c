"""The jobs list's filters: parsed from the URL (so a filtered view is shareable), applied as
one queryset. Every filter combines with every other one (AND)."""

import base64
import binascii
from datetime import datetime

from django import forms
from django.db.models import Q, QuerySet

from jobs.models import FailureGroupJob, Job, Step
from jobs.replay import failures
from jobs.replay.failures import FailureCode, RunStatus

SHOW_CHOICES = [("attention", "Needs attention"), ("all", "All jobs")]
SEGMENT_CHOICES = [("", "any"), ("retryable", "has retryable"), ("failed", "has failed")]
STATUS_CHOICES = [(s.value, s.value) for s in RunStatus]
FAILURE_CODE_CHOICES = [("", "any")] + [(c.value, c.value) for c in FailureCode]
ERROR_TYPE_CHOICES = [("", "any")] + [(t, t) for t in failures.RUN_STATUS_BY_ERROR_TYPE]


class JobFilterForm(forms.Form):
    show = forms.ChoiceField(choices=SHOW_CHOICES, required=False)
    q = forms.CharField(required=False, max_length=200, label="Job, correlation or session id")
    status = forms.MultipleChoiceField(choices=STATUS_CHOICES, required=False)
    segment = forms.ChoiceField(choices=SEGMENT_CHOICES, required=False)
    failure_code = forms.ChoiceField(choices=FAILURE_CODE_CHOICES, required=False)
    error_type = forms.ChoiceField(choices=ERROR_TYPE_CHOICES, required=False)
    provider = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200)
    workflow = forms.CharField(required=False, max_length=200)
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
    cursor = forms.CharField(required=False, max_length=200)

    def clean_q(self):
        return self.cleaned_data["q"].strip()

    def clean_reason(self):
        return self.cleaned_data["reason"].strip()

    def clean_cursor(self):
        raw = self.cleaned_data["cursor"]
        if not raw:
            return None
        try:
            return decode_cursor(raw)
        except ValueError:
            raise forms.ValidationError("not a page link this list made") from None


def filter_jobs(filters: dict) -> QuerySet[Job]:
    """The jobs matching cleaned filters, newest first (cursor not applied)."""
    jobs = Job.objects.order_by("-started_at", "-id")
    if filters.get("q"):
        q = filters["q"]
        # A lookup finds the job whatever its status: the attention default does not apply.
        jobs = jobs.filter(Q(job_id=q) | Q(correlation_id=q) | Q(session_id=q))
    elif filters.get("status"):
        jobs = jobs.filter(status__in=filters["status"])
    elif filters.get("show") != "all" and not (filters.get("retrying") or filters.get("stalled")):
        jobs = jobs.filter(status__in=sorted(failures.ATTENTION_STATUSES))
    if filters.get("segment") == "retryable":
        jobs = jobs.filter(has_retryable=True)
    elif filters.get("segment") == "failed":
        jobs = jobs.filter(has_failed=True)
    if filters.get("failure_code"):
        jobs = jobs.filter(
            id__in=Step.objects.filter(failure_code=filters["failure_code"]).values("job_id")
        )
    if filters.get("error_type"):
        jobs = jobs.filter(
            id__in=Step.objects.filter(error_type=filters["error_type"]).values("job_id")
        )
    for name in ("provider", "model", "workflow"):
        if filters.get(name):
            jobs = jobs.filter(**{name: filters[name]})
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
        jobs = jobs.filter(id__in=Step.objects.reason_matches(filters["reason"]).values("job_id"))
    if filters.get("group"):
        jobs = jobs.filter(
            id__in=FailureGroupJob.objects.filter(group__fingerprint=filters["group"]).values(
                "job_id"
            )
        )
    return jobs


def after_cursor(jobs: QuerySet[Job], cursor: tuple[datetime, int] | None) -> QuerySet[Job]:
    """Keyset pagination on (started_at, id) descending."""
    if cursor is None:
        return jobs
    started, pk = cursor
    return jobs.filter(Q(started_at__lt=started) | Q(started_at=started, id__lt=pk))


def encode_cursor(job: Job) -> str:
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
    return not any(value for name, value in filters.items() if name not in ("show", "cursor"))
