"""Append first, project coalesced per job (docs/architecture.md, "Data flow"): an answer with
``Prefer: respond-async`` leaves its jobs dirty, the projector folds them, what is not folded
yet is said, and no interleaving of appends and folds changes the rows."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import timedelta
from unittest import mock

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from jobs.contract import bodies
from jobs.ingest import counters, locks, parity, projection, projector
from jobs.ingest.store import store_batch
from jobs.models import Counter, Event, Job, ProjectionMark, Step
from tests.factories import event, finished, started, store
from tests.integration.test_embedded_scheduler import ROOT, embedded_env
from tests.integration.test_incremental_projection import HYPOTHESIS, clear, projection_rows
from tests.otlp_spans import request as traces_request
from tests.otlp_spans import root, span
from tests.strategies import job_events

pytestmark = pytest.mark.django_db


def store_async(items: list[dict]):
    return store_batch(bodies.parse_items(items, max_events=100_000), project=False)


def dirty() -> list[str]:
    return sorted(ProjectionMark.objects.dirty().values_list("job_id", flat=True))


def fold_while_appending(items: list[dict]) -> None:
    """``project_dirty``, with another request's append of ``items`` committing while it
    folds (here: in its transaction)."""
    original = projector.project_jobs

    def append_meanwhile(*args, **kwargs):
        counted = original(*args, **kwargs)
        store_async(items)
        return counted

    with mock.patch.object(projector, "project_jobs", side_effect=append_meanwhile):
        projector.project_dirty()


def dirty_since(job_id: str, seconds: int) -> None:
    """Make the job's mark say it has been dirty for ``seconds`` more."""
    ProjectionMark.objects.filter(job_id=job_id).update(
        first_marked_at=F("first_marked_at") - timedelta(seconds=seconds)
    )


# --- Prefer: respond-async ---------------------------------------------------------------------


def test_respond_async_answers_202_once_the_events_are_durable(send, client, ingest_token):
    items = [event("job_started", "aj", at=0), started("n1", "aj", at=1)]
    response = send(items, HTTP_PREFER="respond-async")
    assert response.status_code == 202
    assert response["Preference-Applied"] == "respond-async"
    assert json.loads(response.content)["stored"] == 2
    assert Event.objects.filter(job_id="aj").count() == 2
    assert (dirty(), Job.objects.filter(job_id="aj").exists()) == (["aj"], False)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ingest_token}"}
    missing = client.get("/api/v1/jobs/aj", **auth)
    assert missing.status_code == 404
    assert "2 events are not projected yet" in json.loads(missing.content)["error"]

    assert projector.project_dirty() == 1
    found = json.loads(client.get("/api/v1/jobs/aj", **auth).content)
    assert (found["projected"], found["unprojected_events"], dirty()) == (True, 0, [])
    assert [step["node_id"] for step in found["steps"]] == ["n1"]
    assert parity.differences("aj") == []


def test_without_the_preference_a_request_reads_its_own_writes(send):
    response = send([event("job_started", "rj", at=0)], HTTP_PREFER="return=minimal")
    assert response.status_code == 200
    assert "Preference-Applied" not in response
    assert (dirty(), Job.objects.filter(job_id="rj").count()) == ([], 1)


def test_respond_async_among_other_preferences_is_honoured(send):
    response = send([event("job_started", "pj", at=0)], HTTP_PREFER="wait=5, Respond-Async")
    assert response.status_code == 202


def test_a_batch_with_rejected_items_keeps_its_207_when_answered_async(send):
    response = send(
        [event("job_started", "pj", at=0), {"type": "job_started"}], HTTP_PREFER="respond-async"
    )
    assert response.status_code == 207
    assert response["Preference-Applied"] == "respond-async"


def send_trace_async(client, ingest_token):
    """A root span and its child to /v1/traces with ``Prefer: respond-async``."""
    body = traces_request(root(end_ms=50), span(start_ms=1, end_ms=20)).SerializeToString()
    return client.post(
        "/v1/traces",
        body,
        content_type="application/x-protobuf",
        HTTP_AUTHORIZATION=f"Bearer {ingest_token}",
        HTTP_PREFER="respond-async",
    )


def test_otlp_traces_answer_202_with_respond_async(client, ingest_token):
    response = send_trace_async(client, ingest_token)
    assert (response.status_code, response["Preference-Applied"]) == (202, "respond-async")
    assert len(dirty()) == 1 and not Job.objects.exists()
    projector.project_dirty()
    job = Job.objects.get()
    assert job.step_count >= 1 and parity.differences(job.job_id) == []


def test_a_fold_writes_the_shared_counter_rows_once_and_after_the_failure_groups(
    client, ingest_token
):
    # Counter rows and failure-group totals are shared by every fold: written in one order by
    # all (groups, then counters, once), two projectors cannot lock them in opposite orders.
    assert send_trace_async(client, ingest_token).status_code == 202
    failing = finished("n1", "permanent_failure", "fj", at=2, reason="upstream said no")
    store_async([event("job_started", "fj", at=0), started("n1", "fj", at=1), failing])
    with CaptureQueriesContext(connection) as queries:
        assert projector.project_dirty() == 2
    writes = [q["sql"] for q in queries if q["sql"].startswith(("INSERT", "UPDATE"))]
    tables = [sql.split('"')[1] for sql in writes]
    assert tables.count("jobs_counter") == 1 and "jobs_failuregroup" in tables
    assert tables.index("jobs_counter") > max(
        i for i, table in enumerate(tables) if table == "jobs_failuregroup"
    )
    span_steps = Step.objects.exclude(job__job_id="fj").count()
    assert span_steps >= 1
    counted = Counter.objects.filter(name=counters.STEPS).values_list("value", flat=True)
    assert sum(counted) == span_steps + 1  # the span's steps and the failed node, once each


# --- what is not shown yet is said ------------------------------------------------------------


def test_a_job_with_unprojected_events_says_so(client, ingest_token, admin_client):
    store([event("job_started", "uj", at=0), started("n1", "uj", at=1)])
    store_async([finished("n1", "success", "uj", at=2), started("n2", "uj", at=3)])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {ingest_token}"}
    answer = json.loads(client.get("/api/v1/jobs/uj", **auth).content)
    assert (answer["projected"], answer["unprojected_events"]) == (False, 2)
    page = admin_client.get("/jobs/uj/").content.decode()
    assert "2 events not yet shown (arrived 0 s ago)" in page
    projector.project_dirty()
    assert "not yet shown" not in admin_client.get("/jobs/uj/").content.decode()


def test_metrics_and_healthz_report_the_dirty_jobs_and_the_lag(client):
    store_async([event("job_started", "m1", at=0), event("job_started", "m2", at=0)])
    dirty_since("m1", 30)
    text = client.get("/metrics").content.decode()
    assert "traceviz_projection_dirty_jobs 2.0" in text
    lag = next(
        float(line.split()[1])
        for line in text.splitlines()
        if line.startswith("traceviz_projection_lag_seconds ")
    )
    assert 30 <= lag < 120
    health = json.loads(client.get("/healthz").content)
    assert health["projection"]["dirty_jobs"] == 2 and health["projection"]["lag_seconds"] >= 30
    projector.project_dirty()
    health = json.loads(client.get("/healthz").content)
    assert health["projection"] == {"dirty_jobs": 0, "lag_seconds": 0.0}
    assert "traceviz_projection_dirty_jobs 0.0" in client.get("/metrics").content.decode()


# --- folds --------------------------------------------------------------------------------------


def test_events_several_requests_sent_are_folded_once():
    store_async([event("job_started", "cj", at=0), started("n1", "cj", at=1)])
    store_async([finished("n1", "success", "cj", at=2)])
    store_async([started("n2", "cj", at=3)])
    mark = ProjectionMark.objects.get(job_id="cj")
    assert (mark.generation - mark.projected) == 3
    with mock.patch.object(projector, "project_jobs", wraps=projector.project_jobs) as fold:
        assert projector.project_dirty() == 1
    assert fold.call_count == 1
    assert Job.objects.get(job_id="cj").event_count == 4
    assert parity.differences("cj") == []


def test_a_fold_that_fails_loses_nothing_and_the_next_finishes_it():
    store_async([event("job_started", "kj", at=0), started("n1", "kj", at=1)])
    killed = mock.patch.object(projector, "project_jobs", side_effect=RuntimeError("killed"))
    with killed, pytest.raises(RuntimeError):
        projector.project_dirty()
    assert (dirty(), Job.objects.filter(job_id="kj").exists()) == (["kj"], False)
    assert projector.project_dirty() == 1
    assert dirty() == [] and parity.differences("kj") == []


def test_a_projector_killed_mid_fold_loses_nothing_and_the_next_run_finishes_it():
    """Killed after the fold wrote the job's Job and Step rows but before it finished (here:
    an error where its calls are written), the whole transaction goes: the rows are those of
    before, the mark still dirty, and the next run folds every event."""
    store([event("job_started", "mj", at=0), started("n1", "mj", at=1)])
    before = projection_rows()
    store_async([finished("n1", "retryable_failure", "mj", at=2), started("n2", "mj", at=3)])
    wrote: list[int] = []

    def killed(*args, **kwargs):
        wrote.append(Step.objects.filter(job__job_id="mj").count())
        raise RuntimeError("killed")

    kill = mock.patch.object(projection, "_write_calls", side_effect=killed)
    with kill, pytest.raises(RuntimeError):
        projector.project_dirty()
    assert wrote == [2]  # the fold had written its steps when it was killed
    assert (projection_rows(), dirty()) == (before, ["mj"])
    assert projector.project_dirty() == 1
    job = Job.objects.get(job_id="mj")
    assert (job.event_count, job.step_count, dirty()) == (4, 2, [])
    assert parity.differences("mj") == []


def test_a_mark_newer_than_the_fold_stays_dirty():
    store_async([event("job_started", "nj", at=0)])
    fold_while_appending([started("n1", "nj", at=1)])
    assert dirty() == ["nj"]
    assert Job.objects.get(job_id="nj").event_count == 1
    projector.project_dirty()
    assert dirty() == [] and Job.objects.get(job_id="nj").event_count == 2
    assert parity.differences("nj") == []


def test_a_job_a_fold_leaves_dirty_dates_its_lag_from_the_events_the_fold_did_not_take():
    """A live job gets events during every fold: its lag is the age of its oldest event not
    shown, not the time since it was last clean (which grows as long as the producer runs)."""
    store_async([event("job_started", "lj", at=0)])
    dirty_since("lj", 30)
    Event.objects.filter(job_id="lj").update(received_at=F("received_at") - timedelta(seconds=30))
    fold_while_appending([started("n1", "lj", at=1)])
    mark = ProjectionMark.objects.get(job_id="lj")
    left = Event.objects.get(job_id="lj", generation=mark.generation)
    assert (dirty(), mark.first_marked_at) == (["lj"], left.received_at)
    assert projector.dirty_summary(timezone.now())[1] < 10
    assert projector.backlog("lj") == projector.Backlog(1, left.received_at)


def test_the_projector_takes_the_job_whose_unshown_events_are_oldest_first():
    """A job a fold left dirty with events that just came waits behind one whose events have
    waited longer, however long ago the first was dirty."""
    store_async([event("job_started", "live", at=0)])
    dirty_since("live", 30)
    fold_while_appending([started("n1", "live", at=1)])
    store_async([event("job_started", "waiting", at=0)])
    dirty_since("waiting", 10)
    assert projector.project_dirty(limit=1) == 1
    assert dirty() == ["live"]


def test_a_resend_left_dirty_by_a_fold_dates_its_lag_from_its_append():
    """An append of stored events only (a resend) numbers no event: the mark's own time."""
    store_async([event("job_started", "rj", at=0)])
    dirty_since("rj", 30)
    fold_while_appending([event("job_started", "rj", at=0)])
    mark = ProjectionMark.objects.get(job_id="rj")
    assert mark.first_marked_at == mark.marked_at


def test_a_rebuild_leaves_the_marks_clean():
    store_async([event("job_started", "bj", at=0), started("n1", "bj", at=1)])
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert dirty() == [] and parity.differences("bj") == []
    projector.project_dirty()
    assert Job.objects.get(job_id="bj").event_count == 2  # not folded twice


def fold_queries(count: int) -> int:
    """Queries of one projector batch that resumes ``count`` jobs, each folding a failed node
    and a failed finish onto a stored failed node (the failure records' every path), their
    failure groups new (a workflow of their own)."""
    job_ids = [f"q{count}-{n}" for n in range(count)]
    for job_id in job_ids:
        store_async(
            [
                event("job_started", job_id, at=0, workflow=f"wf{count}"),
                started("n1", job_id, at=1),
                finished("n1", "permanent_failure", job_id, at=2, reason="disk full"),
            ]
        )
    projector.project_dirty()
    for job_id in job_ids:
        store_async(
            [
                started("n2", job_id, at=3),
                finished("n2", "permanent_failure", job_id, at=4, reason="quota"),
                event("job_finished", job_id, at=5, status="failed", reason="gave up"),
            ]
        )
    with CaptureQueriesContext(connection) as queries:
        assert projector.project_dirty() == count
    assert set(Job.objects.filter(job_id__in=job_ids).values_list("status", flat=True)) == {
        "failed"
    }
    for job_id in job_ids:
        assert parity.differences(job_id) == []
    return len(queries)


def test_a_folds_queries_do_not_grow_with_its_jobs():
    # Both above the rows that PostgreSQL upserts without a staging table.
    assert fold_queries(10) == fold_queries(5)


@pytest.mark.postgres
def test_a_request_for_hundreds_of_jobs_sends_them_as_arrays_not_as_parameters():
    """psycopg converts a statement of more than 50 parameters afresh each time (uncached): an
    append touching 400 jobs sends each list of them as one array (``AnyOf``, the marks'
    ``unnest``)."""
    store_async([event("job_started", f"p{n}", at=0) for n in range(400)])
    projector.project_dirty(limit=400)
    sent: list[tuple[str, int]] = []

    def count(execute, sql, params, many, context):
        sent.append((sql, len(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        store_async([started("n1", f"p{n}", at=1) for n in range(400)])
    assert [sql[:60] for sql, params in sent if params > 50] == []
    assert sum("= ANY(" in sql for sql, _ in sent) >= 3  # the aliases (twice), the Job rows


@pytest.mark.postgres
def test_a_fold_locks_the_marks_in_the_order_appends_do_whatever_the_collation():
    """Appends upsert their marks in job id order by code point ("B" before "a"); a database
    created with a locale's collation orders "a" before "B", and a fold that locked in that
    order could deadlock with an append."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE jobs_projectionmark "
            'ALTER COLUMN job_id TYPE varchar(200) COLLATE "und-x-icu"'
        )
    store_async([event("job_started", job_id, at=0) for job_id in ("a", "B", "c")])
    assert projector.lock_marks(["c", "a", "B"]) == ["B", "a", "c"] == sorted(["c", "a", "B"])


@HYPOTHESIS
@given(
    data=st.data(),
    jobs=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
)
def test_any_interleaving_of_appends_and_folds_gives_a_full_replays_rows(db, data, jobs):
    items = [item for job_id in jobs for item in data.draw(job_events(job_id, max_size=14))]
    items = data.draw(st.permutations(items))
    clear()
    start = 0
    while start < len(items):
        size = data.draw(st.integers(1, 5))
        batch = bodies.parse_items(items[start : start + size], max_events=1000)
        store_batch(batch, project=data.draw(st.booleans()))
        start += size
        if data.draw(st.booleans()):
            projector.project_dirty(limit=data.draw(st.integers(1, 3)))
    while projector.project_dirty():
        pass
    assert dirty() == []
    for job_id in jobs:
        assert parity.differences(job_id) == []
    folded = projection_rows()
    call_command("rebuild_projections", stdout=None, stderr=None)
    assert projection_rows() == folded


# --- several projectors (PostgreSQL: SQLite serialises writers itself) ------------------------


def folding_slowly(job_ids: list[str], errors: list) -> tuple[threading.Thread, threading.Event]:
    """Another projector, on its own connection: it holds these jobs' projection locks until
    the returned event is set, then folds them (what it raises goes to ``errors``)."""
    holding, release = threading.Event(), threading.Event()

    def fold():
        try:
            with transaction.atomic():
                locks.lock_projections(job_ids)
                holding.set()
                release.wait(10)
                projector.fold_locked(job_ids)
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=fold)
    thread.start()
    assert holding.wait(10)
    return thread, release


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_projectors_never_fold_one_job_at_once():
    store_async([event("job_started", "tj", at=0), started("n1", "tj", at=1)])
    errors: list[Exception] = []
    waited: list[int] = []

    def request_waits():
        try:
            waited.append(projector.project_own(["tj"]))
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    holder, release = folding_slowly(["tj"], errors)
    assert projector.project_dirty() == 0  # skipped: another projector holds it
    waiter = threading.Thread(target=request_waits)
    waiter.start()
    waiter.join(0.5)
    assert waiter.is_alive()  # the request waits for the fold in progress...
    release.set()
    holder.join(10)
    waiter.join(10)
    assert errors == []
    assert waited == [0]  # ...and, the mark cleared, folds nothing twice
    assert Job.objects.get(job_id="tj").event_count == 2
    assert dirty() == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_projector_folds_the_next_dirty_jobs_while_another_folds_the_oldest():
    for n in range(6):  # marked oldest first: o0 ... o5
        store_async([event("job_started", f"o{n}", at=n)])
    errors: list[Exception] = []
    other, release = folding_slowly(["o0", "o1"], errors)
    try:
        # The two oldest are the other projector's: this one takes the two after them, then
        # the last two, rather than folding nothing until the other commits.
        assert projector.project_dirty(limit=2) == 2
        assert dirty() == ["o0", "o1", "o4", "o5"]
        assert projector.project_dirty(limit=2) == 2
        assert dirty() == ["o0", "o1"]
        assert projector.project_dirty(limit=2) == 0
    finally:
        release.set()
        other.join(10)
    assert errors == []
    assert dirty() == []


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_async_appends_and_projectors_keep_parity():
    first = [finished(f"n{i}", "retryable_failure", "pj", at=i, attempt=1) for i in range(0, 40, 2)]
    second = [finished(f"n{i}", "success", "pj", at=i + 1, attempt=2) for i in range(0, 40, 2)]
    errors, appending = [], [True]

    def append_all(items):
        try:
            for start in range(0, len(items), 4):
                store_async(items[start : start + 4])
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    def fold_all():
        try:
            while appending[0] or dirty():
                projector.project_dirty()
        except Exception as error:
            errors.append(error)
        finally:
            connection.close()

    appenders = [threading.Thread(target=append_all, args=(i,)) for i in (first, second)]
    folders = [threading.Thread(target=fold_all) for _ in range(2)]
    for thread in [*appenders, *folders]:
        thread.start()
    for thread in appenders:
        thread.join()
    appending[0] = False
    for thread in folders:
        thread.join(60)
    assert errors == []
    assert dirty() == []
    assert Job.objects.get(job_id="pj").event_count == 40
    assert parity.differences("pj") == []


# --- the projector loop, a real process -------------------------------------------------------


def run_projector(env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "run_projector"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def stop(process: subprocess.Popen) -> str:
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    return output


def test_make_run_starts_the_projector_beside_the_server():
    """What ``make run`` would run (``make -n``): the projector starts in the same command as the
    server, so nobody starts it by hand (the test below shows it folds on the embedded
    default)."""
    recipe = subprocess.run(
        ["make", "-n", "run"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    command = recipe[recipe.index("run_scheduler &") :]
    assert "manage.py run_projector &" in command
    assert command.index("run_projector &") < command.index("manage.py runserver")


def test_the_embedded_default_projects_what_was_appended_with_no_hand_started_process(tmp_path):
    """``make run`` starts run_projector beside runserver: on SQLite, events appended without
    projection are folded by it."""
    database = tmp_path / "embedded.sqlite3"
    env = embedded_env(database)
    manage = [sys.executable, "manage.py"]
    subprocess.run([*manage, "migrate", "--noinput"], cwd=ROOT, env=env, check=True, timeout=300)
    items = [event("job_started", f"e{n}", at=0) for n in range(5)]
    items += [finished("n1", "success", f"e{n}", at=1) for n in range(5)]
    path = tmp_path / "events.ndjson"
    path.write_text("\n".join(json.dumps(item) for item in items))
    subprocess.run(
        [*manage, "import_events", "--defer-projection", str(path)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
    )

    def counts() -> tuple[int, int]:
        with sqlite3.connect(database) as db:
            (marks,) = db.execute(
                "SELECT count(*) FROM jobs_projectionmark WHERE generation > projected"
            ).fetchone()
            (jobs,) = db.execute("SELECT count(*) FROM jobs_job").fetchone()
        return marks, jobs

    assert counts() == (5, 0)
    process = run_projector(env)
    try:
        deadline = time.monotonic() + 60
        while counts() != (0, 5) and time.monotonic() < deadline:
            assert process.poll() is None, "run_projector exited"
            time.sleep(0.2)
        assert counts() == (0, 5)
    finally:
        output = stop(process)
    assert "run_projector: stopped" in output


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_run_projector_folds_async_ingest_and_a_killed_one_loses_nothing():
    """The real command against the test database: woken by NOTIFY, it folds what async
    requests appended; killed with SIGKILL, whatever it was folding rolls back and the next
    one finishes it."""
    settings_dict = connection.settings_dict
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"},
        "DATABASE_URL": (
            f"postgres://{settings_dict['USER']}@{settings_dict['HOST']}:"
            f"{settings_dict['PORT']}/{settings_dict['NAME']}"
        ),
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("CELERY_BROKER_URL", None)
    first = run_projector(env)
    try:
        for n in range(20):
            store_async([event("job_started", f"k{n}", at=0), started("n1", f"k{n}", at=1)])
        time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        for n in range(20):
            store_async([finished("n1", "success", f"k{n}", at=2)])
        second = run_projector(env)
        try:
            deadline = time.monotonic() + 60
            while dirty() and time.monotonic() < deadline:
                assert second.poll() is None, "run_projector exited"
                time.sleep(0.2)
        finally:
            stop(second)
    finally:
        if first.poll() is None:
            first.kill()
    assert dirty() == []
    assert Job.objects.filter(job_id__startswith="k").count() == 20
    for n in range(20):
        assert parity.differences(f"k{n}") == []
    assert set(Step.objects.values_list("result_type", flat=True)) == {"success"}


def test_a_resend_of_stored_events_leaves_nothing_dirty():
    items = [event("job_started", "dj", at=0), started("n1", "dj", at=1)]
    store(items)
    assert store(items).duplicates == 2
    assert dirty() == [] and Job.objects.get(job_id="dj").event_count == 2
    store_async(items)
    assert projector.backlog("dj") is None  # marked, but nothing is unshown
    assert projector.project_dirty() == 1 and dirty() == []
