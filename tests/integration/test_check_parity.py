"""``manage.py check_parity``: an operator's check that the projected rows are what a replay of
the stored events gives, naming each difference and failing when there is one."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from jobs.models import Job
from tests.factories import event, finished, started, store

pytestmark = pytest.mark.django_db


def store_two_jobs() -> None:
    store(
        [event("job_started", "p1", 0), started("n1", "p1", 1), finished("n1", job_id="p1", at=2)]
    )
    store([event("job_started", "p2", 0), finished("n1", "permanent_failure", "p2", at=2)])


def test_jobs_whose_rows_match_their_events_pass():
    store_two_jobs()
    out = StringIO()
    call_command("check_parity", stdout=out, stderr=StringIO())
    assert out.getvalue().strip() == "2 jobs match a replay of their events"


def test_a_stale_row_is_named_and_the_command_fails():
    store_two_jobs()
    Job.objects.filter(job_id="p2").update(status="completed")
    out = StringIO()
    with pytest.raises(CommandError, match="1 of 2 jobs differ"):
        call_command("check_parity", stdout=out, stderr=StringIO())
    assert "p2 job status: stored 'completed', replayed 'failed'" in out.getvalue()
    assert "p1" not in out.getvalue()


def test_only_the_given_jobs_are_checked():
    store_two_jobs()
    Job.objects.filter(job_id="p2").update(status="completed")
    out = StringIO()
    call_command("check_parity", "--job", "p1", stdout=out, stderr=StringIO())
    assert out.getvalue().strip() == "1 jobs match a replay of their events"
