"""A dashboard filtered by provider or model reads the jobs that used it, as the jobs list's
filter does (docs/dashboard.md): a job started on openai whose planner degraded on anthropic, or
that called two models, is under each. Every panel's numbers from the rollup equal the raw
aggregate and the Step and Job rows, and each link's job count equals the list it opens."""

import pytest
from django.db.models import Count, Sum

from jobs.dashboard import charts, headlines, rollup
from jobs.dashboard.window import Window, jobs_url
from jobs.models import DashboardRollup, runs
from jobs.replay.failures import FAILED_FAMILY
from tests.factories import ANTHROPIC, OPENAI, degraded_planner, event, store
from tests.integration.test_dashboard import (
    CUSTOM,
    assert_links_match_list,
    chart_figure,
    list_count,
    operator_client,  # noqa: F401 (fixture)
)
from tests.integration.test_dashboard_rollup import (
    STEP_PANELS,
    assert_migration_marks_old_rollup_hours_dirty,
    assert_same_as_raw,
    steps_of,
    window,
)

pytestmark = pytest.mark.django_db
MINI = {"provider": "openai", "model": "gpt-4.1-mini"}
FILTERS = [
    {},
    {"provider": "anthropic"},
    {"provider": "openai"},
    {"model": "claude-x"},
    {"model": "gpt-4.1-mini"},
    {"provider": "anthropic", "model": "claude-x"},
    # Each half used by some job, never as one pair: the list's two filters AND-ed.
    {"provider": "anthropic", "model": "gpt-4.1-mini"},
]


@pytest.fixture
def mixed_jobs(db):
    """Over three hours from 09:00: jobs on one provider, jobs whose planner degraded on
    another, jobs that called two models of one provider, each with ok, retried and failed
    steps (``steps_of``)."""
    items = []
    for i in range(18):
        job_id, at = f"m{i}", i * 600 + 11
        if i % 3 == 0:
            items += degraded_planner(job_id, at)
        else:
            items.append(event("job_started", job_id, at, **(OPENAI if i % 2 else ANTHROPIC)))
        if i % 3 == 1:  # a second model of the job's provider, or of the other
            items.append(event("graph.next_step.parse_invalid", job_id, at + 1, **MINI))
        items += steps_of(job_id, at + 2, i)
    store(items)


def code_counts(w: Window) -> dict[str, int]:
    """The failure codes panel's steps per code."""
    bars = charts.failures_by_code(w)["data"]
    return {code: n for bar in bars for code, n in zip(bar["y"], bar["x"], strict=True)}


def raw(w: Window) -> rollup.Plan:
    return rollup.Plan((), ((w.start, w.end),))


@pytest.mark.parametrize("filters", FILTERS, ids=lambda f: "&".join(f.values()) or "none")
@pytest.mark.parametrize(("start", "end"), [(0, 3), (0.25, 2.5)])
def test_a_filter_reads_the_jobs_that_used_it(mixed_jobs, filters, start, end):
    w = window(start, end, **filters)
    jobs = w.jobs()
    assert jobs.count() == list_count(jobs_url(w))
    assert_same_as_raw(w)
    failed = jobs.filter(status__in=[status.value for status in FAILED_FAMILY]).count()
    assert headlines.job_counts(w) == headlines.job_counts(w, raw(w)) == (jobs.count(), failed)
    # Steps, from the rollup, as many as the Step rows of those jobs: a job that used two of
    # a provider's models counts once under it.
    shown = sum(sum(bar["y"]) for bar in charts.step_results(w)["data"])
    assert shown == w.steps().filter(segment__in=charts.RESULT_SEGMENTS).count()
    codes = code_counts(w)
    assert codes == {
        code: n
        for code, n in w.steps()
        .exclude(failure_code="")
        .values_list("failure_code")
        .annotate(n=Count("id"))
    }
    for panel in STEP_PANELS:
        if panel(w)["data"]:
            assert_links_match_list(panel(w))


@pytest.mark.parametrize("filters", FILTERS[1:], ids=lambda f: "&".join(f.values()))
def test_the_jobs_that_used_it_named_or_looked_up_are_the_same(mixed_jobs, filters, monkeypatch):
    # ``that_used`` names the jobs with a JobProvider row for the value when they are few, and
    # looks each job up when they are many (``runs.FEW_JOBS``): the same jobs either way.
    def found(few: int) -> tuple:
        monkeypatch.setattr(runs, "FEW_JOBS", few)
        w = window(0, 3, **filters)
        jobs = set(w.jobs().values_list("job_id", flat=True))
        return jobs, w.steps().count(), list_count(jobs_url(w))

    named, looked_up = found(runs.FEW_JOBS), found(0)
    assert named == looked_up
    assert len(named[0]) == named[2]


def test_a_job_is_under_every_provider_and_model_it_used(mixed_jobs):
    # m0 and m9 started on openai and degraded on anthropic; m1 started on openai and called
    # gpt-4.1-mini too; m4 started on anthropic and called openai's gpt-4.1-mini.
    def ids(**filters) -> set[str]:
        return set(window(0, 3, **filters).jobs().values_list("job_id", flat=True))

    assert {"m0", "m4", "m9"} <= ids(provider="anthropic") and "m1" not in ids(provider="anthropic")
    assert {"m0", "m1", "m4"} <= ids(provider="openai")
    assert {"m1", "m4"} <= ids(model="gpt-4.1-mini") and "m0" not in ids(model="gpt-4.1-mini")
    assert ids(provider="anthropic", model="gpt-4.1-mini") == {"m4", "m10", "m16"}
    # Anthropic's failed-step bar counts m9's failed n3 (a job started on openai): the
    # dashboard filtered on the job's own provider showed none.
    figure = charts.step_results(window(0, 3, provider="anthropic"))
    assert sum(next(bar for bar in figure["data"] if bar["name"] == "failed")["y"]) == 1
    assert code_counts(window(0, 3, provider="anthropic"))["tool_not_found"] == 1


def test_guest_rows_hold_only_what_a_job_used_beside_its_own(mixed_jobs):
    window(0, 3).plan()
    guests = DashboardRollup.objects.filter(kind="jobs").exclude(scope=rollup.Scope.OWN)
    by_scope = dict(guests.values_list("scope").annotate(n=Sum("jobs")))
    # Providers: the six degraded on anthropic, and m4, m10, m16 (anthropic) on openai. Models:
    # those nine and m1, m7, m13 (openai's second model). Pairs: every provider x model a job
    # used but its own: 3 for each of the first nine (2 x 2 less 1), 1 for m1, m7, m13.
    assert by_scope == {"provider": 9, "model": 12, "pair": 30}


def test_compiled_days_keep_the_guests(mixed_jobs, monkeypatch):
    monkeypatch.setattr(charts, "DURATION_EXACT_STEPS", 0)  # histograms, also from raw rows
    rollup.refresh_pending()  # the fixture's day is in the past: compiled
    assert DashboardRollup.objects.filter(kind="jobs_day", scope=rollup.Scope.PAIR).exists()
    for filters in FILTERS:
        w = window(-30, 30, "day", **filters)
        assert_same_as_raw(w)
        jobs = w.jobs()
        failed = jobs.filter(status__in=[status.value for status in FAILED_FAMILY]).count()
        assert headlines.job_counts(w, w.plan()) == (jobs.count(), failed)


def test_the_page_says_whose_jobs_it_shows(operator_client, mixed_jobs):  # noqa: F811
    html = operator_client.get(f"{CUSTOM}&provider=anthropic").content.decode()
    assert "jobs that used anthropic / any model" in html
    failed = next(
        bar for bar in chart_figure(html, "step-results")["data"] if bar["name"] == "failed"
    )
    assert sum(failed["y"]) == 1  # m9's failed n3, in a job started on openai


def test_a_filter_ignores_case_as_the_list_does(mixed_jobs):
    # At 10:01: c1's own provider is spelled OpenAI; c2 started on anthropic and called openai
    # under two spellings (one guest, counted once).
    store(
        [
            event("job_started", "c1", 3660, provider="OpenAI", model="GPT-4.1"),
            *steps_of("c1", 3661, 1),
            event("job_started", "c2", 3720, **ANTHROPIC),
            event("graph.next_step.parse_invalid", "c2", 3721, provider="OPENAI", model="gpt-4.1"),
            event("graph.next_step.parse_invalid", "c2", 3722, provider="openai", model="gpt-4.1"),
            *steps_of("c2", 3723, 5),
        ]
    )
    for start, end in ((0, 3), (0.25, 2.5)):
        shown = []
        for spelling in ("openai", "OpenAI", "OPENAI"):
            w = window(start, end, provider=spelling, model="gpt-4.1")
            assert_same_as_raw(w)
            jobs = w.jobs()
            assert {"c1", "c2"} <= set(jobs.values_list("job_id", flat=True))
            assert headlines.job_counts(w)[0] == jobs.count() == list_count(jobs_url(w))
            counts, _rate = charts.planner(w)
            planner_events = sum(sum(trace["y"]) for trace in counts["data"])
            shown.append((headlines.job_counts(w), code_counts(w), planner_events))
        assert shown[0] == shown[1] == shown[2]
        assert shown[0][2] >= 2  # c2's parse_invalid events, both spellings


@pytest.mark.django_db(transaction=True)
def test_the_migration_recomputes_every_hour_the_rollup_holds():
    """Rollups made before the scopes are recomputed: migration 0042 marks the hours of their
    JOBS rows dirty, so a filtered dashboard reads them raw until the refresh rewrites them."""
    assert_migration_marks_old_rollup_hours_dirty(
        "0041_failures_counted_by_provider_that_failed", "0042_rollup_rows_per_scope"
    )
