"""Failure groups are kept by ingest (docs/architecture.md): counts stay exact through
incremental batches, full replays, rebuilds and retention; a new group can raise an alert."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.escalations import alerts
from jobs.ingest import failure_groups, parity, retention
from jobs.models import (
    AlertRule,
    Escalation,
    FailureGroup,
    FailureGroupDay,
    FailureGroupJob,
    Job,
    Step,
)
from tests.factories import BASE_TS, event, finished, started, store

pytestmark = pytest.mark.django_db


def timeout(job_id: str, at: float, seconds: int, node: str = "fetch", **payload) -> dict:
    return finished(
        node,
        "permanent_failure",
        job_id,
        at=at,
        reason=f"upstream timed out after {seconds}s (request req_{job_id}x9)",
        failure_code="adapter_timeout",
        error_type="PermanentError",
        **payload,
    )


def failed_job(job_id: str, at: float = 0, seconds: int = 30, **labels) -> list[dict]:
    labels = labels or {"provider": "openai", "model": "gpt-x"}
    return [
        event("job_started", job_id, at, workflow="billing", **labels),
        started("fetch", job_id, at=at + 1),
        timeout(job_id, at + 2, seconds),
    ]


def only_group() -> FailureGroup:
    return FailureGroup.objects.get(job_count__gt=0)


def test_same_failure_in_three_jobs_is_one_group_with_three_jobs():
    for index, seconds in enumerate((30, 45, 60)):
        store(failed_job(f"j{index}", at=index * 10, seconds=seconds))
    group = only_group()
    assert (group.job_count, group.step_count) == (3, 3)
    assert (group.workflow, group.node_id, group.failure_code, group.error_type) == (
        "billing",
        "fetch",
        "adapter_timeout",
        "PermanentError",
    )
    assert group.reason == "upstream timed out after <n>s (request <id>)"
    assert (group.first_seen, group.last_seen) == (
        BASE_TS + timedelta(seconds=2),
        BASE_TS + timedelta(seconds=22),
    )
    assert group.example_job.job_id == "j0" and group.example_step == "fetch:1"
    assert set(Step.objects.filter(failure_group=group).values_list("job__job_id", flat=True)) == {
        "j0",
        "j1",
        "j2",
    }
    assert failure_groups.differences() == []


def test_an_earlier_failure_arriving_later_widens_first_seen_back():
    store(failed_job("late", at=10))
    store(failed_job("early", at=0))
    store(failed_job("middle", at=5))
    group = only_group()
    assert (group.first_seen, group.last_seen) == (
        BASE_TS + timedelta(seconds=2),
        BASE_TS + timedelta(seconds=12),
    )
    assert (group.job_count, group.step_count) == (3, 3)


def test_successful_steps_have_no_group():
    store([event("job_started", "ok", 0, workflow="billing"), finished("n1", job_id="ok")])
    assert Step.objects.get().failure_group is None
    assert not FailureGroup.objects.exists()


def test_a_retried_failure_counts_each_failed_attempt_once():
    store(failed_job("j1"))
    store([timeout("j1", 5, 31, attempt=2), timeout("j1", 6, 32, attempt=3)])
    group = only_group()
    assert (group.job_count, group.step_count) == (1, 3)
    assert FailureGroupJob.objects.get().step_count == 3
    assert parity.differences("j1") == [] and failure_groups.differences() == []


def test_a_refinished_attempt_moves_to_its_new_group():
    store(failed_job("j1"))
    store([finished("fetch", "permanent_failure", "j1", at=9, reason="quota exceeded")])
    groups = dict(FailureGroup.objects.values_list("reason", "job_count"))
    assert groups == {"upstream timed out after <n>s (request <id>)": 0, "quota exceeded": 1}
    assert parity.differences("j1") == [] and failure_groups.differences() == []


def test_late_earlier_event_replays_the_job_and_keeps_counts_exact():
    store(failed_job("j1")[1:])  # no job_started yet: the workflow is blank
    store(failed_job("j1")[:1])  # sorts first: a full replay re-signs the failure
    group = only_group()
    assert (group.workflow, group.job_count, group.step_count) == ("billing", 1, 1)
    assert FailureGroup.objects.get(workflow="").job_count == 0
    assert parity.differences("j1") == [] and failure_groups.differences() == []


def test_provider_named_after_the_failure_follows_the_job():
    store(
        [
            event("job_started", "j1", 0, workflow="billing"),
            started("fetch", "j1", at=1),
            timeout("j1", 2, 30),
        ]
    )
    store([event("graph.next_step.parse_invalid", "j1", 5, provider="acme", model="m1")])
    assert FailureGroupJob.objects.values_list("provider", "model").get() == ("acme", "m1")
    assert failure_groups.differences() == []


def failing_nodes(job_id: str, nodes: int, **labels) -> list[dict]:
    """A job that failed in ``nodes`` nodes, one failure group each."""
    events = [event("job_started", job_id, 0, workflow="billing", **labels)]
    for index in range(nodes):
        events += [
            started(f"n{index}", job_id, at=1 + 2 * index),
            timeout(job_id, 2 + 2 * index, 30, node=f"n{index}"),
        ]
    return events


def test_a_batch_reads_only_the_group_rows_of_the_failures_it_changes(monkeypatch):
    # A long agent run has a (group, job) row per group it failed in: a batch that adds one
    # failure must not read them all (its cost would grow with the job).
    store(failing_nodes("long", 6, provider="openai", model="gpt-x"))
    read = []
    stored = failure_groups._stored

    def counting(rows):
        found = stored(rows)
        read.append(len(found))
        return found

    monkeypatch.setattr(failure_groups, "_stored", counting)
    store([started("n2", "long", at=40, attempt=2), timeout("long", 41, 31, node="n2", attempt=2)])
    assert sum(read) == 1
    row = FailureGroupJob.objects.get(group__node_id="n2")
    assert (row.step_count, row.group.step_count) == (2, 2)
    assert parity.differences("long") == [] and failure_groups.differences() == []


def test_a_job_named_a_provider_later_moves_every_group_row_it_has():
    store(failing_nodes("j1", 3))
    assert set(FailureGroupJob.objects.values_list("provider", "model")) == {("", "")}
    store(
        [
            event("graph.next_step.parse_invalid", "j1", 50, provider="acme", model="m1"),
            started("n9", "j1", at=51),
            timeout("j1", 52, 30, node="n9"),
        ]
    )
    assert set(FailureGroupJob.objects.values_list("provider", "model")) == {("acme", "m1")}
    assert FailureGroupJob.objects.count() == 4
    assert failure_groups.differences() == []


def test_day_rows_sum_the_hour_rows_of_each_day_and_follow_a_job_that_leaves():
    day = 86400
    store(failed_job("j1", at=0))
    store(failed_job("j2", at=3600))  # the same UTC day, another hour
    # Another job that day, whose provider is named only after its failure.
    store(
        [
            event("job_started", "j3", 7200, workflow="billing"),
            started("fetch", "j3", at=7201),
            timeout("j3", 7202, 30),
        ]
    )
    store(failed_job("j4", at=day))
    rows = FailureGroupDay.objects.values_list("day", "provider", "step_count")
    assert sorted(rows) == [
        (BASE_TS.date(), "", 1),
        (BASE_TS.date(), "openai", 2),
        ((BASE_TS + timedelta(days=1)).date(), "openai", 1),
    ]
    # A late provider moves the job's steps in its day row, as in its hour rows.
    store([event("graph.next_step.parse_invalid", "j3", 7205, provider="acme", model="m1")])
    assert sorted(rows.filter(step_count__gt=0)) == [
        (BASE_TS.date(), "acme", 1),
        (BASE_TS.date(), "openai", 2),
        ((BASE_TS + timedelta(days=1)).date(), "openai", 1),
    ]
    assert failure_groups.differences() == []


def test_differences_report_a_day_row_that_disagrees_with_its_hours():
    store(failed_job("j1", at=0))
    FailureGroupDay.objects.update(step_count=5)
    assert [line for line in failure_groups.differences() if "group day" in line] != []


def test_rebuild_keeps_counts_and_repairs_tampered_rows():
    for index in range(3):
        store(failed_job(f"j{index}", at=index))
    FailureGroup.objects.update(job_count=99)
    FailureGroupDay.objects.update(step_count=42)
    Step.objects.filter(job__job_id="j1").delete()
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert (only_group().job_count, FailureGroupJob.objects.count()) == (3, 3)
    assert failure_groups.differences() == []


def test_retention_takes_deleted_jobs_out_of_their_groups():
    store(failed_job("old", at=0))
    store(failed_job("new", at=100))
    now = timezone.now()
    Job.objects.filter(job_id="old").update(last_received_at=now - timedelta(days=30))
    Job.objects.filter(job_id="new").update(last_received_at=now)
    Escalation.objects.update(status=Escalation.Status.RESOLVED)
    assert retention.apply_retention(7, now).jobs == 1
    group = only_group()
    assert (group.job_count, group.step_count) == (1, 1)
    assert list(FailureGroupJob.objects.values_list("job__job_id", flat=True)) == ["new"]
    assert failure_groups.differences() == []


@pytest.fixture
def signature_rule(db):
    AlertRule.objects.update(enabled=False)
    rule = AlertRule.objects.get(kind=AlertRule.Kind.NEW_FAILURE_SIGNATURE)
    rule.enabled = True
    rule.save()
    return rule


def test_new_signature_rule_ships_switched_off(db):
    rule = AlertRule.objects.get(kind=AlertRule.Kind.NEW_FAILURE_SIGNATURE)
    assert rule.enabled is False


def test_new_signature_rule_fires_when_a_new_group_appears(signature_rule):
    store(failed_job("j1"))
    outcome = alerts.evaluate(timezone.now())
    group = only_group()
    assert [episode.subject for episode in outcome.fired] == [group.fingerprint]
    escalation = Escalation.objects.get(alert_rule=signature_rule)
    assert escalation.kind == "raised" and group.fingerprint in escalation.message
    assert "billing · fetch" in escalation.message


def test_new_signature_rule_stays_quiet_for_a_known_group(signature_rule):
    store(failed_job("j1"))
    FailureGroup.objects.update(created_at=timezone.now() - timedelta(days=2))
    store(failed_job("j2", at=50, seconds=99))
    assert FailureGroup.objects.count() == 1
    assert alerts.evaluate(timezone.now()).fired == []
    assert not Escalation.objects.filter(alert_rule=signature_rule).exists()


def test_purge_scrubs_a_secret_from_group_reasons():
    secret = "correcthorsebatterystaple"  # no digits: normalisation keeps it
    store(
        [
            event("job_started", "j1", 0, workflow="billing"),
            finished("fetch", "permanent_failure", "j1", at=1, reason=f"bad password {secret}"),
        ]
    )
    assert secret in FailureGroup.objects.get().reason
    call_command("purge_text", secret, stdout=None)
    assert not FailureGroup.objects.filter(reason__contains=secret).exists()
    assert failure_groups.differences() == []
