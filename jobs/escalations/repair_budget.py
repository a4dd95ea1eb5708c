"""The repair budget (the run-status contract): failed:logic runs in one retry_of chain beyond
TRACEVIZ_REPAIR_BUDGET open a ``repair_budget_exhausted`` escalation on the run that went over."""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings

from jobs.escalations.actions import apply_trigger
from jobs.models import Escalation, Job
from jobs.replay.failures import ResultType, RunStatus
from jobs.replay.state import EscalationTrigger


@dataclass(frozen=True, slots=True)
class ChainRun:
    job_id: str
    failed_at: datetime
    trigger_event_id: str


def repair_budget_overrun(runs: Iterable[ChainRun], budget: int) -> ChainRun | None:
    """The failed:logic run of a retry_of chain whose failure, in event time, pushed the count
    of such runs over ``budget``; None while the chain is within budget."""
    ordered = sorted(runs, key=lambda run: (run.failed_at, run.job_id))
    return ordered[budget] if len(ordered) > budget else None


def _retry_chain(job: Job) -> list[Job]:
    """Every run linked to ``job`` through retry_of, in either direction."""
    seen = {job.job_id: job}
    frontier = [job]
    while frontier:
        ids = {j.retry_of for j in frontier if j.retry_of} | {j.job_id for j in frontier}
        linked = Job.objects.filter(job_id__in=ids) | Job.objects.filter(retry_of__in=ids)
        frontier = [j for j in linked if j.job_id not in seen]
        seen.update((j.job_id, j) for j in frontier)
    return list(seen.values())


def check_repair_budget(job: Job, current: dict) -> None:
    """Open (or leave alone) the repair_budget_exhausted escalation of ``job``'s retry_of chain:
    on the failed:logic run that pushed the chain over TRACEVIZ_REPAIR_BUDGET. ``current`` maps
    (job pk, kind, node) to the escalations already loaded; it is updated in place."""
    runs = [
        ChainRun(run.job_id, run.failed_at, _failing_event_id(run))
        for run in _retry_chain(job)
        if run.status == RunStatus.FAILED_LOGIC and run.failed_at
    ]
    overrun = repair_budget_overrun(runs, settings.TRACEVIZ_REPAIR_BUDGET)
    if overrun is None:
        return
    over_job = Job.objects.get(job_id=overrun.job_id)
    trigger = EscalationTrigger(
        "repair_budget_exhausted",
        "",
        "medium",
        f"{len(runs)} runs failed with logic errors in this retry chain (budget "
        f"{settings.TRACEVIZ_REPAIR_BUDGET}): auto-fix stops here",
        overrun.trigger_event_id,
        overrun.failed_at,
    )
    key = (over_job.pk, trigger.kind, "")
    current[key] = apply_trigger(
        trigger, job=over_job, existing=current.get(key) or _existing(over_job, trigger.kind)
    )


def _existing(job: Job, kind: str) -> Escalation | None:
    return Escalation.objects.filter(job=job, kind=kind, node_id="").first()


def _failing_event_id(job: Job) -> str:
    step = (
        job.steps.exclude(result_type__in=["", ResultType.SUCCESS])
        .order_by("-finished_at", "-position")
        .only("finished_event_id")
        .first()
    )
    return step.finished_event_id if step else f"{job.job_id}:failed"
