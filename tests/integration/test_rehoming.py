"""One trace, one job, whatever order its spans arrive in (docs/otlp.md, "How a trace finds its
job"): a job stored under its trace id is re-homed when a span names it, the trace id stays an
alias, and nothing of the anonymous job is left behind."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.trace.v1.trace_pb2 import Span, SpanFlags

from jobs.contract import bodies, otlp
from jobs.dashboard import rollup
from jobs.escalations import actions
from jobs.ingest import failure_groups, parity
from jobs.ingest.retention import apply_retention
from jobs.ingest.store import store_batch
from jobs.models import (
    DashboardDirtyHour,
    DashboardRollup,
    Escalation,
    Event,
    FailureGroup,
    FailureGroupJob,
    Job,
    JobAlias,
    Notification,
    PlannerCount,
    PlannerJobHour,
    Step,
)
from tests.factories import event, store, user
from tests.integration.test_incremental_projection import HYPOTHESIS, clear
from tests.integration.test_trace_growth import call_rows, deliver, rows, traces, trees
from tests.otlp_spans import (
    ERROR,
    START,
    TRACE_ID,
    attrs,
    llm_span,
    request,
    root,
    sid,
    span,
    store_spans,
)

pytestmark = pytest.mark.django_db

TRACE = TRACE_ID.hex()
NAMED = attrs(traceviz__job_id="release-42")


def children() -> list:
    """A run's steps (one failing, one with an LLM call inside) without their root, as the
    Python SDK exports them: each says its parent is in the same process (so the root is
    coming)."""
    spans = [
        span(name="fetch", span_id=sid(1), start_ms=0, end_ms=40),
        llm_span(sid(3), sid(2), "gpt-4o-mini", 55),
        span(name="upload", span_id=sid(2), start_ms=50, end_ms=90, status=ERROR),
    ]
    for one in spans:
        one.flags = SpanFlags.SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
    return spans


def job_ids() -> list[str]:
    return sorted(Job.objects.values_list("job_id", flat=True))


def whole_trace_rows(*spans) -> tuple:
    """The rows of these spans sent in one request to an empty database."""
    clear()
    store_spans(*spans)
    return rows()


def test_children_exported_before_the_named_root_join_its_job():
    for child in children():
        store_spans(child)
    assert job_ids() == [TRACE]
    store_spans(root(end_ms=100, attributes=NAMED))
    assert job_ids() == ["release-42"]
    job = Job.objects.get()
    assert list(job.steps.order_by("position").values_list("node_id", "result_type")) == [
        ("fetch", "success"),
        ("upload", "permanent_failure"),
    ]
    # The root ended OK: the upload's failure was handled.
    assert (job.status, job.name, job.input_tokens) == ("completed", "run", 1000)
    assert set(Event.objects.values_list("job_id", flat=True)) == {"release-42"}
    assert JobAlias.objects.job_of(TRACE) == "release-42"
    assert parity.differences("release-42") == []
    assert failure_groups.differences() == []
    assert rows() == whole_trace_rows(*children(), root(end_ms=100, attributes=NAMED))


def test_spans_after_the_name_go_to_the_named_job():
    store_spans(span(name="fetch", span_id=sid(1), start_ms=0, end_ms=40, attributes=NAMED))
    assert JobAlias.objects.job_of(TRACE) == "release-42"
    store_spans(span(name="upload", span_id=sid(2), start_ms=50, end_ms=90))
    store_spans(root(end_ms=100))
    assert job_ids() == ["release-42"]
    assert Job.objects.get().step_count == 2
    assert parity.differences("release-42") == []


def test_every_event_sent_under_an_aliased_trace_id_goes_to_the_named_job():
    store_spans(root(end_ms=100, attributes=NAMED))
    result = store([event("escalation_raised", TRACE, at=1, kind="help", node_id="fetch")])
    assert result.job_ids == ["release-42"]
    assert job_ids() == ["release-42"]
    assert list(Escalation.objects.values_list("job__job_id", "kind")) == [("release-42", "raised")]


def test_an_event_under_the_trace_id_in_the_batch_that_names_the_trace_goes_to_the_named_job():
    traces = otlp.to_batch(request(*children(), root(end_ms=100, attributes=NAMED)), 10_000)
    raised = event("escalation_raised", TRACE, at=1, kind="help", node_id="fetch")
    traces.batch.events.extend(bodies.parse_items([raised], max_events=1).events)
    store_batch(traces.batch)
    assert job_ids() == ["release-42"]
    assert Escalation.objects.get().job.job_id == "release-42"


def test_the_first_name_recorded_wins_and_the_rest_of_the_trace_follows_it():
    store_spans(span(name="fetch", span_id=sid(1), start_ms=0, end_ms=40))
    store_spans(span(name="upload", span_id=sid(2), start_ms=50, end_ms=90, attributes=NAMED))
    store_spans(root(end_ms=100, attributes=attrs(traceviz__job_id="other-name")))
    assert job_ids() == ["release-42"]
    assert Job.objects.get().name == "run"
    assert JobAlias.objects.job_of(TRACE) == "release-42"
    assert parity.differences("release-42") == []


def test_in_one_export_naming_a_trace_twice_the_first_span_that_names_it_decides():
    store_spans(
        span(name="fetch", span_id=sid(1), start_ms=0, end_ms=40, attributes=NAMED),
        root(end_ms=100, attributes=attrs(traceviz__job_id="other-name")),
    )
    assert job_ids() == ["release-42"]
    assert Job.objects.get().step_count == 1


def test_planner_events_of_a_span_naming_a_second_job_follow_the_first_name():
    store_spans(span(name="fetch", span_id=sid(1), start_ms=0, end_ms=40, attributes=NAMED))
    degraded = Span.Event(
        name="graph.next_step.degraded",
        time_unix_nano=START + 5_000_000,
        attributes=attrs(provider="anthropic", model="claude-x", attempts="2"),
    )
    store_spans(
        span(
            name="plan",
            span_id=sid(2),
            start_ms=50,
            end_ms=90,
            span_events=[degraded],
            attributes=attrs(traceviz__job_id="other-name"),
        )
    )
    assert job_ids() == ["release-42"]
    assert Job.objects.get().planner_degraded == 1


def test_a_job_named_by_a_child_is_the_same_as_named_by_its_root():
    spans = [*children(), root(end_ms=100)]
    spans[0] = span(name="fetch", span_id=sid(1), start_ms=0, end_ms=40, attributes=NAMED)
    for one in reversed(spans):
        store_spans(one)
    assert job_ids() == ["release-42"]
    assert rows() == whole_trace_rows(*spans)


def test_rehoming_into_a_job_that_exists_moves_the_events_and_leaves_no_counts_behind():
    # The named job holds a contract step, and the root span (a resend, below) already.
    store([event("node_finished", "release-42", at=0, node_id="prepare", result_type="success")])
    store_spans(*children())
    anonymous = Job.objects.get(job_id=TRACE)
    group = FailureGroup.objects.get()
    assert (group.job_count, group.example_job_id) == (1, anonymous.pk)
    # A span the named job already holds: under the same event id it is stored once.
    upload = Event.objects.get(job_id=TRACE, event_id=f"otlp:{TRACE}:{sid(2).hex()}")
    Event.objects.create(
        job_id="release-42",
        event_id=upload.event_id,
        type="span",
        ts=upload.ts,
        payload=upload.payload,
        partition_day=Job.objects.get(job_id="release-42").partition_day,
    )
    store_spans(root(end_ms=100, attributes=NAMED))
    assert job_ids() == ["release-42"]
    job = Job.objects.get()
    assert Event.objects.filter(job_id="release-42").count() == 5
    assert not Event.objects.filter(job_id=TRACE).exists()
    assert sorted(job.steps.values_list("node_id", flat=True)) == ["fetch", "prepare", "upload"]
    assert not Step.objects.filter(job_id=anonymous.pk).exists()
    group.refresh_from_db()
    assert (group.job_count, group.step_count, group.example_job_id) == (1, 1, job.pk)
    assert list(FailureGroupJob.objects.values_list("job_id", flat=True)) == [job.pk]
    assert failure_groups.differences() == []
    assert parity.differences("release-42") == []
    assert JobAlias.objects.job_of(TRACE) == "release-42"


def test_escalations_move_with_what_people_did_to_them():
    support = user("sam", "support")
    store([event("escalation_raised", TRACE, at=1, kind="help", node_id="fetch", severity="high")])
    escalation = Escalation.objects.get()
    actions.acknowledge(escalation, support, "looking")
    actions.assign(escalation, support, support)
    store_spans(root(end_ms=100, attributes=NAMED))
    moved = Escalation.objects.get()
    assert (moved.pk, moved.job.job_id, moved.status, moved.assignee) == (
        escalation.pk,
        "release-42",
        "acknowledged",
        support,
    )
    assert list(moved.entries.values_list("action", "actor_name")) == [
        ("opened", "traceviz"),
        ("acknowledged", "sam"),
        ("assigned", "sam"),
        ("rehomed", "traceviz"),
    ]
    assert TRACE in moved.entries.last().note


def test_an_escalation_the_named_job_has_too_is_merged_keeping_every_audit_entry(settings):
    settings.TRACEVIZ_ESCALATION_EMAILS = ["support@example.com"]
    support = user("sam", "support")
    raised = {"kind": "help", "node_id": "fetch", "severity": "high"}
    store([event("escalation_raised", "release-42", at=1, event_id="named-raise", **raised)])
    store([event("escalation_raised", TRACE, at=2, event_id="trace-raise", **raised)])
    on_named, on_trace = Escalation.objects.order_by("pk")
    actions.acknowledge(on_trace, support, "on it")
    notifications = Notification.objects.count()
    assert notifications > 0
    store_spans(root(end_ms=100, attributes=NAMED))
    merged = Escalation.objects.get()
    # People acted on the one of the trace's job: it is kept, with the other's trail.
    assert (merged.pk, merged.job.job_id, merged.status) == (
        on_trace.pk,
        "release-42",
        "acknowledged",
    )
    assert sorted(merged.trigger_event_ids) == ["named-raise", "trace-raise"]
    assert merged.created_at == on_named.created_at
    assert sorted(merged.entries.values_list("action", flat=True)) == [
        "acknowledged",
        "merged",
        "opened",
        "opened",
    ]
    assert merged.notifications.count() == notifications


def test_a_merge_never_hides_an_open_problem():
    support = user("sam", "support")
    raised = {"kind": "help", "node_id": "fetch", "severity": "high"}
    store([event("escalation_raised", "release-42", at=1, event_id="named-raise", **raised)])
    actions.resolve(Escalation.objects.get(), support, "fixed")
    store([event("escalation_raised", TRACE, at=2, event_id="trace-raise", **raised)])
    store_spans(root(end_ms=100, attributes=NAMED))
    merged = Escalation.objects.get()
    assert merged.status == "open"
    assert list(merged.entries.values_list("action", flat=True))[-2:] == ["merged", "reopened"]


def test_the_anonymous_jobs_dashboard_hours_and_planner_rows_are_recomputed():
    degraded = Span.Event(
        name="graph.next_step.degraded",
        time_unix_nano=START + 5_000_000,
        attributes=attrs(provider="anthropic", model="claude-x", attempts="2"),
    )
    spans = [
        span(name="plan", span_id=sid(1), start_ms=0, end_ms=40, span_events=[degraded]),
        *children()[1:],
    ]
    for one in spans:
        store_spans(one)
    rollup.refresh_pending()
    assert PlannerJobHour.objects.get().job_id == TRACE
    store_spans(root(end_ms=100, attributes=NAMED))
    assert rollup.dirty_hours()
    rollup.refresh_pending()

    def dashboard_rows() -> tuple:
        return (
            sorted(
                DashboardRollup.objects.values_list(
                    "hour", "kind", "provider", "model", "dimension", "status", "steps", "jobs"
                )
            ),
            sorted(PlannerJobHour.objects.values_list("hour", "provider", "model", "job_id")),
            sorted(PlannerCount.objects.values_list("span", "start", "jobs", "degraded")),
        )

    rehomed = dashboard_rows()
    assert rehomed[1][0][3] == "release-42"
    for model in (DashboardRollup, PlannerJobHour, PlannerCount, DashboardDirtyHour):
        model.objects.all().delete()
    whole_trace_rows(*spans, root(end_ms=100, attributes=NAMED))
    rollup.refresh_pending()
    assert dashboard_rows() == rehomed


def stored_on(day: datetime, *spans) -> None:
    """Store spans as POST /v1/traces does, received on ``day``."""
    traces = otlp.to_batch(request(*spans), max_events=10_000)
    store_batch(traces.batch, received_at=day)


def test_a_trace_stored_on_another_day_moves_into_the_named_jobs_day():
    first_day = datetime(2026, 3, 2, 9, tzinfo=UTC)
    stored_on(first_day - timedelta(days=1), *children())
    store([event("node_finished", "release-42", at=0, node_id="prepare", result_type="success")])
    named_day = Job.objects.get(job_id="release-42").partition_day
    stored_on(first_day, root(end_ms=100, attributes=NAMED))
    assert job_ids() == ["release-42"]
    assert set(Event.objects.values_list("partition_day", flat=True)) == {named_day}
    assert set(Step.objects.values_list("partition_day", flat=True)) == {named_day}
    assert parity.differences("release-42") == []


def test_a_renamed_job_keeps_the_day_its_first_spans_arrived():
    first_day = datetime(2026, 3, 1, 9, tzinfo=UTC)
    stored_on(first_day, *children())
    stored_on(first_day + timedelta(days=1), root(end_ms=100, attributes=NAMED))
    job = Job.objects.get()
    assert (job.job_id, job.partition_day) == ("release-42", first_day.date())
    assert set(Event.objects.values_list("partition_day", flat=True)) == {first_day.date()}
    assert parity.differences("release-42") == []


def test_retention_deletes_a_jobs_aliases_with_it():
    for child in children():
        store_spans(child)
    store_spans(root(end_ms=100, attributes=NAMED))
    Job.objects.update(last_received_at=datetime(2026, 3, 2, tzinfo=UTC))
    assert apply_retention(1, now=datetime(2026, 3, 10, tzinfo=UTC)).jobs == 1
    assert not JobAlias.objects.exists()


def test_calls_of_the_trace_end_up_on_the_named_job():
    for child in children():
        store_spans(child)
    store_spans(root(end_ms=100, attributes=NAMED))
    assert [row[0] for row in call_rows()] == ["release-42"]


# --- any split, any order, the name on any span ---------------------------------------------


@HYPOTHESIS
@given(data=st.data(), drawn=st.one_of(traces(), trees()))
def test_any_split_in_any_order_named_on_any_span_gives_the_whole_traces_rows(db, data, drawn):
    named = data.draw(st.integers(0, len(drawn) - 1), label="named span")
    spans = []
    for index, one in enumerate(drawn):
        copy = Span()
        copy.CopyFrom(one)
        if index == named:
            copy.attributes.extend(NAMED)
        spans.append(copy)
    clear()
    store_spans(*spans)
    whole = rows()

    clear()
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4), label="sizes")
    deliver(data.draw(st.permutations(spans), label="order"), sizes, checked=True)
    assert job_ids() == ["release-42"]
    assert set(Event.objects.values_list("job_id", flat=True)) == {"release-42"}
    assert rows() == whole
    assert failure_groups.differences() == []

    call_command("rebuild_projections", stdout=None, stderr=None)
    assert rows() == whole


# --- the trace id as a URL ------------------------------------------------------------------


@pytest.fixture
def rehomed(client):
    for child in children():
        store_spans(child)
    store_spans(root(end_ms=100, attributes=NAMED))
    client.force_login(user("erin", "engineer"))
    return client


def test_the_trace_id_job_page_redirects_to_the_named_job_with_its_query(rehomed):
    response = rehomed.get(f"/jobs/{TRACE}/?step=upload:1&node=up")
    assert response.status_code == 302
    assert response["Location"] == "/jobs/release-42/?step=upload:1&node=up"
    page = rehomed.get(response["Location"])
    assert page.status_code == 200
    assert "upload" in page.content.decode()


def test_a_fragment_asked_for_by_the_trace_ids_page_moves_the_whole_page(rehomed):
    response = rehomed.get(
        f"/jobs/{TRACE}/live?first=0",
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL=f"http://testserver/jobs/{TRACE}/?step=upload:1",
    )
    # The page it polls for moves, with the page's own query, not the poll's.
    assert (response.status_code, response["HX-Redirect"]) == (
        200,
        "/jobs/release-42/?step=upload:1",
    )


def test_the_trace_id_exports_redirect(rehomed):
    response = rehomed.get(f"/jobs/{TRACE}/events.ndjson")
    assert (response.status_code, response["Location"]) == (
        302,
        "/jobs/release-42/events.ndjson",
    )


def test_the_trace_id_api_url_redirects_to_the_named_jobs(rehomed, ingest_token):
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ingest_token}"}
    response = rehomed.get(f"/api/v1/jobs/{TRACE}", **auth)
    assert (response.status_code, response["Location"]) == (307, "/api/v1/jobs/release-42")
    assert rehomed.get(response["Location"], **auth).json()["job_id"] == "release-42"


def test_an_unknown_id_stays_a_404(rehomed, ingest_token):
    assert rehomed.get("/jobs/no-such-job/").status_code == 404
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ingest_token}"}
    assert rehomed.get("/api/v1/jobs/no-such-job", **auth).status_code == 404


def test_someone_without_a_role_learns_nothing_of_an_alias(rehomed):
    rehomed.force_login(user("nobody"))
    assert rehomed.get(f"/jobs/{TRACE}/").status_code == 403


def test_a_link_to_a_named_trace_points_at_its_job_before_its_root_arrives(client):
    running = children()
    running[0].attributes.extend(NAMED)
    store_spans(*running)
    assert job_ids() == ["release-42"]
    other_trace = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")
    follow_up = [
        span(name="follow-up", span_id=sid(8), parent=b"", start_ms=200, end_ms=300),
        span(name="notify", span_id=sid(9), parent=sid(8), start_ms=210, end_ms=290),
    ]
    follow_up[1].links.append(Span.Link(trace_id=TRACE_ID, span_id=sid(1)))
    for one in follow_up:
        one.trace_id = other_trace
    store_spans(*follow_up)
    client.force_login(user("erin", "engineer"))
    page = client.get(f"/jobs/{other_trace.hex()}/?step=notify:1")
    assert '<a href="/jobs/release-42/">job release-42</a>' in page.content.decode()


# --- concurrency ----------------------------------------------------------------------------


def test_an_alias_recorded_after_the_first_read_starts_the_batch_again(monkeypatch):
    """Between the batch's first read of the aliases and its locks, another batch named the
    trace: the batch does not hold the named job's lock, so it starts again."""
    store_spans(root(end_ms=100, attributes=NAMED))
    reads = []
    real = JobAlias.objects.jobs_of

    def first_read_misses(ids):
        reads.append(sorted(ids))
        return {} if len(reads) == 1 else real(ids)

    monkeypatch.setattr(JobAlias.objects, "jobs_of", first_read_misses)
    result = store_spans(children()[0])
    assert len(reads) == 4  # read, read under locks (another job's alias), and again
    assert (result.job_ids, job_ids()) == (["release-42"], ["release-42"])


def store_concurrently(*batches: list) -> None:
    """Store each list of spans (one request per span, in turn) in a thread of its own, the
    threads starting together."""
    errors = []
    barrier = threading.Barrier(len(batches))

    def send(spans):
        try:
            barrier.wait()
            for one in spans:
                store_spans(one)
        except Exception as error:  # reported below, a thread cannot fail the test itself
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(spans,)) for spans in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


# Exercises the PostgreSQL advisory locks on both ids (SQLite serialises writers itself).
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("run", range(6))
def test_named_and_unnamed_spans_of_a_trace_stored_at_once_end_as_one_job(run):
    trace_id = (run + 1).to_bytes(16, "big")
    spans = [*children(), root(end_ms=100, attributes=NAMED)]
    for one in spans:
        one.trace_id = trace_id
    unnamed, named = spans[:3], spans[3:]
    if run % 2:  # a second named span beside the root, in the unnamed one's thread
        unnamed[0].attributes.extend(NAMED)
    store_concurrently(unnamed, named)
    assert job_ids() == ["release-42"]
    assert not Event.objects.exclude(job_id="release-42").exists()
    assert Job.objects.get().step_count == 2
    assert parity.differences("release-42") == []
    assert failure_groups.differences() == []
