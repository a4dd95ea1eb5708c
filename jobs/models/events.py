"""The append-only event log, the source of truth, and the span resources stored once apart
from it."""

import hashlib
from datetime import UTC, datetime
from typing import Any

from django.db import models
from django.db.models import Case, IntegerField, Q, Value, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Trunc
from django.utils import timezone

from jobs.contract.events import OTHER_TYPE_RANK, TYPE_RANK
from jobs.models.access import IngestToken
from jobs.models.values import ByCodePoint, JSONField, JSONTextField, json_text, today_utc

PARSE_INVALID = "graph.next_step.parse_invalid"


DEGRADED = "graph.next_step.degraded"


# What the planner panels and alerts count (docs/contract.md), when it carries provider and
# model: the jobs that name a provider/model on job_started or on a planner event.
PLANNER_EVENT_TYPES = ("job_started", PARSE_INVALID, DEGRADED)


# A span or log event's stored payload holds its resource and its scope as {RESOURCE_REF:
# <digest>}: their attributes are ``SpanResource`` rows, each stored once (``EventPayloadField``
# puts them back on read).
RESOURCE_REF = "$resource"


STORED_APART = ("resource", "scope")


# The event types whose payload may reference a ``SpanResource``.
RESOURCE_EVENT_TYPES = ("span", "log")


def resource_reference(name: str) -> Cast:
    """The digest an event's ``name`` (one of ``STORED_APART``) references, as text in SQL.
    Cast, as plain text: Django's lookups on a KT() of SQLite take the right-hand side for
    JSON ("malformed JSON"), and the index must hold the same expression as the query."""
    return Cast(KT(f"payload__{name}__{RESOURCE_REF}"), models.TextField())


# 32 hex digits (128 bits) of the SHA-256 of a resource's JSON text name it.
DIGEST_CHARS = 32


# Resources read, by digest: a digest names one content for good (it is that content's hash),
# so what was read once is kept (the least recently used go past this many).
RESOURCE_CACHE_SIZE = 1024


_resources: dict[str, dict] = {}


def resource_digest(text: str) -> str:
    """The digest a resource's JSON text (``json_text``) is stored under."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:DIGEST_CHARS]


def stored_payload(event_type: str, payload: dict) -> tuple[dict, dict[str, str]]:
    """The payload as its row stores it, and what to store apart, as {digest: JSON text}: a
    span or log event's non-empty resource and scope become references."""
    if event_type not in ("span", "log"):
        return payload, {}
    apart: dict[str, str] = {}
    stored = payload
    for name in STORED_APART:
        value = payload.get(name)
        if isinstance(value, dict) and value:
            text = json_text(value)
            digest = resource_digest(text)
            apart[digest] = text
            stored = {**stored, name: {RESOURCE_REF: digest}}
    return stored, apart


def _resource_of(digest: str) -> dict | None:
    found = _resources.get(digest)
    if found is None:
        row = SpanResource.objects.filter(digest=digest).values_list("attributes", flat=True)
        found = next(iter(row), None)
        if found is None:
            return None
        if len(_resources) >= RESOURCE_CACHE_SIZE:
            _resources.pop(next(iter(_resources)))
        _resources[digest] = found
    return found


def with_resource(payload):
    """A stored payload with its resource and scope put back (``stored_payload``); a
    reference to no row (purged) reads as empty. The dicts are shared: read, not changed."""
    if not isinstance(payload, dict):
        return payload
    restored = payload
    for name in STORED_APART:
        reference = payload.get(name)
        if isinstance(reference, dict) and len(reference) == 1 and RESOURCE_REF in reference:
            digest = reference[RESOURCE_REF]
            attributes = _resource_of(digest) if isinstance(digest, str) else None
            restored = {**restored, name: attributes if attributes is not None else {}}
    return restored


class EventPayloadField(JSONField):
    """An event's payload: a span's or log record's resource read back from its
    ``SpanResource`` row (``with_resource``)."""

    def from_db_value(self, value, expression, connection):
        return with_resource(super().from_db_value(value, expression, connection))


class EventQuerySet(models.QuerySet):
    def in_event_order(self) -> "EventQuerySet":
        """Event order (docs/contract.md) in SQL, from the same rank table as the Python
        ``contract.events.order_key``: ts, seq (missing = 0), type rank, attempt, event_id
        compared by code point (the "C" collation on PostgreSQL, SQLite's BINARY)."""
        rank = Case(
            *(When(type=name, then=Value(r)) for name, r in TYPE_RANK.items()),
            default=Value(OTHER_TYPE_RANK),
            output_field=IntegerField(),
        )
        return self.order_by(
            "ts",
            Coalesce("seq", Value(0)).asc(),
            rank.asc(),
            "attempt",
            ByCodePoint("event_id").asc(),
        )

    def planner(self, provider: str = "", model: str = "") -> "EventQuerySet":
        """These events' job_started and planner events that carry a provider and a model,
        annotated with both (as text), of ``provider`` and ``model`` when given (in any case,
        as the jobs list's filters): what the planner panels and alerts count. With a ts
        filter, served by the (type, ts) index."""
        rows = self.filter(type__in=PLANNER_EVENT_TYPES).annotate(
            provider=KT("payload__provider"), model=KT("payload__model")
        )
        rows = rows.filter(provider__isnull=False, model__isnull=False)
        # Compare the JSON values, not the KT() annotations: Django's exact lookup on a KT()
        # wraps the right-hand side in JSON_EXTRACT(%s, '$') on SQLite, which a plain string is
        # not ("malformed JSON"). The contract makes provider and model strings, so both mean
        # the same.
        if provider:
            rows = rows.filter(payload__provider__iexact=provider)
        if model:
            rows = rows.filter(payload__model__iexact=model)
        return rows

    def resources_referenced(self, digests: list[str]) -> set[str]:
        """Those of ``digests`` that one of these events references as its resource or its
        scope (served by the ``event_*_reference`` indexes)."""
        found: set[str] = set()
        for name in STORED_APART:
            rows = self.filter(type__in=RESOURCE_EVENT_TYPES).annotate(
                digest=resource_reference(name)
            )
            found.update(
                rows.filter(digest__in=digests).order_by().values_list("digest", flat=True)
            )
        return found

    def planner_hours(self) -> list[datetime]:
        """The UTC hours of these events' job_started and planner events (whether or not they
        carry a provider and model): the hours to mark dirty when such events go or change."""
        hours = self.filter(type__in=PLANNER_EVENT_TYPES).annotate(
            hour=Trunc("ts", "hour", tzinfo=UTC)
        )
        return list(hours.values_list("hour", flat=True).distinct().order_by())


class Event(models.Model):
    """One event as received (after redaction). Append-only: nothing updates these rows."""

    job_id = models.CharField(max_length=200)
    event_id = models.CharField(max_length=200)
    type = models.CharField(max_length=200)
    ts = models.DateTimeField()
    seq = models.BigIntegerField(null=True, blank=True)
    attempt = models.IntegerField(default=1)
    payload = EventPayloadField(default=dict)
    received_at = models.DateTimeField(default=timezone.now)
    # Who sent it. Tokens are revoked, never deleted (the admin offers no delete), so no
    # database constraint checks each new row against them: deferred to commit, that check cost
    # ingest about a quarter of what a raw COPY of the same rows costs (bench/README.md). Nor
    # an index: nothing reads events by token, and it grew with every event (bench/storage.py).
    token = models.ForeignKey(
        IngestToken,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        db_index=False,
    )
    # The job's partition_day (ingest copies it from the Job row): on PostgreSQL the table is
    # partitioned by it, one partition per day, so retention drops whole days.
    partition_day = models.DateField(default=today_utc)
    # The payload paths redaction masked at ingest (``payload_results.password``), never what
    # was there: the step panel and the API say so.
    masked = JSONTextField(default=list, blank=True)
    # The append that stored it, numbered per job (``ProjectionMark.generation``): the
    # projector folds the numbers after its mark's ``projected``. 0: folded whatever the
    # number (stored before marks, or re-homed into a job that is then replayed whole).
    generation = models.BigIntegerField(default=0)

    objects = EventQuerySet.as_manager()

    class Meta:
        constraints = [
            # Idempotency: a resent event (same job and event_id) is stored once. A partitioned
            # table's unique key must hold its partition key; partition_day is a function of
            # job_id (all of a job's rows share its day), so this is (job_id, event_id) unique.
            # Its index also serves replay and export, which read one job's events.
            models.UniqueConstraint(
                fields=["job_id", "event_id", "partition_day"], name="event_unique_per_job"
            ),
        ]
        indexes = [
            # Dashboard planner panel and planner alerts: job_started and planner events by time
            # (``EventQuerySet.planner``). Those types only: most events are node events, and
            # each went into this index for nothing.
            models.Index(
                fields=["type", "ts"],
                condition=Q(type__in=PLANNER_EVENT_TYPES),
                name="event_type_ts",
            ),
            # Retention: which span resources an event still references, before it deletes the
            # others (``EventQuerySet.resources_referenced``). Span and log events only; a
            # resource's spans share one entry's key (B-tree deduplication on PostgreSQL).
            *(
                models.Index(
                    resource_reference(name),
                    condition=Q(type__in=RESOURCE_EVENT_TYPES),
                    name=f"event_{name}_reference",
                )
                for name in STORED_APART
            ),
            # The projector: a job's events after its mark's ``projected``, without reading
            # the events it folded already (a live job's fold stays as cheap at 10,000 steps).
            models.Index(fields=["job_id", "generation"], name="event_job_generation"),
        ]

    def __str__(self):
        return f"{self.job_id}/{self.event_id} {self.type}"

    def as_contract_dict(self) -> dict:
        """The event as the event contract writes it (docs/contract.md), for export and the
        raw-event view): a ``seq`` the producer left out stays out (the contract has no
        ``null`` seq, so an export imports again)."""
        item: dict[str, Any] = {
            "type": self.type,
            "job_id": self.job_id,
            "event_id": self.event_id,
            "ts": self.ts.isoformat().replace("+00:00", "Z"),
        }
        if self.seq is not None:
            item["seq"] = self.seq
        item["payload"] = self.payload
        return item


class SpanResource(models.Model):
    """An OpenTelemetry resource's attributes (redacted and bounded, as the mapping stores
    them), or an instrumentation scope, once for every span and log event that carried it:
    they reference it by ``digest``, of its JSON text (``stored_payload``). A 12 KB resource copied
    into each span of an export made the database grow hundreds of times what was sent."""

    digest = models.CharField(max_length=DIGEST_CHARS, primary_key=True)
    attributes = JSONTextField(default=dict)
    first_seen = models.DateTimeField(default=timezone.now)

    def __str__(self):
        return self.digest
