"""The dashboard's headline numbers, each with its change against the previous period."""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q
from django.urls import reverse

from jobs.dashboard import rollup
from jobs.dashboard.window import Window, jobs_url
from jobs.models import AlertEpisode, Escalation
from jobs.replay.failures import FAILED_FAMILY


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


def job_counts(window: Window, plan: rollup.Plan | None = None) -> tuple[int, int]:
    """(jobs, failed-family jobs) started in the window: its whole clean hours from the
    rollup's JOBS rows, the partial and dirty hours from Job rows (the same numbers as
    counting Job rows, without reading two weeks of them for a 7-day view)."""
    totals = rollup.job_totals(plan or window.plan(), window.provider, window.model).values()
    return sum(jobs for jobs, _failed in totals), sum(failed for _jobs, failed in totals)


def escalation_counts(cutoff: datetime) -> tuple[int, int]:
    """(unresolved escalations now, those open at ``cutoff``: created by then and not resolved
    by then). Three index-only counts (escalation_unresolved, escalation_resolved) rather than
    one pass over every escalation ever opened."""
    escalations = Escalation.objects.all()
    # Of triggered_at (never null), as the open escalations panel counts: the partial index
    # answers alone, where COUNT(*) was planned over the whole of another index.
    unresolved = escalations.exclude(status=Escalation.Status.RESOLVED).aggregate(
        n=Count("triggered_at")
    )["n"]
    created = escalations.filter(created_at__lte=cutoff)
    still_open = created.filter(resolved_at__isnull=True).count()
    resolved_later = created.filter(resolved_at__gt=cutoff).count()
    return unresolved, still_open + resolved_later


def headlines(window: Window, now: datetime, plan: rollup.Plan | None = None) -> list[Headline]:
    """Jobs, failed jobs, failure rate, open escalations and firing alerts, each against the
    previous period of the same length (escalations and alerts: as they stood at its end).
    ``plan``: the window's rollup plan when the caller made one already."""
    jobs, failed = job_counts(window, plan)
    # Ingest dirties recent hours: the previous period's few dirty ones are read raw rather
    # than refreshed on this request (the periodic refresh task gets to them).
    jobs_before, failed_before = job_counts(window.previous, window.previous.plan(0))
    cutoff = window.start
    open_escalations, open_before = escalation_counts(cutoff)
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
        Headline("Jobs", jobs, jobs_before, jobs_url(window)),
        Headline(
            "Failed jobs",
            failed,
            failed_before,
            jobs_url(window, status=[s.value for s in FAILED_FAMILY]),
        ),
        Headline(
            "Failure rate",
            rate(failed, jobs),
            rate(failed_before, jobs_before),
            percent=True,
        ),
        Headline("Open escalations", open_escalations, open_before, reverse("jobs:escalations")),
        Headline("Firing alerts", firing["now"], firing["before"], "#alerts"),
    ]
