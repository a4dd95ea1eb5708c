"""The optional read replica (traceviz/routers.py), with two real database aliases.

The replica here is a second database (a second SQLite file, or a second PostgreSQL database),
not a mirror of the first: ``replicate()`` copies the primary into it, as streaming
replication would, and whatever is stored after that copy is the replica's lag. So a page that
shows only what was copied read the replica, and a write that needs a row stored after the copy
worked against the primary.
"""

import copy

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.test.utils import CaptureQueriesContext

from jobs.models import Escalation, IngestToken, Job
from tests.factories import event, finished, started, store, user
from traceviz.routers import PIN_COOKIE, REPLICA

pytestmark = pytest.mark.django_db(transaction=True, databases=[DEFAULT_DB_ALIAS, REPLICA])


@pytest.fixture(scope="module")
def replica_database(django_db_setup, django_db_blocker, tmp_path_factory):
    """A second database under the alias ``replica``, migrated like the first."""
    config = copy.deepcopy(connections.settings[DEFAULT_DB_ALIAS])
    if connections[DEFAULT_DB_ALIAS].vendor == "sqlite":
        name = str(tmp_path_factory.mktemp("replica") / "replica.sqlite3")
    else:
        name = f"{config['NAME']}_replica"
    config["TEST"] = {**config.get("TEST", {}), "NAME": name, "MIRROR": None}
    connections.settings[REPLICA] = config
    with django_db_blocker.unblock():
        connections[REPLICA].creation.create_test_db(verbosity=0, autoclobber=True)
    yield REPLICA
    with django_db_blocker.unblock():
        connections[REPLICA].creation.destroy_test_db(config["NAME"], verbosity=0)
    del connections[REPLICA]
    del connections.settings[REPLICA]


@pytest.fixture
def replica(replica_database, settings):
    settings.TRACEVIZ_READ_REPLICA = REPLICA
    return REPLICA


def replicate() -> None:
    """What streaming replication does: the replica becomes a copy of the primary."""
    models = [Group, User, User.groups.through, *apps.get_app_config("jobs").get_models()]
    with transaction.atomic(using=REPLICA):
        for model in reversed(models):
            model.objects.using(REPLICA).all()._raw_delete(REPLICA)
        for model in models:
            model.objects.using(REPLICA).bulk_create(model.objects.using(DEFAULT_DB_ALIAS).all())


def failed_job(job_id: str, at: float = 0) -> list[dict]:
    """A job whose expired credentials open a user_action escalation."""
    return [
        event("job_started", job_id, at),
        started("n1", job_id, at + 1),
        finished("n1", "retryable_failure", job_id, at + 2, error_type="auth", reason="expired"),
    ]


def test_pages_and_the_read_api_read_the_replica(replica, client):
    store(failed_job("copied"))
    olga = user("olga", "operator")
    replicate()
    store(failed_job("lagging", at=10))  # not on the replica yet
    client.force_login(olga)

    with CaptureQueriesContext(connections["default"]) as on_primary:
        response = client.get("/?status=all")
    listed = response.content.decode()
    assert "copied" in listed and "lagging" not in listed
    assert response.context["total"] == 1  # the capped count reads the replica too
    assert not [q for q in on_primary.captured_queries if "jobs_job" in q["sql"]]
    assert not [q for q in on_primary.captured_queries if "max_parallel" in q["sql"]]
    assert client.get("/jobs/copied/").status_code == 200
    assert client.get("/jobs/lagging/").status_code == 404

    # A token issued after the copy works at once: tokens are read from the primary.
    _token, raw = IngestToken.issue("reader")
    api = client.get("/api/v1/jobs", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert api.status_code == 200
    assert [job["job_id"] for job in api.json()["jobs"]] == ["copied"]


def test_ingest_and_actions_never_touch_the_replica(replica, client, ingest_token):
    replicate()
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        response = client.post(
            "/api/v1/events",
            [*failed_job("fresh")],
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
        )
        assert response.status_code == 200, response.content
        escalation = Escalation.objects.using(DEFAULT_DB_ALIAS).get(job__job_id="fresh")
        client.force_login(user("sam", "support"))
        # Only the primary has this escalation: reading it from the replica would be a 404.
        acknowledged = client.post(f"/escalations/{escalation.pk}/acknowledge/")
        assert acknowledged.status_code == 303
    assert on_replica.captured_queries == []
    assert not Job.objects.using(REPLICA).filter(job_id="fresh").exists()
    escalation.refresh_from_db(using=DEFAULT_DB_ALIAS)
    assert escalation.status == Escalation.Status.ACKNOWLEDGED


def test_a_browser_reads_the_primary_for_a_while_after_its_change(replica, client, settings):
    store(failed_job("j1"))
    client.force_login(user("sam", "support"))
    replicate()
    escalation = Escalation.objects.get(job__job_id="j1")
    page = f"/escalations/{escalation.pk}/"

    response = client.post(f"/escalations/{escalation.pk}/acknowledge/")
    assert response.cookies[PIN_COOKIE]["max-age"] == settings.TRACEVIZ_REPLICA_PIN_SECONDS
    # Pinned to the primary: the change is there although the replica has not caught up.
    assert 'data-esc-status="acknowledged"' in client.get(page).content.decode()
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        client.get(page)
    assert on_replica.captured_queries == []

    client.cookies.pop(PIN_COOKIE)
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        replica_page = client.get(page).content.decode()
    assert on_replica.captured_queries
    assert Escalation.objects.using(REPLICA).get(pk=escalation.pk).status == "open"
    assert 'data-esc-status="open"' in replica_page


def test_the_dashboard_refresh_writes_the_primary_only(replica, client):
    store(failed_job("j1"))
    client.force_login(user("olga", "operator"))
    replicate()
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        assert client.get("/dashboard/?range=7d").status_code == 200
    statements = [query["sql"].lstrip().split()[0].upper() for query in on_replica]
    assert statements and set(statements) == {"SELECT"}


def test_without_a_replica_pages_read_the_primary(replica_database, client, settings):
    settings.TRACEVIZ_READ_REPLICA = ""
    replicate()
    store(failed_job("lagging"))
    client.force_login(user("olga", "operator"))
    with CaptureQueriesContext(connections[REPLICA]) as on_replica:
        assert "lagging" in client.get("/?status=all").content.decode()
    assert on_replica.captured_queries == []


def test_reads_inside_a_transaction_on_the_primary_read_the_primary(replica_database):
    from traceviz.routers import replica_reads

    with replica_reads(REPLICA):
        assert Job.objects.all().db == REPLICA
        assert IngestToken.objects.all().db == DEFAULT_DB_ALIAS
        with transaction.atomic():
            assert Job.objects.all().db == DEFAULT_DB_ALIAS
    assert Job.objects.all().db == DEFAULT_DB_ALIAS
