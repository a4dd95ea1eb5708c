"""Timestamps read back from the database: the instants stored, aware, in UTC.

On PostgreSQL traceviz reads timestamptz values with ``datetime.fromisoformat`` instead of
Django's pure-Python loader (``database.read_timestamps_fast``); what the ORM and raw cursors
return must not change with it.
"""

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import psycopg
import pytest
from django.db import DataError, connection
from psycopg.pq import Format

from jobs.models import Job

pytestmark = pytest.mark.django_db

PARIS = ZoneInfo("Europe/Paris")
INSTANTS = [
    datetime(2026, 11, 23, 23, 48, 11, 316478, tzinfo=UTC),
    # The hour Paris skips and the hour it repeats, given in Paris time.
    datetime(2026, 3, 29, 3, 30, 0, 1, tzinfo=PARIS),
    datetime(2026, 10, 25, 2, 30, 0, 999999, tzinfo=PARIS).replace(fold=1),
    datetime(2026, 1, 1, 5, 0, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
    datetime(1, 1, 1, 0, 0, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
]


def test_timestamps_read_back_as_the_instants_stored_in_utc():
    for n, instant in enumerate(INSTANTS):
        Job.objects.create(job_id=f"t{n}", started_at=instant, last_received_at=instant)
    rows = Job.objects.order_by("job_id").values_list("started_at", "last_received_at")
    with connection.cursor() as cursor:
        cursor.execute("SELECT started_at FROM jobs_job ORDER BY job_id")
        raw = [value for (value,) in cursor.fetchall()]
    for instant, (started_at, received_at), raw_value in zip(INSTANTS, rows, raw, strict=True):
        # In UTC: a repeated hour's second pass (fold=1) never equals another zone's time.
        assert started_at == received_at == instant.astimezone(UTC)
        assert started_at.tzinfo == UTC
        if connection.vendor == "postgresql":  # SQLite gives raw text
            assert raw_value == instant.astimezone(UTC) and raw_value.tzinfo == UTC


@pytest.mark.postgres
def test_postgres_reads_timestamps_with_traceviz_loader_and_refuses_what_python_cannot_hold():
    connection.ensure_connection()
    oid = psycopg.adapters.types["timestamptz"].oid
    loader = connection.connection.adapters.get_loader(oid, Format.TEXT)
    assert loader.__module__ == "jobs.ingest.database"
    assert loader.timezone == UTC  # what Django's cursors expect: none registers its own
    with connection.cursor() as cursor:
        assert cursor.cursor.adapters.get_loader(oid, Format.TEXT) is loader
        for text in ("infinity", "10000-01-01 00:00:00+00", "0044-03-15 00:00:00+00 BC"):
            cursor.execute("SELECT %s::timestamptz", [text])
            with pytest.raises(DataError, match=r"timestamp too (large|small)"):
                cursor.fetchone()
