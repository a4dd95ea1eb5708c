import time

from django.core.management.base import BaseCommand

from jobs.dashboard import rollup


class Command(BaseCommand):
    help = (
        "Recompute the dashboard rollup from every Job and Step row (after a bulk load that "
        "bypassed ingest, or to catch up at once instead of through the periodic refresh)."
    )

    def handle(self, *args, **options):
        started = time.perf_counter()
        rows = rollup.rebuild()
        self.stdout.write(f"{rows:,} rollup rows in {time.perf_counter() - started:.1f} s")
