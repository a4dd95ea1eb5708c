"""Everything that differs between PostgreSQL and SQLite, in one module (docs/architecture.md):
bulk writes (COPY and upserts), advisory locks, how PostgreSQL's timestamps are read, and the
SQL fragments whose spelling differs. Nothing else in traceviz branches on the database
vendor (query expressions spell themselves per database with ``as_postgresql``/``as_sqlite``).

Bulk writes: PostgreSQL COPY where it is available, multi-row statements elsewhere. COPY moves
rows without building statements with thousands of placeholders, and a staged
``INSERT ... ON CONFLICT`` replaces Django's ``bulk_update`` (a CASE expression per column and
row), which dominated ingest time for jobs whose events arrive over several batches (see
bench/README.md). Both paths write the same rows.
"""

import functools
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence, Set
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

import psycopg
from django.db import (
    IntegrityError,
    OperationalError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.models.expressions import RawSQL
from psycopg.adapt import Loader
from psycopg.pq import Format

from jobs.models import BoundedSum, Event, Job, JSONTextField, ProjectionMark, json_text

POSTGRES = "postgresql"

# SQLite allows 32,766 bound variables per statement: rows of up to ~60 columns fit 500 at once.
SQLITE_ROWS_PER_STATEMENT = 500
# Up to this many rows, one multi-row INSERT beats COPYing into a staging table first (three
# more round trips) on PostgreSQL. Not more: the driver's placeholder parsing grows with rows x
# columns (bench/README.md, "Measurements behind the code").
STAGED_ROWS = 4
# The fields whose values are written as JSON text (jsonb or text columns).
JSON_FIELDS = (models.JSONField, JSONTextField)


def _fields(model: type[models.Model]) -> list[models.Field]:
    """The columns a row is written with: not the id, nor what the database generates."""
    return [f for f in model._meta.concrete_fields if not (f.primary_key or f.generated)]


def _field(model: type[models.Model], name: str) -> models.Field:
    """``model``'s column field ``name`` (``get_field`` may also answer with a relation's
    reverse side, which has no column)."""
    field = model._meta.get_field(name)
    assert isinstance(field, models.Field), f"{model.__name__}.{name} is not a column"
    return field


def _values(fields: Sequence[models.Field], rows: Iterable[dict]) -> list[list]:
    """Row dicts (by attname; missing fields take their default) as database values."""
    names = [f.attname for f in fields]
    defaults = [f.get_default() for f in fields]
    if connection.vendor == POSTGRES:
        # map() looks every value up in C: a live batch converts some 600 rows of 40 columns.
        json_columns = [i for i, f in enumerate(fields) if isinstance(f, JSON_FIELDS)]
        out = []
        for row in rows:
            values = list(map(row.get, names, defaults))
            for i in json_columns:
                values[i] = json_text(values[i])
            out.append(values)
        return out
    return [
        [
            f.get_db_prep_save(value, connection)
            for f, value in zip(fields, map(row.get, names, defaults), strict=True)
        ]
        for row in rows
    ]


# The staging tables each database session has, once the transaction creating them committed
# (a rollback drops them again), by the driver's connection.
_STAGES: "weakref.WeakKeyDictionary[object, set[str]]" = weakref.WeakKeyDictionary()


def _stage(cursor, table: str, columns: str, rows: Iterable[Sequence]) -> str:
    """COPY rows into a temporary table shaped like ``columns`` of ``table`` (created once per
    database session); returns its name. Whatever reads it must empty it (``_insert_returning``
    deletes what it reads): ON COMMIT empties it only when the outermost transaction commits,
    and a second batch inside one transaction (an import, a test) must not see the first one's
    rows."""
    stage = connection.ops.quote_name(f"tv_stage_{table.strip(chr(34))}")
    created = _STAGES.setdefault(connection.connection, set())
    if stage not in created:
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS "
            f"AS SELECT {columns} FROM {table} WITH NO DATA"
        )
        connection.on_commit(lambda: created.add(stage))
    with (
        connection.wrap_database_errors,
        cursor.cursor.copy(f"COPY {stage} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)
    return stage


def _insert_returning(
    table: str, fields: Sequence[models.Field], rows: Sequence[Sequence], tail: str
) -> list[tuple]:
    """``INSERT ... <tail>`` of ``rows`` (values of ``fields``, as ``_values`` makes them),
    returning what ``tail``'s RETURNING names (nothing when it has no RETURNING). On
    PostgreSQL, a batch of more than STAGED_ROWS rows is COPYed into a staging table first;
    fewer go as one multi-row statement (a live producer's batch touches a row or two)."""
    quote = connection.ops.quote_name
    columns = ", ".join(quote(f.column) for f in fields)
    returning = "RETURNING" in tail
    out: list[tuple] = []
    with connection.cursor() as cursor:
        if connection.vendor == POSTGRES and len(rows) > STAGED_ROWS:
            stage = _stage(cursor, table, columns, rows)
            cursor.execute(
                f"WITH staged AS (DELETE FROM {stage} RETURNING {columns}) "
                f"INSERT INTO {table} ({columns}) SELECT {columns} FROM staged {tail}"
            )
            return list(map(tuple, cursor.fetchall())) if returning else []
        json_cast = "::jsonb" if connection.vendor == POSTGRES else ""
        placeholder = (
            "("
            + ", ".join(
                f"%s{json_cast}" if isinstance(f, models.JSONField) else "%s" for f in fields
            )
            + ")"
        )
        for start in range(0, len(rows), SQLITE_ROWS_PER_STATEMENT):
            chunk = rows[start : start + SQLITE_ROWS_PER_STATEMENT]
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES "
                + ", ".join([placeholder] * len(chunk))
                + f" {tail}",
                [value for row in chunk for value in row],
            )
            if returning:
                out.extend(map(tuple, cursor.fetchall()))
    return out


def _names(model: type[models.Model], fields: Sequence[models.Field]) -> tuple[str, str]:
    quote = connection.ops.quote_name
    return quote(model._meta.db_table), ", ".join(quote(f.column) for f in fields)


def insert_rows(model: type[models.Model], rows: Sequence[dict]) -> None:
    """Insert rows given as ``{attname: value}`` dicts (ids are not read back)."""
    if not rows:
        return
    fields = _fields(model)
    if connection.vendor != POSTGRES:
        model._default_manager.bulk_create([model(**row) for row in rows], batch_size=500)
        return
    table, columns = _names(model, fields)
    with (
        connection.cursor() as cursor,
        connection.wrap_database_errors,
        cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for values in _values(fields, rows):
            copy.write_row(values)


def upsert_rows(
    model: type[models.Model],
    rows: Sequence[dict],
    unique: Sequence[str],
    *,
    returning: bool = True,
) -> dict[tuple, int]:
    """Insert rows, or update every other column of the row with the same ``unique`` values
    (attnames of a unique constraint; the row keeps its id). Returns ``{unique values: id}``
    when ``returning``. ``rows`` must not repeat a key."""
    if not rows:
        return {}
    fields = _fields(model)
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    by_attname = {f.attname: f for f in fields}
    key = ", ".join(quote(by_attname[name].column) for name in unique)
    updates = ", ".join(
        f"{quote(f.column)} = EXCLUDED.{quote(f.column)}" for f in fields if f.attname not in unique
    )
    tail = f"ON CONFLICT ({key}) DO UPDATE SET {updates}"
    if not returning:
        _insert_returning(table, fields, _values(fields, rows), tail)
        return {}
    tail += f" RETURNING {key}, {quote(model._meta.pk.column)}"
    found = _insert_returning(table, fields, _values(fields, rows), tail)
    return {tuple(row[:-1]): row[-1] for row in found}


def insert_new_events(
    model: type[models.Model],
    columns: Sequence[str],
    rows: Iterable[tuple],
    *,
    unseen: Set[str] = frozenset(),
) -> set[tuple[str, str]]:
    """Insert event rows unless (job_id, event_id) is stored already; returns the new rows'
    (job_id, event_id).

    ``rows`` hold database values in ``columns`` order: job_id, event_id and partition_day
    first (the unique key), the payload as JSON text. The caller must hold the batch's append
    locks (``locks.lock_appends``): on PostgreSQL the stored keys are read first, one query per
    day (so each reads one partition), and the new rows COPYed straight in, which is only safe
    while nobody else can insert events of these jobs. ``unseen`` are jobs none of whose
    stored events can be among the rows (the caller knows why: ``projection.unseen_jobs``):
    their rows are not looked up. Should one be stored after all, the COPY's unique violation
    is undone (a savepoint) and every row is looked up.
    """
    table = connection.ops.quote_name(model._meta.db_table)
    rows = list(rows)
    if connection.vendor != POSTGRES:
        keys = ", ".join(columns[:3])
        tail = f"ON CONFLICT ({keys}) DO NOTHING RETURNING {', '.join(columns[:2])}"
        by_attname = {f.attname: f for f in model._meta.concrete_fields}
        return set(_insert_returning(table, [by_attname[c] for c in columns], rows, tail))
    if unseen:
        try:
            with transaction.atomic():
                return _copy_new_events(model, table, columns, rows, unseen)
        except IntegrityError:
            pass
    return _copy_new_events(model, table, columns, rows, frozenset())


def _copy_new_events(
    model: type[models.Model],
    table: str,
    columns: Sequence[str],
    rows: list[tuple],
    unlooked: Set[str],
) -> set[tuple[str, str]]:
    """``insert_new_events`` on PostgreSQL: the stored keys of the rows of jobs not in
    ``unlooked`` read, then the other rows COPYed in."""
    by_day: dict = {}
    for row in rows:
        if row[0] not in unlooked:
            by_day.setdefault(row[2], []).append(row[:2])
    stored: set[tuple] = set()
    with connection.cursor() as cursor:
        for day, pairs in by_day.items():
            stored.update(_select_pairs(cursor, model, ("job_id", "event_id"), pairs, day, ()))
        new_rows, new_keys = [], set()
        for row in rows:
            if (key := (row[0], row[1])) not in stored and key not in new_keys:
                new_keys.add(key)
                new_rows.append(row)
        # The driver's own cursor: its errors (a connection lost mid-COPY) become Django's, so
        # the views' outage handling answers 503 rather than 500.
        with (
            connection.wrap_database_errors,
            cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
        ):
            for row in new_rows:
                copy.write_row(row)
    return new_keys


def adapt_datetime(value: datetime | None):
    """A datetime as the database driver takes it in a raw statement."""
    return connection.ops.adapt_datetimefield_value(value)


def add_to_counters(model: type[models.Model], deltas: Mapping[tuple[str, str], float]) -> None:
    """Add each delta to its (name, labels) row of ``model`` (a counter table with a unique
    (name, labels) constraint) in one upsert statement, in the caller's transaction."""
    rows = [(name, labels, value) for (name, labels), value in sorted(deltas.items()) if value]
    if not rows:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    sql = (
        f"INSERT INTO {table} (name, labels, value) VALUES "
        + ", ".join(["(%s, %s, %s)"] * len(rows))
        + f" ON CONFLICT (name, labels) DO UPDATE SET value = {table}.value + excluded.value"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for row in rows for value in row])


def add_to_counts(
    model: type[models.Model],
    key: tuple[str, ...],
    count: str,
    deltas: Mapping[tuple, int],
) -> None:
    """Add each delta to the ``count`` column of ``model``'s row whose ``key`` columns
    (attnames of a unique constraint) hold the delta's key, creating missing rows: one upsert
    statement per 500 rows, in the caller's transaction."""
    if not deltas:
        return
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    fields = [_field(model, name.removesuffix("_id")) for name in key]
    count_column = quote(_field(model, count).column)
    key_columns = ", ".join(quote(f.column) for f in fields)
    items = list(deltas.items())
    for start in range(0, len(items), SQLITE_ROWS_PER_STATEMENT):
        chunk = items[start : start + SQLITE_ROWS_PER_STATEMENT]
        placeholders = ", ".join(["(" + ", ".join(["%s"] * (len(key) + 1)) + ")"] * len(chunk))
        params: list[Any] = []
        for values, delta in chunk:
            params.extend(
                f.get_db_prep_save(v, connection) for f, v in zip(fields, values, strict=True)
            )
            params.append(delta)
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} ({key_columns}, {count_column}) VALUES {placeholders} "
                f"ON CONFLICT ({key_columns}) DO UPDATE SET {count_column} = "
                f"{table}.{count_column} + excluded.{count_column}",
                params,
            )


def add_to_totals(
    model: type[models.Model],
    rows: Sequence[tuple[int, int, int, datetime | None, datetime | None]],
) -> None:
    """For each (pk, jobs, steps, first, last): add ``jobs`` and ``steps`` to the row's
    ``job_count`` and ``step_count`` and widen its ``first_seen``..``last_seen`` to take in
    ``first``..``last`` (None: keep them). One statement sent for all rows, in their order (the
    caller sorts by pk, so concurrent batches lock rows in the same order)."""
    if not rows:
        return
    table = connection.ops.quote_name(model._meta.db_table)
    least, greatest = ("LEAST", "GREATEST") if connection.vendor == POSTGRES else ("MIN", "MAX")
    # PostgreSQL's LEAST skips a NULL, SQLite's MIN returns it: COALESCE gives both the same.
    sql = (
        f"UPDATE {table} SET job_count = job_count + %s, step_count = step_count + %s, "
        f"first_seen = COALESCE({least}(first_seen, %s), %s, first_seen), "
        f"last_seen = COALESCE({greatest}(last_seen, %s), %s, last_seen) WHERE id = %s"
    )
    params = []
    for pk, jobs, steps, first, last in rows:
        first, last = (adapt_datetime(t) if t is not None else None for t in (first, last))
        params.append((jobs, steps, first, first, last, last, pk))
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def count_in_window(model: type[models.Model], key: str, window_start: datetime) -> int:
    """Add one to ``key``'s count in the window starting at ``window_start`` (a rate-counter
    table unique on (key, window_start)); returns the new count. One statement, so concurrent
    web processes never lose a count."""
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (key, window_start, count) VALUES (%s, %s, 1) "
            "ON CONFLICT (key, window_start) DO UPDATE SET count = "
            f"{table}.count + 1 RETURNING count",
            [key, adapt_datetime(window_start)],
        )
        (count,) = cursor.fetchone()
    return count


# --- day partitions (PostgreSQL) -----------------------------------------------------------

# The tables partitioned by range of partition_day, one partition per UTC day (migration 0015).
PARTITIONED_TABLES = ("jobs_event", "jobs_step")
PARTITION_LOCK_KEYS = (0x747A76, 2)  # beside the rollup's (0x747A76, 1)
# Days whose partitions this process has seen exist.
_partition_days: set[date] = set()


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def partition_days() -> list[date]:
    """The days that have partitions (of every partitioned table), oldest first; none on
    SQLite, which partitions nothing."""
    if connection.vendor != POSTGRES:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = %s::regclass",
            [PARTITIONED_TABLES[0]],
        )
        names = [name for (name,) in cursor.fetchall()]
    prefix = f"{PARTITIONED_TABLES[0]}_p"
    return sorted(
        datetime.strptime(name.removeprefix(prefix), "%Y%m%d").date()
        for name in names
        if name.startswith(prefix)
    )


def ensure_partitions(days: Iterable[date]) -> None:
    """Create the partitions of these days where missing. Call it outside a transaction,
    before the one that writes rows of those days: creating a partition locks its table until
    the creating transaction ends. Cached: once a day's partitions exist, a call costs a set
    lookup. Nothing to do on SQLite."""
    if connection.vendor != POSTGRES:
        return
    missing = set(days) - _partition_days
    if not missing:
        return
    existing = set(partition_days())
    if missing - existing:
        with transaction.atomic():
            lock_pair(PARTITION_LOCK_KEYS, wait=True)
            with connection.cursor() as cursor:
                for day in sorted(missing - existing):
                    end = day + timedelta(days=1)
                    for table in PARTITIONED_TABLES:
                        cursor.execute(
                            f"CREATE TABLE IF NOT EXISTS {partition_name(table, day)} "
                            f"PARTITION OF {table} "
                            f"FOR VALUES FROM ('{day.isoformat()}') TO ('{end.isoformat()}')"
                        )
    if not connection.in_atomic_block:  # cache only what is committed
        _partition_days.update(existing | missing)


def drop_partitions(day: date) -> None:
    """Drop the day's partitions, with every row in them (the caller deleted the day's jobs
    first, holding their locks, so no writer can still add rows of that day)."""
    _partition_days.discard(day)
    with connection.cursor() as cursor:
        # Dropping a partition locks its table: give up (and retry next run) rather than queue
        # every reader and writer behind a long query.
        cursor.execute("SET LOCAL lock_timeout = '10s'")
        # A table with pending deferred constraint checks cannot be dropped: run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        for table in PARTITIONED_TABLES:
            cursor.execute(f"DROP TABLE IF EXISTS {partition_name(table, day)}")


# --- reading timestamps (PostgreSQL) ----------------------------------------------------------


def read_timestamps_fast(sender, **kwargs) -> None:
    """``connection_created``: read timestamptz values with ``datetime.fromisoformat``.

    Django's loader subclasses psycopg's pure-Python one (the C one cannot be subclassed) and
    then calls ``datetime.replace`` on every value, several times the cost of parsing it here
    (bench/README.md, "Measurements behind the code"); a live batch reads hundreds of
    timestamps, a 10,000-step job's page tens of thousands. The values are Django's: the
    session's time (Django sets the session to UTC) in the time zone Django's loader gives.
    What fromisoformat does not read (infinity, years past 9999, BC, a DateStyle other than
    ISO) goes to psycopg's parser, which reads it or raises as before."""
    wrapper = kwargs["connection"]  # the DatabaseWrapper whose connection was just made
    if wrapper.vendor != POSTGRES:
        return
    adapters = wrapper.connection.adapters
    oid = adapters.types["timestamptz"].oid
    adapters.register_loader(oid, _timestamp_loader(adapters.get_loader(oid, Format.TEXT).timezone))


@functools.cache
def _timestamp_loader(tz: tzinfo | None) -> type[Loader]:
    class TimestampLoader(Loader):
        timezone = tz  # Django's cursors compare it with the connection's

        def load(self, data):
            try:
                moment = datetime.fromisoformat(bytes(data).decode())
            except ValueError:  # rare: psycopg's own loader, made only then
                parser = psycopg.adapters.get_loader(self.oid, Format.TEXT)
                if parser is None:  # none of psycopg's either: the parse error stands
                    raise
                moment = parser(self.oid, self.connection).load(data)
            if moment.tzinfo is self.timezone:
                return moment  # replace() costs twice the parse
            return moment.replace(tzinfo=self.timezone)

    return TimestampLoader


# --- dirty marks -----------------------------------------------------------------------------

DIRTY_CHANNEL = "traceviz_dirty"


def mark_dirty(
    days: Mapping[str, date], at: datetime, *, whole: Set[str] = frozenset()
) -> dict[str, tuple[int, date, bool]]:
    """Upsert the projection marks of these jobs (job id -> the partition day a new mark takes)
    in one statement, in job id order: each mark's generation goes up by one (a new mark starts
    at 1), its first_marked_at is ``at`` when it was clean, its marked_at is ``at``. Returns by
    job id: (the generation this append stores its events under, the job's partition day as
    the mark holds it, whether the job was clean before). ``whole``: jobs the next fold
    replays from every event. The row locks last until the caller's transaction ends."""
    if not days:
        return {}
    table = connection.ops.quote_name(ProjectionMark._meta.db_table)
    found: dict[str, tuple[int, date, bool]] = {}
    with connection.cursor() as cursor:
        for rows, params in _mark_rows(sorted(days), days, whole, adapt_datetime(at)):
            cursor.execute(
                f"INSERT INTO {table} AS mark (job_id, partition_day, generation, projected, "
                f"whole, first_marked_at, marked_at) {rows} "
                "ON CONFLICT (job_id) DO UPDATE SET generation = mark.generation + 1, "
                "whole = (mark.whole OR excluded.whole), first_marked_at = CASE WHEN "
                "mark.generation > mark.projected THEN mark.first_marked_at "
                "ELSE excluded.first_marked_at END, marked_at = excluded.marked_at "
                "RETURNING job_id, partition_day, generation, projected",
                params,
            )
            for job_id, day, generation, projected in cursor.fetchall():
                if isinstance(day, str):
                    day = date.fromisoformat(day)
                found[job_id] = (generation, day, projected == generation - 1)
    return found


def _mark_rows(
    job_ids: Sequence[str], days: Mapping[str, date], whole: Set[str], stamp
) -> Iterator[tuple[str, list]]:
    """The new marks of ``mark_dirty``'s upsert, in job id order, as the SQL of its rows with
    their parameters: on PostgreSQL one ``unnest`` of a column an array (few parameters, which
    psycopg converts once: ``AnyOf``), on SQLite VALUES of SQLITE_ROWS_PER_STATEMENT rows at
    most a statement."""
    if connection.vendor == POSTGRES:
        yield (
            "SELECT k.job_id, k.day, 1, 0, k.whole, %s, %s FROM "
            "unnest(%s::varchar[], %s::date[], %s::boolean[]) AS k(job_id, day, whole)",
            [
                stamp,
                stamp,
                list(job_ids),
                [days[j] for j in job_ids],
                [j in whole for j in job_ids],
            ],
        )
        return
    adapt_day = connection.ops.adapt_datefield_value
    for start in range(0, len(job_ids), SQLITE_ROWS_PER_STATEMENT):
        chunk = job_ids[start : start + SQLITE_ROWS_PER_STATEMENT]
        yield (
            "VALUES " + ", ".join(["(%s, %s, 1, 0, %s, %s, %s)"] * len(chunk)),
            [v for j in chunk for v in (j, adapt_day(days[j]), j in whole, stamp, stamp)],
        )


def set_projected(generations: Mapping[str, int]) -> None:
    """Set these jobs' marks projected up to the generation given (by job id); a mark whose
    generation is that one stops asking for a whole replay (``whole``), a newer one keeps it
    and is dated from its oldest event the fold did not take (``first_marked_at``: the lag's
    clock; its own append's time when that append stored no event, a resend): a job that got
    events during every fold is never clean, and the time since it last was would grow as
    long as its producer runs.
    One statement per SQLITE_ROWS_PER_STATEMENT jobs, written by hand: the ORM's Case/When of
    a projector batch cost more to build than the fold it closes."""
    quote = connection.ops.quote_name
    table = quote(ProjectionMark._meta.db_table)
    events = quote(Event._meta.db_table)
    job_ids = sorted(generations)
    with connection.cursor() as cursor:
        for start in range(0, len(job_ids), SQLITE_ROWS_PER_STATEMENT):
            chunk = job_ids[start : start + SQLITE_ROWS_PER_STATEMENT]
            through = f"CASE {table}.job_id " + "WHEN %s THEN %s " * len(chunk) + "END"
            pairs = [value for job_id in chunk for value in (job_id, generations[job_id])]
            left = (
                f"SELECT min(event.received_at) FROM {events} AS event "
                f"WHERE event.job_id = {table}.job_id "
                f"AND event.partition_day = {table}.partition_day "
                f"AND event.generation > {through}"
            )
            cursor.execute(
                f"UPDATE {table} SET projected = {through}, "
                f"whole = (whole AND generation <> {through}), "
                f"first_marked_at = CASE WHEN generation = {through} THEN first_marked_at "
                f"ELSE coalesce(({left}), marked_at) END "
                f"WHERE job_id IN ({', '.join(['%s'] * len(chunk))})",
                [*pairs, *pairs, *pairs, *pairs, *chunk],
            )


def after_marks(marks: Mapping[str, tuple[int, int]]) -> RawSQL:
    """A filter of the event table: the row's job is one of ``marks`` (job id -> (projected,
    generation)) and its generation is after the first and at most the second. Written by
    hand: the ORM's OR of one Q per job cost more to build than the rows it reads."""
    terms = "(job_id = %s AND generation > %s AND generation <= %s)"
    params = [
        value for job_id, (after, through) in marks.items() for value in (job_id, after, through)
    ]
    return RawSQL(" OR ".join([terms] * len(marks)), params, output_field=models.BooleanField())


def notify_dirty() -> None:
    """Wake the projectors waiting on PostgreSQL's LISTEN (sent when the caller's transaction
    commits); on SQLite they poll."""
    if connection.vendor != POSTGRES:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [DIRTY_CHANNEL])


def wait_for_dirty(timeout: float) -> None:
    """Return when an append notifies (PostgreSQL, ``notify_dirty``) or after ``timeout``
    seconds (on SQLite: a plain sleep, the polling interval). Outside any transaction."""
    if connection.vendor != POSTGRES:
        time.sleep(timeout)
        return
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute(f"LISTEN {DIRTY_CHANNEL}")
    driver = connection.connection
    with connection.wrap_database_errors:
        for _ in driver.notifies(timeout=timeout, stop_after=1):
            pass


# --- advisory locks --------------------------------------------------------------------------


def lock_keys(keys: list[int]) -> None:
    """Take transaction-level advisory locks on ``keys`` (sorted by the caller, so two callers
    never deadlock). SQLite serialises writers by itself: nothing to do there."""
    if connection.vendor != POSTGRES or not keys:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) AS k ORDER BY k", [keys]
        )


def lock_out_writers(model: type[models.Model], timeout: str = "5s") -> bool:
    """Hold off writes to ``model``'s table until the caller's transaction (it must be in one)
    ends, reads going on: once this returns True, every transaction that wrote to it has
    ended. Retention takes it on the span resources before it deletes those no event
    references: every batch writes its resources (``INSERT ... ON CONFLICT DO NOTHING``, even
    those already stored) in its own transaction before its events, so none is about to
    reference one that goes. False when writers held the table past ``timeout``: the caller
    gives up rather than queue ingest behind it. SQLite serialises writers by itself."""
    if connection.vendor != POSTGRES:
        return True
    table = connection.ops.quote_name(model._meta.db_table)
    try:
        # A savepoint: a timeout leaves the caller's transaction usable.
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET LOCAL lock_timeout = '{timeout}'")
            cursor.execute(f"LOCK TABLE {table} IN EXCLUSIVE MODE")
    except OperationalError:
        return False
    return True


def try_lock_keys(keys: list[int]) -> set[int]:
    """Take what can be taken at once of the transaction-level advisory locks on ``keys``;
    returns those taken (the others are someone else's). Never waits, so in any order. On
    SQLite, whose writers are serialised by the database itself: all of them."""
    if connection.vendor != POSTGRES or not keys:
        return set(keys)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT k FROM unnest(%s::bigint[]) AS k WHERE pg_try_advisory_xact_lock(k)", [keys]
        )
        return {row[0] for row in cursor.fetchall()}


def lock_pair(keys: tuple[int, int], *, wait: bool) -> bool:
    """A transaction-level advisory lock in the two-key space (apart from the per-job keys).
    With ``wait`` False, returns at once: True when taken, False when someone else holds it.
    Always True on SQLite."""
    if connection.vendor != POSTGRES:
        return True
    function = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {function}(%s, %s)", keys)
        return wait or cursor.fetchone()[0]


# --- SQL fragments ---------------------------------------------------------------------------


def sql_job_rows(table: str, alias: str, job: str, partitioned: bool = True) -> str:
    """A FROM item joining the rows of ``table`` (with job_id; ``partitioned``: and with
    partition_day, partitioned like the jobs') to the job aliased ``job``. On PostgreSQL a
    LATERAL lookup per job, by the table's (job_id, ...) index (in the job's own partition): a
    plain join over a few jobs is planned as a hash join over every partition once index-only
    scans are cheap, and over the unpartitioned calls as a scan of all of them: costs that grow
    with the tables, where the lookups grow with the jobs (bench/README.md, "Measurements
    behind the code"); OFFSET 0 keeps the planner from flattening it back into that join.
    Elsewhere a plain join."""
    if connection.vendor == POSTGRES:
        day = f" AND partition_day = {job}.partition_day" if partitioned else ""
        return (
            f"CROSS JOIN LATERAL (SELECT * FROM {table} WHERE job_id = {job}.id{day}"
            f"{sql_lookup_each()}) {alias}"
        )
    return f"JOIN {table} {alias} ON {alias}.job_id = {job}.id"


def sql_lookup_each() -> str:
    """What ends a correlated subquery that PostgreSQL should run as a lookup per outer row:
    OFFSET 0, which keeps it from hashing (or flattening) the subquery over every row it could
    match. Nothing elsewhere (SQLite looks each row up, and takes no OFFSET without LIMIT)."""
    return " OFFSET 0" if connection.vendor == POSTGRES else ""


def sql_trunc_utc(column: str, kind: str) -> str:
    """An expression truncating a timestamp column to its UTC ``kind`` ("hour" or "day"); the
    same spelling for every column of one query, so its values group together."""
    if connection.vendor == POSTGRES:
        return f"date_trunc('{kind}', {column}, 'UTC')"
    pattern = {"hour": "%%Y-%%m-%%d %%H:00:00", "day": "%%Y-%%m-%%d 00:00:00"}[kind]
    return f"strftime('{pattern}', {column})"


def sql_hours_since_epoch(column: str) -> str:
    """An expression: the whole UTC hours from 1970 to a timestamp column (an integer, which a
    page reads far faster than thousands of timestamps)."""
    if connection.vendor == POSTGRES:
        return f"(EXTRACT(EPOCH FROM {column}) / 3600)::bigint"
    return f"(CAST(strftime('%%s', {column}) AS INTEGER) / 3600)"


def sql_bounded_sum(column: str) -> str:
    """SUM of an integer column held at the largest 64-bit integer (``models.BoundedSum``)."""
    return BoundedSum.sql(connection.vendor, column)


def sql_json_null() -> str:
    return "NULL::jsonb" if connection.vendor == POSTGRES else "NULL"


def sql_histogram(bucket: str, count: str) -> str:
    """An aggregate building ``{"b": [bucket, ...], "n": [count, ...]}`` ordered by bucket."""
    if connection.vendor == POSTGRES:
        return (
            f"jsonb_build_object('b', jsonb_agg({bucket} ORDER BY {bucket}), "
            f"'n', jsonb_agg({count} ORDER BY {bucket}))"
        )
    return f"json_object('b', json_group_array({bucket}), 'n', json_group_array({count}))"


def rows_by_pairs(
    model: type[models.Model],
    columns: tuple[str, str],
    pairs: Sequence[tuple],
    day: date,
    select: Sequence[str],
) -> list[tuple]:
    """The ``columns`` and ``select`` values (attnames; JSON decoded) of ``model``'s rows in
    ``day``'s partition whose two ``columns`` are one of ``pairs``, read by the unique index
    that leads with the two columns."""
    if connection.vendor != POSTGRES:
        # SQLite gives text for dates and times: the model's own converters read them.
        query = model._default_manager.filter(pairs_in(model, columns, pairs)).filter(
            partition_day=day
        )
        return list(query.values_list(*columns, *select))
    with connection.cursor() as cursor:
        rows = _select_pairs(cursor, model, columns, pairs, day, select)
    decoders = [
        (index, field)
        for index, field in enumerate(
            (model._meta.get_field(name) for name in select), start=len(columns)
        )
        if isinstance(field, JSON_FIELDS)
    ]
    if not decoders:
        return rows
    out = []
    for row in rows:
        values = list(row)
        for index, field in decoders:
            # No expression: the value is a whole column's (the stubs want one).
            values[index] = field.from_db_value(values[index], None, connection)  # type: ignore[arg-type]
        out.append(tuple(values))
    return out


def _select_pairs(
    cursor,
    model: type[models.Model],
    columns: tuple[str, str],
    pairs: Sequence[tuple],
    day: date,
    select: Sequence[str],
) -> list[tuple]:
    """``rows_by_pairs`` on PostgreSQL, without decoding. Each pair is looked up on its own (a
    LATERAL subquery that OFFSET 0 keeps the planner from flattening): a semi-join of the pairs
    may be planned as a hash join over a scan of the whole partition, whose cost grows with
    the table, where these lookups grow with the pairs. The ORDER BY the unique index's next
    column, which that index gives for free, keeps a partition with no statistics yet (a new
    day's) from being read by another index that leads with the first column (the steps' (job,
    position)): that reads all of a job's rows for each pair."""
    quote = connection.ops.quote_name
    fields = [_field(model, name) for name in columns]
    first, second = (quote(f.column) for f in fields)
    wanted = ", ".join([first, second, *(quote(_field(model, name).column) for name in select)])
    types = [f.db_type(connection) for f in fields]
    cursor.execute(
        f"SELECT r.* FROM unnest(%s::{types[0]}[], %s::{types[1]}[]) AS k(a, b) "
        f"CROSS JOIN LATERAL (SELECT {wanted} FROM {quote(model._meta.db_table)} "
        f"WHERE partition_day = %s AND {first} = k.a AND {second} = k.b"
        f"{_unique_order(model, columns)} OFFSET 0) r",
        [[pair[0] for pair in pairs], [pair[1] for pair in pairs], day],
    )
    return list(map(tuple, cursor.fetchall()))


def _unique_order(model: type[models.Model], columns: tuple[str, str]) -> str:
    """ " ORDER BY" the columns that follow ``columns`` in the unique constraint leading with
    them (partition_day aside), or "" when none do."""
    for constraint in model._meta.constraints:
        if isinstance(constraint, models.UniqueConstraint) and constraint.fields[:2] == columns:
            rest = [name for name in constraint.fields[2:] if name != "partition_day"]
            quote = connection.ops.quote_name
            fields = [quote(_field(model, name).column) for name in rest]
            return f" ORDER BY {', '.join(fields)}" if fields else ""
    return ""


def pairs_in(model: type[models.Model], columns: tuple[str, str], pairs: Sequence[tuple]) -> RawSQL:
    """A filter: ``(first, second)`` of ``model``'s row is one of ``pairs``."""
    return RawSQL(*_pairs_condition(model, columns, pairs), output_field=models.BooleanField())


def _pairs_condition(
    model: type[models.Model], columns: tuple[str, str], pairs: Sequence[tuple]
) -> tuple[str, list]:
    """SQL (and its parameters) true where the row's two ``columns`` are one of ``pairs``: one
    bound parameter per column, which the planner serves with the two columns' unique index
    (``a = ANY(..) AND b = ANY(..)`` is read as a scan of every row of the ``a`` values, and
    an OR of per-pair conditions costs more to build and to plan than the rows it reads)."""
    fields = [_field(model, name) for name in columns]
    first, second = (connection.ops.quote_name(f.column) for f in fields)
    if connection.vendor == POSTGRES:
        types = [f.db_type(connection) for f in fields]
        return (
            f"({first}, {second}) IN (SELECT * FROM unnest(%s::{types[0]}[], %s::{types[1]}[]))",
            [[pair[0] for pair in pairs], [pair[1] for pair in pairs]],
        )
    return (
        f"({first}, {second}) IN "
        "(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM json_each(%s))",
        [json_text([list(pair) for pair in pairs])],
    )


def findings_by_kind() -> list[tuple[str, int]]:
    """(kind, count) over every stored job's contract findings: one aggregate over the jobs
    table, unnesting the findings JSON array with the database's own function."""
    table = connection.ops.quote_name(Job._meta.db_table)
    if connection.vendor == POSTGRES:
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


def capped_count(jobs: models.QuerySet, cap: int) -> int:
    """How many of these rows, counting at most ``cap`` (``cap`` means "cap or more").

    Counted in the queryset's order: with the jobs list's newest-first order PostgreSQL walks
    the same index as the page and stops at the cap (unordered, it may build a bitmap of every
    matching row, which grows with the table). Without parallel workers: for a walk of a
    thousand rows their start-up costs more than they save."""
    capped = jobs[:cap]
    database = connections[jobs.db]  # the replica when the router reads from one
    if database.vendor != POSTGRES:
        return capped.count()
    with transaction.atomic(using=jobs.db), database.cursor() as cursor:
        cursor.execute("SET LOCAL max_parallel_workers_per_gather = 0")
        return capped.count()
