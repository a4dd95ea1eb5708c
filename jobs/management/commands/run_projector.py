import signal

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections

from jobs.ingest import database, projector

# Longest wait between looks at the marks: a wake-up lost (or SQLite, which has none) costs
# at most this much lag, and a stop signal is answered within it.
POLL_SECONDS = 1.0


class Command(BaseCommand):
    help = (
        "Fold the jobs left dirty (answers sent with Prefer: respond-async, a worker that died "
        "between its append and its fold) until stopped: batches of the longest dirty marks "
        "nobody else is folding, woken by LISTEN/NOTIFY on PostgreSQL, polling on SQLite. "
        "Several may run at once. `make run` starts one beside runserver."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--batch",
            type=int,
            default=projector.DIRTY_BATCH,
            help="jobs folded per transaction (default %(default)s)",
        )
        parser.add_argument(
            "--once", action="store_true", help="fold until nothing is dirty, then stop"
        )

    def handle(self, *args, batch, once, **options):
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        self.verbosity = options["verbosity"]
        # Like run_scheduler: a stop signal is noted and honoured between batches, so a fold
        # in progress commits (or, killed harder, rolls back whole: its marks stay dirty).
        self.stopping = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        self.stdout.write(f"run_projector: batches of {batch}")
        self.stdout.flush()
        total = 0
        while not self.stopping:
            folded = self._drain(batch)
            total += folded
            if once and not folded:
                break
            if not folded and not self.stopping:
                database.wait_for_dirty(POLL_SECONDS)
        self.stdout.write(f"run_projector: stopped ({total} job folds)")

    def _drain(self, batch: int) -> int:
        """Fold batches until none is left that nobody else is folding; returns the jobs."""
        close_old_connections()
        folded = 0
        while not self.stopping:
            try:
                done = projector.project_dirty(limit=batch)
            except Exception as error:  # a failing fold rolls back; the loop must go on
                self.stderr.write(f"run_projector: a fold failed: {type(error).__name__}: {error}")
                self.stderr.flush()
                return folded
            if not done:
                break
            folded += done
            if self.verbosity >= 2:
                self.stdout.write(f"run_projector: folded {done} jobs")
                self.stdout.flush()
        return folded

    def _stop(self, signum, frame):
        self.stopping = True
