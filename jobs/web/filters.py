"""The jobs list's filters, parsed from the URL (so a filtered view is shareable). The HTML list
and ``GET /api/v1/jobs`` parse them with the same form and ask the same query of the model
(``JobQuerySet.matching``), so each filter means the same on both."""

import base64
import binascii
from datetime import UTC, datetime

from django import forms
from django.db.models import Q, QuerySet

from jobs.contract.events import MAX_TS_YEAR, MIN_TS_YEAR
from jobs.models import Job
from jobs.replay import failures
from jobs.replay.failures import FailureCode, RunStatus

SHOW_CHOICES = [("attention", "Needs attention"), ("all", "All jobs")]
SEGMENT_CHOICES = [("", "any"), ("retryable", "has retryable"), ("failed", "has failed")]
STATUS_CHOICES = [(s.value, s.value) for s in RunStatus]
ALL_STATUSES = "all"
FAILURE_CODE_CHOICES = [("", "any")] + [(c.value, c.value) for c in FailureCode]
ERROR_TYPE_CHOICES = [("", "any")] + [(t, t) for t in failures.RUN_STATUS_BY_ERROR_TYPE]
RANGE_CHOICES = [("", "any time"), ("1h", "last hour"), ("24h", "last 24 h"), ("7d", "last 7 days")]
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


class StatusField(forms.MultipleChoiceField):
    """Run statuses, repeated (``status=a&status=b``) or comma-separated (``status=a,b``).
    ``status=all``, which links made before ``show=all`` existed still carry, means every
    status (the form turns it into ``show=all``)."""

    def to_python(self, value) -> list[str]:
        return [part for item in super().to_python(value) for part in item.split(",") if part]

    def valid_value(self, value) -> bool:
        return value == ALL_STATUSES or super().valid_value(value)


# No job starts outside the contract's years (docs/contract.md): a time filter past them is
# held at their edge, where it means the same; shown in the display zone, a time at the
# calendar's edge would overflow (a 500 the fuzzer found with since=9999-12-31T23:59:59-23:59).
EARLIEST_FILTER = datetime(MIN_TS_YEAR, 1, 1, tzinfo=UTC)
LATEST_FILTER = datetime(MAX_TS_YEAR + 1, 1, 1, tzinfo=UTC)


class CalendarDateTimeField(forms.DateTimeField):
    """A time filter held within the years jobs can start in, in UTC."""

    def to_python(self, value):
        moment = super().to_python(value)
        if moment is None:
            return None
        try:
            moment = moment.astimezone(UTC)
        except OverflowError:
            return EARLIEST_FILTER if moment.year < MIN_TS_YEAR else LATEST_FILTER
        return min(max(moment, EARLIEST_FILTER), LATEST_FILTER)


class JobFilterForm(forms.Form):
    show = forms.ChoiceField(choices=SHOW_CHOICES, required=False)
    q = forms.CharField(required=False, max_length=200, label="Job, correlation or session id")
    status = StatusField(choices=STATUS_CHOICES, required=False)
    segment = forms.ChoiceField(choices=SEGMENT_CHOICES, required=False)
    failure_code = forms.ChoiceField(choices=FAILURE_CODE_CHOICES, required=False)
    error_type = forms.ChoiceField(choices=ERROR_TYPE_CHOICES, required=False)
    # The error type of the job's root failure (the dashboard's error-type panel links here).
    root_error_type = forms.CharField(required=False, max_length=200)
    provider = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200)
    workflow = forms.CharField(required=False, max_length=200)
    range = forms.ChoiceField(choices=RANGE_CHOICES, required=False, label="Started within")
    since = CalendarDateTimeField(required=False, label="Started from")
    until = CalendarDateTimeField(required=False, label="Started before")
    # An attempt after the first is running; "waiting" jobs are paused between attempts.
    retrying = forms.BooleanField(required=False, label="Retrying now")
    waiting = forms.BooleanField(required=False, label="Waiting to retry")
    stalled = forms.BooleanField(required=False)
    has_findings = forms.BooleanField(required=False, label="Has findings")
    min_attempts = forms.IntegerField(required=False, min_value=1, label="Min attempts")
    reason = forms.CharField(
        required=False,
        max_length=200,
        label="Reason has words starting with",
        help_text="every word, any case: time finds Timeout",
    )
    group = forms.RegexField(
        required=False, regex=r"^[0-9a-f]{1,40}$", max_length=40, label="Failure group"
    )
    meta = MetaFilterField(required=False, label="Metadata")
    cursor = forms.CharField(required=False, max_length=200)
    # The live refresh's first row: rows newer than it are counted, not inserted above it.
    anchor = forms.CharField(required=False, max_length=200)

    def clean(self):
        super().clean()
        cleaned = self.cleaned_data
        if ALL_STATUSES in (cleaned.get("status") or []):
            cleaned["status"] = [s for s in cleaned["status"] if s != ALL_STATUSES]
            cleaned["show"] = "all"
        return cleaned

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
