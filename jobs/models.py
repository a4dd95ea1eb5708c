"""Stored data: the append-only event log (source of truth) and its projection.

Job and Step rows are exactly what ``replay.build`` returns for a job's events (replay parity);
Escalation rows add what people did (acknowledge, assign, resolve), which a rebuild never touches.
"""

import enum
import functools
import hashlib
import hmac
import json
import logging
import re
import secrets
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any, Final, TypeVar

import orjson
from django.conf import settings
from django.db import NotSupportedError, connection, connections, models, transaction
from django.db.models import (
    Case,
    Exists,
    F,
    Func,
    IntegerField,
    OuterRef,
    Q,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Collate, Trunc, Upper
from django.db.models.lookups import Exact, In
from django.utils import timezone

from jobs.contract.events import OTHER_TYPE_RANK, TYPE_RANK
from jobs.replay.failures import (
    ATTENTION_STATUSES,
    FAILED_FAMILY,
    STALLABLE_STATUSES,
    RunStatus,
)

TOKEN_PREFIX_CHARS = 8
# Integers past 64 bits have 19 digits or more: with every digit made "0", such a run of digits
# is LONG_DIGITS.
DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
LONG_DIGITS = b"0" * 19
PARSE_INVALID = "graph.next_step.parse_invalid"
DEGRADED = "graph.next_step.degraded"
# What the planner panels and alerts count (docs/contract.md), when it carries provider and
# model: the jobs that name a provider/model on job_started or on a planner event.
PLANNER_EVENT_TYPES = ("job_started", PARSE_INVALID, DEGRADED)


def json_text(value) -> str:
    """Compact JSON text; orjson where it can (fast), the stdlib for integers past 64 bits."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def json_value(text: str):
    """JSON text read back exactly: orjson, or the stdlib where the text has a run of 19 digits
    or more (orjson reads an integer past 64 bits as a float, silently; a string or a fraction
    with such a run reads the same either way). The run is looked for in C: a regular
    expression took four times as long as orjson's whole parse."""
    if len(text) < len(LONG_DIGITS):  # most step columns: "{}", "[]"
        return orjson.loads(text)
    raw = text.encode()
    return json.loads(text) if LONG_DIGITS in raw.translate(DIGITS_AS_ZERO) else orjson.loads(raw)


T = TypeVar("T")
R = TypeVar("R")
D = TypeVar("D")


def contained(logger: logging.Logger, what: str, work: Callable[[], T], default: D) -> T | D:
    """``work()`` in a transaction of its own, or ``default`` when it raises.

    The periodic tasks (stall check, alert evaluation, dashboard rollup, retention) go through
    many jobs, rules or hours each run: one they cannot handle (a row no check foresaw) is
    logged with its traceback, naming ``what``, and skipped, so it never stops the others, run
    after run. A lost database is nobody's row: that is raised, and the run fails as a whole."""
    try:
        with transaction.atomic():
            return work()
    except Exception:
        # Only a connection that no longer answers means the database is gone (SQLite reports
        # an integer overflow as an OperationalError too).
        if not connection.is_usable():
            raise
        logger.exception("%s failed and was skipped; the others went on", what)
        return default


class _Failed(enum.Enum):
    FAILED = enum.auto()


FAILED: Final = _Failed.FAILED


def contained_batch(
    logger: logging.Logger,
    what: Callable[[list[T]], str],
    items: list[T],
    work: Callable[[list[T]], R],
) -> tuple[list[R], list[T]]:
    """``work(items)``, ``contained``; when it fails, ``work([item])`` for each item, each
    contained, so that one item nothing can handle costs only itself. Returns the results of
    the work that went through and the items that failed alone. ``what`` names a list of
    items in the log."""
    done = contained(logger, what(items), lambda: work(items), FAILED)
    if done is not FAILED or len(items) == 1:
        return ([done], []) if done is not FAILED else ([], list(items))
    results: list[R] = []
    failed: list[T] = []
    for item in items:
        alone = contained(logger, what([item]), functools.partial(work, [item]), FAILED)
        if alone is FAILED:
            failed.append(item)
        else:
            results.append(alone)
    return results, failed


MAX_BIGINT = 2**63 - 1


class BoundedSum(models.Aggregate):
    """SUM of an integer column held at the largest 64-bit integer, null when every value is
    null (as SUM's). Token counts as large as their column holds, stored before ingest bounded
    them, add up past what a BIGINT holds: PostgreSQL's sum then fails its cast or insert and
    SQLite's SUM raises (its TOTAL does not: a float, exact below 2^53). ``sql`` writes the
    same for the dashboard rollup's raw SQL."""

    function = "SUM"
    name = "BoundedSum"
    output_field = models.BigIntegerField()
    TEMPLATES = {
        "postgresql": (
            f"CAST(CASE WHEN SUM(<x>) > {MAX_BIGINT} THEN {MAX_BIGINT} ELSE SUM(<x>) END AS BIGINT)"
        ),
        "sqlite": (
            "CASE WHEN COUNT(<x>) = 0 THEN NULL "
            f"ELSE CAST(MIN(TOTAL(<x>), {MAX_BIGINT}.0) AS INTEGER) END"
        ),
    }

    @classmethod
    def sql(cls, vendor: str, expression: str) -> str:
        return cls.TEMPLATES[vendor].replace("<x>", expression)

    def as_sql(self, compiler, connection, **extra_context):
        source, where = self.get_source_expressions()
        if where is not None:
            raise ValueError("BoundedSum takes no filter")
        inner, params = compiler.compile(source)
        uses = self.TEMPLATES[connection.vendor].count("<x>")
        return self.sql(connection.vendor, inner), tuple(params) * uses


class JSONField(models.JSONField):
    """Django's JSONField, read with ``json_value`` (orjson, exact past 64 bits): ingest loads
    the JSON columns of every job and step a live batch touches, and the stdlib decoder was a
    tenth of that time."""

    def from_db_value(self, value, expression, connection):
        if isinstance(value, str) and self.decoder is None:
            return json_value(value)
        return super().from_db_value(value, expression, connection)


# A span or log event's stored payload holds its resource and its scope as {RESOURCE_REF:
# <digest>}: their attributes are ``SpanResource`` rows, each stored once (``EventPayloadField``
# puts them back on read).
RESOURCE_REF = "$resource"
STORED_APART = ("resource", "scope")
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


class JSONTextField(models.TextField):
    """JSON kept as text on every database, for a value always read whole and never queried
    into. PostgreSQL parses each jsonb value it is given and prints it back out on each read:
    that was most of the time to read a week's 1,300 duration histograms, and of a live batch's
    200 Job rows it took the upsert from 51 to about 35 ms and the read from 9 to 3 ms
    (bench/README.md, "Live producers")."""

    def from_db_value(self, value, expression, connection):
        return value if value is None else json_value(value)

    def to_python(self, value):
        return json_value(value) if isinstance(value, str) else value

    def get_prep_value(self, value):
        return value if value is None else json_text(value)

    def value_to_string(self, obj):
        return self.value_from_object(obj)  # as JSONField: dumpdata writes the JSON itself

    # For django-stubs: the field's Python value is any JSON value, not text.
    _pyi_private_set_type: Any
    _pyi_private_get_type: Any


def today_utc() -> date:
    """Today's UTC date: a new job's ``partition_day``."""
    return timezone.now().date()


class Role(models.TextChoices):
    """The groups that grant access (docs/architecture.md); migration 0002 creates them."""

    OPERATOR = "operator"
    SUPPORT = "support"
    ENGINEER = "engineer"


class IngestToken(models.Model):
    """A producer's bearer token, stored hashed; the clear token is shown once at creation."""

    name = models.CharField(max_length=200, unique=True)
    prefix = models.CharField(max_length=TOKEN_PREFIX_CHARS, db_index=True)
    token_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Requests per minute; None means settings.TRACEVIZ_INGEST_RATE_LIMIT.
    rate_limit_per_minute = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self):
        return self.name

    @staticmethod
    def hash(raw: str) -> str:
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def set_new_secret(self) -> str:
        """Give this (unsaved) token a fresh secret; returns it in clear, never stored."""
        raw = "tvz_" + secrets.token_urlsafe(32)
        self.prefix = raw[:TOKEN_PREFIX_CHARS]
        self.token_hash = self.hash(raw)
        return raw

    @classmethod
    def issue(cls, name: str) -> tuple["IngestToken", str]:
        """Create a token; returns the row and the clear token, which is never stored."""
        token = cls(name=name)
        raw = token.set_new_secret()
        token.save()
        return token, raw

    @classmethod
    def authenticate(cls, raw: str) -> "IngestToken | None":
        """The live token matching ``raw``, compared in constant time, or None."""
        digest = cls.hash(raw)
        candidates = cls.objects.filter(prefix=raw[:TOKEN_PREFIX_CHARS], revoked_at__isnull=True)
        for token in candidates:
            if hmac.compare_digest(token.token_hash, digest):
                return token
        return None


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
        by_code_point = "C" if connection.vendor == "postgresql" else "BINARY"
        return self.order_by(
            "ts",
            Coalesce("seq", Value(0)).asc(),
            rank.asc(),
            "attempt",
            Collate("event_id", by_code_point).asc(),
        )

    def planner(self, provider: str = "", model: str = "") -> "EventQuerySet":
        """These events' job_started and planner events that carry a provider and a model,
        annotated with both (as text), of ``provider`` and ``model`` when given: what the
        planner panels and alerts count. With a ts filter, served by the (type, ts) index."""
        rows = self.filter(type__in=PLANNER_EVENT_TYPES).annotate(
            provider=KT("payload__provider"), model=KT("payload__model")
        )
        rows = rows.filter(provider__isnull=False, model__isnull=False)
        # Compare the JSON values, not the KT() annotations: Django's exact lookup on a KT()
        # wraps the right-hand side in JSON_EXTRACT(%s, '$') on SQLite, which a plain string is
        # not ("malformed JSON"). The contract makes provider and model strings, so both mean
        # the same.
        if provider:
            rows = rows.filter(payload__provider=provider)
        if model:
            rows = rows.filter(payload__model=model)
        return rows

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
    # ingest about a quarter of what a raw COPY of the same rows costs (bench/README.md).
    token = models.ForeignKey(
        IngestToken, null=True, blank=True, on_delete=models.SET_NULL, db_constraint=False
    )
    # The job's partition_day (ingest copies it from the Job row): on PostgreSQL the table is
    # partitioned by it, one partition per day, so retention drops whole days.
    partition_day = models.DateField(default=today_utc)
    # The payload paths redaction masked at ingest (``payload_results.password``), never what
    # was there: the step panel and the API say so.
    masked = JSONTextField(default=list, blank=True)

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


def stalled_condition(now: datetime) -> Q:
    """The stall rule (docs/contract.md): a job in a status that still expects events that has
    received none for TRACEVIZ_STALL_AFTER. ``Job.is_stalled_at`` is the same rule for a row
    in hand; nothing else decides it. The receive hour adds nothing to the rule: it is what the
    ``job_stall`` index holds."""
    cutoff = now - settings.TRACEVIZ_STALL_AFTER
    return Q(
        status__in=sorted(STALLABLE_STATUSES),
        received_hour__lte=hour_floor(cutoff),
        last_received_at__lt=cutoff,
    )


class UTCHour(Func):
    """The start of the UTC hour of a timestamp column (``hour_floor`` in SQL), as an expression
    each database accepts for a generated column (PostgreSQL wants it immutable: no session
    time zone in it)."""

    output_field = models.DateTimeField()

    def as_postgresql(self, compiler, connection, **extra):
        template = "timezone('UTC', date_trunc('hour', timezone('UTC', %(expressions)s)))"
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sqlite(self, compiler, connection, **extra):
        # Django stores a datetime on SQLite as UTC text, "YYYY-MM-DD HH:MM:SS[.ffffff]". No
        # ", " in it: Django's SQLite introspection splits the CREATE TABLE text on it.
        template = "substr(%(expressions)s,1,13)||':00:00'"
        return self.as_sql(compiler, connection, template=template, **extra)


class JSONKeyText(Func):
    """One top-level key of a JSON object column, as text: a string as itself, a number or a
    boolean as JSON writes it (``42``, ``2.5``, ``true``); null when the key is missing or its
    value is null. (An object or array comes as JSON text, spaced as each database prints it.)

    The key is a query parameter, never part of the SQL, so any key reads the same: with dots,
    quotes or ``__`` in it. Django's key lookups split ``a__b`` into two keys, and SQLite's JSON
    paths cannot name a key holding a double quote, so SQLite reads the object's members with
    ``json_each`` and picks the one of that key."""

    output_field = models.TextField()

    def __init__(self, column: str, key: str):
        super().__init__(F(column))
        self.key = key

    def as_sql(self, compiler, connection, **extra_context):
        raise NotSupportedError(f"JSONKeyText has no SQL for {connection.vendor}")

    def as_postgresql(self, compiler, connection, **extra_context):
        column, params = compiler.compile(self.source_expressions[0])
        return f"({column} ->> %s::text)", (*params, self.key)

    def as_sqlite(self, compiler, connection, **extra_context):
        column, params = compiler.compile(self.source_expressions[0])
        sql = (
            "(SELECT CASE member.type WHEN 'text' THEN member.value WHEN 'true' THEN 'true' "
            "WHEN 'false' THEN 'false' WHEN 'null' THEN NULL ELSE CAST(member.value AS TEXT) END "
            f"FROM json_each({column}) AS member WHERE member.key = %s)"
        )
        return sql, (*params, self.key)


# The jobs list's "no provider" / "no model" value (the dashboard's label for an empty one).
NO_VALUE = "(none)"
# Started within the last ... (the dashboard's presets); combines with since/until.
STARTED_WITHIN = {"1h": timedelta(hours=1), "24h": timedelta(hours=24), "7d": timedelta(days=7)}


def statuses_of(selected: list[str]) -> list[str]:
    """The run statuses a status selection means: "failed" is the failed family unless a
    specific failed:* status is selected beside it."""
    chosen = set(selected)
    if RunStatus.FAILED in chosen and not chosen & set(FAILED_FAMILY[1:]):
        chosen.update(FAILED_FAMILY)
    return sorted(chosen)


def list_scope(filters: dict) -> str:
    """Which jobs the list starts from: "lookup" (any status), "status" (the chosen ones),
    "attention" (the default: failed and paused) or "all"."""
    if filters.get("q"):
        return "lookup"
    if filters.get("status"):
        return "status"
    flags = ("retrying", "waiting", "stalled")
    if filters.get("show") != "all" and not any(filters.get(flag) for flag in flags):
        return "attention"
    return "all"


def has_step(steps: "models.QuerySet") -> Exists:
    """The job has one of these steps. A job's steps live in its day's partition
    (``Job.partition_day``), so matching the day too lets PostgreSQL probe that one partition
    per job, newest first, instead of every day's."""
    return Exists(steps.filter(job_id=OuterRef("pk"), partition_day=OuterRef("partition_day")))


class JobQuerySet(models.QuerySet):
    def stalled(self, now: datetime | None = None) -> "JobQuerySet":
        return self.filter(stalled_condition(now or timezone.now()))

    def with_metadata(self, key: str, value: str) -> "JobQuerySet":
        """These jobs whose metadata (``job_started.metadata``; a trace's resource attributes)
        holds ``value`` at the top-level ``key``, compared as text (``JSONKeyText``): "42"
        finds 42 and "42", "true" finds true. Chained calls must all hold."""
        return self.filter(Exact(JSONKeyText("metadata", key), value))

    def ids_by_trace(self, trace_ids: Iterable[str]) -> dict[str, str]:
        """The job id holding each of these OpenTelemetry trace ids, for those that are here
        (one query): the job named by the trace id, or the job whose metadata records the
        trace (``otel.trace_id``, a job named by ``traceviz.job_id``), else the job the trace id
        is an alias of (a trace re-homed into its named job). Where two jobs hold one trace, the
        first stored."""
        wanted = {trace_id for trace_id in trace_ids if trace_id}
        if not wanted:
            return {}
        trace_of = JSONKeyText("metadata", "otel.trace_id")
        rows = (
            self.filter(Q(job_id__in=sorted(wanted)) | Q(In(trace_of, sorted(wanted))))
            .annotate(trace_of=trace_of)
            .order_by("pk")
            .values_list("job_id", "trace_of")
        )
        found: dict[str, str] = {}
        for job_id, trace_of_job in rows:
            for trace_id in (job_id, trace_of_job):
                if trace_id in wanted:
                    found.setdefault(trace_id, job_id)
        if missing := wanted - found.keys():
            found.update(JobAlias.objects.jobs_of(missing))
        return found

    def findings_by_kind(self) -> list[tuple[str, int]]:
        """(kind, count) over these jobs' contract findings: one aggregate over the jobs table,
        unnesting the findings JSON array with the database's own function."""
        table = connection.ops.quote_name(self.model._meta.db_table)
        if connection.vendor == "postgresql":
            sql = (
                f"SELECT f->>'kind', count(*) FROM {table}, "
                f"jsonb_array_elements({table}.findings) f "
                f"WHERE {table}.findings <> '[]'::jsonb GROUP BY 1 ORDER BY 1"
            )
        else:
            sql = (
                f"SELECT json_extract(f.value, '$.kind'), count(*) FROM {table}, "
                f"json_each({table}.findings) f WHERE {table}.findings <> '[]' "
                "GROUP BY 1 ORDER BY 1"
            )
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return [(kind or "unknown", count) for kind, count in cursor.fetchall()]

    def capped_count(self, cap: int) -> int:
        """How many of these jobs, counting at most ``cap`` (``cap`` means "cap or more").

        Counted in the queryset's order: with the list's newest-first order PostgreSQL walks
        the same index as the page and stops at the cap (unordered, it may build a bitmap of
        every matching row, which grows with the table). Without parallel workers: for a walk
        of a thousand rows their start-up costs more than they save."""
        capped = self[:cap]
        database = connections[self.db]  # the replica when the router reads from one
        if database.vendor != "postgresql":
            return capped.count()
        with transaction.atomic(using=self.db), database.cursor() as cursor:
            cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
            return capped.count()

    def matching(self, filters: dict, now: datetime | None = None) -> "JobQuerySet":
        """These jobs matching the jobs list's filters (cleaned, as ``JobFilterForm`` gives
        them), newest first; the HTML list and ``GET /api/v1/jobs`` both ask this, so a filter
        means the same on both (docs/api.md). Every filter combines with the others (AND)."""
        jobs = self.order_by("-started_at", "-id")
        starting = list_scope(filters)
        if starting == "lookup":
            q = filters["q"]
            # A lookup finds the job whatever its status; a job id also matches by its start.
            jobs = jobs.filter(Q(job_id__startswith=q) | Q(correlation_id=q) | Q(session_id=q))
        elif starting == "status":
            jobs = jobs.filter(status__in=statuses_of(filters["status"]))
        elif starting == "attention":
            jobs = jobs.filter(status__in=sorted(ATTENTION_STATUSES))
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
            if filters.get(name) == NO_VALUE:
                jobs = jobs.filter(**{name: ""})
            elif filters.get(name):
                # Every provider/model the job used, and the one each failure failed on.
                used = JobProvider.objects.filter(
                    job=OuterRef("pk"), **{f"{name}__iexact": filters[name]}
                )
                jobs = jobs.filter(Q(**{f"{name}__iexact": filters[name]}) | Exists(used))
        if filters.get("workflow"):
            jobs = jobs.filter(workflow=filters["workflow"])
        if filters.get("range") in STARTED_WITHIN:
            jobs = jobs.filter(
                started_at__gte=(now or timezone.now()) - STARTED_WITHIN[filters["range"]]
            )
        if filters.get("since"):
            jobs = jobs.filter(started_at__gte=filters["since"])
        if filters.get("until"):
            jobs = jobs.filter(started_at__lt=filters["until"])
        if filters.get("retrying"):
            # Retrying now: an attempt after the first is running.
            jobs = jobs.filter(has_step(Step.objects.filter(segment="running", attempt__gt=1)))
        if filters.get("waiting"):
            jobs = jobs.filter(status=RunStatus.PAUSED_TRANSIENT)
        if filters.get("stalled"):
            jobs = jobs.stalled(now)
        if filters.get("has_findings"):
            jobs = jobs.exclude(findings=[])
        if filters.get("min_attempts"):
            jobs = jobs.filter(max_attempt__gte=filters["min_attempts"])
        if filters.get("reason"):
            found = Failure.objects.reason_matches(filters["reason"]).filter(job=OuterRef("pk"))
            jobs = jobs.filter(Exists(found))
        for key, value in filters.get("meta") or []:
            jobs = jobs.with_metadata(key, value)
        if filters.get("group"):
            in_group = FailureGroupJob.objects.filter(group__fingerprint=filters["group"])
            jobs = jobs.filter(id__in=in_group.values("job_id"))
        return jobs

    def delete_with_steps(self) -> int:
        """Delete these jobs, their steps (which do not cascade, see ``Step.job``) and what
        cascades from a job; returns how many jobs."""
        pks = list(self.values_list("pk", flat=True))
        Step.objects.filter(job_id__in=pks).delete()
        Job.objects.filter(pk__in=pks).delete()
        return len(pks)


class Job(models.Model):
    """A job's replayed state (projection of its events)."""

    job_id = models.CharField(max_length=200, unique=True)
    status = models.CharField(
        max_length=32, choices=[(s.value, s.value) for s in RunStatus], default=RunStatus.RUNNING
    )
    name = models.CharField(max_length=200, blank=True)
    workflow = models.CharField(max_length=200, blank=True)
    correlation_id = models.CharField(max_length=200, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    plan_hash = models.CharField(max_length=200, blank=True)
    retry_of = models.CharField(max_length=200, blank=True)
    metadata = JSONField(default=dict, blank=True)
    cursor_node = models.CharField(max_length=200, blank=True)
    payload_results = JSONTextField(default=dict, blank=True)
    last_validation_error = JSONField(null=True, blank=True)
    findings = JSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_event_at = models.DateTimeField(null=True, blank=True)
    last_received_at = models.DateTimeField(default=timezone.now)
    # The hour of last_received_at, kept by the database: the stall index holds it rather than
    # the receive time itself, which changes on every batch and would keep PostgreSQL from
    # updating a live job's row in place (a HOT update, which writes none of its indexes).
    received_hour = models.GeneratedField(
        expression=UTCHour("last_received_at"),
        output_field=models.DateTimeField(),
        db_persist=True,
    )
    finish_code = models.CharField(max_length=200, blank=True)
    finish_reason = models.TextField(blank=True)
    cancel_reason = models.TextField(blank=True)
    # The root failure (first failing node) as the jobs list shows it.
    failing_node_id = models.CharField(max_length=200, blank=True)
    failing_reason = models.TextField(blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    # When the latest failure happened (event time): repair budget counts runs in this order.
    failed_at = models.DateTimeField(null=True, blank=True)
    has_retryable = models.BooleanField(default=False)
    has_failed = models.BooleanField(default=False)
    step_count = models.IntegerField(default=0)
    max_attempt = models.IntegerField(default=0)
    # Attempts that failed (segment failed or retryable, stale results aside), and the job's
    # duration so far (its end or last event, less its start; 0 without a start): keys the
    # jobs list sorts on (docs/pages.md).
    failed_steps = models.IntegerField(default=0, db_default=0)
    duration_ms = models.BigIntegerField(default=0, db_default=0)
    event_count = models.IntegerField(default=0)
    planner_parse_invalid = models.IntegerField(default=0)
    planner_degraded = models.IntegerField(default=0)
    # Tiny per-step summary for the list's segment strip: [[segment, stale], ...] in order.
    segment_strip = JSONTextField(default=list, blank=True)
    # Summed over the job's calls (LLM calls from OpenTelemetry spans); cost in USD.
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    # The replay fold's snapshot (jobs.replay.walk.Fold.snapshot): the next batch whose events
    # all sort after it is folded onto it instead of replaying the job. Never shown.
    fold = JSONTextField(default=dict, blank=True)
    # The UTC day the job's first event was received (or, for a job retention kept past its
    # day, the day it was moved on): its events and steps live in that day's partitions.
    partition_day = models.DateField(default=today_utc)

    objects = JobQuerySet.as_manager()

    class Meta:
        indexes = [
            # Jobs list: newest first, optionally by status (the default "needs attention" view).
            models.Index(fields=["-started_at", "-id"], name="job_newest"),
            models.Index(fields=["status", "-started_at", "-id"], name="job_status_newest"),
            # Lookup box: correlation and session ids; retry_of chains.
            models.Index(fields=["correlation_id"], name="job_correlation"),
            models.Index(fields=["session_id"], name="job_session"),
            models.Index(fields=["retry_of"], name="job_retry_of"),
            # Stall check: running-ish jobs by the hour they last received an event.
            models.Index(fields=["status", "received_hour"], name="job_stall"),
            # Retention: the jobs of a day's partitions.
            models.Index(fields=["partition_day"], name="job_partition_day"),
            # Jobs list: provider/model filters ignore case (iexact compares UPPER() of both
            # sides on PostgreSQL), newest first.
            models.Index(
                Upper("provider"),
                F("started_at").desc(),
                F("id").desc(),
                name="job_provider_newest",
            ),
            models.Index(
                Upper("model"), F("started_at").desc(), F("id").desc(), name="job_model_newest"
            ),
            # Jobs list sorted by duration, steps, attempts or failures (keyset on the key and
            # id, either direction: an index is read backwards as well).
            models.Index(fields=["duration_ms", "id"], name="job_sort_duration"),
            models.Index(fields=["step_count", "id"], name="job_sort_steps"),
            models.Index(fields=["max_attempt", "id"], name="job_sort_attempts"),
            models.Index(fields=["failed_steps", "id"], name="job_sort_failures"),
            # Compare's baseline (the latest earlier run of a workflow, completed first) and the
            # list's workflow filter, newest first.
            models.Index(fields=["workflow", "-started_at", "-id"], name="job_workflow_newest"),
        ]

    def __str__(self):
        return self.job_id

    @property
    def completed_node_ids(self) -> list[str]:
        """The nodes a success completed, in completion order, without repeats (one query).
        Each completing step holds its node's place: a live batch writes that step, not a
        list as long as the job."""
        steps = self.steps.filter(partition_day=self.partition_day, completes__isnull=False)
        return list(steps.order_by("completes").values_list("node_id", flat=True))

    def is_stalled_at(self, now: datetime) -> bool:
        """``stalled_condition`` for this row."""
        return (
            self.status in STALLABLE_STATUSES
            and self.last_received_at < now - settings.TRACEVIZ_STALL_AFTER
        )

    @property
    def is_stalled(self) -> bool:
        return self.is_stalled_at(timezone.now())


class JobAliasQuerySet(models.QuerySet):
    def jobs_of(self, aliases: Iterable[str]) -> dict[str, str]:
        """The job id each of these ids is an alias of (those that are one), by alias."""
        rows = self.filter(alias__in=sorted(set(aliases))).values_list("alias", "job__job_id")
        return dict(rows)

    def job_of(self, alias: str) -> str | None:
        """The job id ``alias`` is an alias of, or None."""
        return self.jobs_of([alias]).get(alias)


class JobAlias(models.Model):
    """Another id of a job: a trace's id, once a span of the trace named its job
    (``traceviz.job_id``). Spans that arrived before the name were stored under the trace id
    and moved to the named job (jobs.ingest.aliases); later events stored under the trace id go
    to the named job, and its URLs redirect there. Deleted with its job."""

    alias = models.CharField(max_length=200, unique=True)  # its index serves every lookup
    # Its index serves the cascade when the job goes, and re-pointing a re-homed job's aliases.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="aliases")
    created_at = models.DateTimeField(default=timezone.now)

    objects = JobAliasQuerySet.as_manager()

    def __str__(self):
        return f"{self.alias} -> {self.job_id}"


class StepQuerySet(models.QuerySet):
    def failed_attempt_first(self) -> "StepQuerySet":
        """These steps, the latest failed attempt first (retryable or failed, not a stale
        result), then the others latest first: an escalation names the attempt that failed,
        not the later one that succeeded after it (a job that recovered)."""
        failed = Q(segment__in=("retryable", "failed"), ignored_stale=False)
        return self.annotate(
            is_failed_attempt=Case(When(failed, then=Value(1)), default=Value(0))
        ).order_by("-is_failed_attempt", "-attempt")


class Step(models.Model):
    """One attempt of one node of a job, as replay built it."""

    # No database constraint and no cascade: a day's steps leave with their partition (retention
    # drops it after deleting the day's jobs); ``JobQuerySet.delete_with_steps`` deletes both
    # otherwise. No index of its own: the unique constraint's index leads with the job.
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="steps",
    )
    node_id = models.CharField(max_length=200)
    attempt = models.IntegerField()
    position = models.IntegerField()
    result_type = models.CharField(max_length=32, blank=True)
    segment = models.CharField(max_length=16)
    reason = models.TextField(blank=True)
    ignored_stale = models.BooleanField(default=False)
    compensated = models.BooleanField(default=False)
    compensation_reason = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    state = models.CharField(max_length=200, blank=True)
    step_index = models.IntegerField(null=True, blank=True)
    trace_span_id = models.CharField(max_length=200, blank=True)
    parent_span_id = models.CharField(max_length=200, blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    tool = models.CharField(max_length=200, blank=True)
    source = models.CharField(max_length=200, blank=True)
    plan_hash = models.CharField(max_length=200, blank=True)
    continue_on_error = models.BooleanField(default=False)
    epoch = models.BigIntegerField(null=True, blank=True)
    step_epoch = models.BigIntegerField(null=True, blank=True)
    payload_results = JSONTextField(default=dict, blank=True)
    context = JSONTextField(default=dict, blank=True)
    audit_trail = JSONTextField(default=list, blank=True)
    extra = JSONTextField(default=dict, blank=True)
    started_event_id = models.CharField(max_length=200, blank=True)
    finished_event_id = models.CharField(max_length=200, blank=True)
    exception_type = models.CharField(max_length=200, blank=True)
    stack = models.TextField(blank=True)
    # A failure its caller handled (drawn failed, no failing node); a result type inferred from
    # a span's status rather than declared (jobs.replay.spans).
    handled = models.BooleanField(default=False)
    inferred = models.BooleanField(default=False)
    # The OpenTelemetry span behind the step, as the step panel shows it.
    span = JSONTextField(default=dict, blank=True)
    # Results this attempt no longer shows (stale ones kept beside it, replaced ones), oldest
    # first; and replay's bookkeeping (event positions, first success and permanent failure).
    history = JSONTextField(default=list, blank=True)
    marks = JSONTextField(default=dict, blank=True)
    # On the step whose success completed its node: the node's place, from 0, in the job's
    # completed nodes (``Job.completed_node_ids``).
    completes = models.PositiveIntegerField(null=True, blank=True)
    # The paths ingest masked in the step's events (``Event.masked``), in the order met.
    masked = JSONTextField(default=list, blank=True)
    # The job's partition_day, as for events.
    partition_day = models.DateField(default=today_utc)
    # The failure group of a grouped failure (jobs.replay.signatures), set by projection. No
    # database constraint: the step table is partitioned and groups are never deleted.
    failure_group = models.ForeignKey(
        "FailureGroup",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the partial index step_failure_group
        related_name="steps",
    )

    objects = StepQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["job", "node_id", "attempt", "partition_day"], name="step_unique_attempt"
            ),
        ]
        indexes = [
            # Job page: a job's steps in event order.
            models.Index(fields=["job", "position"], name="step_job_position"),
            # Jobs list filters: jobs that have a step with this failure code / error type. Only
            # the steps that have one: most steps are successes, which no filter looks for, and
            # each write of a step (a live job's is written twice) pays for every index it is in.
            models.Index(
                fields=["failure_code", "job"],
                condition=~Q(failure_code=""),
                name="step_failure_code",
            ),
            models.Index(
                fields=["error_type", "job"], condition=~Q(error_type=""), name="step_error_type"
            ),
            # Failure groups: a group's steps, and the grouped steps (rebuilding the totals).
            models.Index(
                fields=["failure_group"],
                condition=Q(failure_group__isnull=False),
                name="step_failure_group",
            ),
        ]

    def __str__(self):
        return f"{self.node_id}:{self.attempt}"

    @property
    def step_key(self) -> str:
        return f"{self.node_id}:{self.attempt}"


class FailureGroup(models.Model):
    """Failed steps sharing a signature (jobs.replay.signatures), kept up to date by projection
    (jobs.ingest.failure_groups). Never deleted: a signature seen before is not new again after
    retention removed its jobs (the "new failure signature" alert rule relies on it).

    ``job_count`` and ``step_count`` are the sums of the group's FailureGroupJob rows;
    ``first_seen``/``last_seen`` are event times of the earliest/latest failure ever grouped.
    """

    fingerprint = models.CharField(max_length=40, unique=True)
    workflow = models.CharField(max_length=200, blank=True)
    node_id = models.CharField(max_length=200, blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    reason = models.TextField(blank=True)
    # The job and step the group was first made from (the job may have left by retention).
    example_job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    example_step = models.CharField(max_length=220, blank=True)
    first_seen = models.DateTimeField(null=True, blank=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    job_count = models.IntegerField(default=0)
    step_count = models.IntegerField(default=0)
    # When traceviz first grouped the signature (the alert rule's "new").
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [
            # Alert rule "new failure signature": groups created in the rule's window.
            models.Index(fields=["created_at"], name="failure_group_created"),
        ]

    def __str__(self):
        return self.fingerprint


class FailureGroupJob(models.Model):
    """A job's failed steps in one group: how many, and the job's provider/model (the page's
    "providers involved" and the jobs list's ``group`` filter)."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="group_jobs")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="failure_groups")
    step_count = models.IntegerField(default=0)
    # The same steps by UTC hour of their failure ({"2026-11-20T10": 3}; "" for no time), so a
    # full replay or retention takes out exactly what the job put into the hour rows.
    hours = JSONField(default=dict, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            # Its index serves the group page's providers and the jobs list's group filter.
            models.UniqueConstraint(fields=["group", "job"], name="failure_group_job"),
        ]
        indexes = [
            # Projection and the job page: a job's groups.
            models.Index(fields=["job"], name="failure_group_job_job"),
        ]

    def __str__(self):
        return f"{self.group_id} {self.job_id}"


class FailureGroupCount(models.Model):
    """A count of a group's failed steps by the provider/model of their job, in one span of
    their failure's time (event time): the failures page's trend and providers involved."""

    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    step_count = models.IntegerField(default=0)

    class Meta:
        abstract = True


class FailureGroupHour(FailureGroupCount):
    """The counts per UTC hour."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="hours")
    hour = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "hour", "provider", "model"], name="failure_group_hour"
            ),
        ]
        indexes = [
            # The failures page: every group's hours inside the window.
            models.Index(fields=["hour", "group"], name="failure_group_hour_window"),
        ]

    def __str__(self):
        return f"{self.group_id} {self.hour:%Y-%m-%d %H:00}"


class FailureGroupDay(FailureGroupCount):
    """The hour rows summed per UTC day (the same group, provider and model): long windows of
    the failures page read a row per day for the days they cover whole, not 24 hour rows.
    Written beside the hour rows in the same statement batch (``jobs.ingest.failure_groups``),
    so a day row always equals the sum of its hours."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="days")
    day = models.DateField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["group", "day", "provider", "model"], name="failure_group_day"
            ),
        ]
        indexes = [
            # The failures page over a long window: every group's whole days inside it.
            models.Index(fields=["day", "group"], name="failure_group_day_window"),
        ]

    def __str__(self):
        return f"{self.group_id} {self.day:%Y-%m-%d}"


def search_words(text: str) -> list[str]:
    """The words of ``text`` as reason search compares them: runs of letters, digits and
    underscores, lowercased (Python's rules, so both databases compare the same text)."""
    return re.findall(r"\w+", (text or "").lower())


def search_text(reason: str) -> str:
    """What ``Failure.search_text`` holds: the reason's words, each after one space, so a word
    prefix is a plain substring ``" " + prefix`` on every database."""
    return "".join(" " + word for word in search_words(reason))


class FailureQuerySet(models.QuerySet):
    def reason_matches(self, query: str) -> "FailureQuerySet":
        """Failures whose reason has, for every word of ``query``, a word beginning with it
        (words ANDed, prefix match, case-insensitive), the same on SQLite and PostgreSQL: "time"
        finds "Timeout", "bucket not found" finds "Bucket not found: x". A query without words
        matches nothing."""
        words = search_words(query)
        if not words:
            return self.none()
        condition = Q()
        for word in words:
            condition &= Q(search_text__contains=" " + word)
        return self.filter(condition)

    def ended_their_job(self) -> "FailureQuerySet":
        """Failures that were not retried successfully nor handled, in jobs that ended failed."""
        return self.filter(
            recovered=False, handled=False, job__status__in=[s.value for s in FAILED_FAMILY]
        )


class Failure(models.Model):
    """One failure of a job (the record every view reads): a failed step attempt, a job-level
    failure (``job_finished`` failed with a reason) or the planner's degradation. Each has a
    reason, the provider/model that failed and a failure group. Written by projection with the
    job's other rows (jobs.ingest.failure_records); a full replay rewrites a job's whole."""

    class Kind(models.TextChoices):
        STEP = "step"
        JOB = "job"
        PLANNER = "planner"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="failures")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    node_id = models.CharField(max_length=200, blank=True)  # "" for a job or planner failure
    attempt = models.IntegerField(default=0)  # 0 for a job or planner failure
    reason = models.TextField(blank=True)
    search_text = models.TextField(blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    error_type = models.CharField(max_length=200, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    # No database constraint, as for Step.failure_group: groups are never deleted.
    group = models.ForeignKey(
        FailureGroup,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="failures",
    )
    at = models.DateTimeField(null=True, blank=True)  # event time: its finish, else its start
    # A later attempt of the node succeeded; the caller handled it (continue_on_error, a span
    # whose parent ended well): neither ended the job.
    recovered = models.BooleanField(default=False)
    handled = models.BooleanField(default=False)

    objects = FailureQuerySet.as_manager()

    class Meta:
        constraints = [
            # Projection's key; its index also serves "a job's failures".
            models.UniqueConstraint(
                fields=["job", "kind", "node_id", "attempt"], name="failure_identity"
            ),
        ]
        indexes = [
            # Jobs list: the provider filter counts a failure against the provider that failed
            # (iexact compares UPPER() of both sides on PostgreSQL).
            models.Index(Upper("provider"), F("job"), name="failure_provider"),
            # A failure group's page: its failures, newest first.
            models.Index(fields=["group", "-at"], name="failure_group_newest"),
        ]

    def __str__(self):
        return f"{self.kind} {self.job_id} {self.node_id}:{self.attempt}"


class JobProvider(models.Model):
    """A provider/model a job used: its ``job_started``'s, its planner events', its LLM
    calls'. The jobs list's provider and model filters read these (a job is every provider it
    used); projection rewrites a job's rows when the set changes."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="providers")
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "provider", "model"], name="job_provider"),
        ]
        indexes = [
            # Jobs list: provider / model filters, ignoring case.
            models.Index(Upper("provider"), F("job"), name="job_provider_upper"),
            models.Index(Upper("model"), F("job"), name="job_provider_model_upper"),
        ]

    def __str__(self):
        return f"{self.job_id} {self.provider}/{self.model}"


class Call(models.Model):
    """A call a step made (an LLM, a tool, a retriever, a message published...), from an
    OpenTelemetry span inside the step (jobs.replay.calls). ``node_id`` "" is a call of the job
    itself (its root span). Replay writes these rows with the job's steps."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="calls")
    node_id = models.CharField(max_length=200, blank=True)
    attempt = models.IntegerField(null=True, blank=True)
    position = models.IntegerField()
    span_id = models.CharField(max_length=32)
    parent_span_id = models.CharField(max_length=32, blank=True)
    kind = models.CharField(max_length=32)
    name = models.CharField(max_length=200)
    status = models.CharField(max_length=16)
    reason = models.TextField(blank=True)
    exception_type = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField()
    duration_ms = models.FloatField()
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    total_tokens = models.BigIntegerField(null=True, blank=True)
    # USD, from genai-prices; null when it does not know the model.
    cost = models.DecimalField(max_digits=16, decimal_places=8, null=True, blank=True)
    # The transcript: [{direction, role, content, tool_calls}], oldest first.
    messages = JSONField(default=list, blank=True)
    input = JSONField(null=True, blank=True)
    output = JSONField(null=True, blank=True)
    tool = JSONField(null=True, blank=True)
    # Other attributes, span events, links, stack trace.
    detail = JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "span_id"], name="call_unique_span"),
        ]
        indexes = [
            # Step panel: a step's calls in order.
            models.Index(fields=["job", "node_id", "attempt", "position"], name="call_step"),
            # Dashboard: tokens and cost per provider/model over a time window.
            models.Index(fields=["started_at"], name="call_started"),
        ]

    def __str__(self):
        return f"{self.kind} {self.name}"

    @property
    def is_unpriced(self) -> bool:
        """Tokens the job's totals count, but no known price: the job's cost leaves it out."""
        return bool(self.input_tokens or self.output_tokens) and self.cost is None


class Escalation(models.Model):
    class Status(models.TextChoices):
        OPEN = "open"
        ACKNOWLEDGED = "acknowledged"
        RESOLVED = "resolved"

    class Severity(models.TextChoices):
        LOW = "low"
        MEDIUM = "medium"
        HIGH = "high"
        CRITICAL = "critical"

    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="escalations"
    )
    kind = models.CharField(max_length=64)
    node_id = models.CharField(max_length=200, blank=True)
    severity = models.CharField(max_length=16, choices=Severity.choices)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.OPEN)
    message = models.TextField(blank=True)
    source = models.CharField(max_length=200, blank=True)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="escalations",
    )
    # Every trigger event this escalation has seen: a trigger seen before changes nothing.
    trigger_event_ids = JSONField(default=list, blank=True)
    triggered_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    # When it last became open (created or reopened): the queue's age counts from here.
    opened_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    resolved_at = models.DateTimeField(null=True, blank=True)
    # A firing alert rule's escalation has no job; node_id then names the alert's subject
    # (provider/model or failure code), so each subject has its own escalation.
    alert_rule = models.ForeignKey(
        "AlertRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="escalations"
    )

    class Meta:
        constraints = [
            # Identity: one escalation per (job, kind, node).
            models.UniqueConstraint(
                fields=["job", "kind", "node_id"],
                condition=Q(job__isnull=False),
                name="escalation_identity_job",
            ),
            # Identity of an alert's escalation: one per (rule, kind, subject).
            models.UniqueConstraint(
                fields=["alert_rule", "kind", "node_id"],
                condition=Q(alert_rule__isnull=False),
                name="escalation_identity_alert",
            ),
        ]
        indexes = [
            # Queue: open first, oldest first.
            models.Index(fields=["status", "created_at"], name="escalation_queue"),
            models.Index(fields=["kind", "status"], name="escalation_kind"),
            # Queue: unresolved first, longest open first (age counts from the last opening).
            models.Index(fields=["status", "opened_at"], name="escalation_opened"),
            # Dashboard: unresolved escalations by kind and age, and how many (partial: most
            # escalations are resolved; the condition is the panels' exclude(status=RESOLVED)).
            models.Index(
                fields=["kind", "triggered_at"],
                condition=~Q(status="resolved"),
                name="escalation_unresolved",
            ),
            # Dashboard headline: those open when the range began (not resolved by then).
            models.Index(fields=["resolved_at", "created_at"], name="escalation_resolved"),
        ]

    def __str__(self):
        return f"{self.kind} {self.job_id or ''} {self.node_id}".strip()


class EscalationEntry(models.Model):
    """The audit trail of an escalation: who did what, when, from which status to which."""

    escalation = models.ForeignKey(Escalation, on_delete=models.CASCADE, related_name="entries")
    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_name = models.CharField(max_length=200)
    action = models.CharField(max_length=32)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16, blank=True)
    note = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self):
        return f"{self.action} by {self.actor_name}"


class Notification(models.Model):
    """Outbox row: written with the change that caused it, delivered later by a Celery task."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"
        SENT = "sent"
        FAILED = "failed"

    class Channel(models.TextChoices):
        EMAIL = "email"
        WEBHOOK = "webhook"

    escalation = models.ForeignKey(
        Escalation, on_delete=models.CASCADE, related_name="notifications"
    )
    reason = models.CharField(max_length=32)  # opened, reopened, commented
    # The audit entry whose text is the news (a comment); None for openings.
    entry = models.ForeignKey(
        EscalationEntry, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # One row per destination, so a failing webhook never re-sends an email that went out.
    channel = models.CharField(max_length=16, choices=Channel.choices, default=Channel.EMAIL)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    # Delivery attempts so far; a claim increments it, so it also fences a worker whose lease
    # expired from recording over the worker that claimed the row after it.
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    # While "sending": when the claim lapses and another worker may take the row again.
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # Outbox sweep: pending notifications that are due.
            models.Index(fields=["status", "next_attempt_at"], name="notification_due"),
        ]

    def __str__(self):
        return f"{self.reason} {self.escalation_id} ({self.status})"


class AlertRule(models.Model):
    """An alert threshold, edited by staff in the admin; evaluated by ``alerts.evaluate``.

    Blank provider and model mean "each provider/model on its own" for the planner kinds; a
    failure-code rate is over all jobs (or the given provider/model's).
    """

    class Kind(models.TextChoices):
        PLANNER_DEGRADED_RATE = "planner_degraded_rate", "Planner degraded rate (fraction)"
        PLANNER_PARSE_INVALID = "planner_parse_invalid", "Planner parse_invalid count"
        FAILURE_CODE_RATE = "failure_code_rate", "Failure rate of a failure code (fraction)"
        NEW_FAILURE_SIGNATURE = "new_failure_signature", "New failure signature"

    name = models.CharField(max_length=200, unique=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    failure_code = models.CharField(max_length=200, blank=True)
    # Fires when the value is above the threshold: a fraction (0.2 = 20 %) for rates, a count
    # for parse_invalid.
    threshold = models.FloatField()
    window_minutes = models.PositiveIntegerField(default=15)
    min_jobs = models.PositiveIntegerField(default=5)
    severity = models.CharField(
        max_length=16, choices=Escalation.Severity.choices, default=Escalation.Severity.MEDIUM
    )
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class AlertEpisode(models.Model):
    """One stretch of time during which a rule held for one subject: firing, then resolved."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="episodes")
    # "provider/model" for planner kinds, the failure code for failure-code rates.
    subject = models.CharField(max_length=401, blank=True)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    firing_since = models.DateTimeField()
    resolved_at = models.DateTimeField(null=True, blank=True)
    value = models.FloatField()
    jobs = models.IntegerField(default=0)
    last_evaluated_at = models.DateTimeField()
    escalation = models.ForeignKey(
        Escalation, null=True, blank=True, on_delete=models.SET_NULL, related_name="alert_episodes"
    )

    class Meta:
        constraints = [
            # A rule fires once per episode: at most one unresolved episode per subject.
            models.UniqueConstraint(
                fields=["rule", "subject"],
                condition=Q(resolved_at__isnull=True),
                name="alert_episode_one_firing",
            ),
        ]
        indexes = [
            # Page header and dashboard: firing alerts (resolved_at IS NULL), newest first.
            models.Index(fields=["resolved_at", "-firing_since"], name="alert_episode_firing"),
        ]

    def __str__(self):
        return f"{self.rule} {self.subject}".strip()

    @property
    def is_firing(self) -> bool:
        return self.resolved_at is None


class Counter(models.Model):
    """A Prometheus counter series kept in the database, so every web process adds to the same
    number and it survives restarts. ``labels`` is the canonical key (sorted JSON)."""

    name = models.CharField(max_length=200)
    labels = models.CharField(max_length=1000, blank=True)
    value = models.FloatField(default=0)

    class Meta:
        constraints = [
            # The upsert target of counters.increment (INSERT ... ON CONFLICT DO UPDATE).
            models.UniqueConstraint(fields=["name", "labels"], name="counter_series"),
        ]

    def __str__(self):
        return f"{self.name}{self.labels} {self.value:g}"


class RateCounter(models.Model):
    """Requests counted per ingest token in fixed time windows. In the database so every web
    process shares one count; ended windows are deleted by a periodic task."""

    key = models.CharField(max_length=255)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["key", "window_start"], name="rate_counter_window"),
        ]

    def __str__(self):
        return f"{self.key} @ {self.window_start}: {self.count}"

    @classmethod
    def forget_windows_before(cls, cutoff) -> int:
        """Delete windows that started before ``cutoff``; returns how many rows went."""
        deleted, _ = cls.objects.filter(window_start__lt=cutoff).delete()
        return deleted


class DashboardRollup(models.Model):
    """The dashboard's step panels pre-aggregated (jobs.rollup): per hour of job start (UTC),
    provider, model and the panel's own dimension, how many steps and how many distinct jobs.
    A job lies in one hour and has one provider/model, so job counts add up across rows."""

    class Kind(models.TextChoices):
        # Jobs started (dimension empty; steps = their step_count); status "failed" for the
        # failed family, "" for every other status.
        JOBS = "jobs"
        SEGMENT = "segment"  # dimension: step segment
        FAILURE_CODE = "failure_code"  # dimension: failure code (non-empty)
        ERROR_TYPE = "error_type"  # dimension: error type (non-empty); status: the job's
        DURATION = "duration"  # dimension: node id; steps with a duration, their histogram
        # LLM calls made of OpenTelemetry spans: provider and model are the call's (not the
        # job's), steps = calls, with their summed tokens and cost.
        LLM = "llm"
        # A whole UTC day's rows of each kind above merged (hour = midnight: counts and sums
        # added, histograms merged), and the DAY row saying the day's are complete
        # (jobs.dashboard.rollup.compile_days).
        JOBS_DAY = "jobs_day"
        SEGMENT_DAY = "segment_day"
        FAILURE_CODE_DAY = "failure_code_day"
        ERROR_TYPE_DAY = "error_type_day"
        DURATION_DAY = "duration_day"
        LLM_DAY = "llm_day"
        DAY = "day"

    hour = models.DateTimeField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    provider = models.CharField(max_length=200, blank=True)
    model = models.CharField(max_length=200, blank=True)
    dimension = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=32, blank=True)
    steps = models.IntegerField(default=0)
    jobs = models.IntegerField(default=0)
    # Duration rows: {"b": [bucket, ...], "n": [steps, ...]}, log-spaced buckets of duration_ms
    # (jobs.dashboard.histograms.bucket_of).
    histogram = JSONTextField(null=True, blank=True)
    # LLM rows: the calls' sums, null when no call reported any (as SQL's SUM).
    input_tokens = models.BigIntegerField(null=True, blank=True)
    output_tokens = models.BigIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=24, decimal_places=8, null=True, blank=True)

    class Meta:
        constraints = [
            # One row per cell. Its index serves the panels' reads (an hour range, then kind)
            # and the refresh's delete of recomputed hours.
            models.UniqueConstraint(
                fields=["hour", "kind", "provider", "model", "dimension", "status"],
                name="rollup_cell",
            ),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.kind} {self.dimension}"


def hour_floor(value: datetime) -> datetime:
    """The UTC hour ``value`` lies in."""
    return value.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


class DirtyHourQuerySet(models.QuerySet):
    def mark(self, moments: Iterable[datetime | None]) -> None:
        """Record that what the dashboard's pre-aggregates hold for the hours of these times
        changed (one INSERT; None is skipped): jobs started then, or planner-counted events
        with that ts. The rollup recomputes those hours later."""
        hours = sorted({hour_floor(value) for value in moments if value is not None})
        if hours:
            self.bulk_create([self.model(hour=hour) for hour in hours])


class DashboardDirtyHour(models.Model):
    """An hour whose rollup rows may be stale: an hour of job start (the step panels) or of
    event ts (the planner panels). project_jobs appends one row per start hour it touched and
    per hour of the new job_started and planner events (append-only: concurrent batches never
    conflict or wait on each other); jobs.rollup.refresh deletes the rows it saw and recomputes
    their hours."""

    hour = models.DateTimeField()

    objects = DirtyHourQuerySet.as_manager()

    class Meta:
        indexes = [
            # Refresh: the dirty hours inside the dashboard's range, newest first.
            models.Index(fields=["hour"], name="dirty_hour"),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00}"


class PlannerJobHour(models.Model):
    """The planner panels' membership rows (jobs.dashboard.planner_rollup): one per UTC hour of
    event ts, provider, model and job that has a planner-counted event
    (``EventQuerySet.planner``) in that hour, with that hour's parse_invalid and degraded events
    of the job. A range's jobs are the distinct job ids over its hours' rows; recomputed per
    dirty hour like the step rollup (``DashboardDirtyHour``).

    ``prev_hour`` links each row to the same job's (and provider/model's) previous row: the
    jobs of a run of hours [h1, h2) are its rows whose ``prev_hour`` is null or before h1,
    counted without gathering job ids."""

    hour = models.DateTimeField()
    # Text, not CharField: the raw aggregate takes the payload's strings whatever their length.
    provider = models.TextField(blank=True)
    model = models.TextField(blank=True)
    job_id = models.CharField(max_length=200)
    parse_invalid = models.IntegerField(default=0)
    degraded = models.IntegerField(default=0)
    prev_hour = models.DateTimeField(null=True)

    class Meta:
        constraints = [
            # One row per (hour, provider, model, job). Its index serves the panels' reads of
            # an hour range, the refresh's delete of recomputed hours and the day compile.
            models.UniqueConstraint(
                fields=["hour", "provider", "model", "job_id"], name="planner_job_hour"
            ),
        ]
        indexes = [
            # A job's rows in hour order: the refresh's relinking of prev_hour, and the raw
            # edge's check whether a job already has a row in a run of hours.
            models.Index(
                fields=["job_id", "provider", "model", "hour"], name="planner_job_hour_job"
            ),
        ]

    def __str__(self):
        return f"{self.hour:%Y-%m-%d %H:00} {self.provider}/{self.model} {self.job_id}"


class PlannerCount(models.Model):
    """The planner panels' counts of one UTC hour or one whole UTC day per provider/model:
    distinct jobs and parse_invalid and degraded events, summed from the PlannerJobHour rows of
    that hour or day. Hour rows are written with their membership rows; day rows only for past
    days without dirty hours (jobs.dashboard.planner_rollup.compile_days), and deleted when any hour
    of their day is recomputed."""

    class Span(models.TextChoices):
        HOUR = "hour"
        DAY = "day"

    start = models.DateTimeField()
    span = models.CharField(max_length=4, choices=Span.choices)
    provider = models.TextField(blank=True)
    model = models.TextField(blank=True)
    jobs = models.IntegerField(default=0)
    parse_invalid = models.IntegerField(default=0)
    degraded = models.IntegerField(default=0)

    class Meta:
        constraints = [
            # One row per cell. Its index serves the panels' reads (hour rows of a range, the
            # day rows of whole days) and the refresh's deletes.
            models.UniqueConstraint(
                fields=["span", "start", "provider", "model"], name="planner_count_cell"
            ),
        ]

    def __str__(self):
        return f"{self.span} {self.start:%Y-%m-%d %H:00} {self.provider}/{self.model}"


class SavedView(models.Model):
    """A user's named filters of a list page: the page's path and its query string. Its URL
    (``/views/<id>/``) is a share link: it opens the same filters for anyone who may see the
    page; only its owner deletes it."""

    class Page(models.TextChoices):
        JOBS = "/", "Jobs"
        FAILURES = "/failures/", "Failures"
        ESCALATIONS = "/escalations/", "Escalations"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="saved_views"
    )
    name = models.CharField(max_length=100)
    path = models.CharField(max_length=32, choices=Page.choices)
    query = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            # One view per name and owner; its index serves the navigation's list of a
            # user's views.
            models.UniqueConstraint(fields=["owner", "name"], name="saved_view_owner_name"),
        ]

    def __str__(self):
        return f"{self.name} ({self.path})"

    @property
    def target_url(self) -> str:
        """The page with the saved filters."""
        return self.path + (f"?{self.query}" if self.query else "")
