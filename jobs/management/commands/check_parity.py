from django.core.management.base import BaseCommand, CommandError

from jobs.ingest import parity
from jobs.management.progress import Progress
from jobs.models import Event


class Command(BaseCommand):
    help = (
        "Compare every job's (or the given jobs') stored Job, Step, Call, failure-group and "
        "escalation rows with a replay of its stored events, and print each difference. Exits "
        "with status 1 when any job differs: its rows are stale, and rebuild_projections "
        "rewrites them. Reads only; safe beside live ingest (a job mid-batch may differ until "
        "its batch commits: check it again)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--job", action="append", help="check only these job ids")
        parser.add_argument("--batch", type=int, default=200, help="jobs read per round")

    def handle(self, *args, job, batch, **options):
        if batch < 1:
            raise CommandError("--batch must be at least 1")
        stored = Event.objects.order_by("job_id").values_list("job_id", flat=True).distinct()
        if job:
            stored = stored.filter(job_id__in=job)
        job_ids = list(stored)
        progress = Progress(self.stderr, "jobs checked", len(job_ids))
        differing = 0
        for start in range(0, len(job_ids), batch):
            chunk = job_ids[start : start + batch]
            for differences in parity.mismatched_jobs(chunk).values():
                differing += 1
                for difference in differences:
                    self.stdout.write(str(difference))
            progress.advance(len(chunk))
        if differing:
            raise CommandError(
                f"{differing} of {len(job_ids)} jobs differ from a replay of their events; "
                "manage.py rebuild_projections --job <id> rewrites them"
            )
        self.stdout.write(f"{len(job_ids)} jobs match a replay of their events")
