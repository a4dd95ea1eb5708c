"""The jobs list's sort orders and their keyset pages (docs/pages.md, "Sorting the jobs
list"). A sort is ``sort=<key>`` (ascending) or ``sort=-<key>`` (descending); the default,
newest first, is ``-started``. A page link of a sorted list carries ``after``: the sort it was
made for, the last row's key value and id, so the next page starts right after that row
whatever was inserted since."""

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet

from jobs.models import Job

# Sort key (as the URL names it) -> the Job column (each has an index with the id beside it).
SORT_FIELDS = {
    "started": "started_at",
    "duration": "duration_ms",
    "steps": "step_count",
    "attempts": "max_attempt",
    "failures": "failed_steps",
}
LABELS = {
    "started": "Started",
    "duration": "Duration",
    "steps": "Steps",
    "attempts": "Attempts",
    "failures": "Failed attempts",
}
DEFAULT = "-started"


@dataclass(frozen=True, slots=True)
class Sort:
    key: str
    descending: bool

    @property
    def param(self) -> str:
        return ("-" if self.descending else "") + self.key

    @property
    def field(self) -> str:
        return SORT_FIELDS[self.key]

    @property
    def is_default(self) -> bool:
        return self.param == DEFAULT

    def order_by(self) -> tuple[str, str]:
        return (f"-{self.field}", "-id") if self.descending else (self.field, "id")


def order_words(sort: Sort) -> str:
    """The order in words, as the list's note says it."""
    if sort.key == "started":
        return "newest first" if sort.descending else "oldest first"
    return "largest first" if sort.descending else "smallest first"


def parse_sort(raw: str | None) -> Sort:
    """The sort ``raw`` names; the default when empty. Raises ValueError naming the choices."""
    text = (raw or DEFAULT).strip()
    key = text.removeprefix("-")
    if key not in SORT_FIELDS:
        choices = ", ".join(SORT_FIELDS)
        raise ValueError(f"sort {text!r} is not one of {choices} (a leading - sorts descending)")
    return Sort(key, text.startswith("-"))


def ordered(jobs: QuerySet[Job], sort: Sort) -> QuerySet[Job]:
    return jobs.order_by(*sort.order_by())


def after(jobs: QuerySet[Job], sort: Sort, cursor: tuple[object, int]) -> QuerySet[Job]:
    """The rows after ``cursor`` (the last row's key value and id) in ``sort``'s order."""
    value, pk = cursor
    if sort.descending:
        return jobs.filter(
            Q(**{f"{sort.field}__lt": value}) | Q(**{sort.field: value, "id__lt": pk})
        )
    return jobs.filter(Q(**{f"{sort.field}__gt": value}) | Q(**{sort.field: value, "id__gt": pk}))


def encode_cursor(job: Job, sort: Sort) -> str:
    value = getattr(job, sort.field)
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    raw = f"{sort.param}|{text}|{job.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(raw: str, sort: Sort) -> tuple[object, int]:
    """The key value and id an ``after`` link carries. Raises ValueError when it is not one
    this list made for this sort."""
    try:
        text = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).decode()
        made_for, value, pk = text.split("|")
        if made_for != sort.param:
            raise ValueError
        key = datetime.fromisoformat(value) if sort.key == "started" else int(value)
        return key, int(pk)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a page link this list made for sort {sort.param}") from None


def header_links(query, sort: Sort) -> dict[str, dict]:
    """Each sortable column's header link (``query``: the list's other parameters, a
    QueryDict without pages): a click sorts by it, descending first, a second click
    ascending; ``aria_sort`` for the column sorted now."""
    links = {}
    for key, label in LABELS.items():
        current = sort.key == key
        descending = not (current and sort.descending)
        params = query.copy()
        params["sort"] = ("-" if descending else "") + key
        if params["sort"] == DEFAULT:
            del params["sort"]
        encoded = params.urlencode()
        links[key] = {
            "href": "?" + encoded if encoded else "?",
            "label": label,
            "aria_sort": ("descending" if sort.descending else "ascending") if current else "",
            "arrow": ("↓" if sort.descending else "↑") if current else "",
        }
    return links
