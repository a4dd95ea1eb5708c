"""``load_demo`` prints the login URL of the server ``make run`` actually starts."""

import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from jobs.management.demo import demo_streams
from jobs.models import Job

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.django_db
def test_load_demo_prints_the_login_url_with_the_port_served():
    out = StringIO()
    call_command("load_demo", "--port", "8101", stdout=out, stderr=StringIO())
    assert "Log in at http://127.0.0.1:8101/accounts/login/ as admin" in out.getvalue()


@pytest.mark.django_db
def test_load_demo_prints_a_first_event_for_its_port_and_a_job_no_demo_stream_uses():
    out = StringIO()
    call_command("load_demo", "--port", "8101", stdout=out, stderr=StringIO())
    printed = out.getvalue()
    assert "curl -sS http://127.0.0.1:8101/api/v1/events" in printed
    token = printed.split("Demo ingest token (shown once):\n")[1].splitlines()[0]
    assert f"Authorization: Bearer {token}" in printed
    assert '"job_id": "my-first-job"' in printed
    assert not Job.objects.filter(job_id="my-first-job").exists()
    assert "8000" not in printed


def test_readme_examples_use_a_job_id_no_demo_stream_has():
    readme = (ROOT / "README.md").read_text()
    demo_ids = {s[0]["job_id"] for s in demo_streams(timezone.now())}
    assert "my-first-job" in readme and "my-first-job" not in demo_ids
    curl_lines = [line for line in readme.splitlines() if "/api/v1/" in line or '"job_id"' in line]
    for job_id in demo_ids:
        assert not any(job_id in line for line in curl_lines), job_id


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
