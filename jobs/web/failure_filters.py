"""The failures list's filters, sort and page links, parsed from the URL (so a filtered view is
shareable and a saved view keeps it). The query itself is ``FailureGroupQuerySet.matching``;
the lifecycle forms of a group's page are here too."""

import base64
import binascii
from datetime import datetime, timedelta

from django import forms

from jobs.models import GROUP_SORT_FIELDS, FailureGroup

STATUS_CHOICES = [
    ("unresolved", "Unresolved"),
    ("new", "New"),
    ("regressed", "Regressed"),
    ("resolved", "Resolved"),
    ("ignored", "Ignored"),
    ("all", "All"),
]
SORT_CHOICES = [
    ("steps", "Most failures"),
    ("jobs", "Most jobs"),
    ("newest", "Newest"),
    ("last_seen", "Last seen"),
]
DEFAULT_SORT = "steps"


class GroupFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=200, label="Reason has words starting with")
    status = forms.ChoiceField(choices=STATUS_CHOICES, required=False)
    node = forms.CharField(required=False, max_length=200)
    workflow = forms.CharField(required=False, max_length=200)
    provider = forms.CharField(required=False, max_length=200)
    model = forms.CharField(required=False, max_length=200)
    ended = forms.BooleanField(required=False, label="Ended their job")
    sort = forms.ChoiceField(choices=SORT_CHOICES, required=False)
    cursor = forms.CharField(required=False, max_length=200)


def encode_cursor(group: FailureGroup, sort: str) -> str:
    """The next page's link: the sort it was made for, the last row's sort value and id."""
    value = getattr(group, GROUP_SORT_FIELDS[sort])
    text = "" if value is None else value.isoformat() if isinstance(value, datetime) else str(value)
    raw = f"{sort}|{text}|{group.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(raw: str, sort: str) -> tuple[object, int]:
    """The sort value and id a page link carries. Raises ValueError when it is not one this
    list made for this sort."""
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        made_for, value, pk = text.split("|")
        if made_for != sort:
            raise ValueError
        key: object
        if value == "":
            key = None
        elif GROUP_SORT_FIELDS[sort] in ("created_at", "last_seen"):
            key = datetime.fromisoformat(value)
        else:
            key = int(value)
        return key, int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a page link this list made for sort {sort}") from None


IGNORE_FOR_CHOICES = [
    ("", "until unignored"),
    ("1h", "for 1 hour"),
    ("24h", "for 24 hours"),
    ("7d", "for 7 days"),
    ("30d", "for 30 days"),
]
IGNORE_FOR = {
    "1h": timedelta(hours=1),
    "24h": timedelta(hours=24),
    "7d": timedelta(days=7),
    "30d": timedelta(days=30),
}


class ResolveForm(forms.Form):
    in_version = forms.CharField(required=False, max_length=200, label="In version")
    after = forms.DateTimeField(required=False, label="For failures after")


class IgnoreForm(forms.Form):
    duration = forms.ChoiceField(choices=IGNORE_FOR_CHOICES, required=False, label="Ignore")
    count = forms.IntegerField(
        required=False, min_value=1, max_value=1_000_000, label="Or until seen this many times"
    )


class MergeForm(forms.Form):
    into = forms.RegexField(
        regex=r"^[0-9a-f]{1,40}$", max_length=40, label="Merge into group (fingerprint)"
    )
