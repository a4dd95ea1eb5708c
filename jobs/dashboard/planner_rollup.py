"""Pre-aggregates behind the dashboard's planner panels (docs/contract.md and docs/architecture.md).

The planner panels count, per provider/model and bucket of event ts, the distinct jobs that carry
that provider/model on job_started or on a planner event, and the parse_invalid and degraded
events (``alerts.planner_activity``). Aggregated from Event rows on every request, a week reads
every job_started of the week. A job's events may lie in several hours, so job counts do not add
up across hours; what is kept is which jobs each hour has:

- PlannerJobHour: one row per (hour, provider, model, job) with a counted event in that hour,
  with that hour's parse_invalid and degraded events of the job;
- PlannerCount hour rows: each hour's rows counted (jobs, parse_invalid, degraded);
- PlannerCount day rows: a whole past UTC day's rows counted, distinct jobs over its hours,
  compiled only for days without dirty hours (``compile_days``).

Freshness is the step rollup's (``jobs.dashboard.rollup``): the same dirty-hour marks, here the
hours of event ts that ingest, retention and purge store, delete or rewrite planner-counted
events in (``DashboardDirtyHour.objects.mark`` in their transaction), and the same ``recompute``,
which calls ``delete`` and ``insert`` for the hours it recomputes under its lock. Deleting an
hour also deletes its day's day rows, so a day row always counts the hours' current rows.

Reading a range (``activity``) gives what ``planner_activity`` gives for it: hour buckets from
the hour rows of clean whole hours, the other hours (partial at the ends, dirty) from Event rows;
day buckets from the day rows of whole clean days that have them, the rest from the membership
rows of clean hours together with the Event rows of the others, so a job with events in both is
counted once. Where a day's clean hours are one run [h1, h2) (a whole day without day rows, or
the partial days at a range's ends), its jobs are its rows whose ``prev_hour`` (the job's
previous row) is null or before h1, a count; the day's raw events then add only the jobs with no
row in the run (an index lookup per job). A day whose clean hours are broken by a dirty one
counts distinct job ids over its rows and events. One statement: a day whose rows a concurrent
refresh deletes is read from its hours in the same snapshot.

``prev_hour`` is kept exact by ``insert``, which relinks the rows of every job that had or has a
row in the recomputed hours, from the first of those hours on.
"""

from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Count, F, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Trunc

from jobs.dashboard import spans
from jobs.ingest import database
from jobs.models import (
    DEGRADED,
    PARSE_INVALID,
    Event,
    PlannerCount,
    PlannerJobHour,
)

Span = PlannerCount.Span
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
MEMBER_COLUMNS = ("hour", "provider", "model", "job_id", "parse_invalid", "degraded")
COUNT_COLUMNS = ("start", "span", "provider", "model", "jobs", "parse_invalid", "degraded")
Ranges = Sequence[tuple[datetime, datetime]]
# Jobs relinked per UPDATE (a parameter each).
RELINK_BATCH = 500


# --- writing: called by jobs.dashboard.rollup under its lock ---------------------------------


def delete(hours: Sequence[datetime]) -> set[str]:
    """Delete the rows of these hours and the day rows of their days; returns the jobs of the
    deleted membership rows (whose later rows ``insert`` relinks)."""
    days = sorted({spans.day_floor(hour) for hour in hours})
    members = PlannerJobHour.objects.filter(hour__in=hours)
    jobs = set(members.values_list("job_id", flat=True).distinct().order_by())
    members.delete()
    PlannerCount.objects.filter(
        Q(span=Span.HOUR, start__in=hours) | Q(span=Span.DAY, start__in=days)
    ).delete()
    return jobs


def insert(ranges: Ranges | None, deleted_jobs: Collection[str] = ()) -> None:
    """Insert the membership and hour rows of the whole hours in ``ranges`` (None: every hour)
    from Event rows, two INSERT ... SELECT statements, then relink ``prev_hour``. The caller
    deleted them first (``deleted_jobs``: ``delete``'s answer)."""
    events = Event.objects.all() if ranges is None else Event.objects.filter(_within("ts", ranges))
    members = (
        events.planner()
        .annotate(hour=Trunc("ts", "hour", tzinfo=UTC))
        .values("hour", "provider", "model", "job_id")
        .annotate(
            n_parse_invalid=Count("id", filter=Q(type=PARSE_INVALID)),
            n_degraded=Count("id", filter=Q(type=DEGRADED)),
        )
        .order_by()
    )
    _insert_select(PlannerJobHour, MEMBER_COLUMNS, members)
    rows = PlannerJobHour.objects.all()
    if ranges is not None:
        rows = rows.filter(_within("hour", ranges))
    hours = (
        rows.annotate(hour_start=F("hour"), hour_span=Value(Span.HOUR))
        .values("hour_start", "hour_span", "provider", "model")
        .annotate(
            n_jobs=Count("id"), n_parse_invalid=Sum("parse_invalid"), n_degraded=Sum("degraded")
        )
        .order_by()
    )
    _insert_select(PlannerCount, COUNT_COLUMNS, hours)
    _relink(ranges, deleted_jobs)


def _relink(ranges: Ranges | None, deleted_jobs: Collection[str]) -> None:
    """Set each row's ``prev_hour`` to its job's previous row's hour, for the rows from the
    first recomputed hour on of the jobs with a row deleted or inserted there (only their
    previous rows can have changed); every row when ``ranges`` is None. Only the rows whose
    link changes are written: most jobs lie in one hour (no previous row, as inserted)."""
    previous = (
        PlannerJobHour.objects.filter(
            job_id=OuterRef("job_id"),
            provider=OuterRef("provider"),
            model=OuterRef("model"),
            hour__lt=OuterRef("hour"),
        )
        .order_by("-hour")
        .values("hour")[:1]
    )
    if ranges is None:
        PlannerJobHour.objects.update(prev_hour=Subquery(previous))
        return
    inserted = PlannerJobHour.objects.filter(_within("hour", ranges))
    jobs = sorted({*deleted_jobs, *inserted.values_list("job_id", flat=True).distinct().order_by()})
    first = min(since for since, _until in ranges)
    for at in range(0, len(jobs), RELINK_BATCH):
        rows = PlannerJobHour.objects.filter(
            job_id__in=jobs[at : at + RELINK_BATCH], hour__gte=first
        ).annotate(link=Subquery(previous))
        changed = [
            PlannerJobHour(pk=pk, prev_hour=link)
            for pk, prev_hour, link in rows.values_list("pk", "prev_hour", "link")
            if prev_hour != link
        ]
        PlannerJobHour.objects.bulk_update(changed, ["prev_hour"], batch_size=RELINK_BATCH)


def compile_days(before: datetime, dirty_days: set[datetime], limit: int) -> int:
    """Count the membership rows of whole UTC days before ``before`` that have hour rows, no
    day rows yet and no dirty hour (``dirty_days``) into day rows, newest first, at most
    ``limit`` days; returns how many. A week then reads about 7 rows per provider/model, not
    a row per job."""
    hours = PlannerCount.objects.filter(span=Span.HOUR, start__lt=before)
    by_day = hours.annotate(day=Trunc("start", "day", tzinfo=UTC))
    days = set(by_day.values_list("day", flat=True).distinct().order_by())
    days -= set(PlannerCount.objects.filter(span=Span.DAY).values_list("start", flat=True))
    newest = sorted(days - dirty_days, reverse=True)[:limit]
    for day in newest:
        counts = (
            PlannerJobHour.objects.filter(hour__gte=day, hour__lt=day + DAY)
            .annotate(day_start=Value(day), day_span=Value(Span.DAY))
            .values("day_start", "day_span", "provider", "model")
            .annotate(
                n_jobs=Count("job_id", distinct=True),
                n_parse_invalid=Sum("parse_invalid"),
                n_degraded=Sum("degraded"),
            )
            .order_by()
        )
        _insert_select(PlannerCount, COUNT_COLUMNS, counts)
    return len(newest)


def delete_all() -> None:
    PlannerJobHour.objects.all().delete()
    PlannerCount.objects.all().delete()


def _insert_select(model, columns: Sequence[str], rows: QuerySet) -> None:
    """INSERT INTO model's table (columns) the SELECT ``rows`` compiles to: its values() and
    annotations in ``columns`` order (Django 5.2 keeps values()'s order)."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    names = ", ".join(quote(model._meta.get_field(name).column) for name in columns)
    select, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(f"INSERT INTO {table} ({names}) {select}", params)


def _within(name: str, ranges: Ranges) -> Q:
    """``name`` lies in one of the [since, until) ranges."""
    condition = Q()
    for since, until in ranges:
        condition |= Q(**{f"{name}__gte": since, f"{name}__lt": until})
    return condition


# --- reading ----------------------------------------------------------------------------------


def activity(
    rollup: Ranges,
    raw: Ranges,
    bucket: str,
    provider: str = "",
    model: str = "",
) -> list[dict]:
    """``alerts.planner_activity``'s rows (provider, model, bucket, jobs, parse_invalid,
    degraded, in that order) for the range made of ``rollup`` (whole hours without a dirty
    mark, read from the pre-aggregates) and ``raw`` (read from Event rows), which do not
    overlap. ``bucket``: "hour" or "day" (UTC). One statement."""
    members_table = connection.ops.quote_name(PlannerJobHour._meta.db_table)
    counts_table = connection.ops.quote_name(PlannerCount._meta.db_table)
    subject, subject_params = "", []
    for name, value in (("provider", provider), ("model", model)):
        if value:
            subject += f" AND UPPER({name}) = UPPER(%s)"
            subject_params.append(value)
    summaries: list[tuple[str, list]] = []  # (SQL, params): rows of b, p, m, jobs, pi, dg
    # Rows of b, p, m, j, pi, dg, d: a job once per row; d = 1 when a run counts it already.
    members: list[tuple[str, list]] = []
    runs: dict[datetime, tuple[datetime, datetime]] = {}  # a day's one run of clean hours

    def counts(condition: str, params: list) -> None:
        summaries.append(
            (
                f"SELECT {database.sql_trunc_utc('start', bucket)} AS b, provider AS p, "
                "model AS m, jobs, parse_invalid AS pi, degraded AS dg "
                f"FROM {counts_table} WHERE {condition}{subject}",
                [*params, *subject_params],
            )
        )

    def of_run(since: datetime, until: datetime, condition: str = "", params=()) -> None:
        # Each job once: its first row in the run. A run lies in one day: its bucket is
        # truncated once per provider/model, not once per row (half the statement's time).
        summaries.append(
            (
                f"SELECT {database.sql_trunc_utc('MIN(hour)', bucket)} AS b, provider AS p, "
                "model AS m, SUM(CASE WHEN prev_hour IS NULL OR prev_hour < %s THEN 1 ELSE 0 END) "
                "AS jobs, SUM(parse_invalid) AS pi, SUM(degraded) AS dg "
                f"FROM {members_table} WHERE hour >= %s AND hour < %s{condition}{subject} "
                "GROUP BY provider, model",
                [*_params_of([since, since, until]), *params, *subject_params],
            )
        )

    def of_hours(condition: str, params: list) -> None:
        members.append(
            (
                f"SELECT {database.sql_trunc_utc('hour', bucket)} AS b, provider AS p, "
                "model AS m, job_id AS j, parse_invalid AS pi, degraded AS dg, 0 AS d "
                f"FROM {members_table} WHERE {condition}{subject}",
                [*params, *subject_params],
            )
        )

    if rollup and bucket == "hour":
        counts(f"span = '{Span.HOUR}' AND {_sql_within('start', rollup)}", _params(rollup))
    elif rollup:
        days = spans.whole_days(rollup)
        for day, pieces in spans.by_day(spans.without_days(rollup, days)).items():
            if len(pieces) == 1:
                runs[day] = pieces[0]
                of_run(*pieces[0])
            else:  # broken by a dirty hour: distinct job ids
                of_hours(_sql_within("hour", pieces), _params(pieces))
        if days:
            listed = ", ".join(["%s"] * len(days))
            counts(f"span = '{Span.DAY}' AND start IN ({listed})", _params_of(days))
        for day in days:
            # The day's hours, unless it is compiled: a condition on no column of the rows,
            # which PostgreSQL checks once, before reading any (a "one-time filter"). In the
            # same statement as the day rows: a day a refresh uncompiles meanwhile is read
            # from its hours, never from neither.
            of_run(
                day,
                day + DAY,
                f" AND NOT EXISTS (SELECT 1 FROM {counts_table} "
                f"WHERE span = '{Span.DAY}' AND start = %s)",
                _params_of([day]),
            )
    if raw:
        # Which events count, and their provider and model, as planner_activity has them.
        events = (
            Event.objects.filter(_within("ts", raw))
            .planner(provider, model)
            .values("ts", "provider", "model", "job_id", "type")
        )
        events_sql, events_params = events.query.sql_with_params()
        # An event's job is counted already when its day has a run holding a row of the job:
        # a lookup per event, which grows with the live hour's events, where a hash of the
        # day's whole run grows with the day (bench/README.md, "Measurements behind the code").
        counted, counted_params = ["0 = 1"], []
        for day, (since, until) in runs.items():
            counted.append(
                f"(e.ts >= %s AND e.ts < %s AND EXISTS (SELECT 1 FROM {members_table} x "
                "WHERE x.job_id = e.job_id AND x.provider = e.provider AND x.model = e.model "
                f"AND x.hour >= %s AND x.hour < %s{database.sql_lookup_each()}))"
            )
            counted_params.extend(_params_of([day, day + DAY, since, until]))
        members.append(
            (
                f"SELECT {database.sql_trunc_utc('e.ts', bucket)} AS b, e.provider AS p, "
                "e.model AS m, e.job_id AS j, CASE WHEN e.type = %s THEN 1 ELSE 0 END AS pi, "
                "CASE WHEN e.type = %s THEN 1 ELSE 0 END AS dg, "
                f"CASE WHEN {' OR '.join(counted)} THEN 1 ELSE 0 END AS d FROM ({events_sql}) e",
                [PARSE_INVALID, DEGRADED, *counted_params, *events_params],
            )
        )
    parts, params = [], []
    for sql, part_params in summaries:
        parts.append(sql)
        params.extend(part_params)
    if members:
        union = []
        for sql, part_params in members:
            union.append(sql)
            params.extend(part_params)
        # Each job once per bucket, then the jobs counted: two hash aggregates, where
        # COUNT(DISTINCT) would sort every row by its (collated) text columns.
        parts.append(
            "SELECT g.b, g.p, g.m, SUM(1 - g.d) AS jobs, SUM(g.pi) AS pi, SUM(g.dg) AS dg FROM ("
            "SELECT u.b, u.p, u.m, u.j, SUM(u.pi) AS pi, SUM(u.dg) AS dg, MAX(u.d) AS d "
            f"FROM ({' UNION ALL '.join(union)}) u GROUP BY u.b, u.p, u.m, u.j"
            ") g GROUP BY g.b, g.p, g.m"
        )
    if not parts:
        return []
    # A day's run and its raw events give two rows of one bucket.
    sql = (
        "SELECT r.b, r.p, r.m, SUM(r.jobs), SUM(r.pi), SUM(r.dg) "
        f"FROM ({' UNION ALL '.join(parts)}) r GROUP BY r.b, r.p, r.m ORDER BY r.p, r.m, r.b"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [
            {
                "provider": p,
                "model": m,
                "bucket": _as_utc(b),
                "jobs": int(jobs),
                "parse_invalid": int(pi),
                "degraded": int(dg),
            }
            for b, p, m, jobs, pi, dg in cursor.fetchall()
        ]


def _sql_within(column: str, ranges: Ranges) -> str:
    return "(" + " OR ".join([f"({column} >= %s AND {column} < %s)"] * len(ranges)) + ")"


def _params(ranges: Ranges) -> list:
    return _params_of([value for pair in ranges for value in pair])


def _params_of(moments: Sequence[datetime]) -> list:
    return [database.adapt_datetime(moment) for moment in moments]


def _as_utc(value) -> datetime:
    """A bucket as the driver returns it (SQLite: text; PostgreSQL: a timestamp without time
    zone, as Trunc with a tzinfo makes it) as an aware UTC datetime."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
