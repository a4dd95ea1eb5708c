"""A failure group counts each failure against the provider/model that failed (its failure
record's, else its job's: docs/failures.md): the (group, job) rows, the hour and day rows, the
failures list's provider filter and a group's "providers involved", whichever path wrote them
(a fold, a full replay, a rebuild, a merge, retention)."""

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.dashboard import failure_groups as read
from jobs.dashboard.window import parse_window
from jobs.ingest import failure_groups, parity
from jobs.models import Failure, FailureGroup, FailureGroupDay, FailureGroupHour, FailureGroupJob
from tests import factories
from tests.factories import (
    BASE_TS,
    OPENAI,
    degraded_planner,
    event,
    finished,
    started,
    store,
)
from tests.otlp_spans import ERROR, attrs, root, sid, span, store_spans

pytestmark = pytest.mark.django_db


def minutes_ago(minutes: float) -> float:
    return (timezone.now() - BASE_TS).total_seconds() - minutes * 60


def planner_group() -> FailureGroup:
    return FailureGroup.objects.get(failures__kind=Failure.Kind.PLANNER)


def counted(model) -> set[tuple]:
    return set(model.objects.filter(step_count__gt=0).values_list("group_id", "provider", "model"))


def exact(*job_ids: str) -> None:
    assert failure_groups.differences() == []
    for job_id in job_ids:
        assert parity.differences(job_id) == []


def test_a_planner_degraded_on_another_provider_counts_under_the_one_that_failed():
    store(degraded_planner("p1", 60, workflow="plan"))
    group = planner_group()
    assert counted(FailureGroupJob) == {(group.pk, "anthropic", "claude-x")}
    assert counted(FailureGroupHour) == {(group.pk, "anthropic", "claude-x")}
    assert counted(FailureGroupDay) == {(group.pk, "anthropic", "claude-x")}
    exact("p1")


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


def test_the_failures_list_and_group_page_name_the_provider_that_failed(operator):
    store(degraded_planner("p1", minutes_ago(30), workflow="plan"))
    group = planner_group()
    listed = operator.get("/failures/?provider=anthropic").context["rows"]
    assert [item["row"].group.pk for item in listed] == [group.pk]
    assert [who.label for who in listed[0]["row"].involved] == ["anthropic/claude-x"]
    assert operator.get("/failures/?provider=openai").context["rows"] == []
    page = operator.get(f"/failures/{group.fingerprint}/")
    assert [who.label for who in page.context["row"].involved] == ["anthropic/claude-x"]
    assert [trace["name"] for trace in page.context["trend"]["data"]] == ["anthropic/claude-x"]
    html = page.content.decode()
    assert 'data-label="Failed on">anthropic / claude-x<' in html
    window, _ = parse_window({"range": "24h", "provider": "anthropic"}, timezone.now())
    assert read.group_in_window(group, window).steps_in_window == 1


def failed_call(span_id: bytes, parent: bytes, provider: str, model: str, start_ms: int):
    call = span(
        name="chat",
        span_id=span_id,
        parent=parent,
        start_ms=start_ms,
        end_ms=start_ms + 5,
        attributes=attrs(
            openinference__span__kind="LLM", llm__provider=provider, llm__model_name=model
        ),
    )
    call.status.CopyFrom(ERROR)
    return call


def test_a_step_failed_on_a_call_to_another_provider_counts_under_the_call_provider():
    # Two attempts of one node in one group: the first failed on an anthropic call, the
    # second named no provider (its job's).
    store_spans(
        root(end_ms=100, attributes=attrs(llm__provider="openai", llm__model_name="gpt-4.1")),
        span(name="fetch", span_id=sid(2), start_ms=1, end_ms=20, status=ERROR),
        failed_call(sid(3), sid(2), "anthropic", "claude-x", 2),
        span(name="fetch", span_id=sid(4), start_ms=30, end_ms=50, status=ERROR),
    )
    failures = Failure.objects.filter(kind=Failure.Kind.STEP)
    assert sorted(failures.values_list("attempt", "provider")) == [(1, "anthropic"), (2, "")]
    job = failures.first().job
    own = (job.provider, job.model)
    group_id = failures.first().group_id
    assert {(g, p, m) for g, p, m in counted(FailureGroupJob)} == {
        (group_id, "anthropic", "claude-x"),
        (group_id, *own),
    }
    assert FailureGroup.objects.get(pk=group_id).job_count == 1
    exact(job.job_id)


def test_a_job_named_a_provider_later_moves_only_the_failures_that_named_none():
    # Its first planner event names the job's provider (anthropic) until job_started does.
    store(
        [
            event("job_started", "j1", 0, workflow="plan"),
            started("fetch", "j1", at=1),
            finished("fetch", "permanent_failure", "j1", at=2, reason="disk full"),
            *degraded_planner("j1", 10, workflow="plan")[1:],
        ]
    )
    planner = planner_group()
    step = FailureGroup.objects.get(node_id="fetch")
    assert counted(FailureGroupJob) == {
        (planner.pk, "anthropic", "claude-x"),
        (step.pk, "anthropic", "claude-x"),
    }
    store([event("job_started", "j1", 0, workflow="plan", **OPENAI)])
    assert counted(FailureGroupJob) == {
        (planner.pk, "anthropic", "claude-x"),
        (step.pk, "openai", "gpt-4.1"),
    }
    assert counted(FailureGroupHour) == counted(FailureGroupJob)
    exact("j1")


def test_a_rebuild_a_merge_and_retention_keep_the_provider_that_failed():
    store(degraded_planner("p1", 60, workflow="plan"))
    store(
        [
            event("job_started", "p2", 100, workflow="plan", **OPENAI),
            started("fetch", "p2", at=101),
            finished("fetch", "permanent_failure", "p2", at=102, reason="disk full"),
        ]
    )
    planner, step = planner_group(), FailureGroup.objects.get(node_id="fetch")
    call_command("rebuild_projections")
    assert counted(FailureGroupHour) == {
        (planner.pk, "anthropic", "claude-x"),
        (step.pk, "openai", "gpt-4.1"),
    }
    exact("p1", "p2")
    failure_groups.merge(step, planner)
    assert counted(FailureGroupHour) == {
        (planner.pk, "anthropic", "claude-x"),
        (planner.pk, "openai", "gpt-4.1"),
    }
    planner.refresh_from_db()
    assert (planner.job_count, planner.step_count) == (2, 2)
    exact("p1", "p2")
    failure_groups.forget_jobs([Failure.objects.get(job__job_id="p1").job_id])
    assert counted(FailureGroupHour) == {(planner.pk, "openai", "gpt-4.1")}
    planner.refresh_from_db()
    assert (planner.job_count, planner.step_count) == (1, 1)


@pytest.mark.django_db(transaction=True)
def test_the_migration_recounts_stored_groups_by_the_provider_that_failed():
    """Rows written before 0041 counted each failure under its job's provider/model: the
    migration recomputes them from the failure records."""
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    store(degraded_planner("p1", 60, workflow="plan"))
    group = planner_group()
    before = [("jobs", "0040_projection_marks")]
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("jobs")
    try:
        executor.migrate(before)
        old = executor.loader.project_state(before).apps
        for name in ("FailureGroupJob", "FailureGroupHour", "FailureGroupDay"):
            old.get_model("jobs", name).objects.update(**OPENAI)
        old.get_model("jobs", "FailureGroup").objects.update(job_count=5, step_count=9)
        assert counted(FailureGroupHour) == {(group.pk, "openai", "gpt-4.1")}
        MigrationExecutor(connection).migrate(latest)
        assert counted(FailureGroupJob) == {(group.pk, "anthropic", "claude-x")}
        assert counted(FailureGroupHour) == {(group.pk, "anthropic", "claude-x")}
        assert counted(FailureGroupDay) == {(group.pk, "anthropic", "claude-x")}
        group.refresh_from_db()
        assert (group.job_count, group.step_count) == (1, 1)
        exact("p1")
    finally:
        MigrationExecutor(connection).migrate(latest)
