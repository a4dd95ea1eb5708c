"""Full-text search on step reasons (jobs list "search reasons"): a GIN index on PostgreSQL only.

The expression must match ``jobs.models.ReasonMatches`` exactly for the planner to use it.
SQLite has no GIN and the list falls back to icontains there, so the migration does nothing.
"""

from django.db import migrations

INDEX = "step_reason_fts"
CREATE = (
    f"CREATE INDEX IF NOT EXISTS {INDEX} ON jobs_step "
    "USING gin (to_tsvector('simple'::regconfig, reason))"
)
DROP = f"DROP INDEX IF EXISTS {INDEX}"


def create_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(CREATE)


def drop_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_rate_limits")]
    operations = [migrations.RunPython(create_index, drop_index)]
