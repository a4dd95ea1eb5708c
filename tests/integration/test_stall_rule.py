"""The stall rule (DESIGN.md section 4) is decided in one place: the SQL filter the list and
the stall check use and the row predicate the pages use agree on every status and silence."""

from datetime import timedelta

import pytest

from jobs.models import Job
from jobs.replay.failures import RunStatus
from tests.factories import BASE_TS

pytestmark = pytest.mark.django_db

SILENCES = (
    timedelta(0),
    timedelta(minutes=29, seconds=59),
    timedelta(minutes=30),
    timedelta(minutes=30, microseconds=1),
    timedelta(hours=5),
)


def test_sql_filter_and_row_predicate_agree(settings):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
    now = BASE_TS + timedelta(days=1)
    for status in RunStatus:
        for silence in SILENCES:
            Job.objects.create(
                job_id=f"{status}-{silence.total_seconds()}",
                status=status,
                last_received_at=now - silence,
            )
    in_sql = set(Job.objects.stalled(now).values_list("job_id", flat=True))
    by_row = {job.job_id for job in Job.objects.all() if job.is_stalled_at(now)}
    assert in_sql == by_row
    assert in_sql == {
        f"{status}-{silence.total_seconds()}"
        for status in ("running", "cancelling", "paused:transient")
        for silence in SILENCES[3:]
    }
