"""``load_demo`` prints the login URL of the server ``make run`` actually starts."""

import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_load_demo_prints_the_login_url_with_the_port_served():
    out = StringIO()
    call_command("load_demo", "--port", "8101", stdout=out, stderr=StringIO())
    assert "Log in at http://127.0.0.1:8101/accounts/login/ as admin" in out.getvalue()


@pytest.mark.django_db
def test_load_demo_reaches_a_wildcard_host_on_the_loopback():
    out = StringIO()
    call_command("load_demo", "--host", "0.0.0.0", "--port", "9000", stdout=out, stderr=StringIO())
    assert "http://127.0.0.1:9000/accounts/login/" in out.getvalue()


@pytest.mark.django_db
def test_load_demo_refuses_a_port_out_of_range():
    with pytest.raises(CommandError, match="--port must be between 1 and 65535"):
        call_command("load_demo", "--port", "70000", stdout=StringIO(), stderr=StringIO())


def test_make_run_passes_its_port_to_load_demo_and_runserver():
    dry_run = subprocess.run(
        ["make", "-n", "run", "PORT=8101", "HOST=127.0.0.1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "manage.py load_demo --host '127.0.0.1' --port '8101'" in dry_run
    assert "manage.py runserver 127.0.0.1:8101" in dry_run
