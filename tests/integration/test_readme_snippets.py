"""The README's OpenTelemetry snippets run as written against a live server (their URL and token
swapped for the test's): a LangGraph graph through OpenInference, a plain OpenTelemetry app and
one that exports log records too make their jobs; the Celery one sets up (running its tasks
needs a broker and workers: test_otel_producers.py covers Celery's instrumentation end to
end)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from jobs.models import IngestToken, Job

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Sending traces from LangGraph, Celery, or any OpenTelemetry app"

pytestmark = pytest.mark.django_db(transaction=True)


def snippets() -> list[str]:
    text = README.read_text()
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def run(snippet: str, url: str, token: str) -> None:
    code = snippet.replace('"http://127.0.0.1:8000", "tvz_..."', f'"{url}", "{token}"')
    assert code != snippet, "the snippet's TRACEVIZ, TOKEN line changed: update this test"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_section_has_four_snippets():
    assert len(snippets()) == 4


def test_langgraph_snippet_makes_a_completed_job_with_its_node(live_server):
    _token, raw = IngestToken.issue("readme")
    run(snippets()[0], live_server.url, raw)
    job = Job.objects.get()
    assert (job.status, job.workflow) == ("completed", "support-agent")
    assert list(job.steps.values_list("node_id", flat=True)) == ["answer"]


def test_plain_opentelemetry_snippet_makes_a_job_of_the_root_and_two_steps(live_server):
    _token, raw = IngestToken.issue("readme")
    run(snippets()[2], live_server.url, raw)
    job = Job.objects.get()
    assert (job.name, job.workflow, job.status) == ("nightly-billing", "billing-agent", "completed")
    assert list(job.steps.order_by("position").values_list("node_id", flat=True)) == [
        "fetch_invoices",
        "charge",
    ]


def test_celery_snippet_sets_up_without_error(live_server):
    # Setting up sends nothing: no task is sent without a broker and a worker.
    run(snippets()[1], live_server.url, "tvz_unused")
    assert not Job.objects.exists()


def test_logs_snippet_makes_its_log_record_a_timed_entry_of_its_step(live_server):
    _token, raw = IngestToken.issue("readme")
    run(snippets()[3], live_server.url, raw)
    job = Job.objects.get()
    (step,) = job.steps.all()
    assert (job.workflow, step.node_id) == ("support-bot", "lookup_order")
    (entry,) = step.span["events"]
    assert (entry["severity"], entry["body"]) == ("WARN", "order 42 is not in the cache")
