from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from jobs.contract import bodies
from jobs.ingest.store import store_batch
from jobs.management.demo import demo_streams
from jobs.management.progress import Progress
from jobs.models import IngestToken, Role

DEMO_PASSWORD = "traceviz-demo"
DEMO_TOKEN_NAME = "demo"


def base_url(host: str, port: int) -> str:
    """The server on ``host``:``port``; a wildcard address is reached on the loopback."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def login_url(host: str, port: int) -> str:
    return f"{base_url(host, port)}/accounts/login/"


# The README's first event, sent to a job id no demo stream uses: it starts a job of its own.
FIRST_EVENT = (
    '{"type": "node_finished", "job_id": "my-first-job", "payload": {"node_id": "upload", '
    '"result_type": "retryable_failure", "reason": "network timeout"}}'
)


class Command(BaseCommand):
    help = (
        "Load demo jobs through the ingest path, create demo users (one per role plus an admin) "
        "and print a demo login and a fresh demo ingest token. Safe to run again."
    )

    def add_arguments(self, parser):
        # `make run HOST=... PORT=...` passes what runserver will serve, so the printed login
        # URL is the one that answers.
        parser.add_argument("--host", default="127.0.0.1", help="host the server listens on")
        parser.add_argument("--port", type=int, default=8000, help="port the server listens on")

    def handle(self, *args, host, port, **options):
        if not 0 < port < 65536:
            raise CommandError(f"--port must be between 1 and 65535, not {port}")
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
            f"Log in at {login_url(host, port)} as admin, operator, support or "
            f"engineer with password {DEMO_PASSWORD!r}.\n"
            f"Demo ingest token (shown once):\n{raw}\n"
            f"Send a first event:\n"
            f"curl -sS {base_url(host, port)}/api/v1/events -H 'Authorization: Bearer {raw}' "
            f"-H 'Content-Type: application/json' -d '{FIRST_EVENT}'"
        )

    def _user(self, username: str, groups: list[str], staff: bool = False) -> None:
        user, created = User.objects.get_or_create(
            username=username, defaults={"is_staff": staff, "is_superuser": staff}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        user.groups.set(Group.objects.filter(name__in=groups))
