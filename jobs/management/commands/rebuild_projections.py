from django.core.management.base import BaseCommand
from django.db import transaction

from jobs.ingest.store import project_jobs
from jobs.management.progress import Progress
from jobs.models import Event


class Command(BaseCommand):
    help = (
        "Rebuild every job's Job and Step rows from its events. Escalations keep what people did "
        "to them: triggers already seen change nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=200, help="jobs per transaction")
        parser.add_argument("--job", action="append", help="rebuild only these job ids")

    def handle(self, *args, batch, job, **options):
        job_ids = job or list(Event.objects.values_list("job_id", flat=True).distinct().order_by())
        job_ids.sort()
        progress = Progress(self.stderr, "jobs rebuilt", len(job_ids))
        for start in range(0, len(job_ids), batch):
            chunk = job_ids[start : start + batch]
            with transaction.atomic():
                project_jobs(chunk)
            progress.advance(len(chunk))
        self.stdout.write(progress.finish())
