"""Rate-limit rows do not pile up: a periodic task deletes ended ingest windows, expired
sign-in failures and old sign-in logs."""

from datetime import timedelta

import pytest
from axes.models import AccessAttempt, AccessLog
from django.conf import settings
from django.utils import timezone

from jobs import tasks
from jobs.models import RateCounter

pytestmark = pytest.mark.django_db


def test_the_pruning_task_is_on_the_beat_schedule():
    tasks_scheduled = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "jobs.tasks.prune_rate_limits" in tasks_scheduled


def test_ended_windows_go_and_the_current_one_stays():
    now = timezone.now()
    RateCounter.objects.create(key="token:1", window_start=now - timedelta(hours=2), count=5)
    RateCounter.objects.create(key="token:1", window_start=now - timedelta(seconds=30), count=5)
    result = tasks.prune_rate_limits.apply().get()
    assert result["windows"] == 1
    assert list(RateCounter.objects.values_list("count", flat=True)) == [5]
    assert RateCounter.objects.get().window_start > now - timedelta(minutes=1)


def test_expired_sign_in_failures_and_old_logs_go(settings):
    settings.AXES_COOLOFF_TIME = timedelta(minutes=5)
    settings.TRACEVIZ_LOGIN_LOG_DAYS = 30
    now = timezone.now()
    for when, address in ((now - timedelta(hours=1), "198.51.100.1"), (now, "198.51.100.2")):
        attempt = AccessAttempt.objects.create(
            ip_address=address, username="x", failures_since_start=3, get_data="", post_data=""
        )
        AccessAttempt.objects.filter(pk=attempt.pk).update(attempt_time=when)
    old = AccessLog.objects.create(ip_address="198.51.100.1", username="x")
    AccessLog.objects.filter(pk=old.pk).update(attempt_time=now - timedelta(days=31))
    AccessLog.objects.create(ip_address="198.51.100.2", username="y")
    result = tasks.prune_rate_limits.apply().get()
    assert (result["sign_in_failures"], result["sign_in_logs"]) == (1, 1)
    assert list(AccessAttempt.objects.values_list("ip_address", flat=True)) == ["198.51.100.2"]
    assert list(AccessLog.objects.values_list("username", flat=True)) == ["y"]
