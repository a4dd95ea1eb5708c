from django.contrib.auth.management import create_permissions
from django.db import migrations

# What staff do in the admin (docs/architecture.md): alert rules and ingest tokens; the rest
# they read (the admin's own read-only classes refuse edits whatever the permission).
STAFF_PERMISSIONS = (
    "add_alertrule",
    "change_alertrule",
    "delete_alertrule",
    "view_alertrule",
    "add_ingesttoken",
    "change_ingesttoken",
    "view_ingesttoken",
    "view_alertepisode",
    "view_job",
    "view_step",
    "view_event",
    "view_escalation",
    "view_escalationentry",
)


def create_staff_group(apps, schema_editor):
    # Permissions are made after migrate on a fresh database: make them now.
    jobs_config = apps.get_app_config("jobs")
    jobs_config.models_module = True
    create_permissions(jobs_config, apps=apps, verbosity=0)
    jobs_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="staff")
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="jobs", codename__in=STAFF_PERMISSIONS)
    )


def remove_staff_group(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="staff").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0016_failure_groups"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]
    operations = [migrations.RunPython(create_staff_group, remove_staff_group)]
