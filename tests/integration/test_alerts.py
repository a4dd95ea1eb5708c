"""Alert rules: episodes fire once, resolve, fire again later (frozen clock: ``now`` is passed in),
and a firing alert opens a ``raised`` escalation tied to its rule that notifies like the others."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from jobs.escalations import actions, alerts
from jobs.models import AlertEpisode, AlertRule, Escalation, Notification
from tests.factories import BASE_TS, event, finished, store, user

ANTHROPIC = {"provider": "anthropic", "model": "claude-x"}
T0 = BASE_TS + timedelta(hours=1)  # the first evaluation; events are in the 15 minutes before


@pytest.fixture
def degraded_rule(db, settings):
    settings.TRACEVIZ_ESCALATION_WEBHOOK_URL = "https://hooks.example.invalid/traceviz"
    AlertRule.objects.exclude(kind=AlertRule.Kind.PLANNER_DEGRADED_RATE).update(enabled=False)
    return AlertRule.objects.get(kind=AlertRule.Kind.PLANNER_DEGRADED_RATE)


def seconds(at):
    return (at - BASE_TS).total_seconds()


def planner_jobs(prefix: str, at, jobs: int, degraded: int, **labels):
    """``jobs`` jobs started at ``at`` carrying provider/model, ``degraded`` of them degraded."""
    labels = labels or ANTHROPIC
    items = []
    for i in range(jobs):
        job_id = f"{prefix}{i}"
        items.append(event("job_started", job_id, seconds(at) + i, **labels))
        if i < degraded:
            items.append(
                event(
                    "graph.next_step.parse_invalid",
                    job_id,
                    seconds(at) + i + 0.1,
                    attempt=1,
                    **labels,
                )
            )
            items.append(
                event(
                    "graph.next_step.degraded", job_id, seconds(at) + i + 0.2, attempts=1, **labels
                )
            )
    store(items)


def test_default_rules_come_from_the_data_migration(db):
    rules = {rule.kind: rule for rule in AlertRule.objects.all()}
    degraded = rules[AlertRule.Kind.PLANNER_DEGRADED_RATE]
    assert (degraded.threshold, degraded.window_minutes, degraded.min_jobs) == (0.2, 15, 5)
    assert (degraded.provider, degraded.model) == ("", "")
    assert AlertRule.Kind.PLANNER_PARSE_INVALID in rules
    assert rules[AlertRule.Kind.FAILURE_CODE_RATE].failure_code


def test_degraded_rate_above_threshold_fires_one_episode_per_provider_model(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    planner_jobs(
        "o", T0 - timedelta(minutes=10), jobs=5, degraded=1, provider="openai", model="gpt-4.1"
    )
    outcome = alerts.evaluate(now=T0)
    assert [(e.subject, e.firing_since, e.value, e.jobs) for e in outcome.fired] == [
        ("anthropic/claude-x", T0, 0.4, 5)
    ]


def test_firing_alert_opens_a_raised_escalation_tied_to_its_rule(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    alerts.evaluate(now=T0)
    escalation = Escalation.objects.get(alert_rule=degraded_rule)
    assert (escalation.job, escalation.kind, escalation.node_id, escalation.status) == (
        None,
        "raised",
        "anthropic/claude-x",
        "open",
    )
    assert escalation.severity == degraded_rule.severity
    assert "40% (2 of 5 jobs)" in escalation.message
    assert escalation.trigger_event_ids == [
        f"alert:{degraded_rule.pk}:anthropic/claude-x:{T0.isoformat()}"
    ]
    assert Notification.objects.filter(escalation=escalation, reason="opened").count() == 1


def test_a_firing_rule_does_not_fire_again_while_it_holds(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    alerts.evaluate(now=T0)
    outcome = alerts.evaluate(now=T0 + timedelta(minutes=1))
    assert outcome.fired == [] and outcome.resolved == []
    assert AlertEpisode.objects.count() == 1
    escalation = Escalation.objects.get(alert_rule=degraded_rule)
    assert len(escalation.trigger_event_ids) == 1
    assert Notification.objects.filter(escalation=escalation).count() == 1


def test_episode_resolves_with_a_timestamp_when_the_rule_stops_holding(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    alerts.evaluate(now=T0)
    later = T0 + timedelta(minutes=30)
    outcome = alerts.evaluate(now=later)
    episode = AlertEpisode.objects.get()
    assert [e.pk for e in outcome.resolved] == [episode.pk]
    assert (episode.firing_since, episode.resolved_at) == (T0, later)
    entry = Escalation.objects.get().entries.last()
    assert entry.action == "alert resolved"


def test_rule_fires_again_later_as_a_new_episode_and_reopens_its_escalation(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    alerts.evaluate(now=T0)
    alerts.evaluate(now=T0 + timedelta(minutes=30))
    escalation = Escalation.objects.get()
    actions.resolve(escalation, user("sam", "support"), "provider fixed their formatter")
    t1 = T0 + timedelta(hours=2)
    planner_jobs("b", t1 - timedelta(minutes=5), jobs=6, degraded=3)
    outcome = alerts.evaluate(now=t1)
    assert [(e.subject, e.firing_since) for e in outcome.fired] == [("anthropic/claude-x", t1)]
    episodes = list(AlertEpisode.objects.order_by("firing_since"))
    assert [(e.firing_since, e.resolved_at) for e in episodes] == [
        (T0, T0 + timedelta(minutes=30)),
        (t1, None),
    ]
    escalation.refresh_from_db()
    assert escalation.status == "open"
    assert len(escalation.trigger_event_ids) == 2
    assert Notification.objects.filter(escalation=escalation, reason="reopened").count() == 1
    assert Escalation.objects.count() == 1


def test_rule_for_one_provider_model_measures_only_that_provider_model(degraded_rule):
    AlertRule.objects.filter(pk=degraded_rule.pk).update(provider="openai", model="gpt-4.1")
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=4)
    planner_jobs(
        "o", T0 - timedelta(minutes=10), jobs=5, degraded=2, provider="openai", model="gpt-4.1"
    )
    outcome = alerts.evaluate(now=T0)
    assert [(e.subject, e.value, e.jobs) for e in outcome.fired] == [("openai/gpt-4.1", 0.4, 5)]


def test_too_few_jobs_do_not_fire(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=4, degraded=4)
    assert alerts.evaluate(now=T0).fired == []


def test_events_outside_the_window_do_not_count(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=20), jobs=5, degraded=5)
    assert alerts.evaluate(now=T0).fired == []


def test_disabling_a_rule_resolves_its_firing_episode(degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    alerts.evaluate(now=T0)
    AlertRule.objects.filter(pk=degraded_rule.pk).update(enabled=False)
    outcome = alerts.evaluate(now=T0 + timedelta(minutes=1))
    assert len(outcome.resolved) == 1


def test_parse_invalid_count_rule_fires_above_its_count(degraded_rule):
    rule = AlertRule.objects.create(
        name="parse", kind=AlertRule.Kind.PLANNER_PARSE_INVALID, threshold=2, min_jobs=1
    )
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=3, degraded=2)
    assert all(e.rule_id != rule.pk for e in alerts.evaluate(now=T0).fired)  # 2 is not above 2
    planner_jobs("b", T0 - timedelta(minutes=5), jobs=1, degraded=1)
    fired = [e for e in alerts.evaluate(now=T0).fired if e.rule_id == rule.pk]
    assert [(e.subject, e.value) for e in fired] == [("anthropic/claude-x", 3.0)]


def test_failure_code_rate_rule(degraded_rule):
    rule = AlertRule.objects.create(
        name="timeouts",
        kind=AlertRule.Kind.FAILURE_CODE_RATE,
        failure_code="adapter_timeout",
        threshold=0.25,
        min_jobs=3,
    )
    start = seconds(T0 - timedelta(minutes=10))
    items = []
    for i in range(4):
        items.append(event("job_started", f"f{i}", start + i))
        code = {"failure_code": "adapter_timeout"} if i < 2 else {}
        items.append(finished("n1", "retryable_failure", job_id=f"f{i}", at=start + i + 1, **code))
    store(items)
    fired = [e for e in alerts.evaluate(now=T0).fired if e.rule_id == rule.pk]
    assert [(e.subject, e.value, e.jobs) for e in fired] == [("adapter_timeout", 0.5, 4)]


def test_evaluate_alerts_command_and_task(degraded_rule):
    from jobs.tasks import evaluate_alerts

    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    result = evaluate_alerts.apply(kwargs={}).get()  # eager, at the real clock: nothing recent
    assert result == {"fired": 0, "resolved": 0}
    out = StringIO()
    call_command("evaluate_alerts", stdout=out)
    assert "0 fired, 0 resolved" in out.getvalue()


def test_firing_alerts_show_in_the_header_and_on_the_dashboard(client, degraded_rule):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    alerts.evaluate(now=T0)
    client.force_login(user("olga", "operator"))
    html = client.get("/dashboard/").content.decode()
    assert "1 alert firing" in html
    assert "Planner degraded rate per provider/model" in html
    assert "anthropic/claude-x" in html


@pytest.mark.speed_guard
def test_header_indicator_costs_one_query(client, degraded_rule, django_assert_num_queries):
    from django.template import Context, Template
    from django.test import RequestFactory

    from jobs.web.context_processors import firing_alerts

    request = RequestFactory().get("/")
    request.user = user("olga", "operator")
    context = firing_alerts(request)
    with django_assert_num_queries(1):
        Template("{% if n %}{{ n }}{% endif %}").render(
            Context({"n": context["firing_alert_count"]})
        )


def test_alert_escalation_names_its_provider_model_and_links_the_affected_jobs(
    degraded_rule, client
):
    planner_jobs("a", T0 - timedelta(minutes=10), jobs=5, degraded=2)
    planner_jobs("x", T0 - timedelta(minutes=10), jobs=2, degraded=0, provider="other", model="m")
    alerts.evaluate(now=T0)
    escalation = Escalation.objects.get(alert_rule=degraded_rule)
    client.force_login(user("sam", "support"))
    response = client.get(f"/escalations/{escalation.pk}/")
    body = response.content.decode()
    assert "Failing node" not in body
    assert "<dt>Provider / model</dt><dd><code>anthropic/claude-x</code>" in body
    jobs_url = response.context["alert"].jobs_url
    assert "provider=anthropic" in jobs_url and "model=claude-x" in jobs_url
    listed = client.get(jobs_url).context["rows"]
    assert sorted(row.job.job_id for row in listed) == [f"a{i}" for i in range(5)]
