from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobs.models import IngestToken


class Command(BaseCommand):
    help = "Revoke an ingest token by name; requests with it answer 401 from then on."

    def add_arguments(self, parser):
        parser.add_argument("name")

    def handle(self, *args, name, **options):
        revoked = IngestToken.objects.filter(name=name, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if not revoked:
            raise CommandError(f"no live token named {name!r}")
        self.stdout.write(f"Revoked ingest token {name!r}.")
