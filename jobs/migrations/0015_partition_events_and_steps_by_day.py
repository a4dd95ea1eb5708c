"""Events and steps partitioned by day on PostgreSQL, so retention drops whole days.

Every job gets a ``partition_day``: the UTC day its first event was received. Its events and
steps carry the same day, so the unique keys, which a partitioned table must extend with its
partition key, stay exactly as strict: (job_id, event_id, partition_day) is unique iff
(job_id, event_id) is.

On PostgreSQL, jobs_event and jobs_step are rebuilt as tables partitioned by range of
partition_day, one partition per day (``jobs_event_p20261122``), with the same columns, indexes
and constraints (the primary keys extended with the day), and their rows copied in: on a large
database this migration rewrites both tables once. On SQLite the columns are added and filled;
nothing is partitioned.

A step no longer has a database foreign key to its job (see ``Step.job``): a day's steps leave
with their partition, after the day's jobs were deleted.
"""

from datetime import timedelta

from django.db import migrations, models
from django.utils import timezone

import jobs.models

PARTITIONED = ("jobs_event", "jobs_step")
# Partitions created ahead, so ingest never waits for one on the first batch of a day.
DAYS_AHEAD = 2
FIRST_RECEIVED = "SELECT job_id, min(received_at) AS first FROM jobs_event GROUP BY job_id"


def fill_job_days(apps, schema_editor):
    """A job's day: when its first event was received."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "UPDATE jobs_job SET partition_day = (e.first AT TIME ZONE 'UTC')::date "
            f"FROM ({FIRST_RECEIVED}) e WHERE e.job_id = jobs_job.job_id"
        )
    else:
        schema_editor.execute(
            "UPDATE jobs_job SET partition_day = coalesce((SELECT date(min(e.received_at)) "
            "FROM jobs_event e WHERE e.job_id = jobs_job.job_id), partition_day)"
        )


def partition(apps, schema_editor):
    """Copy each job's day onto its events and steps; on PostgreSQL, into partitioned tables."""
    if schema_editor.connection.vendor != "postgresql":
        schema_editor.execute(
            "UPDATE jobs_event SET partition_day = coalesce((SELECT j.partition_day FROM jobs_job "
            "j WHERE j.job_id = jobs_event.job_id), partition_day)"
        )
        schema_editor.execute(
            "UPDATE jobs_step SET partition_day = (SELECT j.partition_day FROM jobs_job j "
            "WHERE j.id = jobs_step.job_id)"
        )
        return
    with schema_editor.connection.cursor() as cursor:
        rebuild(
            cursor,
            "jobs_event",
            "LEFT JOIN jobs_job j ON j.job_id = o.job_id",
            partitioned=True,
        )
        rebuild(cursor, "jobs_step", "JOIN jobs_job j ON j.id = o.job_id", partitioned=True)


def unpartition(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            for table in PARTITIONED:
                rebuild(cursor, table, "", partitioned=False)


def rebuild(cursor, table: str, join: str, *, partitioned: bool) -> None:
    """Rebuild ``table`` as a day-partitioned (or a plain) table with the same columns, indexes
    and constraints, and copy its rows in; with ``join`` (against the old rows, ``o``), each
    row's partition_day is its job's ``j.partition_day``."""
    cursor.execute(
        "SELECT conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE conrelid = %s::regclass ORDER BY contype DESC",
        [table],
    )
    constraints = cursor.fetchall()
    cursor.execute(
        "SELECT indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
        "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        [table, table],
    )
    indexes = [definition for (definition,) in cursor.fetchall()]
    cursor.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        [table],
    )
    columns = [name for (name,) in cursor.fetchall()]
    old = f"{table}_rebuilt"
    cursor.execute(f"ALTER TABLE {table} RENAME TO {old}")
    layout = "PARTITION BY RANGE (partition_day)" if partitioned else ""
    cursor.execute(
        f"CREATE TABLE {table} (LIKE {old} INCLUDING DEFAULTS INCLUDING IDENTITY) {layout}"
    )
    values = [
        "coalesce(j.partition_day, o.partition_day)"
        if name == "partition_day" and join
        else f"o.{name}"
        for name in columns
    ]
    source = f"FROM {old} o {join}"
    if partitioned:
        cursor.execute(f"SELECT DISTINCT {values[columns.index('partition_day')]} {source}")
        today = timezone.now().date()
        days = {day for (day,) in cursor.fetchall()}
        days.update(today + timedelta(days=n) for n in range(DAYS_AHEAD + 1))
        for day in sorted(days):
            end = day + timedelta(days=1)
            cursor.execute(
                f"CREATE TABLE {table}_p{day:%Y%m%d} PARTITION OF {table} "
                f"FOR VALUES FROM ('{day.isoformat()}') TO ('{end.isoformat()}')"
            )
    cursor.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} {source}"
    )
    cursor.execute(
        f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
        f"(SELECT coalesce(max(id), 0) + 1 FROM {table}), false)"
    )
    cursor.execute(f"DROP TABLE {old}")
    for name, kind, definition in constraints:
        if kind == "p":
            definition = "PRIMARY KEY (id, partition_day)" if partitioned else "PRIMARY KEY (id)"
        cursor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for definition in indexes:
        cursor.execute(definition)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0014_json_columns_read_with_orjson")]

    operations = [
        migrations.AddField(
            model_name="job",
            name="partition_day",
            field=models.DateField(default=jobs.models.today_utc),
        ),
        migrations.RunPython(fill_job_days, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["partition_day"], name="job_partition_day"),
        ),
        migrations.AddField(
            model_name="event",
            name="partition_day",
            field=models.DateField(default=jobs.models.today_utc),
        ),
        migrations.AddField(
            model_name="step",
            name="partition_day",
            field=models.DateField(default=jobs.models.today_utc),
        ),
        migrations.AlterField(
            model_name="step",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=models.deletion.DO_NOTHING,
                related_name="steps",
                to="jobs.job",
            ),
        ),
        migrations.RemoveConstraint(model_name="event", name="event_unique_per_job"),
        migrations.AddConstraint(
            model_name="event",
            constraint=models.UniqueConstraint(
                fields=("job_id", "event_id", "partition_day"), name="event_unique_per_job"
            ),
        ),
        migrations.RemoveConstraint(model_name="step", name="step_unique_attempt"),
        migrations.AddConstraint(
            model_name="step",
            constraint=models.UniqueConstraint(
                fields=("job", "node_id", "attempt", "partition_day"),
                name="step_unique_attempt",
            ),
        ),
        migrations.RunPython(partition, unpartition),
    ]
