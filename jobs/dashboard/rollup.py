"""Hourly pre-aggregates behind the dashboard's step and LLM panels (docs/architecture.md).

The step panels (results over time, failure codes, error types, durations) count steps and
distinct jobs by the hour of job start. Aggregated from Step rows on every request they read every
step of the range (a week: a million rows). DashboardRollup keeps, per hour of job start (UTC),
scope, provider, model and the panel's dimension, the number of steps and of distinct jobs.

Scopes: a provider or model filter means what the jobs list's means, the jobs that used it (a
job that called openai and anthropic is under both). Each job lies once under its own
provider/model (OWN rows: the unfiltered dashboard sums these over provider and model), and the
job kinds (SCOPED_KINDS) keep guest rows for what else it used: PROVIDER, under each other
provider; MODEL, each other model; PAIR, each other provider x model (both filters, AND-ed as
the list does). A filter reads OWN rows that match it plus its shape's guest rows, two disjoint
sets of jobs, so the job counts it reads add up (a job that used two of openai's models is
under provider openai once), and every count read from the rollup equals the raw aggregate.
Guest rows exist only for jobs that used more than one provider or model.

Reading a range [start, end) (``plan`` then ``cells``): its whole hours come from the rollup; the
partial hours at either end (one hour of jobs in all for a 24 h range) and whole hours still dirty
are aggregated from the raw rows with the same SQL that fills the rollup.

Freshness: ``project_jobs`` and retention call ``DashboardDirtyHour.objects.mark`` with the start
hours of the jobs they rewrite or delete (old and new start): one INSERT of a row or two in
their transaction, append-only, so concurrent batches never conflict or wait on each other.
``refresh`` deletes the marks of some hours, then recomputes those hours from the raw rows
(DELETE + INSERT ... SELECT) in the same transaction. A mark it deletes was committed before its
DELETE ran, so the recomputation, whose statements run after, sees that mark's data; a mark
committed later is not deleted and the hour is recomputed again next time. One refresh runs at a
time (a transaction-level advisory lock on PostgreSQL; SQLite serialises writers). The dashboard
refreshes at most REQUEST_REFRESH_HOURS dirty hours of its range per request and reads any other
dirty hour raw; the refresh_dashboard_rollup task does the rest every minute, in batches.

Durations: percentiles do not add up across hours, so each (hour, provider, model, node) keeps a
histogram of duration_ms in log-spaced buckets (bucket i holds 1 + ms in [e^(i/50), e^((i+1)/50)),
2 % wide, stored as parallel lists {"b": buckets, "n": steps}); percentiles read from merged
histograms are within 2 % of the exact value.

Whole days: a week would read 168 hourly rows per cell (and merge 168 histograms per node and
provider/model), so ``compile_days`` (the periodic task, ``rebuild``) merges each whole past UTC
day into day rows (DAY_KIND: counts and sums added, histograms merged), marked complete by a
DAY row; recomputing any hour of a day deletes them, and the day is read from its hours until it
is compiled again. A range reads its compiled whole days from day rows, its other clean hours
from hour rows.

LLM rows: the calls of the jobs started in the hour, per the calls' own provider and model (a
job may call several), with their tokens and cost summed as SQL's SUM does (null when no call
reported any).

The planner panels' pre-aggregates (``jobs.dashboard.planner_rollup``, by hour of event ts)
share these marks, this lock and these steps: ``recompute``, ``rebuild`` and ``compile_days`` do
theirs too.
"""

import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any

from django.db import connection, transaction
from django.db.models import Exists, Q, Sum
from django.db.models.functions import Trunc
from django.utils import timezone

from jobs.dashboard import histograms, planner_rollup, spans
from jobs.ingest import database
from jobs.models import (
    BoundedSum,
    Call,
    DashboardDirtyHour,
    DashboardRollup,
    Failure,
    Job,
    JobProvider,
    Step,
    contained,
    contained_batch,
    hour_floor,
)
from jobs.replay.failures import FAILED_FAMILY

logger = logging.getLogger(__name__)
Kind = DashboardRollup.Kind
Scope = DashboardRollup.Scope
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
HOUR_KINDS = (
    Kind.JOBS,
    Kind.SEGMENT,
    Kind.FAILURE_CODE,
    Kind.ERROR_TYPE,
    Kind.DURATION,
    Kind.LLM,
    Kind.PROVIDERS,
)
# Each hour kind's whole-day rows (compile_days), and back.
DAY_KIND: dict[str, Kind] = {kind: Kind(f"{kind}_day") for kind in HOUR_KINDS}
HOUR_KIND: dict[str, str] = {day_kind: kind for kind, day_kind in DAY_KIND.items()}
DAY_KINDS = (*DAY_KIND.values(), Kind.DAY)
# What a day row adds up from its hours (SUM: null when every hour's is); token counts held at
# the largest a BIGINT holds, as the hours' own sums are.
SUMMED = ("steps", "jobs", "input_tokens", "output_tokens", "cost")
SUM_OF = dict.fromkeys(SUMMED, Sum) | {"input_tokens": BoundedSum, "output_tokens": BoundedSum}
# Kinds whose cells are never summed over provider and model: duration rows (the caller merges
# their histograms), LLM rows (their provider and model are the calls', shown per series) and
# provider rows (a job counts once under every provider it used).
UNGROUPED_KINDS = frozenset({Kind.DURATION, Kind.LLM, Kind.PROVIDERS})
# Kinds aggregated from the range's jobs' Step rows.
STEP_KINDS = frozenset({Kind.SEGMENT, Kind.FAILURE_CODE, Kind.DURATION})
# Kinds of the jobs themselves, kept in every scope (their day rows too); the others' rows (LLM:
# the calls' provider/model; PROVIDERS: every one used) are OWN only.
SCOPED_KINDS = (Kind.JOBS, Kind.SEGMENT, Kind.FAILURE_CODE, Kind.ERROR_TYPE, Kind.DURATION)
COST_PLACES = Decimal("1e-8")
TASK_MAX_DAYS = 7
REQUEST_REFRESH_HOURS = 6
TASK_BATCH_HOURS = 24
TASK_MAX_BATCHES = 20
# pg_try_advisory_xact_lock(int, int): the two-key space, apart from ingest's per-job keys.
LOCK_KEYS = (0x747A76, 1)
# The status of JOBS and PROVIDERS rows that count failed-family jobs (the others have "").
FAILED_STATUS = "failed"
COLUMNS = (
    "hour",
    "kind",
    "scope",
    "provider",
    "model",
    "dimension",
    "status",
    "steps",
    "jobs",
    "histogram",
    "input_tokens",
    "output_tokens",
    "cost",
)


def scope_of(provider: str, model: str) -> Scope:
    """The rows of the job kinds that a provider/model filter reads."""
    if provider and model:
        return Scope.PAIR
    if provider:
        return Scope.PROVIDER
    return Scope.MODEL if model else Scope.OWN


def hour_ceil(value: datetime) -> datetime:
    floor = hour_floor(value)
    return floor if floor == value else floor + HOUR


# --- marking and refreshing -------------------------------------------------------------------


def dirty_hours(since: datetime | None = None, until: datetime | None = None) -> list[datetime]:
    """Distinct dirty hours in [since, until), newest first."""
    marks = DashboardDirtyHour.objects.all()
    if since is not None:
        marks = marks.filter(hour__gte=since)
    if until is not None:
        marks = marks.filter(hour__lt=until)
    return list(marks.values_list("hour", flat=True).distinct().order_by("-hour"))


def refresh(since: datetime, until: datetime, limit: int = REQUEST_REFRESH_HOURS) -> list[datetime]:
    """Recompute the newest ``limit`` dirty hours in [since, until); returns the dirty hours left
    (all of them when another refresh is running)."""
    dirty = dirty_hours(since, until)
    if dirty and limit > 0 and recompute(dirty[:limit]):
        return dirty[limit:]
    return dirty


def refresh_pending(
    batch_hours: int = TASK_BATCH_HOURS, max_batches: int = TASK_MAX_BATCHES
) -> int:
    """Recompute dirty hours, newest first, ``batch_hours`` per transaction, then compile the
    day rows of past days that lack them; returns how many hours. A batch that fails is
    recomputed hour by hour, and an hour that fails alone is logged and left dirty (its panels
    read it raw) while the others are refreshed (``contained``)."""
    done, failed = 0, set()
    for _ in range(max_batches):
        hours = [hour for hour in dirty_hours() if hour not in failed][:batch_hours]
        if not hours:
            break
        counts, unhandled = contained_batch(logger, _hours_label, hours, _recompute_counted)
        failed.update(unhandled)
        done += sum(count for count in counts if count)
        if None in counts:  # another refresh holds the lock
            break
    contained(logger, "compiling the rollup's day rows", compile_days, 0)
    return done


def _recompute_counted(hours: list[datetime]) -> int | None:
    """``recompute``: how many hours, None when another refresh holds the lock."""
    return len(hours) if recompute(hours) else None


def _hours_label(hours: list[datetime]) -> str:
    first, last = min(hours), max(hours)
    if first == last:
        return f"rollup of the hour {first:%Y-%m-%d %H:00}"
    return f"rollup of {len(hours)} hours from {first:%Y-%m-%d %H:00} to {last:%Y-%m-%d %H:00}"


def compile_days(now: datetime | None = None, limit: int = TASK_MAX_DAYS) -> int:
    """Merge the rows of whole past UTC days without dirty hours into day rows (DAY_KIND of
    each kind, and a DAY row saying the day is compiled), newest first, at most ``limit`` days;
    returns how many. A week then reads 7 rows per cell instead of 168, the durations 7
    histograms per node and provider/model. Recomputing any hour of a day deletes that day's
    day rows again. The planner's day rows are compiled in the same transaction
    (``planner_rollup.compile_days``). A day that cannot be compiled is logged and left to be
    read from its hours (``contained``)."""
    before = spans.day_floor(now or timezone.now())
    with transaction.atomic():
        if not _lock(wait=False):
            return 0
        hours = DashboardRollup.objects.filter(kind__in=HOUR_KINDS, hour__lt=before)
        by_day = hours.annotate(day=Trunc("hour", "day", tzinfo=UTC))
        days = set(by_day.values_list("day", flat=True).distinct().order_by())
        days -= set(DashboardRollup.objects.filter(kind=Kind.DAY).values_list("hour", flat=True))
        dirty_days = {spans.day_floor(hour) for hour in dirty_hours(until=before)}
        newest = sorted(days - dirty_days, reverse=True)[:limit]
        compiled = 0
        for day in newest:
            what = f"compiling the rollup's day {day:%Y-%m-%d}"
            compiled += contained(logger, what, partial(_compile_day, hours, day), 0)
        planner_rollup.compile_days(before, dirty_days, limit)
    return compiled


def _compile_day(hours, day: datetime) -> int:
    """Write one day's day rows from its ``hours`` rows; returns 1 (a day compiled)."""
    in_day = hours.filter(hour__gte=day, hour__lt=day + DAY)
    rows = [DashboardRollup(hour=day, kind=Kind.DAY)]
    for row in (
        in_day.exclude(kind=Kind.DURATION)
        .values("kind", "scope", "provider", "model", "dimension", "status")
        .annotate(**{f"sum_{name}": SUM_OF[name](name) for name in SUMMED})
        .order_by()
    ):
        kind = DAY_KIND[row.pop("kind")]
        sums = {name: row.pop(f"sum_{name}") for name in SUMMED}
        rows.append(DashboardRollup(hour=day, kind=kind, **row, **sums))
    merged: dict[tuple[str, str, str, str], list] = {}
    for *key, steps, histogram in in_day.filter(kind=Kind.DURATION).values_list(
        "scope", "provider", "model", "dimension", "steps", "histogram"
    ):
        entry = merged.setdefault(tuple(key), [0, []])
        entry[0] += steps
        entry[1].append(histogram)
    for (scope, provider, model, node), (steps, hour_histograms) in merged.items():
        histogram = histograms.merge(hour_histograms)
        rows.append(
            DashboardRollup(
                hour=day,
                kind=Kind.DURATION_DAY,
                scope=scope,
                provider=provider,
                model=model,
                dimension=node,
                steps=steps,
                histogram={"b": list(histogram), "n": list(histogram.values())},
            )
        )
    DashboardRollup.objects.bulk_create(rows, batch_size=1000)
    return 1


def recompute(hours: Sequence[datetime]) -> bool:
    """Delete these hours' marks and rows and recompute the rows from Step and Job rows, in one
    transaction. False (nothing done) when another refresh holds the lock."""
    # No savepoint inside a caller's transaction: nothing here catches an error.
    with transaction.atomic(savepoint=False):
        if not _lock(wait=False):
            return False
        deleted_jobs = _delete(hours)
        _insert(_ranges(sorted(hours)), deleted_jobs)
    return True


def _delete(hours: Sequence[datetime]) -> set[str]:
    """Delete the hours' marks, then their rows and their days' day rows; returns the jobs of
    the planner membership rows deleted."""
    days = sorted({spans.day_floor(hour) for hour in hours})
    DashboardDirtyHour.objects.filter(hour__in=hours).delete()
    DashboardRollup.objects.filter(
        Q(hour__in=hours) | Q(kind__in=DAY_KINDS, hour__in=days)
    ).delete()
    return planner_rollup.delete(hours)


def rebuild() -> int:
    """Recompute the whole rollup (after a bulk load that bypassed project_jobs); returns the
    number of rows."""
    with transaction.atomic():
        _lock(wait=True)
        DashboardDirtyHour.objects.all().delete()
        DashboardRollup.objects.all().delete()
        planner_rollup.delete_all()
        _insert(None)
    compile_days(limit=10_000)
    return DashboardRollup.objects.count()


def _lock(wait: bool) -> bool:
    return database.lock_pair(LOCK_KEYS, wait=wait)


def _insert(
    ranges: list[tuple[datetime, datetime]] | None, deleted_jobs: Collection[str] = ()
) -> None:
    table = connection.ops.quote_name(DashboardRollup._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(name) for name in COLUMNS)
    select, params = _select(HOUR_KINDS, ranges, scopes=tuple(Scope))
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) {select}", params)
    planner_rollup.insert(ranges, deleted_jobs)


def _ranges(hours: Sequence[datetime]) -> list[tuple[datetime, datetime]]:
    """Sorted whole hours as [start, end) ranges, adjacent hours merged."""
    ranges: list[tuple[datetime, datetime]] = []
    for hour in hours:
        if ranges and ranges[-1][1] == hour:
            ranges[-1] = (ranges[-1][0], hour + HOUR)
        else:
            ranges.append((hour, hour + HOUR))
    return ranges


# --- the aggregate SQL ------------------------------------------------------------------------


def _select(
    kinds: Sequence[str],
    ranges: list[tuple[datetime, datetime]] | None,
    provider: str = "",
    model: str = "",
    scopes: Sequence[Scope] | None = None,
) -> tuple[str, list]:
    """One SELECT (UNION ALL over kinds) of rollup rows, COLUMNS in order, for the jobs started
    in ``ranges`` (None: every job with a start): the job kinds' in ``scopes`` (by default
    those the provider/model filter reads: OWN and its shape's guests), the others' OWN. The
    range's jobs are read once (jr), with their guest keys (jp), the step kinds' steps once
    (js), each job's by its own lookup."""
    step, job, call = Step._meta.db_table, Job._meta.db_table, Call._meta.db_table
    failure, used = Failure._meta.db_table, JobProvider._meta.db_table
    scopes = scopes or sorted({Scope.OWN, scope_of(provider, model)})
    no_histogram = database.sql_json_null()
    no_usage = "CAST(NULL AS BIGINT), CAST(NULL AS BIGINT), CAST(NULL AS NUMERIC)"
    histogram = database.sql_histogram("t.bucket", "t.n")
    bucket = (
        "CAST(floor(ln(1 + CASE WHEN js.duration_ms > 0 THEN js.duration_ms ELSE 0 END)"
        f" * {histograms.SCALE}) AS INTEGER)"
    )
    in_range = "started_at IS NOT NULL"
    params: list[Any] = []
    if ranges is not None:
        span = "(started_at >= %s AND started_at < %s)"
        in_range += " AND (" + " OR ".join([span] * len(ranges)) + ")"
        params.extend(database.adapt_datetime(value) for pair in ranges for value in pair)
    failed_in = ", ".join(f"'{status.value}'" for status in FAILED_FAMILY)
    jobs_in_range = (
        f"jr AS (SELECT id, partition_day, {database.sql_trunc_utc('started_at', 'hour')} AS hour, "
        "provider, model, error_type, step_count, "
        f"CASE WHEN status IN ({failed_in}) THEN '{FAILED_STATUS}' ELSE '' END AS family, "
        f"status FROM {job} WHERE {in_range})"
    )

    chosen = [(name, value) for name, value in (("provider", provider), ("model", model)) if value]
    subject = [value for _name, value in chosen]

    def where(alias: str, *conditions: str) -> str:
        """WHERE ``conditions`` and the provider/model filter, ignoring case as the jobs list
        does, on the job's scoped keys (alias j), the call's (c) or those used (u); the caller
        adds ``subject`` to its parameters."""
        clauses = [*conditions, *(f"UPPER({alias}.{name}) = UPPER(%s)" for name, _ in chosen)]
        return " WHERE " + " AND ".join(clauses) if clauses else ""

    typed = where("j", "j.error_type <> ''")
    # LLM calls, and any call with tokens (an embedding's): what the job's header counts.
    named_llm = where(
        "c",
        "(c.kind = 'llm' OR c.input_tokens IS NOT NULL OR c.output_tokens IS NOT NULL)",
        "NOT (c.provider = '' AND c.model = '')",
    )
    counted = f"count(*), count(DISTINCT js.job_id), {no_histogram}, {no_usage}"
    selects = {
        # Split by status family (FAILED_STATUS in status, "" for every other status): the
        # headlines and the provider failure rates count jobs and failed jobs from these rows.
        Kind.JOBS: "SELECT j.hour, 'jobs', j.scope, j.provider, j.model, '', j.family, "
        f"CAST(sum(j.step_count) AS BIGINT), count(*), {no_histogram}, {no_usage} "
        f"FROM jp j{where('j')} GROUP BY 1, 3, 4, 5, 7",
        Kind.SEGMENT: "SELECT js.hour, 'segment', js.scope, js.provider, js.model, js.segment, "
        f"'', {counted} FROM js GROUP BY 1, 3, 4, 5, 6",
        Kind.FAILURE_CODE: "SELECT js.hour, 'failure_code', js.scope, js.provider, js.model, "
        f"js.failure_code, '', {counted} FROM js WHERE js.failure_code <> '' "
        "GROUP BY 1, 3, 4, 5, 6",
        # Each job once, by its final root failure's error type (not every type it hit).
        Kind.ERROR_TYPE: "SELECT j.hour, 'error_type', j.scope, j.provider, j.model, "
        f"j.error_type, j.status, count(*), count(*), {no_histogram}, {no_usage} FROM jp j"
        f"{typed} GROUP BY 1, 3, 4, 5, 6, 7",
        Kind.DURATION: "SELECT t.hour, 'duration', t.scope, t.provider, t.model, t.node_id, '', "
        f"CAST(sum(t.n) AS BIGINT), 0, {histogram}, {no_usage} FROM ("
        "SELECT js.hour, js.scope, js.provider, js.model, js.node_id, "
        f"{bucket} AS bucket, count(*) AS n "
        "FROM js WHERE js.duration_ms IS NOT NULL GROUP BY 1, 2, 3, 4, 5, 6) t "
        "GROUP BY t.hour, t.scope, t.provider, t.model, t.node_id",
        # The calls' own provider and model (a job may call several), as the LLM panels show.
        Kind.LLM: "SELECT j.hour, 'llm', '', c.provider, c.model, '', '', count(*), "
        f"count(DISTINCT c.job_id), {no_histogram}, {database.sql_bounded_sum('c.input_tokens')}, "
        f"{database.sql_bounded_sum('c.output_tokens')}, sum(c.cost) "
        f"FROM jr j {database.sql_job_rows(call, 'c', 'j', partitioned=False)}"
        f"{named_llm} GROUP BY 1, 4, 5",
        # Each job once per provider/model it used (ju), failed where it failed on it (jfa).
        Kind.PROVIDERS: "SELECT u.hour, 'providers', '', u.provider, u.model, '', "
        "CASE WHEN EXISTS (SELECT 1 FROM jfa a WHERE a.id = u.id AND a.provider = u.provider "
        f"AND a.model = u.model) THEN '{FAILED_STATUS}' ELSE '' END, 0, count(*), "
        f"{no_histogram}, {no_usage} FROM ju u{where('u')} GROUP BY 1, 4, 5, 7",
    }
    ctes = [jobs_in_range]
    by_scope = set(SCOPED_KINDS).intersection(kinds)
    if Kind.PROVIDERS in kinds or (by_scope and set(scopes) - {Scope.OWN}):
        ctes += _provider_ctes(failure, used)
    if by_scope:
        ctes.append(_scoped_jobs(scopes))
    if STEP_KINDS.intersection(kinds):
        ctes.append(
            "js AS (SELECT j.hour, j.scope, j.provider, j.model, s.job_id, s.segment, "
            f"s.failure_code, s.node_id, s.duration_ms FROM jp j "
            f"{database.sql_job_rows(step, 's', 'j')}{where('j')})"
        )
        params += subject
    sql = " UNION ALL ".join(selects[Kind(kind)] for kind in kinds)
    params += [value for kind in kinds if kind not in STEP_KINDS for value in subject]
    return f"WITH {', '.join(ctes)} {sql}", params


# A job's guest keys in each scope: what it used (ju) other than its own, in capitals (a filter
# ignores case: a provider used under two spellings is one key, and one that is its own
# spelled otherwise is none), only those a filter can name: (key columns, the keys, the
# condition that a key is not the job's own).
GUEST_KEYS = {
    Scope.PROVIDER: (
        "k.provider, '' AS model",
        "SELECT DISTINCT id, UPPER(provider) AS provider FROM ju WHERE provider <> ''",
        "k.provider <> UPPER(j.provider)",
    ),
    Scope.MODEL: (
        "'' AS provider, k.model",
        "SELECT DISTINCT id, UPPER(model) AS model FROM ju WHERE model <> ''",
        "k.model <> UPPER(j.model)",
    ),
    Scope.PAIR: (
        "k.provider, k.model",
        "SELECT DISTINCT a.id, UPPER(a.provider) AS provider, UPPER(b.model) AS model "
        "FROM ju a JOIN ju b ON b.id = a.id WHERE a.provider <> '' AND b.model <> ''",
        "NOT (k.provider = UPPER(j.provider) AND k.model = UPPER(j.model))",
    ),
}


def _scoped_jobs(scopes: Sequence[Scope]) -> str:
    """The CTE jp: the range's jobs (jr) under their own provider/model (OWN) and, in the
    other ``scopes``, under each guest key (GUEST_KEYS): one row per job and key."""
    columns = "partition_day, hour, error_type, step_count, family, status"
    prefixed = ", ".join(f"j.{name}" for name in columns.split(", "))
    parts = []
    if Scope.OWN in scopes:
        parts.append(f"SELECT id, '' AS scope, provider, model, {columns} FROM jr")
    for scope in scopes:
        if scope != Scope.OWN:
            key, keys, guest = GUEST_KEYS[scope]
            parts.append(
                f"SELECT j.id, '{scope.value}' AS scope, {key}, {prefixed} FROM jr j "
                f"JOIN ({keys}) k ON k.id = j.id WHERE {guest}"
            )
    return f"jp AS ({' UNION ALL '.join(parts)})"


def _provider_ctes(failure: str, used: str) -> list[str]:
    """The CTEs of PROVIDERS rows over the range's jobs (jr). jf: the provider/model each
    failure that ended a failed-family job failed on (its own, else the job's: a step failure
    names one only when a failed call did); jfa: those, and the job's own for a failed job
    without such a failure; ju: every provider/model each job used (its JobProvider rows, its
    own when it names one or the job used none, and those it failed on), with its hour."""
    own_or_failed = "f.provider <> '' OR f.model <> ''"
    return [
        f"jf AS (SELECT j.id, CASE WHEN {own_or_failed} THEN f.provider ELSE j.provider END "
        f"AS provider, CASE WHEN {own_or_failed} THEN f.model ELSE j.model END AS model "
        f"FROM jr j JOIN {failure} f ON f.job_id = j.id WHERE j.family = '{FAILED_STATUS}' "
        "AND NOT f.recovered AND NOT f.handled)",
        # NOT IN over the CTE: one hashed set, not a scan of jf per job.
        "jfa AS (SELECT id, provider, model FROM jf UNION SELECT j.id, j.provider, j.model "
        f"FROM jr j WHERE j.family = '{FAILED_STATUS}' AND j.id NOT IN (SELECT id FROM jf))",
        # The job's own empty provider only when it used none: an anti-join by its index (an
        # OR around it would make PostgreSQL hash the whole JobProvider table).
        "ju AS (SELECT p.job_id AS id, j.hour, p.provider, p.model "
        f"FROM jr j JOIN {used} p ON p.job_id = j.id "
        "UNION SELECT j.id, j.hour, j.provider, j.model FROM jr j "
        "WHERE j.provider <> '' OR j.model <> '' "
        "UNION SELECT j.id, j.hour, j.provider, j.model FROM jr j "
        "WHERE j.provider = '' AND j.model = '' "
        f"AND NOT EXISTS (SELECT 1 FROM {used} p WHERE p.job_id = j.id) "
        "UNION SELECT a.id, j.hour, a.provider, a.model FROM jfa a JOIN jr j ON j.id = a.id)",
    ]


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """Where a range's numbers come from: hour-aligned ``rollup`` ranges, the rest ``raw``."""

    rollup: tuple[tuple[datetime, datetime], ...]
    raw: tuple[tuple[datetime, datetime], ...]
    # Cells fetched ahead for several panels: (kind, provider, model) -> cells; job_totals:
    # ("job_totals", provider, model) -> totals.
    fetched: dict = field(default_factory=dict, compare=False, repr=False)


# A Cell's fields after its kind, as stored rows hold them.
CELL = (
    "hour",
    "dimension",
    "status",
    "steps",
    "jobs",
    "histogram",
    "provider",
    "model",
    "input_tokens",
    "output_tokens",
    "cost",
)


@dataclass(frozen=True, slots=True)
class Cell:
    kind: str
    hour: datetime
    dimension: str
    status: str
    steps: int
    jobs: int
    histogram: dict | None
    # The row's provider and model ("" when summed over them; LLM rows: the calls', not the
    # job's) and, for LLM rows, the calls' sums (None: no call reported any).
    provider: str = ""
    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost: Decimal | None = None
    # Aggregated from the raw rows of the plan's raw ranges (never summed over provider/model).
    raw: bool = False


def plan(start: datetime, end: datetime, refresh_hours: int = REQUEST_REFRESH_HOURS) -> Plan:
    """Split [start, end): whole hours that are clean (after refreshing up to ``refresh_hours``
    dirty ones) from the rollup, partial and still-dirty hours raw."""
    first, last = hour_ceil(start), hour_floor(end)
    if first >= last:
        return Plan((), ((start, end),))
    stale = sorted(refresh(first, last, refresh_hours))
    raw = [(start, first)] if start < first else []
    rollup, cursor = [], first
    for hour in stale:
        if cursor < hour:
            rollup.append((cursor, hour))
        raw.append((hour, hour + HOUR))
        cursor = hour + HOUR
    if cursor < last:
        rollup.append((cursor, last))
    if last < end:
        raw.append((last, end))
    merged: list[tuple[datetime, datetime]] = []
    for span in sorted(raw):
        if merged and merged[-1][1] == span[0]:
            merged[-1] = (merged[-1][0], span[1])
        else:
            merged.append(span)
    return Plan(tuple(rollup), tuple(merged))


def prefetch(plan: Plan, kinds: Sequence[str], provider: str = "", model: str = "") -> None:
    """Fetch the cells of several panels together; ``cells`` then answers from them."""
    kinds = [str(kind) for kind in kinds]
    found = cells(plan, kinds, provider, model)
    for kind in kinds:
        plan.fetched[(kind, provider, model)] = [cell for cell in found if cell.kind == kind]


def cells(
    plan: Plan, kinds: Sequence[str], provider: str = "", model: str = "", grouped: bool = True
) -> list[Cell]:
    """The rollup rows of ``kinds`` for the plan's range: stored rows summed over provider and
    model when ``grouped`` (UNGROUPED_KINDS never), raw ranges aggregated from Step, Job and
    Call rows. Cells of several rows may share a key; a compiled whole day's rows come as
    one cell per key at its midnight."""
    kinds = [str(kind) for kind in kinds]
    if all((kind, provider, model) in plan.fetched for kind in kinds):
        return [cell for kind in kinds for cell in plan.fetched[(kind, provider, model)]]
    found: list[Cell] = []
    if plan.rollup:
        summed = [kind for kind in kinds if kind not in UNGROUPED_KINDS] if grouped else []
        if summed:
            rows = (
                _stored(plan, summed, provider, model)
                .values_list("kind", "hour", "dimension", "status")
                .annotate(n_steps=Sum("steps"), n_jobs=Sum("jobs"))
                .order_by()
            )
            found.extend(
                Cell(HOUR_KIND.get(kind, kind), hour, dimension, status, steps, jobs, None)
                for kind, hour, dimension, status, steps, jobs in rows
            )
        if rest := [kind for kind in kinds if kind not in summed]:
            rows = _stored(plan, rest, provider, model).values_list("kind", *CELL)
            found.extend(Cell(HOUR_KIND.get(kind, kind), *row) for kind, *row in rows)
    if plan.raw:
        sql, params = _select(kinds, list(plan.raw), provider, model)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for hour, kind, _scope, row_provider, row_model, dimension, status, *counts in cursor:
                steps, jobs, histogram, input_tokens, output_tokens, cost = counts
                found.append(
                    Cell(
                        kind,
                        _as_hour(hour),
                        dimension,
                        status,
                        int(steps),
                        int(jobs),
                        _as_histogram(histogram),
                        row_provider,
                        row_model,
                        input_tokens,
                        output_tokens,
                        _as_cost(cost),
                        raw=True,
                    )
                )
    return found


def _stored(plan: Plan, kinds: Sequence[str], provider: str, model: str):
    """The stored rows of ``kinds`` over the plan's rollup ranges: a whole day's day rows when
    it has them (its DAY row), else its hour rows; hour rows for the other hours. Decided in
    the same statement as the rows are read (each day's EXISTS is a one-time filter), so a day
    a refresh uncompiles meanwhile is read one way or the other, never neither."""
    days = spans.whole_days(plan.rollup)
    rows = Q(pk__in=[])
    for since, until in spans.without_days(plan.rollup, days):
        rows |= Q(hour__gte=since, hour__lt=until, kind__in=kinds)
    day_kinds = [DAY_KIND[kind] for kind in kinds]
    for day in days:
        compiled = Exists(DashboardRollup.objects.filter(kind=Kind.DAY, hour=day))
        rows |= Q(compiled, hour=day, kind__in=day_kinds)
        rows |= Q(~compiled, hour__gte=day, hour__lt=day + DAY, kind__in=kinds)
    subject = {
        f"{name}__iexact": value
        for name, value in (("provider", provider), ("model", model))
        if value
    }
    # Only the job kinds have guest rows: the OWN rows and the filter's guests, of every kind.
    scopes = sorted({Scope.OWN, scope_of(provider, model)})
    return DashboardRollup.objects.filter(rows, scope__in=scopes, **subject)


def job_totals(plan: Plan, provider: str = "", model: str = "") -> dict[tuple[str, str], list]:
    """Jobs started in the plan's range per (provider, model) of the filter's scope: [jobs,
    failed-family jobs]. Rollup ranges from the JOBS rows (one small aggregate), raw ranges
    aggregated by the same SQL, or taken from the raw JOBS cells when a ``prefetch`` read them;
    the same numbers as counting the Job rows the jobs list's filter finds over the whole range.
    Kept on the plan: the headlines and the provider panel read the same totals."""
    key = ("job_totals", provider, model)
    if key in plan.fetched:
        return plan.fetched[key]
    totals: dict[tuple[str, str], list] = plan.fetched.setdefault(key, {})
    if plan.rollup:
        rows = (
            _stored(plan, [Kind.JOBS], provider, model)
            .values_list("provider", "model", "status")
            .annotate(n_jobs=Sum("jobs"))
            .order_by()
        )
        for row_provider, row_model, status, jobs in rows:
            _count(totals, row_provider, row_model, jobs, jobs if status == FAILED_STATUS else 0)
    if plan.raw:
        fetched = plan.fetched.get((Kind.JOBS, provider, model))
        if fetched is None:
            fetched = cells(Plan((), plan.raw), [Kind.JOBS], provider, model)
        for cell in fetched:
            if cell.raw:
                _count_cell(totals, cell)
    return totals


def _count(totals: dict, provider: str, model: str, jobs: int, failed: int) -> None:
    """Add jobs, and failed jobs, to the [jobs, failed] totals of (provider, model)."""
    entry = totals.setdefault((provider, model), [0, 0])
    entry[0] += jobs
    entry[1] += failed


def _count_cell(totals: dict, cell: Cell) -> None:
    _count(
        totals,
        cell.provider,
        cell.model,
        cell.jobs,
        cell.jobs if cell.status == FAILED_STATUS else 0,
    )


def provider_totals(plan: Plan, provider: str = "", model: str = "") -> dict[tuple[str, str], list]:
    """Jobs started in the plan's range per (provider, model) they used: [jobs that used it,
    jobs that ended failed on it] (the PROVIDERS rows; raw ranges aggregated by the same SQL,
    or taken from a ``prefetch``). A job that used two providers counts under both, and as
    failed only under the one its failure names. After the panels' ``prefetch`` of PROVIDERS
    cells, no query."""
    key = ("provider_totals", provider, model)
    if key in plan.fetched:
        return plan.fetched[key]
    totals: dict[tuple[str, str], list] = plan.fetched.setdefault(key, {})
    prefetched = plan.fetched.get((Kind.PROVIDERS, provider, model))
    if prefetched is not None:  # the panels' prefetch read them all, stored and raw
        for cell in prefetched:
            _count_cell(totals, cell)
        return totals
    if plan.rollup:
        rows = (
            _stored(plan, [Kind.PROVIDERS], provider, model)
            .values_list("provider", "model", "status")
            .annotate(n_jobs=Sum("jobs"))
            .order_by()
        )
        for row_provider, row_model, status, jobs in rows:
            _count(totals, row_provider, row_model, jobs, jobs if status == FAILED_STATUS else 0)
    if plan.raw:
        raw = Plan((), plan.raw)
        for cell in cells(raw, [Kind.PROVIDERS], provider, model):
            _count_cell(totals, cell)
    return totals


def _as_hour(value) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_cost(value) -> Decimal | None:
    """A summed cost as the DecimalField reads it (SQLite sums it as a float)."""
    return None if value is None else Decimal(str(value)).quantize(COST_PLACES)


def _as_histogram(value) -> dict | None:
    return json.loads(value) if isinstance(value, str | bytes) else value
