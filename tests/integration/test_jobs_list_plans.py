"""The jobs list's queries are served by indexes on PostgreSQL (issue 16): the case-insensitive
provider/model filters by their functional indexes, the step filters by one day partition per
job, the step lookups by the partial indexes of the failed steps. Plans are read with
sequential and bitmap scans disabled: on a few rows they are cheaper and say nothing about
whether an index could serve the query in order."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.models import Step, runs
from tests import factories
from tests.factories import event, finished

pytestmark = [pytest.mark.postgres, pytest.mark.django_db, pytest.mark.speed_guard]


@pytest.fixture
def operator(client):
    client.force_login(factories.user("olga", "operator"))
    return client


def plans(client, url: str) -> list[tuple[str, str]]:
    """(sql, plan) of every jobs_job query the page runs."""
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url).status_code == 200
    found = []
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        for query in queries.captured_queries:
            if "jobs_job" in query["sql"] and query["sql"].startswith("SELECT"):
                cursor.execute("EXPLAIN " + query["sql"])
                found.append((query["sql"], "\n".join(row[0] for row in cursor.fetchall())))
    return found


@pytest.fixture
def jobs(db):
    factories.store(
        [
            event("job_started", "a", 0, provider="OpenAI", model="GPT-4o"),
            finished("n1", "permanent_failure", "a", 1, reason="upstream said no"),
            event("job_started", "b", 0, provider="anthropic", model="claude"),
        ]
    )


@pytest.mark.parametrize("few", [runs.FEW_JOBS, 0], ids=["named", "looked up"])
@pytest.mark.parametrize("url", ["/?provider=openai", "/?show=all&model=gpt-4O"])
def test_provider_and_model_filters_read_indexes_only(operator, jobs, url, few, monkeypatch):
    """A provider/model filter matches every provider the job used (JobProvider) or its own,
    case-insensitively: both sides are read through indexes, never a whole table. The jobs
    with a JobProvider row for it are read first: few, they are named by id; many, each job
    the page reads is looked up, never all of them hashed before the first (``runs.Probe``)."""
    monkeypatch.setattr(runs, "FEW_JOBS", few)
    found = plans(operator, url)
    assert len(found) == 3  # which jobs have a JobProvider row for it, the page, its count
    assert found[0][0].startswith('SELECT DISTINCT "jobs_jobprovider"."job_id"')
    for _sql, plan in found:
        assert "Seq Scan" not in plan, plan
        assert "hashed" not in plan, plan
    for _sql, plan in found[1:]:
        assert ("jobs_jobprovider" in plan) == (few == 0), plan


def test_step_filters_probe_only_the_jobs_day_partition(operator, jobs):
    for url in ("/?failure_code=adapter_error", "/?error_type=logic"):
        for sql, _plan in plans(operator, url):
            assert '"partition_day" = ("jobs_job"."partition_day")' in sql, sql


@pytest.mark.parametrize(
    ("steps", "index"),
    [
        (lambda: Step.objects.filter(failure_code="adapter_error"), "failure_code_job_id_idx"),
        (lambda: Step.objects.filter(error_type="logic"), "error_type_job_id_idx"),
        (lambda: Step.objects.filter(failure_group_id=1), "failure_group_id_idx"),
    ],
)
def test_step_lookups_can_use_the_partial_indexes_of_the_failed_steps(jobs, steps, index):
    """The step indexes hold only the steps with a reason, failure code, error type or failure
    group (migration 0026): a lookup's condition must imply that for the planner to use them."""
    sql, params = steps().query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert index in plan, plan
