"""The stall rule (docs/contract.md) is decided in one place: the SQL filter the list and
the stall check use and the row predicate the pages use agree on every status and silence."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from jobs.models import Job, hour_floor
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


# The SQL filter narrows by the receive hour first (the index holds it): a job last heard from
# at the very start of the cutoff's hour, a microsecond before the cutoff, is stalled too.
HOUR = datetime(2026, 3, 29, 1, tzinfo=UTC)
NOWS = (
    BASE_TS + timedelta(days=1),
    HOUR + timedelta(minutes=30),
    HOUR + timedelta(minutes=30, microseconds=1),
)


@pytest.mark.parametrize("now", NOWS)
def test_sql_filter_and_row_predicate_agree(settings, now):
    settings.TRACEVIZ_STALL_AFTER = timedelta(minutes=30)
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


def test_the_receive_hour_follows_the_receive_time_in_utc():
    paris = ZoneInfo("Europe/Paris")
    # 03:59:59.999999 in Paris on the night its clocks went forward: 01:59:59.999999 UTC.
    received = datetime(2026, 3, 29, 3, 59, 59, 999999, tzinfo=paris)
    job = Job.objects.create(job_id="hourly", last_received_at=received)
    job.refresh_from_db()
    assert job.received_hour == datetime(2026, 3, 29, 1, tzinfo=UTC) == hour_floor(received)
    Job.objects.filter(pk=job.pk).update(last_received_at=received + timedelta(microseconds=1))
    job.refresh_from_db()
    assert job.received_hour == datetime(2026, 3, 29, 2, tzinfo=UTC)
