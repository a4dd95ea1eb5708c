"""The demo users and their published password exist only after ``load_demo`` (which ``make
run`` calls): migrations and settings create no user, so a deployment has none."""

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import RequestFactory

from jobs.management.commands.load_demo import DEMO_PASSWORD

pytestmark = pytest.mark.django_db


def test_a_migrated_database_has_no_users():
    assert not User.objects.exists()


def test_load_demo_creates_the_demo_logins(capsys):
    call_command("load_demo")
    assert sorted(User.objects.values_list("username", flat=True)) == [
        "admin",
        "engineer",
        "operator",
        "support",
    ]
    request = RequestFactory().post("/accounts/login/", REMOTE_ADDR="127.0.0.1")
    assert authenticate(request, username="operator", password=DEMO_PASSWORD) is not None
