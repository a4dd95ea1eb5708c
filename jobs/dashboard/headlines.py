"""The dashboard's headline numbers, each with its change against the previous period."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q

from jobs.dashboard.window import Window, jobs_url
from jobs.models import AlertEpisode, Escalation, Job
from jobs.replay.failures import RunStatus

FAILED_STATUSES = (RunStatus.FAILED, RunStatus.FAILED_LOGIC, RunStatus.FAILED_INTERNAL)


@dataclass(frozen=True, slots=True)
class Headline:
    label: str
    value: float
    previous: float
    url: str = ""
    percent: bool = False

    @property
    def change(self) -> float:
        return self.value - self.previous

    @property
    def display(self) -> str:
        return f"{self.value:.1%}" if self.percent else f"{self.value:g}"

    @property
    def change_display(self) -> str:
        if self.percent:
            return f"{self.change * 100:+.1f} pt"
        return f"{self.change:+g}"


def headlines(window: Window, now: datetime) -> list[Headline]:
    """Jobs, failed jobs, failure rate, open escalations and firing alerts, each against the
    previous period of the same length (escalations and alerts: as they stood at its end)."""
    previous = window.previous
    in_now = Q(started_at__gte=window.start)
    failed = Q(status__in=[s.value for s in FAILED_STATUSES])
    jobs = Job.objects.filter(started_at__gte=previous.start, started_at__lt=window.end)
    jobs = jobs.filter(**window._job_filter("")).aggregate(
        jobs=Count("id", filter=in_now),
        failed=Count("id", filter=in_now & failed),
        jobs_before=Count("id", filter=~in_now),
        failed_before=Count("id", filter=~in_now & failed),
    )
    cutoff = window.start
    escalations = Escalation.objects.aggregate(
        open=Count("id", filter=~Q(status=Escalation.Status.RESOLVED)),
        before=Count(
            "id",
            filter=Q(created_at__lte=cutoff)
            & (Q(resolved_at__isnull=True) | Q(resolved_at__gt=cutoff)),
        ),
    )
    firing = AlertEpisode.objects.aggregate(
        now=Count("id", filter=Q(resolved_at__isnull=True)),
        before=Count(
            "id",
            filter=Q(firing_since__lte=cutoff)
            & (Q(resolved_at__isnull=True) | Q(resolved_at__gt=cutoff)),
        ),
    )

    def rate(failed_count: int, total: int) -> float:
        return failed_count / total if total else 0.0

    return [
        Headline("Jobs", jobs["jobs"], jobs["jobs_before"], jobs_url(window)),
        Headline(
            "Failed jobs",
            jobs["failed"],
            jobs["failed_before"],
            jobs_url(window, status=[s.value for s in FAILED_STATUSES]),
        ),
        Headline(
            "Failure rate",
            rate(jobs["failed"], jobs["jobs"]),
            rate(jobs["failed_before"], jobs["jobs_before"]),
            percent=True,
        ),
        Headline("Open escalations", escalations["open"], escalations["before"], "/escalations/"),
        Headline("Firing alerts", firing["now"], firing["before"], "#alerts"),
    ]
