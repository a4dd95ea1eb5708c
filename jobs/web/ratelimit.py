"""Fixed-window rate limits shared by every web process (rows in the database)."""

import math
from datetime import datetime, timedelta

from django.db import connection
from django.utils import timezone

from jobs.models import RateCounter


def hit(key: str, limit: int, window_seconds: int, now: datetime | None = None) -> int | None:
    """Count one request for ``key``; None when it is within ``limit`` per window, else the
    seconds until the window ends (for Retry-After). A limit of 0 means unlimited."""
    if limit <= 0:
        return None
    now = now or timezone.now()
    epoch = int(now.timestamp())
    window_start = datetime.fromtimestamp(epoch - epoch % window_seconds, tz=now.tzinfo)
    table = connection.ops.quote_name(RateCounter._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (key, window_start, count) VALUES (%s, %s, 1) "
            "ON CONFLICT (key, window_start) DO UPDATE SET count = "
            f"{table}.count + 1 RETURNING count",
            [key, connection.ops.adapt_datetimefield_value(window_start)],
        )
        (count,) = cursor.fetchone()
    if count <= limit:
        return None
    window_end = window_start + timedelta(seconds=window_seconds)
    return max(1, math.ceil((window_end - now).total_seconds()))


def forget_before(cutoff: datetime) -> int:
    """Delete windows that ended before ``cutoff``; returns how many rows went."""
    deleted, _ = RateCounter.objects.filter(window_start__lt=cutoff).delete()
    return deleted
