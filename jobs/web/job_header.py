"""What the job page's header shows beyond the job row's own fields: long lists collapsed to
a count, the job's metadata folded, the planner's invalid outputs, and whether the page keeps
itself up to date."""

import json
from datetime import datetime, timedelta

from django.urls import reverse
from django.utils import timezone
from django.utils.http import urlencode

from jobs.escalations.stalls import duration_label
from jobs.ingest import projector
from jobs.models import Job, NextAttempt
from jobs.replay.failures import STALLABLE_STATUSES
from jobs.web.filters import MAX_META_CHARS

# Header lists longer than this (completed nodes, nodes a restart would skip) collapse to a
# count that expands: a 2,000-step job otherwise pushes the waterfall 59,000 px down.
HEADER_LIST_LIMIT = 8
PLANNER_ATTEMPTS_SHOWN = 20
# Metadata values longer than this show their start, the whole value on expand.
METADATA_PREVIEW_CHARS = 80
# The planner's invalid-output event (the planner contract).
PARSE_INVALID = "graph.next_step.parse_invalid"
# How often a live job page asks for news (the poll answers without this trigger once the job
# stops expecting events): a big job's page costs more to render, so it asks less often.
LIVE_POLL_SECONDS = 3
BIG_JOB_POLL_SECONDS = 10
BIG_JOB_STEPS = 2_000


def is_live(job) -> bool:
    """A job whose page polls: not finished, in a status that still expects events (the
    statuses the stall rule watches)."""
    return job.finished_at is None and job.status in STALLABLE_STATUSES


def poll_seconds(job) -> int:
    return BIG_JOB_POLL_SECONDS if job.step_count > BIG_JOB_STEPS else LIVE_POLL_SECONDS


def collapsible(items: list[str]) -> dict:
    """A header list as the template shows it: inline when short, else a count that expands
    to the whole list joined in one string (one text node, not thousands of elements)."""
    return {
        "count": len(items),
        "collapsed": len(items) > HEADER_LIST_LIMIT,
        "items": items[:HEADER_LIST_LIMIT],
        "first": items[0] if items else "",
        "last": items[-1] if items else "",
        "text": " → ".join(items),
    }


def metadata_items(metadata) -> dict:
    """The job's metadata as the header shows it: key/value pairs by key, the first
    HEADER_LIST_LIMIT inline and the rest behind a count; a value longer than
    METADATA_PREVIEW_CHARS folded to its start. A short text, number or boolean links to the
    jobs list filtered on it (``meta=key:value``, which a key holding a colon cannot say)."""
    if not isinstance(metadata, dict):
        return {"count": 0, "items": [], "more": []}
    items = [_metadata_item(key, metadata[key]) for key in sorted(metadata)]
    return {
        "count": len(items),
        "items": items[:HEADER_LIST_LIMIT],
        "more": items[HEADER_LIST_LIMIT:],
    }


def _metadata_item(key: str, value) -> dict:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    long = len(text) > METADATA_PREVIEW_CHARS
    filterable = (
        not long
        and isinstance(value, str | int | float | bool)
        and ":" not in key
        and key.strip() == key
        and text.strip() == text
        and "\x00" not in key + text
        and len(key) + 1 + len(text) <= MAX_META_CHARS
    )
    return {
        "key": key,
        "text": text,
        "long": long,
        "preview": text[:METADATA_PREVIEW_CHARS],
        "filter_href": reverse("jobs:jobs")
        + "?"
        + urlencode({"show": "all", "meta": f"{key}:{text}"})
        if filterable and key
        else "",
    }


def finish_words(job: Job) -> dict[str, str]:
    """What the header says beside Finished and Duration. A job with a finish time: nothing
    more. One that still expects events: "not finished", its duration "so far". One whose
    status is final without a ``job_finished`` (a failure replay decided): no finish was
    reported, and its duration runs to its last event."""
    if job.finished_at is not None:
        return {"finished_note": "", "duration_note": ""}
    if job.status in STALLABLE_STATUSES or job.status.startswith("paused"):
        return {"finished_note": "not finished", "duration_note": "so far"}
    return {"finished_note": "no job_finished received", "duration_note": "to its last event"}


def next_attempt_words(due: NextAttempt | None, now: datetime) -> dict[str, str]:
    """What the jobs list and the job page say of a job waiting to retry: ``due`` in words
    ("next attempt due in 40 s", "next attempt due by 12:04:13", "next attempt overdue by 3
    min") and ``window`` (when it is due, in the display zone); both "" when nothing says when
    (no attempt awaiting retry)."""
    if due is None:
        return {"due": "", "window": ""}
    start, end = (timezone.localtime(at).strftime("%H:%M:%S") for at in (due.due_from, due.due_by))
    window = f"due {start}" if start == end else f"due between {start} and {end}"
    if now < due.due_from - timedelta(seconds=1):
        words = f"next attempt due in {duration_label(due.due_from - now)}"
    elif now <= due.due_by:
        words = f"next attempt due by {end}"
    else:
        words = f"next attempt overdue by {duration_label(now - due.due_by)}"
    return {"due": words, "window": window}


def planner_attempts(events) -> list[dict]:
    """The planner's invalid outputs (``graph.next_step.parse_invalid``) among ``events`` (the
    job's Event rows), as stored: their raw output preview was redacted and truncated on
    ingest, their validation errors kept."""
    rows = (
        events.filter(type=PARSE_INVALID)
        .order_by("ts", "seq", "event_id")
        .values_list("ts", "payload")[:PLANNER_ATTEMPTS_SHOWN]
    )
    return [
        {
            "at": ts,
            "attempt": payload.get("attempt"),
            "cycle": payload.get("cycle"),
            "provider_model": "/".join(
                str(payload.get(name) or "?") for name in ("provider", "model")
            ),
            "parse_error_type": payload.get("parse_error_type", ""),
            "validation_errors": [
                validation_error_text(e) for e in as_list(payload.get("validation_errors"))
            ],
            "raw_output_preview": str(payload.get("raw_output_preview") or ""),
        }
        for ts, payload in rows
    ]


def validation_error_text(error) -> str:
    """One of a planner event's validation errors in words: a string as sent; a Pydantic-style
    object as "where: message" (``loc`` joined with dots, then ``msg``); any other value as
    compact JSON, never a Python repr."""
    if isinstance(error, str):
        return error
    if isinstance(error, dict) and isinstance(error.get("msg"), str):
        loc = error.get("loc")
        where = ".".join(str(part) for part in loc) if isinstance(loc, list) else str(loc or "")
        return f"{where}: {error['msg']}" if where else error["msg"]
    return json.dumps(error, ensure_ascii=False, separators=(", ", ": "))


def as_list(value) -> list:
    """A stored JSON value as a list: a list as it is, anything else as none."""
    return value if isinstance(value, list) else []


def unshown(job: Job) -> dict | None:
    """The job's events not folded into its rows yet (``projector.backlog``): how many, and
    how many whole seconds ago the first of them arrived; None when every event is shown."""
    waiting = projector.backlog(job.job_id)
    if waiting is None:
        return None
    seconds = int(max((timezone.now() - waiting.since).total_seconds(), 0))
    return {"events": waiting.events, "seconds": seconds}
