"""Hourly pre-aggregates behind the dashboard's step panels (DESIGN.md section 6).

The step panels (results over time, failure codes, error types, durations) count steps and
distinct jobs by the hour of job start. Aggregated from Step rows on every request they read every
step of the range (a week: a million rows). DashboardRollup keeps, per hour of job start (UTC),
provider, model and the panel's dimension, the number of steps and of distinct jobs. A job lies
in exactly one hour and has one provider and model, so job counts add up across rows, and every
count read from the rollup equals the raw aggregate.

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
histograms are within 2 % of the exact value. A week would merge 168 hourly histograms per node
and provider/model, so ``compile_days`` (the periodic task, ``rebuild``) also merges each whole
past UTC day into DURATION_DAY rows, marked complete by a DAY row; recomputing any hour of a day
deletes them, and the day is read from its hours until it is compiled again.
"""

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection, transaction
from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.db.models.functions import Trunc
from django.utils import timezone

from jobs.ingest import database
from jobs.models import DashboardDirtyHour, DashboardRollup, Job, Step, hour_floor
from jobs.replay.failures import RunStatus

Kind = DashboardRollup.Kind
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
DAY_KINDS = (Kind.DURATION_DAY, Kind.DAY)
HOUR_KINDS = (Kind.JOBS, Kind.SEGMENT, Kind.FAILURE_CODE, Kind.ERROR_TYPE, Kind.DURATION)
TASK_MAX_DAYS = 7
# Buckets per e-fold of (1 + duration_ms): bucket i spans a factor e^(1/50) = 1.0202.
SCALE = 50
REQUEST_REFRESH_HOURS = 6
TASK_BATCH_HOURS = 24
TASK_MAX_BATCHES = 20
# pg_try_advisory_xact_lock(int, int): the two-key space, apart from ingest's per-job keys.
LOCK_KEYS = (0x747A76, 1)
# The failed family (failed, failed:logic, failed:internal), as the list's "failed" means it.
FAILED_FAMILY = (RunStatus.FAILED, RunStatus.FAILED_LOGIC, RunStatus.FAILED_INTERNAL)
# The status of JOBS rows that count failed-family jobs (the other JOBS rows have "").
FAILED_STATUS = "failed"
COLUMNS = ("hour", "kind", "provider", "model", "dimension", "status", "steps", "jobs", "histogram")


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
    day rows of past days that lack them; returns how many hours."""
    done = 0
    for _ in range(max_batches):
        hours = dirty_hours()[:batch_hours]
        if not hours or not recompute(hours):
            break
        done += len(hours)
    compile_days()
    return done


def day_floor(value: datetime) -> datetime:
    return hour_floor(value).replace(hour=0)


def compile_days(now: datetime | None = None, limit: int = TASK_MAX_DAYS) -> int:
    """Merge the duration rows of whole past UTC days without dirty hours into day rows
    (DURATION_DAY, and a DAY row saying the day is compiled), newest first, at most ``limit``
    days; returns how many. A week's durations then read about 7 rows per node and provider/model
    instead of 168. Recomputing any hour of a day deletes that day's day rows again."""
    before = day_floor(now or timezone.now())
    with transaction.atomic():
        if not _lock(wait=False):
            return 0
        hours = DashboardRollup.objects.filter(kind=Kind.DURATION, hour__lt=before)
        by_day = hours.annotate(day=Trunc("hour", "day", tzinfo=UTC))
        days = set(by_day.values_list("day", flat=True).distinct().order_by())
        days -= set(DashboardRollup.objects.filter(kind=Kind.DAY).values_list("hour", flat=True))
        days -= {day_floor(hour) for hour in dirty_hours(until=before)}
        days = sorted(days, reverse=True)[:limit]
        for day in days:
            merged: dict[tuple[str, str, str], list] = {}
            for provider, model, node, steps, histogram in hours.filter(
                hour__gte=day, hour__lt=day + DAY
            ).values_list("provider", "model", "dimension", "steps", "histogram"):
                entry = merged.setdefault((provider, model, node), [0, []])
                entry[0] += steps
                entry[1].append(histogram)
            rows = [DashboardRollup(hour=day, kind=Kind.DAY)]
            for (provider, model, node), (steps, histograms) in merged.items():
                histogram = merge(histograms)
                rows.append(
                    DashboardRollup(
                        hour=day,
                        kind=Kind.DURATION_DAY,
                        provider=provider,
                        model=model,
                        dimension=node,
                        steps=steps,
                        histogram={"b": list(histogram), "n": list(histogram.values())},
                    )
                )
            DashboardRollup.objects.bulk_create(rows, batch_size=1000)
    return len(days)


def recompute(hours: Sequence[datetime]) -> bool:
    """Delete these hours' marks and rows and recompute the rows from Step and Job rows, in one
    transaction. False (nothing done) when another refresh holds the lock."""
    # No savepoint inside a caller's transaction: nothing here catches an error.
    with transaction.atomic(savepoint=False):
        if not _lock(wait=False):
            return False
        _delete(hours)
        _insert(_ranges(sorted(hours)))
    return True


def _delete(hours: Sequence[datetime]) -> None:
    """Delete the hours' marks, then their rows and their days' day rows."""
    days = sorted({day_floor(hour) for hour in hours})
    DashboardDirtyHour.objects.filter(hour__in=hours).delete()
    DashboardRollup.objects.filter(
        Q(hour__in=hours) | Q(kind__in=DAY_KINDS, hour__in=days)
    ).delete()


def rebuild() -> int:
    """Recompute the whole rollup (after a bulk load that bypassed project_jobs); returns the
    number of rows."""
    with transaction.atomic():
        _lock(wait=True)
        DashboardDirtyHour.objects.all().delete()
        DashboardRollup.objects.all().delete()
        _insert(None)
    compile_days(limit=10_000)
    return DashboardRollup.objects.count()


def _lock(wait: bool) -> bool:
    return database.lock_pair(LOCK_KEYS, wait=wait)


def _insert(ranges: list[tuple[datetime, datetime]] | None) -> None:
    table = connection.ops.quote_name(DashboardRollup._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(name) for name in COLUMNS)
    select, params = _select(HOUR_KINDS, ranges)
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({columns}) {select}", params)


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
) -> tuple[str, list]:
    """One SELECT (UNION ALL over kinds) of rollup rows, COLUMNS in order, for the jobs started
    in ``ranges`` (None: every job with a start)."""
    step, job = Step._meta.db_table, Job._meta.db_table
    hour = database.sql_hour_of("j.started_at")
    no_histogram = database.sql_json_null()
    histogram = database.sql_histogram("t.bucket", "t.n")
    bucket = (
        "CAST(floor(ln(1 + CASE WHEN s.duration_ms > 0 THEN s.duration_ms ELSE 0 END)"
        f" * {SCALE}) AS INTEGER)"
    )
    where, where_params = ["j.started_at IS NOT NULL"], []
    if ranges is not None:
        span = "(j.started_at >= %s AND j.started_at < %s)"
        where.append("(" + " OR ".join([span] * len(ranges)) + ")")
        where_params.extend(database.adapt_datetime(value) for pair in ranges for value in pair)
    for name, value in (("provider", provider), ("model", model)):
        if value:
            where.append(f"j.{name} = %s")
            where_params.append(value)
    condition = " AND ".join(where)
    failed_in = ", ".join(f"'{status.value}'" for status in FAILED_FAMILY)
    family = f"CASE WHEN j.status IN ({failed_in}) THEN '{FAILED_STATUS}' ELSE '' END"
    steps_join = f"{step} s JOIN {job} j ON j.id = s.job_id"
    counted = f"count(*), count(DISTINCT s.job_id), {no_histogram}"
    selects = {
        # Split by status family (FAILED_STATUS in status, "" for every other status): the
        # headlines and the provider failure rates count jobs and failed jobs from these rows.
        Kind.JOBS: f"SELECT {hour}, 'jobs', j.provider, j.model, '', {family}, "
        f"CAST(sum(j.step_count) AS BIGINT), count(*), {no_histogram} "
        f"FROM {job} j WHERE {condition} GROUP BY 1, 3, 4, 6",
        Kind.SEGMENT: f"SELECT {hour}, 'segment', j.provider, j.model, s.segment, '', {counted} "
        f"FROM {steps_join} WHERE {condition} GROUP BY 1, 3, 4, 5",
        Kind.FAILURE_CODE: f"SELECT {hour}, 'failure_code', j.provider, j.model, s.failure_code, "
        f"'', {counted} FROM {steps_join} WHERE {condition} AND s.failure_code <> '' "
        "GROUP BY 1, 3, 4, 5",
        # Each job once, by its final root failure's error type (not every type it hit).
        Kind.ERROR_TYPE: f"SELECT {hour}, 'error_type', j.provider, j.model, j.error_type, "
        f"j.status, count(*), count(*), {no_histogram} FROM {job} j WHERE {condition} "
        "AND j.error_type <> '' GROUP BY 1, 3, 4, 5, 6",
        Kind.DURATION: "SELECT t.hour, 'duration', t.provider, t.model, t.node_id, '', "
        f"CAST(sum(t.n) AS BIGINT), 0, {histogram} FROM ("
        f"SELECT {hour} AS hour, j.provider, j.model, s.node_id, {bucket} AS bucket, "
        f"count(*) AS n FROM {steps_join} WHERE {condition} AND s.duration_ms IS NOT NULL "
        "GROUP BY 1, 2, 3, 4, 5) t GROUP BY t.hour, t.provider, t.model, t.node_id",
    }
    sql = " UNION ALL ".join(selects[Kind(kind)] for kind in kinds)
    return sql, where_params * len(kinds)


# --- reading ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """Where a range's numbers come from: hour-aligned ``rollup`` ranges, the rest ``raw``."""

    rollup: tuple[tuple[datetime, datetime], ...]
    raw: tuple[tuple[datetime, datetime], ...]
    # Cells fetched ahead for several panels: (kind, provider, model) -> cells; job_totals:
    # ("job_totals", provider, model) -> totals.
    fetched: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Cell:
    kind: str
    hour: datetime
    dimension: str
    status: str
    steps: int
    jobs: int
    histogram: dict | None


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
    """Fetch the cells of several panels in one query (two with raw ranges); ``cells`` then
    answers from them."""
    kinds = [str(kind) for kind in kinds]
    found = cells(plan, kinds, provider, model, grouped=False)
    for kind in kinds:
        plan.fetched[(kind, provider, model)] = [cell for cell in found if cell.kind == kind]


def cells(
    plan: Plan, kinds: Sequence[str], provider: str = "", model: str = "", grouped: bool = True
) -> list[Cell]:
    """The rollup rows of ``kinds`` for the plan's range: rollup ranges summed over provider and
    model when ``grouped`` (duration rows never: the caller merges their histograms), raw
    ranges aggregated from Step and Job rows. Cells of several rows may share a key."""
    kinds = [str(kind) for kind in kinds]
    if all((kind, provider, model) in plan.fetched for kind in kinds):
        return [cell for kind in kinds for cell in plan.fetched[(kind, provider, model)]]
    found: list[Cell] = []
    if plan.rollup:
        span = Q()
        for since, until in plan.rollup:
            span |= Q(hour__gte=since, hour__lt=until)
        rows = DashboardRollup.objects.filter(span, kind__in=kinds)
        days = _whole_days(plan.rollup)
        if Kind.DURATION in kinds and days:
            # Whole days: their day rows when compiled, else their hour rows.
            compiled = DashboardRollup.objects.filter(kind=Kind.DAY, hour=OuterRef("day"))
            rows = DashboardRollup.objects.annotate(day=Trunc("hour", "day", tzinfo=UTC)).filter(
                Q(span, kind__in=kinds) & ~Q(Q(kind=Kind.DURATION, day__in=days) & Exists(compiled))
                | Q(kind=Kind.DURATION_DAY, hour__in=days)
            )
        if provider:
            rows = rows.filter(provider=provider)
        if model:
            rows = rows.filter(model=model)
        if Kind.DURATION in kinds or not grouped:
            found.extend(
                Cell(Kind.DURATION if kind == Kind.DURATION_DAY else kind, *row)
                for kind, *row in rows.values_list(
                    "kind", "hour", "dimension", "status", "steps", "jobs", "histogram"
                )
            )
        else:
            grouped = (
                rows.values_list("kind", "hour", "dimension", "status")
                .annotate(n_steps=Sum("steps"), n_jobs=Sum("jobs"))
                .order_by()
            )
            found.extend(Cell(*row, None) for row in grouped)
    if plan.raw:
        sql, params = _select(kinds, list(plan.raw), provider, model)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for hour, kind, _p, _m, dimension, status, steps, jobs, histogram in cursor:
                histogram = _as_histogram(histogram)
                found.append(
                    Cell(kind, _as_hour(hour), dimension, status, int(steps), int(jobs), histogram)
                )
    return found


def job_totals(plan: Plan, provider: str = "", model: str = "") -> dict[tuple[str, str], list]:
    """Jobs started in the plan's range per (provider, model): [jobs, failed-family jobs].
    Rollup ranges from the JOBS rows (one small aggregate), raw ranges from Job rows; the same
    numbers as counting Job rows over the whole range. Kept on the plan: the headlines and the
    provider panel read the same totals."""
    key = ("job_totals", provider, model)
    if key in plan.fetched:
        return plan.fetched[key]
    totals: dict[tuple[str, str], list] = plan.fetched.setdefault(key, {})
    subject = {name: value for name, value in (("provider", provider), ("model", model)) if value}
    if plan.rollup:
        span = Q()
        for since, until in plan.rollup:
            span |= Q(hour__gte=since, hour__lt=until)
        rows = (
            DashboardRollup.objects.filter(span, kind=Kind.JOBS, **subject)
            .values_list("provider", "model", "status")
            .annotate(n_jobs=Sum("jobs"))
            .order_by()
        )
        for row_provider, row_model, status, jobs in rows:
            entry = totals.setdefault((row_provider, row_model), [0, 0])
            entry[0] += jobs
            if status == FAILED_STATUS:
                entry[1] += jobs
    if plan.raw:
        span = Q()
        for since, until in plan.raw:
            span |= Q(started_at__gte=since, started_at__lt=until)
        rows = (
            Job.objects.filter(span, **subject)
            .values_list("provider", "model")
            .annotate(
                n_jobs=Count("id"),
                n_failed=Count("id", filter=Q(status__in=[s.value for s in FAILED_FAMILY])),
            )
            .order_by()
        )
        for row_provider, row_model, jobs, failed in rows:
            entry = totals.setdefault((row_provider, row_model), [0, 0])
            entry[0] += jobs
            entry[1] += failed
    return totals


def _whole_days(ranges: Iterable[tuple[datetime, datetime]]) -> list[datetime]:
    """The UTC days lying wholly inside one of these ranges."""
    days = []
    for since, until in ranges:
        day = day_floor(since)
        day = day if day == since else day + DAY
        while day + DAY <= until:
            days.append(day)
            day += DAY
    return days


def _as_hour(value) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _as_histogram(value) -> dict | None:
    return json.loads(value) if isinstance(value, str | bytes) else value


# --- duration histograms ----------------------------------------------------------------------


def bucket_of(duration_ms: float) -> int:
    """The histogram bucket of a duration (the SQL above computes the same)."""
    return math.floor(math.log(1 + max(duration_ms, 0)) * SCALE)


def merge(histograms: Iterable[dict | None]) -> dict[int, int]:
    """Stored histograms ({"b": [bucket, ...], "n": [steps, ...]}) summed: {bucket: steps}.
    Parallel lists of small integers, because a week holds thousands of them to merge."""
    histograms = [histogram for histogram in histograms if histogram and histogram["b"]]
    if not histograms:
        return {}
    total = [0] * (max(max(histogram["b"]) for histogram in histograms) + 1)
    for histogram in histograms:
        for bucket, count in zip(histogram["b"], histogram["n"], strict=True):
            total[bucket] += count
    return {bucket: count for bucket, count in enumerate(total) if count}


def percentiles(histogram: dict[int, int], fractions: Sequence[float]) -> list[float]:
    """percentile_cont of each fraction estimated from a histogram: the values at the two ranks
    around fraction*(n-1), each spread evenly inside its bucket, linearly interpolated. Each is
    inside its bucket, as the exact one is, so the error is under one bucket width (2 %)."""
    buckets = sorted(histogram.items())
    total = sum(count for _bucket, count in buckets)
    if not total:
        return [0.0 for _ in fractions]

    def value_at(rank: int) -> float:
        before = 0
        for bucket, count in buckets:
            if rank < before + count:
                low, high = math.exp(bucket / SCALE) - 1, math.exp((bucket + 1) / SCALE) - 1
                return max(0.0, low + (high - low) * (rank - before + 0.5) / count)
            before += count
        raise ValueError(rank)

    values = []
    for fraction in fractions:
        position = fraction * (total - 1)
        lower = int(position)
        value = value_at(lower)
        if position > lower:
            value += (value_at(lower + 1) - value) * (position - lower)
        values.append(value)
    return values
