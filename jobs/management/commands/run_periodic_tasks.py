from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils.module_loading import import_string


class Command(BaseCommand):
    help = (
        "Run every periodic task of CELERY_BEAT_SCHEDULE once, in this process: outbox sweep, "
        "stall check, retention, alert evaluation. For the embedded default (no broker, so no "
        "beat): call it from cron, e.g. every minute."
    )

    def add_arguments(self, parser):
        parser.add_argument("--only", action="append", help="run only these schedule entries")

    def handle(self, *args, only, **options):
        for name, entry in settings.CELERY_BEAT_SCHEDULE.items():
            if only and name not in only:
                continue
            result = import_string(entry["task"]).apply().get()
            self.stdout.write(f"{name}: {result}")
