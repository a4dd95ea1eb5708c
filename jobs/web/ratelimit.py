"""Fixed-window rate limits shared by every web process (rows in the database)."""

import math
from datetime import datetime, timedelta

from django.utils import timezone

from jobs.ingest import database
from jobs.models import RateCounter


def hit(key: str, limit: int, window_seconds: int, now: datetime | None = None) -> int | None:
    """Count one request for ``key``; None when it is within ``limit`` per window, else the
    seconds until the window ends (for Retry-After). A limit of 0 means unlimited."""
    if limit <= 0:
        return None
    now = now or timezone.now()
    epoch = int(now.timestamp())
    window_start = datetime.fromtimestamp(epoch - epoch % window_seconds, tz=now.tzinfo)
    count = database.count_in_window(RateCounter, key, window_start)
    if count <= limit:
        return None
    window_end = window_start + timedelta(seconds=window_seconds)
    return max(1, math.ceil((window_end - now).total_seconds()))
