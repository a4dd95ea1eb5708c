"""The dashboard's failure rate by provider and /metrics count a failure against the
provider/model that failed (its failure record's, docs/failures.md), out of the jobs that used
that provider/model (JobProvider): from the rollup, from raw rows and after a prefetch alike."""

from datetime import timedelta

import pytest

from jobs.dashboard import provider_health, rollup
from jobs.dashboard.window import Window
from jobs.models import Failure, Job, JobProvider
from jobs.replay.failures import FAILED_FAMILY
from tests.factories import (
    ANTHROPIC,
    BASE_TS,
    OPENAI,
    degraded_planner,
    event,
    finished,
    started,
    store,
)
from tests.integration.test_dashboard_rollup import assert_migration_marks_old_rollup_hours_dirty
from tests.integration.test_metrics import scrape

pytestmark = pytest.mark.django_db


def window(start_hours=0.0, end_hours=4.0, **filters) -> Window:
    return Window(
        "custom",
        BASE_TS + timedelta(hours=start_hours),
        BASE_TS + timedelta(hours=end_hours),
        "hour",
        **filters,
    )


def rates(w: Window, plan: rollup.Plan | None = None) -> dict[tuple[str, str], tuple[int, int]]:
    return {
        (row["provider"], row["model"]): (row["jobs"], row["failed"])
        for row in provider_health.failure_rates(w, plan)
    }


def every_way(w: Window) -> dict[tuple[str, str], tuple[int, int]]:
    """The rates from the rollup, from raw rows and after the panels' prefetch: all equal."""
    rollup.refresh_pending()
    stored = rates(w)
    assert rates(w, rollup.Plan((), ((w.start, w.end),))) == stored
    prefetched = w.plan()
    rollup.prefetch(prefetched, [rollup.Kind.PROVIDERS], w.provider, w.model)
    assert rates(w, prefetched) == stored
    return stored


def test_a_degraded_planner_is_a_failure_of_the_provider_it_degraded_on():
    store(degraded_planner("p1", 60))
    assert Job.objects.get(job_id="p1").status in FAILED_FAMILY
    assert every_way(window()) == {
        ("anthropic", "claude-x"): (1, 1),
        ("openai", "gpt-4.1"): (1, 0),
    }
    # The panel's provider filter reads the provider that failed, not the job's.
    assert every_way(window(provider="anthropic")) == {("anthropic", "claude-x"): (1, 1)}
    assert every_way(window(provider="openai")) == {("openai", "gpt-4.1"): (1, 0)}


def test_a_job_that_used_two_providers_counts_under_both_and_failed_under_the_one_that_failed():
    store(
        [
            # m1 used both; its step failed and no failed call named a provider: its own failed.
            event("job_started", "m1", 60, **OPENAI),
            event("graph.next_step.parse_invalid", "m1", 61, attempt=1, **ANTHROPIC),
            started("load", "m1", 62),
            finished("load", "permanent_failure", "m1", 63, reason="schema mismatch"),
            # m2 used both and completed.
            event("job_started", "m2", 120, **ANTHROPIC),
            event("graph.next_step.parse_invalid", "m2", 121, attempt=1, **OPENAI),
            finished("load", "success", "m2", 122),
            event("job_finished", "m2", 123, status="completed"),
        ]
    )
    assert every_way(window()) == {
        ("openai", "gpt-4.1"): (2, 1),
        ("anthropic", "claude-x"): (2, 0),
    }
    rows = provider_health.failure_rates(window())
    assert [(r["provider"], r["rate"]) for r in rows] == [("openai", 0.5), ("anthropic", 0.0)]


def test_a_recovered_attempt_fails_no_provider_and_a_failed_job_without_a_record_its_own():
    store(
        [
            # r1 retried and recovered: not a failure of anyone.
            event("job_started", "r1", 60, **ANTHROPIC),
            finished("fetch", "retryable_failure", "r1", 61, reason="Timeout"),
            finished("fetch", "success", "r1", 62, attempt=2),
            event("job_finished", "r1", 63, status="completed"),
            # f1 failed and said nothing: no failure record, counted under its own provider.
            event("job_started", "f1", 120, **OPENAI),
            event("job_finished", "f1", 121, status="failed"),
            # n1 named no provider at all and failed: the empty provider, as before.
            event("job_started", "n1", 180),
            finished("step", "permanent_failure", "n1", 181, reason="boom"),
        ]
    )
    assert not Failure.objects.filter(job__job_id="f1").exists()
    assert every_way(window()) == {
        ("anthropic", "claude-x"): (1, 0),
        ("openai", "gpt-4.1"): (1, 1),
        ("", ""): (1, 1),
    }


def reference(w: Window) -> dict[tuple[str, str], tuple[int, int]]:
    """The rates counted in Python from Job, JobProvider and Failure rows."""
    found: dict[tuple[str, str], list[int]] = {}
    for job in w.jobs():
        own = (job.provider, job.model)
        used = set(JobProvider.objects.filter(job=job).values_list("provider", "model"))
        failed_on = {
            (f.provider, f.model) if f.provider or f.model else own
            for f in Failure.objects.ended_their_job().filter(job=job)
        }
        if job.status in FAILED_FAMILY and not failed_on:
            failed_on = {own}
        if own != ("", "") or not used:
            used.add(own)
        for pair in used | failed_on:
            entry = found.setdefault(pair, [0, 0])
            entry[0] += 1
            entry[1] += pair in failed_on
    return {pair: (jobs, failed) for pair, (jobs, failed) in found.items()}


@pytest.mark.parametrize(("start", "end"), [(0, 4), (0.25, 3.5), (1, 2)])
def test_rates_from_the_rollup_equal_the_failure_records(start, end):
    items = []
    for i in range(16):
        job_id, at = f"j{i}", i * 900 + 5
        if i % 4 == 0:
            items += degraded_planner(job_id, at)
            continue
        items.append(event("job_started", job_id, at, **(OPENAI if i % 2 else ANTHROPIC)))
        if i % 3 == 0:
            items.append(event("graph.next_step.parse_invalid", job_id, at + 1, **OPENAI))
        result = "permanent_failure" if i % 5 == 1 else "success"
        items.append(finished("work", result, job_id, at + 2, reason="disk full"))
        if i % 7 == 2:
            items.append(event("job_finished", job_id, at + 3, status="failed", reason="quota"))
    store(items)
    w = window(start, end)
    expected = reference(w)
    assert any(failed for _jobs, failed in expected.values())
    assert every_way(w) == expected


def test_a_job_failing_later_moves_its_failure_to_the_provider_that_failed():
    store([event("job_started", "p1", 60, **OPENAI)])
    assert every_way(window()) == {("openai", "gpt-4.1"): (1, 0)}
    store(degraded_planner("p1", 60)[1:])
    assert every_way(window()) == {
        ("anthropic", "claude-x"): (1, 1),
        ("openai", "gpt-4.1"): (1, 0),
    }
    assert window().plan().raw == ()  # the refresh recomputed the hour


def test_metrics_count_failures_against_the_provider_that_failed(client):
    store(
        [
            *degraded_planner("p1", 60),
            event("job_started", "b1", 120, **OPENAI),
            finished("upload", "permanent_failure", "b1", 121, reason="Bucket not found"),
            event("job_started", "t1", 180, **OPENAI),
            finished("fetch", "retryable_failure", "t1", 181, reason="Timeout"),
            finished("fetch", "success", "t1", 182, attempt=2),
        ]
    )
    samples = scrape(client)
    failures = {
        dict(labels)["kind"] + " " + dict(labels)["provider"]: value
        for (name, labels), value in samples.items()
        if name == "traceviz_failures"
    }
    # The planner failed on anthropic; b1's step named no provider: its job's; t1 recovered.
    assert failures == {"planner anthropic": 1.0, "step openai": 1.0}


@pytest.mark.django_db(transaction=True)
def test_the_migration_recomputes_every_hour_the_rollup_holds():
    """Rollups made before the PROVIDERS rows are recomputed: migration 0037 marks the hours
    of their JOBS rows dirty, so the panel reads them raw until the refresh rewrites them."""
    assert_migration_marks_old_rollup_hours_dirty(
        "0036_failure_group_lifecycle", "0037_rollup_rows_per_provider_used"
    )
