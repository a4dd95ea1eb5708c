"""A failure group's lifecycle (docs/failures.md): resolve (in a version, after a time), ignore
(for a time, until seen N times), merge, regression and its alert, the audit trail, versioned
grouping, producer fingerprints, and rebuilds that keep what people decided."""

import json
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from jobs.escalations import alerts, group_lifecycle
from jobs.ingest import failure_groups
from jobs.ingest.parity import differences as check_parity
from jobs.models import (
    AlertEpisode,
    AlertRule,
    Escalation,
    Failure,
    FailureFingerprint,
    FailureGroup,
    IngestToken,
    Notification,
    Step,
)
from jobs.replay import signatures
from tests import factories
from tests.factories import recent_event

pytestmark = pytest.mark.django_db


def fail(job_id: str, minutes_ago: float, node="fetch", reason=None, version=None, **extra):
    """A job of workflow billing whose ``node`` failed permanently ``minutes_ago`` minutes ago
    (a negative number: in the future, after a resolution made now)."""
    metadata = {"version": version} if version else {}
    factories.store(
        [
            recent_event(
                "job_started",
                job_id,
                minutes_ago + 1,
                workflow="billing",
                **({"metadata": metadata} if metadata else {}),
            ),
            recent_event("node_started", job_id, minutes_ago + 0.5, node_id=node, attempt=1),
            recent_event(
                "node_finished",
                job_id,
                minutes_ago,
                node_id=node,
                attempt=1,
                result_type="permanent_failure",
                reason=reason or "upstream timed out after 30s",
                failure_code="adapter_timeout",
                **extra,
            ),
        ]
    )


def group_of(job_id: str, node="fetch") -> FailureGroup:
    return Step.objects.filter(job__job_id=job_id, node_id=node, attempt=1).get().failure_group


def actions(group: FailureGroup) -> list[tuple[str, str, str]]:
    return [(e.action, e.from_status, e.to_status) for e in group.entries.all()]


@pytest.fixture
def engineer():
    return factories.user("erin", "engineer")


def test_resolve_then_a_later_failure_regresses_it_with_an_audit_trail(engineer):
    fail("a1", 30)
    group = group_of("a1")
    group_lifecycle.resolve(group, actor=engineer)
    group.refresh_from_db()
    assert group.status == "resolved" and group.resolved_after is not None
    fail("a2", -1)  # after the resolution
    group.refresh_from_db()
    assert group.status == "unresolved" and group.is_regressed
    assert actions(group) == [
        ("resolved", "unresolved", "resolved"),
        ("regressed", "resolved", "unresolved"),
    ]
    assert [e.actor_name for e in group.entries.all()] == ["erin", "traceviz"]


def test_a_failure_from_before_the_resolution_does_not_regress_it(engineer):
    fail("a1", 30)
    group = group_of("a1")
    group_lifecycle.resolve(group, actor=engineer)
    fail("late", 20)  # delivered now, but it happened before the resolution
    group.refresh_from_db()
    assert group.status == "resolved" and group.regressed_at is None


def test_resolved_after_a_date_regresses_only_on_failures_after_it(engineer):
    fail("a1", 120)
    group = group_of("a1")
    group_lifecycle.resolve(group, actor=engineer, after=timezone.now() - timedelta(minutes=60))
    fail("before", 90)
    group.refresh_from_db()
    assert group.status == "resolved"
    fail("after", 30)
    group.refresh_from_db()
    assert group.is_regressed


def test_resolved_in_a_version_regresses_only_in_a_later_version(engineer):
    fail("v1", 30, version="1.4.0")
    group = group_of("v1")
    group_lifecycle.resolve(group, actor=engineer, in_version="1.4.2")
    fail("old-deploy", -1, version="1.4.0")
    fail("same", -1, version="1.4.2")
    fail("unversioned", -1)
    group.refresh_from_db()
    assert group.status == "resolved"
    fail("newer", -2, version="1.10.0")
    group.refresh_from_db()
    assert group.is_regressed
    [entry] = [e for e in group.entries.all() if e.action == "regressed"]
    assert "in version 1.10.0" in entry.note and "resolved in 1.4.2" in entry.note


def test_an_opentelemetry_service_version_is_a_failure_version():
    assert group_lifecycle.job_version({"service.version": "2.1"}) == "2.1"
    assert group_lifecycle.job_version({"release": "r7", "service.version": "2.1"}) == "r7"
    assert group_lifecycle.job_version({"version": True}) == ""
    assert group_lifecycle.is_later_version("v13", "v12")
    assert not group_lifecycle.is_later_version("1.9", "1.10")
    assert group_lifecycle.is_later_version("abc123", "def456")
    assert not group_lifecycle.is_later_version("", "1.0")


def test_ignore_until_seen_n_more_times_lapses_on_the_nth(engineer):
    fail("a1", 30)
    group = group_of("a1")
    group_lifecycle.ignore(group, actor=engineer, count=2)
    fail("a2", 20)
    group.refresh_from_db()
    assert (group.status, group.seen_while_ignored) == ("ignored", 1)
    fail("a3", 10)
    group.refresh_from_db()
    assert group.status == "unresolved" and not group.is_regressed
    assert actions(group)[-1] == ("unignored", "ignored", "unresolved")
    assert "seen 2 times" in group.entries.last().note


def test_ignore_for_a_duration_lapses_when_its_time_passes(engineer):
    fail("a1", 30)
    group = group_of("a1")
    group_lifecycle.ignore(group, actor=engineer, until=timezone.now() + timedelta(hours=1))
    assert group_lifecycle.lapse_ignores() == 0
    group.refresh_from_db()
    assert group.status == "ignored"
    assert group_lifecycle.lapse_ignores(timezone.now() + timedelta(hours=2)) == 1
    group.refresh_from_db()
    assert group.status == "unresolved"
    assert "ran out" in group.entries.last().note


def test_an_ignore_in_the_past_or_of_both_kinds_is_refused(engineer):
    fail("a1", 30)
    group = group_of("a1")
    with pytest.raises(group_lifecycle.GroupActionError, match="future"):
        group_lifecycle.ignore(group, until=timezone.now() - timedelta(minutes=1))
    with pytest.raises(group_lifecycle.GroupActionError, match="not both"):
        group_lifecycle.ignore(group, until=timezone.now() + timedelta(hours=1), count=3)
    with pytest.raises(group_lifecycle.GroupActionError, match="unresolved"):
        group_lifecycle.unresolve(group)


def test_merge_moves_failures_and_later_ones_land_in_the_survivor_without_a_new_signature(
    engineer,
):
    rule = AlertRule.objects.get(kind="new_failure_signature")
    rule.enabled = True
    rule.save()
    fail("a1", 30, node="fetch")
    fail("b1", 30, node="charge", reason="card declined")
    fail("b2", 25, node="charge", reason="card declined")
    source, target = group_of("b1", "charge"), group_of("a1")
    failure_groups.merge(source, target, actor=engineer)
    source.refresh_from_db()
    target.refresh_from_db()
    assert (source.status, source.merged_into_id) == ("merged", target.pk)
    assert (source.job_count, source.step_count) == (0, 0)
    assert (target.job_count, target.step_count) == (3, 3)
    assert group_of("b1", "charge") == target
    assert set(Failure.objects.values_list("group_id", flat=True)) == {target.pk}
    groups_before = FailureGroup.objects.count()
    fail("b3", 5, node="charge", reason="card declined")
    assert FailureGroup.objects.count() == groups_before
    assert group_of("b3", "charge") == target
    target.refresh_from_db()
    assert (target.job_count, target.step_count) == (4, 4)
    assert failure_groups.differences() == []
    for job_id in ("a1", "b1", "b3"):
        assert check_parity(job_id) == []
    assert actions(source)[-1][0] == "merged" and actions(target)[-1][0] == "merged in"
    alerts.evaluate(timezone.now() + timedelta(minutes=1))
    fired = AlertEpisode.objects.filter(rule=rule).values_list("subject", flat=True)
    # The surviving signature only: the merged one counts nothing now, the merge made none new.
    assert list(fired) == [target.fingerprint]


def test_a_merge_into_itself_or_into_a_merged_group_is_refused():
    fail("a1", 30)
    fail("b1", 30, node="charge")
    fail("c1", 30, node="refund")
    a, b, c = group_of("a1"), group_of("b1", "charge"), group_of("c1", "refund")
    with pytest.raises(group_lifecycle.GroupActionError, match="itself"):
        failure_groups.merge(a, a)
    failure_groups.merge(b, a)
    b.refresh_from_db()
    with pytest.raises(group_lifecycle.GroupActionError, match="merged into another"):
        failure_groups.merge(c, b)


def test_the_regressed_rule_fires_once_through_an_escalation_and_the_outbox(engineer, settings):
    settings.TRACEVIZ_ESCALATION_EMAILS = ["ops@example.com"]
    rule = AlertRule.objects.get(kind="failure_group_regressed")
    assert rule.enabled and rule.name == "Failure group regressed"
    fail("a1", 30)
    group = group_of("a1")
    group_lifecycle.resolve(group, actor=engineer)
    fail("a2", -1)
    now = timezone.now() + timedelta(minutes=2)
    first = alerts.evaluate(now)
    second = alerts.evaluate(now + timedelta(minutes=1))
    assert [e.subject for e in first.fired] == [group.fingerprint] and second.fired == []
    [escalation] = Escalation.objects.filter(alert_rule=rule)
    assert escalation.node_id == group.fingerprint and "regressed" in escalation.message
    assert Notification.objects.filter(escalation=escalation, reason="opened").count() >= 1


def test_rebuild_keeps_the_lifecycle_and_finds_no_regression(engineer):
    fail("a1", 30)
    fail("b1", 30, node="charge", reason="card declined")
    resolved, ignored = group_of("a1"), group_of("b1", "charge")
    group_lifecycle.resolve(resolved, actor=engineer, in_version="3.0")
    group_lifecycle.ignore(ignored, actor=engineer, count=1)
    call_command("rebuild_projections", verbosity=0)
    resolved.refresh_from_db()
    ignored.refresh_from_db()
    assert (resolved.status, resolved.resolved_in_version) == ("resolved", "3.0")
    assert (ignored.status, ignored.seen_while_ignored) == ("ignored", 0)
    assert [len(actions(g)) for g in (resolved, ignored)] == [1, 1]
    assert check_parity("a1") == [] and check_parity("b1") == []


def test_a_new_grouping_version_finds_the_groups_of_the_old_one(monkeypatch):
    fail("a1", 30)
    group = group_of("a1")
    assert list(group.fingerprints.values_list("version", "fingerprint")) == [
        (1, group.fingerprint)
    ]
    old = signatures.normalise_reason
    monkeypatch.setattr(signatures, "GROUPING_VERSION", 2)
    monkeypatch.setitem(signatures.NORMALISERS, 2, lambda reason: old(reason).upper())
    groups_before = FailureGroup.objects.count()
    fail("a2", 20)
    assert FailureGroup.objects.count() == groups_before
    assert group_of("a2") == group
    versions = sorted(group.fingerprints.values_list("version", flat=True))
    assert versions == [1, 2]
    assert check_parity("a2") == []


# --- producer fingerprints ----------------------------------------------------------------


def auth(raw: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def post_events(client, raw: str, items: list[dict]):
    return client.post(
        "/api/v1/events", json.dumps(items), content_type="application/json", **auth(raw)
    )


def test_a_producer_fingerprint_through_the_event_api_groups_across_nodes(client):
    _token, raw = IngestToken.issue("fingerprints")
    items = []
    for job_id, node, reason in (("p1", "fetch", "timeout"), ("p2", "upload", "broken pipe")):
        items += [
            recent_event("job_started", job_id, 5, workflow="etl"),
            recent_event(
                "node_finished",
                job_id,
                4,
                node_id=node,
                result_type="permanent_failure",
                reason=reason,
                fingerprint=["database-unavailable"],
            ),
        ]
    response = post_events(client, raw, items)
    assert response.status_code == 200, response.content
    assert group_of("p1") == group_of("p2", "upload")


def test_the_default_element_keeps_the_computed_grouping_inside_the_producers(client):
    _token, raw = IngestToken.issue("fingerprints")
    items = []
    for job_id, region in (("d1", "eu"), ("d2", "eu"), ("d3", "us")):
        items += [
            recent_event("job_started", job_id, 5, workflow="etl"),
            recent_event(
                "node_finished",
                job_id,
                4,
                node_id="fetch",
                result_type="permanent_failure",
                reason="timeout",
                fingerprint=["{{ default }}", region],
            ),
        ]
    assert post_events(client, raw, items).status_code == 200
    assert group_of("d1") == group_of("d2") != group_of("d3")


@pytest.mark.parametrize(
    ("fingerprint", "message"),
    [
        ([], "must be a list of 1 to 16 strings"),
        ("one string", "must be a list of 1 to 16 strings"),
        ([1, 2], "must be a list of 1 to 16 strings"),
        (["x"] * 17, "must be a list of 1 to 16 strings"),
        (["x" * 201], "of 1 to 200 characters"),
    ],
)
def test_a_bad_producer_fingerprint_is_a_field_error(client, fingerprint, message):
    _token, raw = IngestToken.issue("fingerprints")
    bad = recent_event(
        "node_finished",
        "bad",
        1,
        node_id="n",
        result_type="permanent_failure",
        fingerprint=fingerprint,
    )
    response = post_events(client, raw, [bad])
    body = response.json()
    assert body["rejected"] == 1
    [error] = body["errors"][0]["errors"]
    assert error["field"] == "payload.fingerprint" and message in error["message"]


# --- links ----------------------------------------------------------------------------------


def retry_exhausted(job_id: str) -> None:
    items = [recent_event("job_started", job_id, 30, workflow="billing")]
    for attempt in range(1, 7):
        items.append(
            recent_event(
                "node_finished",
                job_id,
                30 - attempt,
                node_id="upload",
                attempt=attempt,
                result_type="retryable_failure",
                reason="network timeout",
                failure_code="adapter_timeout",
            )
        )
    factories.store(items)


def test_a_group_page_links_its_open_escalations_and_an_escalation_links_its_group(client):
    client.force_login(factories.user("olga", "operator"))
    retry_exhausted("r1")
    escalation = Escalation.objects.get(job__job_id="r1")
    group = group_of("r1", "upload")
    page = client.get(f"/failures/{group.fingerprint}/")
    assert [e.pk for e in page.context["escalations"]] == [escalation.pk]
    assert f'href="/escalations/{escalation.pk}/"' in page.content.decode()
    html = client.get(f"/escalations/{escalation.pk}/").content.decode()
    assert f'href="/failures/{group.fingerprint}/"' in html
    escalation.status = Escalation.Status.RESOLVED
    escalation.save()
    assert client.get(f"/failures/{group.fingerprint}/").context["escalations"] == []


def test_the_map_has_a_row_for_every_group():
    fail("a1", 30)
    fail("b1", 30, node="charge")
    assert FailureFingerprint.objects.count() == FailureGroup.objects.count() == 2


def test_purge_text_scrubs_a_version_the_lifecycle_wrote_down(engineer):
    from jobs.ingest.purge import PURGED, purge_text

    fail("a1", 30, version="1.0")
    group = group_of("a1")
    group_lifecycle.resolve(group, actor=engineer, in_version="1.0")
    fail("a2", -1, version="9.9-sekrit-build")
    group.refresh_from_db()
    assert group.is_regressed
    report = purge_text("sekrit", dry_run=False)
    assert report.rows["FailureGroupEntry"] == 1
    note = group.entries.get(action="regressed").note
    assert "sekrit" not in note and PURGED in note
