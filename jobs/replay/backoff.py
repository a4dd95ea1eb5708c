"""Exponential backoff with jitter (the run-status contract, "Backoff Calculation"). Pure: no
Django.

The same curve times our own notification retries and tells support when a paused:transient
job's producer should have retried.
"""

import math
import random
from collections.abc import Callable
from datetime import datetime, timedelta

BASE_SECONDS = 1.0
CAP_SECONDS = 5 * 60.0
JITTER = 0.3
# Past this many retries the doubled wait is over the cap: the exponent stops there, so any
# retry count (the contract allows a million attempts) gives a wait, never an overflow.
CAPPED_AFTER_RETRIES = math.ceil(math.log2(CAP_SECONDS / BASE_SECONDS))


def backoff_seconds(retry_count: int, *, rand: Callable[[], float] = random.random) -> float:
    """Seconds to wait before retry number ``retry_count + 1`` (``retry_count`` = retries
    already made, 0 for the first retry): 1 s doubling per retry, capped at 5 min, plus 0-30 %
    jitter on top of the capped value, so the longest wait is 6.5 min. ``rand`` returns a
    float in [0, 1)."""
    exponent = min(max(retry_count, 0), CAPPED_AFTER_RETRIES)
    exponential = min(BASE_SECONDS * 2**exponent, CAP_SECONDS)
    return exponential + rand() * JITTER * exponential


def retry_window(finished_at: datetime, attempt: int) -> tuple[datetime, datetime]:
    """When a producer following the run-status contract should have started the attempt after
    ``attempt`` (1-based) that finished at ``finished_at``: the earliest (no jitter) and latest
    (full jitter) due times."""
    retries_made = max(attempt - 1, 0)
    earliest = backoff_seconds(retries_made, rand=lambda: 0.0)
    latest = backoff_seconds(retries_made, rand=lambda: 1.0)
    return finished_at + timedelta(seconds=earliest), finished_at + timedelta(seconds=latest)
