import django.db.models.functions.text
from django.db import migrations, models


def mark_job_hours_dirty(apps, schema_editor):
    """The rollup's JOBS rows are now split by status family: every hour that has them is
    recomputed (read raw until then, so the dashboard's numbers stay right meanwhile)."""
    rollup = apps.get_model("jobs", "DashboardRollup")
    dirty_hour = apps.get_model("jobs", "DashboardDirtyHour")
    hours = rollup.objects.filter(kind="jobs").values_list("hour", flat=True).distinct()
    dirty_hour.objects.bulk_create([dirty_hour(hour=hour) for hour in hours], batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [("jobs", "0018_failure_group_days")]

    operations = [
        migrations.RunPython(mark_job_hours_dirty, migrations.RunPython.noop, elidable=True),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                django.db.models.functions.text.Upper("provider"),
                models.OrderBy(models.F("started_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                name="job_provider_newest",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                django.db.models.functions.text.Upper("model"),
                models.OrderBy(models.F("started_at"), descending=True),
                models.OrderBy(models.F("id"), descending=True),
                name="job_model_newest",
            ),
        ),
    ]
