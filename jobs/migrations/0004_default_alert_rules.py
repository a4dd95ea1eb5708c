"""Default alert rules (the planner contract phase 2: alert threshold for repeated planner degradation).

Staff tune or disable them in the admin; deleting the migration's rules is never needed.
"""

from django.db import migrations

DEFAULT_RULES = [
    {
        "name": "Planner degraded rate per provider/model",
        "kind": "planner_degraded_rate",
        "threshold": 0.2,
        "window_minutes": 15,
        "min_jobs": 5,
        "severity": "high",
    },
    {
        "name": "Planner parse_invalid count per provider/model",
        "kind": "planner_parse_invalid",
        "threshold": 20,
        "window_minutes": 15,
        "min_jobs": 1,
        "severity": "medium",
    },
    {
        "name": "Failure rate of provider_terminal",
        "kind": "failure_code_rate",
        "failure_code": "provider_terminal",
        "threshold": 0.1,
        "window_minutes": 60,
        "min_jobs": 10,
        "severity": "medium",
    },
]


def create_rules(apps, schema_editor):
    AlertRule = apps.get_model("jobs", "AlertRule")
    for rule in DEFAULT_RULES:
        AlertRule.objects.get_or_create(name=rule["name"], defaults=rule)


def remove_rules(apps, schema_editor):
    names = [rule["name"] for rule in DEFAULT_RULES]
    apps.get_model("jobs", "AlertRule").objects.filter(name__in=names).delete()


class Migration(migrations.Migration):
    dependencies = [("jobs", "0003_alerts_and_counters")]
    operations = [migrations.RunPython(create_rules, remove_rules)]
