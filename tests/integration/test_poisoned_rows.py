"""A row at any bound the contract allows, or stored before a bound existed, never stops a
periodic task: the stall check, alert evaluation, the dashboard rollup and retention handle it,
or log it and skip it, and do their work for every other job."""

import logging
from datetime import UTC, datetime, timedelta

import pytest

from jobs.contract import bodies, otlp
from jobs.dashboard import planner_rollup, rollup
from jobs.escalations import alerts, stalls
from jobs.ingest import failure_groups, retention
from jobs.ingest.store import store_batch
from jobs.models import (
    AlertEpisode,
    AlertRule,
    Call,
    DashboardDirtyHour,
    DashboardRollup,
    Escalation,
    Job,
    hour_floor,
)
from tests.factories import BASE_TS, event, finished, started
from tests.otlp_spans import ROOT_ID, llm_span, request, root, sid

pytestmark = pytest.mark.django_db

T0 = BASE_TS
HOUR_MS = 3_600_000
MAX_BIGINT = 2**63 - 1
LONG_PROVIDER, LONG_MODEL = "p" * 200, "m" * 200
EDGES = {"j-1970": "1970-01-01T00:00:00Z", "j-8999": "8999-12-31T23:59:59.999999Z"}


def store_at(items: list[dict], received_at: datetime = T0):
    batch = bodies.parse_items(items, max_events=1000)
    assert not batch.errors, batch.errors
    return store_batch(batch, received_at=received_at)


def retrying(job_id: str, attempt: int = 1) -> list[dict]:
    """A job waiting on its producer's retry (paused:transient): what the stall check reads."""
    return [
        event("job_started", job_id, 0),
        started("n1", job_id, 1, attempt=attempt),
        finished("n1", "retryable_failure", job_id, 2, attempt=attempt, error_type="network"),
    ]


def parse_invalid(job_id: str, provider: str, model: str) -> list[dict]:
    return [
        event("job_started", job_id, 0, provider=provider, model=model),
        event("graph.next_step.parse_invalid", job_id, 1, provider=provider, model=model),
    ]


@pytest.fixture
def poisoned(db):
    """Rows at every bound, each in a job of its own, beside an ordinary job ("j-normal")."""
    store_at(retrying("j-attempt", attempt=1_000_000))
    store_at(
        [
            event("job_started", "j-sizes", 0),
            finished("n1", "success", "j-sizes", 1, step_index=10_000_000, duration_ms=10**12),
        ]
    )
    for job_id, moment in EDGES.items():
        item = finished("n1", "permanent_failure", job_id, 0, duration_ms=10**12)
        store_at([{**event("job_started", job_id, 0), "ts": moment}, {**item, "ts": moment}])
    store_at(parse_invalid("j-long-names", LONG_PROVIDER, LONG_MODEL))
    # Token counts and costs as large as their columns hold, stored before ingest bounded them.
    spans = [
        root(),
        llm_span(sid(2), ROOT_ID, "gpt-4o", 10),
        llm_span(sid(3), ROOT_ID, "gpt-4o", 20),
    ]
    an_hour_later = [
        root(start_ms=HOUR_MS, end_ms=HOUR_MS + 100),
        llm_span(sid(4), ROOT_ID, "gpt-4o", HOUR_MS + 10),
    ]
    for span in an_hour_later:
        span.trace_id = bytes.fromhex("6c9f" * 8)
    for trace in (spans, an_hour_later):
        store_batch(otlp.to_batch(request(*trace), max_events=10).batch, received_at=T0)
    Call.objects.update(
        input_tokens=MAX_BIGINT,
        output_tokens=MAX_BIGINT,
        total_tokens=MAX_BIGINT,
        cost="99999999.99999999",
    )
    store_at(retrying("j-normal"))
    store_at(parse_invalid("j-normal-planner", "openai", "gpt-4o"))


def test_the_stall_check_opens_every_stall_with_rows_at_every_bound(poisoned, settings):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    assert stalls.check_stalls(T0 + timedelta(hours=1)) >= 2
    stalled = set(Escalation.objects.filter(kind="stalled").values_list("job__job_id", flat=True))
    assert {"j-normal", "j-attempt"} <= stalled


def test_one_job_the_stall_check_cannot_handle_is_logged_and_skipped(
    poisoned, settings, monkeypatch, caplog
):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    trigger = stalls.stall_trigger

    def fails_on_one_job(job, now, waiting_step=None):
        if job.job_id == "j-attempt":
            raise ValueError("a row no check foresaw")
        return trigger(job, now, waiting_step)

    monkeypatch.setattr(stalls, "stall_trigger", fails_on_one_job)
    with caplog.at_level(logging.ERROR):
        stalls.check_stalls(T0 + timedelta(hours=1), batch_size=1)
    stalled = set(Escalation.objects.filter(kind="stalled").values_list("job__job_id", flat=True))
    assert "j-normal" in stalled and "j-attempt" not in stalled
    assert "a row no check foresaw" in caplog.text
    assert f"job {Job.objects.get(job_id='j-attempt').pk}" in caplog.text


def test_alert_evaluation_fires_for_every_subject_with_rows_at_every_bound(poisoned):
    rule = AlertRule.objects.create(
        name="any parse_invalid", kind=AlertRule.Kind.PLANNER_PARSE_INVALID, threshold=0, min_jobs=1
    )
    outcome = alerts.evaluate(now=T0 + timedelta(minutes=10))
    fired = {episode.subject for episode in outcome.fired if episode.rule_id == rule.pk}
    assert fired == {"openai/gpt-4o", f"{LONG_PROVIDER}/{LONG_MODEL}"}
    escalations = Escalation.objects.filter(alert_rule=rule)
    assert escalations.count() == 2
    assert all(len(escalation.node_id) <= 200 for escalation in escalations)
    # The next evaluation finds the same episodes firing (the same escalations, not new ones).
    again = alerts.evaluate(now=T0 + timedelta(minutes=11))
    assert (again.fired, again.resolved) == ([], [])
    assert Escalation.objects.filter(alert_rule=rule).count() == 2


def test_a_rule_alert_evaluation_cannot_measure_is_logged_and_the_others_evaluated(
    poisoned, caplog
):
    AlertRule.objects.create(
        name="a window past the calendar",
        kind=AlertRule.Kind.PLANNER_PARSE_INVALID,
        threshold=0,
        min_jobs=1,
        window_minutes=2**31 - 1,
    )
    rule = AlertRule.objects.create(
        name="z parse_invalid", kind=AlertRule.Kind.PLANNER_PARSE_INVALID, threshold=0, min_jobs=1
    )
    with caplog.at_level(logging.ERROR):
        outcome = alerts.evaluate(now=T0 + timedelta(minutes=10))
    assert "openai/gpt-4o" in {e.subject for e in outcome.fired if e.rule_id == rule.pk}
    assert "a window past the calendar" in caplog.text
    assert not AlertEpisode.objects.exclude(rule=rule).filter(rule__name__startswith="a ").exists()


def test_the_rollup_refreshes_every_hour_with_rows_at_every_bound(poisoned):
    hours = {hour_floor(job.started_at) for job in Job.objects.all()}
    assert hours >= {datetime(1970, 1, 1, tzinfo=UTC), datetime(8999, 12, 31, 23, tzinfo=UTC)}
    rollup.refresh_pending()
    assert not DashboardDirtyHour.objects.exists()
    jobs_per_hour = {
        hour: jobs
        for hour, jobs in DashboardRollup.objects.filter(kind="jobs")
        .values_list("hour", "jobs")
        .order_by()
    }
    assert set(jobs_per_hour) == hours
    llm = DashboardRollup.objects.filter(kind__in=("llm", "llm_day"), provider="openai")
    # Two calls of the largest count in the first hour, one in the next, and the day's row of
    # both: each sum is held at the column's largest value.
    assert sorted(llm.values_list("kind", "hour", "steps", "input_tokens", "output_tokens")) == [
        ("llm", hour_floor(T0), 2, MAX_BIGINT, MAX_BIGINT),
        ("llm", hour_floor(T0) + timedelta(hours=1), 1, MAX_BIGINT, MAX_BIGINT),
        ("llm_day", hour_floor(T0) - timedelta(hours=9), 3, MAX_BIGINT, MAX_BIGINT),
    ]


def test_an_hour_the_rollup_cannot_compute_is_logged_and_the_others_refreshed(
    poisoned, monkeypatch, caplog
):
    poisoned_hour = datetime(1970, 1, 1, tzinfo=UTC)
    insert = planner_rollup.insert

    def fails_on_one_hour(ranges, deleted_jobs=()):
        if any(start <= poisoned_hour < end for start, end in ranges or ()):
            raise ValueError("a row no check foresaw")
        return insert(ranges, deleted_jobs)

    monkeypatch.setattr(planner_rollup, "insert", fails_on_one_hour)
    with caplog.at_level(logging.ERROR):
        rollup.refresh_pending()
    assert list(DashboardDirtyHour.objects.values_list("hour", flat=True)) == [poisoned_hour]
    assert DashboardRollup.objects.filter(kind="jobs", hour=hour_floor(T0)).exists()
    assert "1970-01-01" in caplog.text and "a row no check foresaw" in caplog.text


def test_retention_deletes_every_expired_job_with_rows_at_every_bound(poisoned):
    jobs = Job.objects.count()
    result = retention.apply_retention(7, T0 + timedelta(days=10))
    # Only the job with an unresolved escalation stays (max_retries_exceeded: support owes it
    # an answer); every other job goes.
    assert list(Job.objects.values_list("job_id", flat=True)) == ["j-attempt"]
    assert result.jobs == jobs - 1


def test_a_job_retention_cannot_delete_is_logged_and_the_others_deleted(
    poisoned, monkeypatch, caplog
):
    poisoned_pk = Job.objects.get(job_id="j-8999").pk
    forget = failure_groups.forget_jobs

    def fails_on_one_job(job_pks):
        if poisoned_pk in job_pks:
            raise ValueError("a row no check foresaw")
        return forget(job_pks)

    monkeypatch.setattr(failure_groups, "forget_jobs", fails_on_one_job)
    with caplog.at_level(logging.ERROR):
        retention.apply_retention(7, T0 + timedelta(days=10))
    kept = set(Job.objects.values_list("job_id", flat=True))
    assert "j-8999" in kept
    assert not {"j-normal-planner", "j-1970", "j-sizes"} & kept
    assert "a row no check foresaw" in caplog.text and "j-8999" in caplog.text


@pytest.mark.parametrize("span", [timedelta(hours=1), timedelta(days=1), timedelta(days=3)])
def test_the_dashboard_shows_a_range_with_the_largest_token_counts(poisoned, client, span):
    from tests.factories import user

    client.force_login(user("dana", "operator"))
    since = T0.isoformat().replace("+00:00", "Z")
    until = (T0 + span).isoformat().replace("+00:00", "Z")
    response = client.get(f"/dashboard/?range=custom&since={since}&until={until}")
    assert response.status_code == 200
    assert response.context["figures"]["llm_tokens"]["data"]
