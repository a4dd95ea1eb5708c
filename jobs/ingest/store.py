"""Append a batch of events, then (by default) project the jobs it touched
(docs/architecture.md, "Data flow").

Knows no HTTP: the ingest view, the import command, the demo loader and the OTLP endpoint all
call ``store_batch``. The append is one short transaction: under the batch's append locks, each
event's job (a trace's events go to the job that names it, ``aliases``), the jobs' dirty marks
(one upsert), the event rows (unique per job + event_id) numbered with their job's new
generation. Committed, the batch is durable. Then, unless the caller asked for the answer at
once, ``projector.project_own`` folds the batch's jobs before ``store_batch`` returns
(read-your-writes); otherwise the projector loop does.

Re-homing stays in the append: a batch that names a trace whose spans are stored under its id
moves them (``aliases.rehome``) and projects the named job in its transaction, under both locks
of both jobs, because the alias it records points at the named job's row (once per trace).
"""

import gc
from collections.abc import Iterable, Set
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from jobs.contract.bodies import ParsedBatch
from jobs.contract.events import Event
from jobs.contract.redaction import bounded_payload, redact_payload
from jobs.ingest import aliases, database, locks, projector
from jobs.ingest.projection import APPEND_READS, read_jobs, unseen_jobs
from jobs.models import Event as EventRow
from jobs.models import IngestToken, SpanResource, json_text, json_value, stored_payload

TOKEN_USE_RESOLUTION = timedelta(minutes=1)
EVENT_COLUMNS = (
    "job_id",
    "event_id",
    "partition_day",
    "type",
    "ts",
    "seq",
    "attempt",
    "payload",
    "received_at",
    "token_id",
    "masked",
    "generation",
)


@dataclass(slots=True)
class IngestResult:
    received: int = 0
    stored: int = 0
    duplicates: int = 0
    errors: list[dict] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)

    @property
    def rejected(self) -> int:
        return len(self.errors)

    @property
    def http_status(self) -> int:
        if not self.rejected:
            return 200
        return 207 if self.stored + self.duplicates else 400


@contextmanager
def collector_paused():
    """Python's cyclic garbage collector off for the block (back on after, if it was on).

    A live batch makes tens of thousands of objects that live until it ends (folds, steps,
    rows): dozens of collections ran during each, and each full one walked all of them
    (bench/README.md, "Live producers"); parsing a request's events paid the same.
    So ``store_batch`` and the ingest views run under it. Reference counting still frees what
    they drop; the cycles they leave are collected after, and they hold at most a request's
    events. The switch is the process's: under threads, whichever block began with it on turns
    it back on, so it is on again once none runs."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(slots=True)
class Appended:
    """An append's outcome: how many events were new, the jobs that got new events, and every
    job it marked (a resend's job too: its mark must be cleared, though nothing is new)."""

    stored: int
    job_ids: list[str]
    marked: list[str]


@collector_paused()
def store_batch(
    batch: ParsedBatch,
    *,
    token: IngestToken | None = None,
    received_at: datetime | None = None,
    project: bool = True,
) -> IngestResult:
    """Redact (unless the batch was redacted as it was made), bound and append a parsed batch,
    then (``project``) fold the jobs it touched. Returns counts and the per-item errors.
    Without ``project`` the jobs are left dirty for the projector loop, woken here."""
    received_at = received_at or timezone.now()
    result = IngestResult(received=batch.total, errors=list(batch.errors))
    events: dict[tuple[str, str], Event] = {}
    for _index, event in batch.events:
        # A batch that repeats an event stores it once; the repeat counts as a duplicate.
        key = (event.job_id, event.event_id)
        if key not in events:
            preview_chars = settings.TRACEVIZ_PREVIEW_CHARS
            if batch.redacted:
                payload, masked = bounded_payload(event.payload, preview_chars), event.masked
            else:
                payload, masked = redact_payload(event.payload, preview_chars)
            events[key] = Event(
                event.type,
                event.job_id,
                event.event_id,
                event.ts or received_at,
                event.seq,
                payload,
                masked,
            )
    if not events:
        return result
    # A new job's rows go to the day it arrived (known jobs keep theirs): its partitions must
    # exist before the batch's transaction writes to them.
    today = received_at.astimezone(UTC).date()
    database.ensure_partitions([today])
    while True:
        try:
            with transaction.atomic():
                appended = _append_locked(events, token, received_at, today, notify=not project)
        except aliases.LockedTooFew:
            continue  # an alias recorded meanwhile: start again, locking its job too
        break
    if project:
        projector.project_own(appended.marked)
    result.stored = appended.stored
    result.duplicates = len(batch.events) - result.stored
    result.job_ids = appended.job_ids
    return result


def _append_locked(
    events: dict[tuple[str, str], Event],
    token: IngestToken | None,
    received_at: datetime,
    today: date,
    *,
    notify: bool,
) -> Appended:
    """``store_batch``'s transaction: the batch's append locks and each event's job (a trace's
    name, ``aliases``), the jobs its traces re-home, the marks, the event rows; with
    ``notify``, a wake-up for the projectors at commit. Raises ``aliases.LockedTooFew``."""
    homes = aliases.locked_homes(events)
    events = homes.events
    rehomed: set[str] = set()
    if homes.named:
        # Re-homing rewrites both jobs' rows: their folds wait, and are brought up to date
        # first, so what moves is all of the anonymous job.
        both = {*homes.named, *homes.named.values()}
        locks.lock_projections(both)
        projector.fold_locked(both)
        rehomed = aliases.rehome(homes.named)
    job_ids = sorted({job_id for job_id, _ in events} | rehomed)
    existing = read_jobs(job_ids, APPEND_READS)
    days = dict.fromkeys(job_ids, today)
    days.update((job_id, row["partition_day"]) for job_id, row in existing.items())
    marks = database.mark_dirty(days, received_at, whole=rehomed)
    days = {job_id: day for job_id, (_, day, _) in marks.items()}
    by_job: dict[str, list[Event]] = {}
    for (job_id, _), event in events.items():
        by_job.setdefault(job_id, []).append(event)
    clean = {job_id for job_id, (_, _, was_clean) in marks.items() if was_clean}
    unseen = unseen_jobs(existing, by_job, clean - rehomed)
    generations = {job_id: generation for job_id, (generation, _, _) in marks.items()}
    new_keys = _insert_events(events.values(), days, generations, token, received_at, unseen=unseen)
    if homes.named:
        projector.fold_locked(homes.named.values())
        aliases.record(homes.named)
    if notify:
        database.notify_dirty()
    if token is not None and not _used_lately(token, received_at):
        IngestToken.objects.filter(pk=token.pk).update(last_used_at=received_at)
    touched = sorted({job_id for job_id, _ in new_keys} | rehomed)
    return Appended(len(new_keys), touched, sorted(marks))


def _used_lately(token: IngestToken, now: datetime) -> bool:
    """Whether the token's last use is recent enough not to write it again: a producer
    flushing every second would otherwise rewrite its token row each time."""
    return token.last_used_at is not None and now - token.last_used_at < TOKEN_USE_RESOLUTION


def _insert_events(
    events: Iterable[Event],
    days: dict[str, date],
    generations: dict[str, int],
    token: IngestToken | None,
    received_at: datetime,
    *,
    unseen: Set[str],
) -> set[tuple[str, str]]:
    """Insert event rows (in their job's partition day, numbered with its append's
    generation), skipping stored ones; returns the new rows' (job_id, event_id). ``unseen``:
    ``projection.unseen_jobs``."""
    adapt = database.adapt_datetime
    received, token_id = adapt(received_at), token.pk if token else None
    rows, resources = [], {}
    for event in events:
        payload, apart = stored_payload(event.type, event.payload)
        resources.update(apart)
        rows.append(
            (
                event.job_id,
                event.event_id,
                days[event.job_id],
                event.type,
                adapt(event.ts),
                event.seq,
                event.attempt,
                json_text(payload),
                received,
                token_id,
                json_text(event.masked),
                generations[event.job_id],
            )
        )
    if resources:
        # Each resource once, whatever number of spans (and exports) carried it.
        SpanResource.objects.bulk_create(
            [
                SpanResource(digest=digest, attributes=json_value(text))
                for digest, text in resources.items()
            ],
            ignore_conflicts=True,
        )
    return database.insert_new_events(EventRow, EVENT_COLUMNS, rows, unseen=unseen)
