"""Celery app, laid out as Celery's "First steps with Django" guide does."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "traceviz.settings")

app = Celery("traceviz")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
