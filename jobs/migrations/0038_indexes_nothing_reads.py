"""Indexes that nothing reads, which grew with what was stored (bench/storage.py): the event
table's index on its token (nothing reads events by token), and on PostgreSQL the
``varchar_pattern_ops`` copies Django adds beside a unique text column for LIKE searches, on
columns only ever compared whole: a span resource's digest, a job alias, a failure group's
fingerprint. (The job id keeps its own: the jobs list searches job ids by prefix.)
"""

from django.db import migrations, models

# (table, column) of the unique text columns never searched with LIKE.
NEVER_LIKE = [
    ("jobs_spanresource", "digest"),
    ("jobs_jobalias", "alias"),
    ("jobs_failuregroup", "fingerprint"),
]


def _like_index(schema_editor, table: str, column: str) -> str:
    # The name Django gave it (``DatabaseSchemaEditor._create_like_index_sql``).
    return schema_editor._create_index_name(table, [column], suffix="_like")


def drop_like_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table, column in NEVER_LIKE:
            name = schema_editor.quote_name(_like_index(schema_editor, table, column))
            schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def create_like_indexes(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table, column in NEVER_LIKE:
            name = schema_editor.quote_name(_like_index(schema_editor, table, column))
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {name} ON {schema_editor.quote_name(table)} "
                f"({schema_editor.quote_name(column)} varchar_pattern_ops)"
            )


class Migration(migrations.Migration):
    dependencies = [("jobs", "0037_rollup_rows_per_provider_used")]

    operations = [
        migrations.AlterField(
            model_name="event",
            name="token",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                null=True,
                on_delete=models.deletion.SET_NULL,
                to="jobs.ingesttoken",
            ),
        ),
        migrations.RunPython(drop_like_indexes, create_like_indexes),
    ]
