from django.core.management.base import BaseCommand, CommandError

from jobs.ingest.purge import PURGED, purge_text


class Command(BaseCommand):
    help = (
        f"Replace a string (e.g. a leaked secret) with {PURGED} in events, projections and "
        "escalations. Use --dry-run first to count what would change."
    )

    def add_arguments(self, parser):
        parser.add_argument("text", help="the exact string to remove")
        parser.add_argument("--dry-run", action="store_true", help="count rows, change nothing")

    def handle(self, *args, text, dry_run, **options):
        try:
            report = purge_text(text, dry_run=dry_run)
        except ValueError as error:
            raise CommandError(str(error)) from None
        verb = "would change" if dry_run else "changed"
        for table, count in report.rows.items():
            self.stdout.write(f"{table}: {count} rows {verb}")
        if not dry_run:
            self.stdout.write(f"jobs rebuilt from their scrubbed events: {report.jobs_rebuilt}")
