from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from jobs.ingest import failure_groups
from jobs.ingest.locks import lock_jobs
from jobs.ingest.projection import replay_jobs
from jobs.management.progress import Progress
from jobs.models import Event


class Command(BaseCommand):
    help = (
        "Replay every job (or the given ones) from its events and rewrite its Job and Step rows "
        "and snapshot. Escalations keep what people did to them: triggers already seen change "
        "nothing. Jobs go in job id order, a batch per transaction under ingest's per-job locks, "
        "so it runs beside live ingest; after an interruption, --after resumes where it stopped."
    )

    def add_arguments(self, parser):
        parser.add_argument("--batch", type=int, default=200, help="jobs per transaction")
        parser.add_argument("--job", action="append", help="rebuild only these job ids")
        parser.add_argument(
            "--after", metavar="JOB_ID", help="resume: rebuild only the jobs sorting after this id"
        )

    def handle(self, *args, batch, job, after, **options):
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        stored = Event.objects.order_by("job_id").values_list("job_id", flat=True).distinct()
        if job:
            stored = stored.filter(job_id__in=job)
        if after:
            stored = stored.filter(job_id__gt=after)
        job_ids = list(stored)
        progress = Progress(self.stderr, "jobs rebuilt", len(job_ids))
        last = after
        try:
            for start in range(0, len(job_ids), batch):
                chunk = job_ids[start : start + batch]
                with transaction.atomic():
                    lock_jobs(chunk)
                    replay_jobs(chunk)
                last = chunk[-1]
                progress.advance(len(chunk))
        except KeyboardInterrupt:
            resume = f" --after {last}" if last else ""
            raise CommandError(
                f"interrupted after {progress.done} of {len(job_ids)} jobs; every batch so far "
                f"is committed. Resume with: manage.py rebuild_projections{resume}"
            ) from None
        failure_groups.recount()
        self.stdout.write(progress.finish())
