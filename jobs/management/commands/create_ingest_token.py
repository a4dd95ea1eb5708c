from django.core.management.base import BaseCommand, CommandError

from jobs.models import IngestToken


class Command(BaseCommand):
    help = (
        "Create an ingest token. The token is printed once, as the last line; only its hash is "
        "stored."
    )

    def add_arguments(self, parser):
        parser.add_argument("name", help="a unique name for the producer using this token")

    def handle(self, *args, name, **options):
        if IngestToken.objects.filter(name=name).exists():
            raise CommandError(f"a token named {name!r} exists already")
        _token, raw = IngestToken.issue(name)
        self.stderr.write(f"Created ingest token {name!r}. It is shown once; store it now.")
        self.stdout.write(raw)
