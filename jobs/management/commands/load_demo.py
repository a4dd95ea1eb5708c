from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand
from django.utils import timezone

from jobs.contract import bodies
from jobs.ingest.store import store_batch
from jobs.management.demo import demo_streams
from jobs.management.progress import Progress
from jobs.models import IngestToken, Role

DEMO_PASSWORD = "traceviz-demo"
DEMO_TOKEN_NAME = "demo"


class Command(BaseCommand):
    help = (
        "Load demo jobs through the ingest path, create demo users (one per role plus an admin) "
        "and print a demo login and a fresh demo ingest token. Safe to run again."
    )

    def handle(self, *args, **options):
        streams = demo_streams(timezone.now())
        progress = Progress(self.stderr, "demo events", sum(len(s) for s in streams))
        stored = 0
        for stream in streams:
            result = store_batch(bodies.parse_items(stream, settings.TRACEVIZ_MAX_BATCH_EVENTS))
            if result.errors:
                raise RuntimeError(f"demo stream rejected: {result.errors}")
            stored += result.stored
            progress.advance(result.received)
        self.stderr.write(progress.finish())
        for role in Role.values:
            self._user(role, groups=[role])
        self._user("admin", groups=[], staff=True)
        IngestToken.objects.filter(name=DEMO_TOKEN_NAME).delete()
        _token, raw = IngestToken.issue(DEMO_TOKEN_NAME)
        self.stdout.write(
            f"Demo data: {len(streams)} jobs ({stored} new events).\n"
            f"Log in at {settings.TRACEVIZ_SITE_URL}/accounts/login/ as admin, operator, "
            f"support or engineer with password {DEMO_PASSWORD!r}.\n"
            f"Demo ingest token (shown once):\n{raw}"
        )

    def _user(self, username: str, groups: list[str], staff: bool = False) -> None:
        user, created = User.objects.get_or_create(
            username=username, defaults={"is_staff": staff, "is_superuser": staff}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        user.groups.set(Group.objects.filter(name__in=groups))
