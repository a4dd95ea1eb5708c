"""The job page's step list: find within a job (node name, segment, attempt > 1) and the window
of rows it shows, opened around the selected step so that a root failure 1,900 steps down is on
screen without a single "Show more" click."""

from dataclasses import dataclass

from django import forms
from django.utils.http import urlencode

from jobs.replay.failures import Segment

ROWS_WINDOW = 200
# The largest row offset a URL gives: past the end of every list, and still a 64-bit OFFSET
# with a window added.
MAX_OFFSET = 2**62
# Rows kept above the selected step when the window opens around it (context, and the step is
# not the list's very first line).
ROWS_BEFORE_SELECTED = 20
SEGMENT_CHOICES = [("", "any segment"), *((s.value, s.value) for s in Segment)]


class StepFilterForm(forms.Form):
    node = forms.CharField(required=False, max_length=200, label="Node name contains")
    segment = forms.ChoiceField(choices=SEGMENT_CHOICES, required=False, label="Segment")
    retried = forms.BooleanField(required=False, label="Attempt > 1 only")


@dataclass(frozen=True, slots=True)
class StepFilter:
    """Which of a job's steps the list shows; the empty filter shows them all."""

    node: str = ""
    segment: str = ""
    retried: bool = False

    @property
    def active(self) -> bool:
        return bool(self.node or self.segment or self.retried)

    def apply(self, steps):
        """``steps`` (a Step QuerySet) narrowed to the rows this filter keeps."""
        if self.node:
            steps = steps.filter(node_id__icontains=self.node)
        if self.segment:
            steps = steps.filter(segment=self.segment)
        if self.retried:
            steps = steps.filter(attempt__gt=1)
        return steps

    def query_items(self) -> list[tuple[str, str]]:
        """The filter as query parameters, for links that must keep it."""
        items = [("node", self.node)] if self.node else []
        if self.segment:
            items.append(("segment", self.segment))
        if self.retried:
            items.append(("retried", "1"))
        return items


def parse_filter(query) -> tuple[StepFilter, StepFilterForm]:
    """The filter the query asks for and its bound form; an invalid field is left out of the
    filter (the form carries its error, the view answers 400)."""
    form = StepFilterForm(query)
    form.is_valid()
    data = form.cleaned_data
    step_filter = StepFilter(
        node=(data.get("node") or "").strip(),
        segment=data.get("segment") or "",
        retried=bool(data.get("retried")),
    )
    return step_filter, form


def parse_offset(raw: str | None) -> int | None:
    """A non-negative row offset in ASCII digits, held at MAX_OFFSET (past every row: SQL's
    OFFSET is 64-bit, and ``int`` refuses past 4,300 digits); None when absent or not one."""
    if raw is None:
        return None
    raw = raw.strip()
    if not (raw.isascii() and raw.isdecimal()):
        return None
    return MAX_OFFSET if len(raw) > len(str(MAX_OFFSET)) else min(int(raw), MAX_OFFSET)


def window_start(total: int, selected_index: int | None, first: int | None, size: int) -> int:
    """The first row the list shows: ``first`` when the URL names it; else a little above the
    selected step when it would fall outside the first window; else 0."""
    if first is not None:
        return min(first, max(total - 1, 0))
    if selected_index is None or selected_index < size:
        return 0
    return max(selected_index - ROWS_BEFORE_SELECTED, 0)


@dataclass(frozen=True, slots=True)
class Links:
    """Where the rows before and after the window come from: an HTMX fragment URL and a
    no-JS page URL for each ({} when there is nothing more that way)."""

    before: dict
    after: dict


def window_links(
    start: int,
    end: int,
    total: int,
    keep: list[tuple[str, str]],
    step_filter: StepFilter,
    rows_url: str,
) -> Links:
    """ "Show earlier" and "Show more" links for rows ``start:end`` of ``total``: the rows'
    own URL (``rows_url``, the job's step rows) for HTMX, the job page with a larger window
    without it; ``keep`` holds the parameters every link carries (the selected step)."""
    base = keep + step_filter.query_items()
    before: dict = {}
    if start > 0:
        earlier = max(start - ROWS_WINDOW, 0)
        before = {
            "fragment": rows_url + "?" + urlencode([*base, ("from", earlier), ("to", start)]),
            "page": "?"
            + urlencode([*base, ("first", earlier), ("rows", end - earlier)])
            + "#steps",
            "remaining": start,
        }
    after: dict = {}
    if end < total:
        after = {
            "fragment": rows_url + "?" + urlencode([*base, ("from", end)]),
            "page": "?"
            + urlencode([*base, ("first", start), ("rows", end - start + ROWS_WINDOW)])
            + "#steps",
            "remaining": total - end,
        }
    return Links(before=before, after=after)
