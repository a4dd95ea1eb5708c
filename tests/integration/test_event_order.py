"""Event order (docs/contract.md) has one definition: the SQL order the pages and the export
read in (``Event.objects.in_event_order``) is the Python ``order_key`` replay sorts by."""

import itertools
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.contract.events import TYPE_RANK
from jobs.contract.events import Event as ContractEvent
from jobs.models import Event, Job
from jobs.replay.walk import sort_events
from jobs.web import job_page
from tests.factories import BASE_TS

pytestmark = pytest.mark.django_db

JOB_IDS = (f"order-{n}" for n in itertools.count())
# Ids that collations order differently from code points: case, accents, CJK, emoji, symbols.
EVENT_ID_CHARS = st.sampled_from("aAbBzZ_-.:09éÉß中😀~ ")

event_rows = st.lists(
    st.fixed_dictionaries(
        {
            # Few distinct times and seqs, so the later keys decide often.
            "ts": st.integers(0, 3).map(lambda ms: BASE_TS + timedelta(milliseconds=ms)),
            "seq": st.one_of(st.none(), st.integers(0, 2), st.just(2**62)),
            "type": st.sampled_from([*TYPE_RANK, "custom.thing", "zz_unknown"]),
            "attempt": st.integers(1, 3),
            "event_id": st.text(EVENT_ID_CHARS, min_size=1, max_size=6),
        }
    ),
    min_size=1,
    max_size=25,
    unique_by=lambda row: row["event_id"],
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=event_rows)
def test_sql_event_order_is_the_python_order_key(rows):
    job_id = next(JOB_IDS)
    Event.objects.bulk_create(Event(job_id=job_id, payload={}, **row) for row in rows)
    in_sql = list(
        Event.objects.filter(job_id=job_id).in_event_order().values_list("event_id", flat=True)
    )
    as_replay_sees_them = sort_events(
        ContractEvent(
            row["type"],
            job_id,
            row["event_id"],
            row["ts"],
            row["seq"],
            {"attempt": row["attempt"]},
        )
        for row in rows
    )
    assert in_sql == [event.event_id for event in as_replay_sees_them]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=event_rows)
def test_the_job_page_sorts_a_window_holding_every_event_in_the_same_order(rows):
    job_id = next(JOB_IDS)
    Event.objects.bulk_create(Event(job_id=job_id, payload={}, **row) for row in rows)
    events = Event.objects.filter(job_id=job_id)
    in_sql = list(events.in_event_order().values_list("event_id", flat=True))
    job = Job(job_id=job_id, event_count=len(rows), partition_day=events[0].partition_day)
    # Sorted in Python: the window holds every event.
    assert [e.event_id for e in job_page._events_in_order(job, 0, len(rows))] == in_sql
    # Ordered by SQL: the window is one event short, or starts later.
    shorter = job_page._events_in_order(job, 0, len(rows) - 1)
    assert [e.event_id for e in shorter] == in_sql[:-1]
    later = job_page._events_in_order(job, 1, len(rows) + 5)
    assert [e.event_id for e in later] == in_sql[1:]
