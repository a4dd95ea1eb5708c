"""The jobs list's active filters as removable chips: each says what it filters on and links to
the same list without it (the page's other filters kept, back to the newest rows)."""

from dataclasses import dataclass

from django.http import QueryDict

from jobs.models import statuses_of
from jobs.replay.failures import FAILED_FAMILY
from jobs.web.filters import RANGE_CHOICES, parse_meta

# Parameters that are not filters: which page, the live refresh's anchor.
NOT_FILTERS = ("cursor", "anchor", "show")
LABELS = {
    "q": "Id",
    "reason": "Reason words",
    "segment": "Segment",
    "failure_code": "Failure code",
    "error_type": "Error type",
    "root_error_type": "Root failure error type",
    "provider": "Provider",
    "model": "Model",
    "workflow": "Workflow",
    "range": "Started within",
    "since": "Started from",
    "until": "Started before",
    "min_attempts": "Min attempts",
    "group": "Failure group",
}
FLAGS = {
    "retrying": "Retrying now",
    "waiting": "Waiting to retry",
    "stalled": "Stalled",
    "has_findings": "Has findings",
}


@dataclass(frozen=True, slots=True)
class Chip:
    label: str
    value: str
    remove_url: str


def _without(query: QueryDict, name: str, value: str | None = None) -> str:
    kept = query.copy()
    for other in NOT_FILTERS[:2]:
        kept.pop(other, None)
    if value is None:
        kept.pop(name, None)
    else:
        kept.setlist(name, [v for v in kept.getlist(name) if v != value])
    encoded = kept.urlencode()
    return "?" + encoded if encoded else "/"


def chips(query: QueryDict, cleaned: dict, stamp) -> list[Chip]:
    """Chips for the valid, non-empty filters of the query, in the form's order. ``stamp``
    formats a datetime as the page shows times."""
    found = []
    for status in cleaned.get("status") or []:
        meaning = statuses_of([status]) if status == FAILED_FAMILY[0] else [status]
        value = f"{status} (any: {', '.join(meaning)})" if len(meaning) > 1 else status
        found.append(Chip("Status", value, _without(query, "status", status)))
    ranges = dict(RANGE_CHOICES)
    for name, label in LABELS.items():
        value = cleaned.get(name)
        if value is None or value == "":
            continue
        if name in ("since", "until"):
            shown = stamp(value)
        elif name == "range":
            shown = ranges.get(value, value)
        else:
            shown = str(value)
        found.append(Chip(label, shown, _without(query, name)))
    for name, label in FLAGS.items():
        if cleaned.get(name):
            found.append(Chip(label, "yes", _without(query, name)))
    if cleaned.get("meta"):  # valid, so each item parses on its own
        for raw in query.getlist("meta"):
            for key, value in parse_meta([raw]):
                found.append(Chip("Metadata", f"{key} = {value}", _without(query, "meta", raw)))
    return found
