"""GET /metrics: Prometheus text from database rows, parsed back with prometheus_client."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from opentelemetry.proto.trace.v1.trace_pb2 import SpanFlags
from prometheus_client.parser import text_string_to_metric_families

from jobs.ingest import counters
from jobs.models import Counter, Event
from tests.factories import event, finished, started, store, user
from tests.otlp_spans import ERROR, ROOT_ID, attrs, llm_span, root, sid, span, store_spans

ROOT = Path(__file__).resolve().parents[2]
ANTHROPIC = {"provider": "anthropic", "model": "claude-x"}
STEPS_SAMPLE = counters.STEPS


def scrape(client, **headers) -> dict:
    """{(sample name, frozenset(labels)): value} of one scrape."""
    response = client.get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def planner_batch(job_id="p1"):
    return [
        event("job_started", job_id, 0, **ANTHROPIC),
        event("graph.next_step.parse_invalid", job_id, 1, attempt=1, **ANTHROPIC),
        event("graph.next_step.parse_invalid", job_id, 2, attempt=2, **ANTHROPIC),
        event("graph.next_step.degraded", job_id, 3, attempts=2, **ANTHROPIC),
        finished("n1", job_id=job_id, at=4),
        finished("n2", "retryable_failure", job_id=job_id, at=5),
    ]


def test_planner_counters_by_provider_and_model(client, send):
    assert send(planner_batch()).status_code == 200
    samples = scrape(client)
    labels = frozenset(ANTHROPIC.items())
    assert samples["pdca_next_step_parse_invalid_total", labels] == 2
    assert samples["pdca_next_step_degraded_total", labels] == 1


def test_resent_events_are_counted_once(client, send):
    send(planner_batch())
    send(planner_batch())
    samples = scrape(client)
    assert samples["pdca_next_step_degraded_total", frozenset(ANTHROPIC.items())] == 1
    assert samples["traceviz_events_ingested_total", frozenset({("type", "job_started")})] == 1


def test_events_by_type_and_steps_by_result_type(client, send):
    send(planner_batch())
    samples = scrape(client)
    assert samples["traceviz_events_ingested_total", frozenset({("type", "node_finished")})] == 2
    assert samples["traceviz_steps_finished_total", frozenset({("result_type", "success")})] == 1
    assert (
        samples["traceviz_steps_finished_total", frozenset({("result_type", "retryable_failure")})]
        == 1
    )


def test_rejections_by_field_and_message_class_with_bounded_labels(client, send):
    bad = [
        {"type": "job_started", "payload": {}},  # job_id required
        {"type": "job_started", "job_id": "x", "surprise-1": 1},  # unknown envelope field
        {"type": "job_started", "job_id": "y", "surprise-2": 1},
    ]
    assert send(bad).status_code == 400
    samples = scrape(client)
    rejections = {
        dict(labels)["field"] + " | " + dict(labels)["reason"]: value
        for (name, labels), value in samples.items()
        if name == "traceviz_ingest_rejections_total"
    }
    assert rejections == {
        "job_id | required": 1,
        "(unknown field) | unknown envelope field": 2,
    }


def test_refused_request_counts_as_a_request_rejection(client, send):
    assert send(b"not json at all").status_code == 400
    samples = scrape(client)
    assert (
        samples[
            "traceviz_ingest_rejections_total",
            frozenset({("field", "(request)"), ("reason", "400 body is not JSON")}),
        ]
        == 1
    )


def test_ingest_latency_histogram_counts_every_request(client, send):
    send(planner_batch("a"))
    send(planner_batch("b"))
    samples = scrape(client)
    assert samples["traceviz_ingest_request_duration_seconds_count", frozenset()] == 2
    assert (
        samples["traceviz_ingest_request_duration_seconds_bucket", frozenset({("le", "+Inf")})] == 2
    )
    assert samples["traceviz_ingest_request_duration_seconds_sum", frozenset()] > 0
    buckets = [
        value
        for (name, labels), value in samples.items()
        if name == "traceviz_ingest_request_duration_seconds_bucket"
    ]
    assert len(buckets) == len(counters.LATENCY_BUCKETS) + 1


def test_open_escalations_and_contract_findings_by_kind(client, db):
    store(
        [
            event("job_started", "e1", 0),
            finished("n1", "retryable_failure", job_id="e1", at=1, error_type="auth"),
            event("job_started", "e2", 0),
            started("n1", job_id="e2", at=1),
            finished("n1", job_id="e2", at=2),
            started("n1", job_id="e2", at=3, attempt=2),
            finished("n1", job_id="e2", at=4, attempt=2),  # a second success: duplicate_success
        ]
    )
    samples = scrape(client)
    assert samples["traceviz_escalations_open", frozenset({("kind", "user_action")})] == 1
    assert samples["traceviz_escalations_open", frozenset({("kind", "contract_violation")})] == 1
    assert samples["traceviz_contract_findings", frozenset({("kind", "duplicate_success")})] == 1


@pytest.mark.speed_guard
def test_scrape_does_not_read_the_event_table(client, send):
    send(planner_batch())
    assert Event.objects.exists()
    with CaptureQueriesContext(connection) as queries:
        scrape(client)
    event_table = Event._meta.db_table
    assert queries.captured_queries
    assert not [q["sql"] for q in queries.captured_queries if event_table in q["sql"]]


# --- access -------------------------------------------------------------------------------


def test_other_addresses_are_refused(client, db):
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403


def test_loopback_is_allowed_by_default(client, db):
    assert client.get("/metrics", REMOTE_ADDR="::1").status_code == 200


def test_metrics_token_opens_metrics_from_anywhere(client, db, settings):
    settings.TRACEVIZ_METRICS_TOKEN = "scrape-secret"
    ok = client.get(
        "/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer scrape-secret"
    )
    bad = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer guess")
    assert (ok.status_code, bad.status_code) == (200, 403)


def test_allow_list_takes_networks(client, db, settings):
    import ipaddress

    settings.TRACEVIZ_METRICS_ALLOW_NETWORKS = [ipaddress.ip_network("10.0.0.0/8")]
    assert client.get("/metrics", REMOTE_ADDR="10.2.3.4").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403


def test_behind_a_trusted_proxy_the_allow_list_reads_the_real_client(client, db, settings):
    import ipaddress

    settings.TRACEVIZ_TRUSTED_PROXY_NETWORKS = [ipaddress.ip_network("127.0.0.1")]
    outsider = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="203.0.113.9")
    local = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert (outsider.status_code, local.status_code) == (403, 200)


def test_a_forged_forwarded_for_from_an_untrusted_peer_is_ignored(client, db):
    forged = client.get("/metrics", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR="127.0.0.1")
    assert forged.status_code == 403


def test_staff_session_opens_metrics_and_others_do_not(client, db):
    client.force_login(user("olga", "operator"))
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403
    client.force_login(user("root", staff=True))
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 200


# --- several processes ----------------------------------------------------------------------

INCREMENTS = 150
INCREMENT_CODE = f"""
from jobs.ingest import counters
key = ("pdca_next_step_degraded_total", counters.labels_key(provider="p", model="m"))
for _ in range({INCREMENTS}):
    counters.increment({{key: 1}})
"""
READ_CODE = """
from jobs.models import Counter
print(Counter.objects.get(name="pdca_next_step_degraded_total").value)
"""


def _manage(env, *args) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.django_db(transaction=True)
def test_two_processes_add_to_the_same_counter_and_it_survives_them(tmp_path):
    if connection.vendor == "postgresql":
        s = connection.settings_dict  # the test database, which the processes share
        url = f"postgres://{s['USER']}:{s['PASSWORD'] or ''}@{s['HOST']}:{s['PORT']}/{s['NAME']}"
    else:
        url = f"sqlite:///{tmp_path / 'metrics.sqlite3'}"
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "traceviz.settings"}
    if connection.vendor != "postgresql":
        migrate = _manage(env, "migrate", "--noinput")
        assert migrate.wait(timeout=300) == 0, migrate.stderr.read()
    workers = [_manage(env, "shell", "-c", INCREMENT_CODE) for _ in range(2)]
    for worker in workers:
        assert worker.wait(timeout=300) == 0, worker.stderr.read()
    reader = _manage(env, "shell", "-c", READ_CODE)  # a third process, after both have exited
    out, err = reader.communicate(timeout=120)
    assert reader.returncode == 0, err
    assert float(out.strip().splitlines()[-1]) == 2 * INCREMENTS
    if connection.vendor == "postgresql":
        assert Counter.objects.get(name="pdca_next_step_degraded_total").value == 2 * INCREMENTS


def test_a_traces_steps_are_counted_once_when_replay_makes_them_steps(client, db):
    """A model call under a root that has not come is a call of the job until the root shows
    no step is above it: it is counted as a step then, once, and a rebuild counts nothing."""
    local = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    chat = llm_span(sid(1), ROOT_ID, "gpt-4o-mini", 5)
    chat.flags = local
    tool = span(
        name="lookup",
        span_id=sid(2),
        start_ms=20,
        end_ms=30,
        status=ERROR,
        flags=local,
        attributes=attrs(gen_ai__operation__name="execute_tool", gen_ai__tool__name="lookup"),
    )
    store_spans(chat)
    store_spans(tool)
    assert scrape(client)[STEPS_SAMPLE, frozenset({("result_type", "permanent_failure")})] == 1
    store_spans(root(end_ms=100))
    store_spans(root(end_ms=100))  # a resend
    call_command("rebuild_projections")
    scraped = scrape(client)
    assert scraped[STEPS_SAMPLE, frozenset({("result_type", "success")})] == 1
    assert scraped[STEPS_SAMPLE, frozenset({("result_type", "permanent_failure")})] == 1
